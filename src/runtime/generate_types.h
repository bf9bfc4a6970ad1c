// What a generation request asks for and what it returns: shared by the session, the token-step
// pipeline, the request translation and (later) the engine and the server.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "generate/constraint.h"
#include "generate/drafter.h"
#include "generate/sampler.h"

namespace pocket {

enum class StopReason {
  kEos,          // the model emitted an end-of-generation token
  kStopString,   // a stop string appeared (it is not part of the returned text)
  kMaxTokens,    // the token budget ran out
  kCancelled,    // Cancel() was called
  kCallback,     // the stream callback returned false
  kContextFull,  // no room left in the context
};
std::string_view StopReasonName(StopReason reason);

// Called after each prefill chunk with the prompt tokens evaluated so far and the total.
using PrefillProgress = std::function<void(int32_t n_done, int32_t n_total)>;

struct GenerateOptions {
  SamplerParams sampling;
  // Optional (not owned; reset by Generate): only tokens it allows are sampled, a token it alone
  // allows is taken without sampling, the model may stop only when the output is complete, and a
  // budget that runs out first is an error (ResourceExhausted), never a cut output.
  Constraint* constraint = nullptr;
  int32_t max_tokens = 256;
  std::vector<std::string> stop_strings;
  PrefillProgress on_prefill_progress;
  // Optional (not owned): speculative decoding. The drafter proposes up to draft_max tokens, the
  // target verifies them in one forward pass and keeps those its own sampler chain picks, so the
  // output is exactly that of plain decoding (the same seed, the same tokens).
  Drafter* drafter = nullptr;
  int32_t draft_max = 8;
  // Fewer drafted tokens than this are not verified (plain decoding takes the step instead).
  int32_t draft_min = 1;
  // Auto: speculate only while the measured verification cost and the running acceptance say it
  // pays (else decode plainly, still checking the drafter's guesses against what is decoded), and
  // adapt the draft length to the acceptance. Off: verify every draft of at least draft_min tokens.
  bool spec_auto = false;
  // Fixed drafts (not auto) from a drafter that costs time (a draft model): no verification while
  // the drafter's guesses are mostly wrong (SpecPolicy's guard: by counts, not timings); they are
  // still checked against what is decoded now and then, so verification resumes when they start
  // agreeing. MakeGenerateOptions sets it for draft:FILE.
  bool spec_guard = false;
  // Record every verification step in GenerateResult::spec_steps (allocates per step).
  bool record_spec_steps = false;
  // Benchmarks (llama.cpp's --ignore-eos): a stop token is kept like any other token, so exactly
  // max_tokens are generated. Without a constraint only (one decides where its output ends).
  bool ignore_stop_tokens = false;
  // When max_tokens runs out before a constraint is complete: false, a ResourceExhausted error
  // (a budget never silently cuts a constrained output); true, the partial output with stop
  // reason kMaxTokens (the server: finish_reason "length", as OpenAI answers).
  bool partial_constrained_output = false;
  // Record each chosen token's log-probability under the model (the log-softmax of its logits:
  // before temperature, penalties and the constraint) and those of the `logprobs` most likely
  // tokens (0-20) in GenerateResult::logprobs; -1: nothing recorded. Not with a drafter. Allocates
  // per token when on.
  int32_t logprobs = -1;
};

// One verification pass of speculative decoding.
struct SpecStep {
  std::vector<int32_t> drafted;  // the drafted tokens verified
  int32_t accepted = 0;          // how many of them were kept
};

// A chosen token's log-probability and the most likely tokens' at its step (GenerateOptions::
// logprobs).
struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // most likely first
};

struct GenerateResult {
  std::string text;
  std::vector<int32_t> tokens;  // generated tokens (not including a final stop token)
  StopReason stop_reason = StopReason::kMaxTokens;
  int32_t n_prompt_tokens = 0;  // prompt tokens that were actually evaluated (not reused)
  int32_t n_reused_tokens = 0;  // prompt tokens whose KV rows were kept from before
  int32_t n_cached_tokens = 0;  // of those, the ones copied from the prefix cache
  uint64_t seed = 0;            // the sampler's seed (options.sampling.seed), to reproduce the run
  int64_t prefill_us = 0;
  int64_t decode_us = 0;
  // With a constraint: time spent computing masks and accepting tokens (part of decode_us), the
  // masks computed, and the tokens emitted without sampling (the only continuation).
  int64_t constraint_us = 0;
  int32_t n_masks = 0;
  int32_t n_forced_tokens = 0;
  // With a drafter: verification passes, tokens drafted, drafted tokens kept.
  int32_t n_verify_passes = 0;
  int32_t n_tree_passes = 0;  // of them, passes over a draft tree of several branches
  int32_t n_drafted = 0;
  int32_t n_draft_accepted = 0;
  int32_t n_plain_steps = 0;         // decode steps taken without a draft (auto, short drafts)
  int32_t n_guarded_steps = 0;       // of them, steps the guard took (GenerateOptions::spec_guard)
  int64_t draft_us = 0;              // time in the drafter (part of decode_us)
  std::vector<SpecStep> spec_steps;  // with GenerateOptions::record_spec_steps
  // With GenerateOptions::logprobs >= 0: one entry per chosen token, in order (a final stop token
  // too, which `tokens` does not keep: there may be one entry more than tokens).
  std::vector<TokenLogprobs> logprobs;
};

// Receives each piece of generated text (whole UTF-8 characters); return false to stop.
using StreamCallback = std::function<bool(std::string_view piece)>;

}  // namespace pocket
