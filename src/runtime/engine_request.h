// Engine::Request: one request's state inside the engine (engine.cc, engine_score.cc); not for
// callers of the engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/timer.h"
#include "runtime/engine.h"
#include "runtime/token_step.h"

namespace pocket {

struct Engine::Request {
  enum class Phase {
    kPrefill,  // prompt[at, end) still to evaluate
    kReady,    // the session's logits are those after its last token: a token step is due
    kDecode,   // `pending` is to be evaluated
    kScore,    // a score request's candidates [next_candidate, ...) still to evaluate
    kDone,
  };
  int64_t id = 0;
  Session* session = nullptr;
  std::vector<int32_t> prompt;
  GenerateOptions options;
  StreamCallback on_text;
  GenerateResult result;
  Status status;
  std::unique_ptr<TokenStep> step;  // made when the prompt is in the cache (as Generate does)
  Phase phase = Phase::kPrefill;
  size_t at = 0;     // the next prompt token to evaluate
  size_t start = 0;  // the first one the prefill evaluates (after reused and cached ones)
  int32_t pending = -1;
  int32_t n_decoded = 0;  // token steps taken (Generate's loop counter)
  Stopwatch watch;
  // The KV budget: the session saved to swap_path (with swap_tokens positions) and reset.
  bool swapped = false;
  std::string swap_path;
  size_t swap_tokens = 0;
  uint64_t swap_bytes = 0;     // the file's size
  int64_t restored_step = -1;  // the step that restored it (no victim in that step)
  // A score request (SubmitScore): the candidates, their scores so far, the first candidate not
  // yet evaluated and the end of the group in this step.
  bool scoring = false;
  std::vector<std::vector<int32_t>> candidates;
  std::vector<CandidateScore> scores;
  size_t next_candidate = 0;
  size_t group_end = 0;
  int32_t chunk = 0;  // rows a step at most (0: the session's n_batch)
  // A classify request (SubmitClassify): the prompt's last chunk also yields the final-norm
  // hidden state of its last row, which the head turns into `labels`.
  bool classifying = false;
  std::vector<LabelScore> labels;
};

}  // namespace pocket
