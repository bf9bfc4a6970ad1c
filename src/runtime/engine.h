// The batched engine: many sessions of one model generating together. Each Step runs ONE forward
// pass over a ragged batch (model/forward.h): for every active request either its next prefill
// chunk (the session's own n_batch, the chunking it uses alone) or its one pending decode token,
// each a segment with its own KV cache, position and adapter set. Decode of N requests streams the
// weights once instead of N times; a long prompt is prefilled a chunk per step, interleaved with
// the others' decode steps; requests join (Submit) and leave (they finish or are cancelled)
// between steps: continuous batching.
//
// A request computes exactly what Session::Generate computes alone: the forward pass chooses the
// kernel form per segment and the chunks are the same, so the logits are the same bits, and the
// token steps (mask, sampler, stop checks, stream; token_step.h) are the same code on them.
// Speculative decoding is not batched (Submit refuses a drafter: use Session::Generate).
//
// An Engine is driven by one thread (Submit, Step, Take); Session::Cancel may come from any.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/forward.h"
#include "model/model.h"
#include "model/scratch.h"
#include "runtime/generate_types.h"
#include "runtime/session.h"

namespace pocket {

struct EngineOptions {
  // Requests that may be active at once; each step's batch holds at most one decode row for each.
  int32_t max_requests = 16;
  // The largest prefill chunk of a session submitted to the engine (its SessionOptions::n_batch).
  // A step's batch holds up to max_chunk + max_requests rows, so a whole chunk always fits next
  // to every decode row.
  int32_t max_chunk = 512;
  // A cap on the KV memory of the sessions in the engine's requests and of their prefix caches'
  // entries (0: none), in bytes of pages held, a page shared by several (a cached prefix) once.
  // When a step needs pages beyond it, sessions are saved to `swap_dir`
  // (Session::Save) and their pages freed: those of finished requests not yet taken first, then
  // the prefix caches' least recently used entries, then the newest active requests. Older
  // requests come first: a step plans the budget in the order the requests came, and a swapped
  // request is restored (oldest first) at the next step, saving newer ones to make room when it
  // must, or at Take. The oldest request can always evict the others, so every request
  // completes. Submit refuses, with ResourceExhausted naming the sizes, a request whose
  // prompt and max_tokens cannot fit the budget alone.
  size_t kv_budget_bytes = 0;
  // Where swapped sessions are written, created 0700 when missing (empty: a fresh 0700
  // directory under $TMPDIR, removed with the engine).
  std::string swap_dir;
};

struct EngineStats {
  int64_t swaps_out = 0;         // sessions saved to disk and their pages freed
  int64_t swaps_in = 0;          // sessions restored
  size_t kv_bytes = 0;           // KV pages held by the sessions in memory and their prefix caches
  size_t peak_kv_bytes = 0;      // with a budget: the most held after a step, or a Take's restore
  int32_t n_swapped = 0;         // requests whose sessions are on disk now
  uint64_t swapped_bytes = 0;    // their files' bytes
  int32_t n_parked = 0;          // idle sessions parked (Park) and counted now
  int64_t parked_evictions = 0;  // parked sessions whose context went to the prefix cache
};

class Engine {
 public:
  // `pool` is the one the sessions of `model` share (MakeThreadPool).
  static StatusOr<std::unique_ptr<Engine>> Create(std::shared_ptr<const Model> model,
                                                  std::shared_ptr<ThreadPool> pool,
                                                  const EngineOptions& options = {});

  // Starts generating from `prompt` on `session` with `options`, as Session::Generate would (its
  // context's common prefix with the prompt is reused, the rest prefilled). The session must be
  // of the engine's model and is the request's until Take returns its result: nothing else may
  // use it meanwhile but Cancel. Returns the request's id. Refuses (the session unchanged) a
  // drafter, a session already in a request, one of another model, a prefill chunk larger than
  // max_chunk, a full engine, token ids outside the vocabulary (naming the position), a prompt
  // longer than the context. `on_text`, when given, is called from Step.
  StatusOr<int64_t> Submit(Session* session, std::span<const int32_t> prompt,
                           const GenerateOptions& options, StreamCallback on_text = nullptr);

  // Scores `candidates` as continuations of `prompt` on `session` (Session::Score's computation,
  // batched with the other requests): the prompt is prefilled in the session's chunks (its
  // context and the prefix cache reused as for Submit), then the candidates' rows go into the
  // following steps, whole candidates, at most the session's n_batch rows a step, each candidate
  // in the KV slots after the prompt hiding the ones before it. One score request's rows per
  // step; the others wait. The context stays the prompt. Refuses what Submit refuses, bad
  // candidates (empty, ids outside the vocabulary) and a candidate with more tokens than n_batch
  // or than the context holds after the prompt. Take the result with TakeScores; Cancel stops it
  // (a Cancelled error).
  // `chunk` (0: the session's n_batch) caps the rows a step takes for the prompt and for a group
  // of candidates (a candidate longer than it goes alone): pocket serve keeps it small so that
  // the streams' steps stay short while a long prompt is scored.
  StatusOr<int64_t> SubmitScore(Session* session, std::span<const int32_t> prompt,
                                std::vector<std::vector<int32_t>> candidates, int32_t chunk = 0);
  // The ranked candidates of a finished score request (as Take).
  StatusOr<std::vector<CandidateScore>> TakeScores(int64_t id);
  // Classifies `prompt` on `session` with its head (Session::Classify's computation, batched
  // with the other requests): the prompt prefilled in chunks of `chunk` rows (0: the session's
  // n_batch; its context and the prefix cache reused as for Submit, the last token always
  // evaluated), the head applied to the final-norm hidden state of the last. The context stays
  // the prompt. Refuses what Submit refuses and a session without a head (FailedPrecondition, as
  // Classify). Take the labels, best first, with TakeLabels; Cancel stops it (a Cancelled error).
  StatusOr<int64_t> SubmitClassify(Session* session, std::span<const int32_t> prompt,
                                   int32_t chunk = 0);
  StatusOr<std::vector<LabelScore>> TakeLabels(int64_t id);

  // One forward pass over every active request (decode rows first, then prefill chunks in the
  // order the requests came), and the token steps of those whose logits are ready. Returns the
  // number of requests still active. An error of the pass itself fails the requests in it.
  StatusOr<int32_t> Step();
  // Steps until no request is active.
  Status Run();

  int32_t n_active() const;
  // EngineOptions::max_requests: Submit refuses requests beyond it.
  int32_t max_requests() const { return options_.max_requests; }
  // Whether request `id` has finished (its result waits for Take).
  bool done(int64_t id) const;
  // Whether request `id` is in the engine, running or done (not: taken, never submitted, or
  // dropped with its session).
  bool has(int64_t id) const;
  // The result of a finished request, handing its session back (NotFound for an unknown id,
  // FailedPrecondition while it runs). Submit and Take are refused from inside Step (a stream
  // callback). A session destroyed before Take drops its request (from the thread that drives the
  // engine, never from a stream callback); requests never taken when the engine ends hand their
  // sessions back as they are (a swapped one loaded from its file).
  StatusOr<GenerateResult> Take(int64_t id);

  // Idle sessions under the KV budget (pocket serve's free slots): a session that keeps its
  // context for a later request while no request of this engine runs on it. Its pages count
  // toward the budget; when room is needed, parked sessions go first (oldest first): the context
  // is offered to the session's prefix cache (shared pages, no copy) and the session reset, so
  // that a later request on any session can restore it from the cache while the cache keeps it.
  // Submit unparks the session; so does Unpark (before the session is used outside the engine)
  // and its destruction. Without a budget parking only counts.
  void Park(Session* session);
  void Unpark(Session* session);

  // Rows of the last step's batch, and of them decode rows (for benchmarks and tests).
  int32_t last_rows() const { return last_rows_; }
  int32_t last_decode_rows() const { return last_decode_rows_; }
  // Bytes the engine holds (its scratch and logits buffer).
  size_t memory_bytes() const { return own_scratch_.bytes() + logits_.capacity() * sizeof(float); }
  // Swaps and KV bytes (with a budget, kv_bytes stays within it after every step).
  EngineStats stats() const;

  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

 private:
  struct Request;
  // Session::Generate runs on a one-request engine of its own (ForSession).
  friend class Session;
  // `scratch` null: the engine's own `own`; else one it borrows (a session's).
  Engine(std::shared_ptr<const Model> model, std::shared_ptr<ThreadPool> pool, ForwardScratch own,
         ForwardScratch* scratch, const EngineOptions& options);
  // A one-request engine on `session`'s pool that borrows its scratch (one request's step is its
  // prefill chunk or its decode row, never both: the session's n_batch rows suffice) and writes
  // the logits into the session's buffer: no memory beyond a few reserved vectors.
  static StatusOr<std::unique_ptr<Engine>> ForSession(Session& session);
  // The token step of a request whose logits are ready: choose, accept, stop checks.
  void Advance(Request& r);
  // Scoring (engine_score.cc): the candidates' first tokens from the prompt's logits; the rows
  // of the next group of candidates (whole ones, within the session's chunk); their segments
  // appended to the step's batch; the log-probabilities read from their logits rows.
  void BeginScores(Request& r);
  int32_t NextScoreGroup(Request& r);
  void AppendScoreGroup(Request& r);
  void ReadScoreGroup(Request& r, const float* logits);
  // Removes a finished request of the kind asked for from the engine, its session handed back
  // (Take, TakeScores, TakeLabels); one of another kind stays.
  enum class Kind { kGenerate, kScore, kClassify };
  StatusOr<std::unique_ptr<Request>> Remove(int64_t id, Kind kind);
  // Ends a request: the constraint's and stream's Finish, timings, the session's cancel request
  // cleared.
  void Finish(Request& r, bool run_finish);
  void Fail(Request& r, Status status);
  // The KV budget: bytes held by the sessions in memory; whether `r` may grow its cache to `end`
  // positions this step (evicting others when needed; it fails `r` when it cannot fit alone);
  // saving a session to disk and back; restoring the waiting ones that fit.
  size_t ResidentBytes() const;
  bool MakeRoom(Request& r, int32_t begin, int32_t end);
  // Evicts the least recently used entry of a prefix cache of the requests' or the parked
  // sessions (false: none).
  bool EvictPrefixEntry();
  // Resets the oldest parked session, its context offered to its prefix cache (false: none).
  bool EvictParked();
  Status SwapOut(Request& r);
  Status SwapIn(Request& r);
  void RestoreWaiting();
  // The prefill chunk of `r` (its own for a score request, else its session's n_batch).
  size_t ChunkOf(const Request& r) const;
  // Rows `r` puts in its next step (its next prefill chunk, or a decode row; 0 when done).
  int32_t NextRows(const Request& r) const;
  // A session's end: its request (never taken) is dropped, its swap file removed.
  void Detach(const Session* session);

  std::shared_ptr<const Model> model_;
  std::shared_ptr<ThreadPool> pool_;
  ForwardScratch own_scratch_;
  ForwardScratch* scratch_;  // &own_scratch_ or a session's
  EngineOptions options_;
  int64_t next_id_ = 1;
  std::vector<std::unique_ptr<Request>> requests_;  // in submission order (active and done)
  std::vector<Session*> parked_;                    // oldest first
  // ResidentBytes' scratch: the prefix caches counted.
  mutable std::vector<const PrefixCache*> counted_caches_;
  // Per step (reserved once): the batch's tokens, segments, output rows, their requests, logits.
  std::vector<int32_t> tokens_;
  std::vector<BatchSegment> segments_;
  std::vector<int32_t> out_rows_;
  std::vector<Request*> in_batch_;
  // [max_requests, vocab] (a one-segment pass writes straight into its session's logits: a
  // one-request engine has none).
  std::vector<float> logits_;
  // [max_requests, d_model]: the final-norm hidden states of a step with a classify request's
  // last chunk (sized by the first SubmitClassify).
  std::vector<float> hidden_;
  int32_t last_rows_ = 0;
  int32_t last_decode_rows_ = 0;
  bool stepping_ = false;     // inside Step (stream callbacks run there)
  int64_t steps_ = 0;         // Steps begun
  size_t planned_bytes_ = 0;  // pages the step's batch will allocate (budget bookkeeping)
  // ResidentBytes' scratch: the shared pages of the sessions in memory, and their sizes.
  mutable std::vector<std::pair<const uint8_t*, size_t>> shared_pages_;
  EngineStats stats_;
  uint64_t swap_tag_ = 0;      // a random tag in this engine's swap file names
  std::string swap_dir_;       // where swapped sessions go, made private at the first swap
  bool own_swap_dir_ = false;  // made by the engine under $TMPDIR: removed with it
};

}  // namespace pocket
