// A Session is one conversation with a Model: its KV cache, scratch, token history and sampler.
// Sessions are independent; any number share one immutable Model across threads. A session is
// used by one thread at a time, except Cancel(), which any thread may call.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "runtime/generate_types.h"
#include "runtime/prefix_cache.h"

namespace pocket {

struct SessionOptions {
  int32_t n_ctx = 4096;  // context size in tokens (clamped to the model's training context)
  int32_t n_batch =
      512;  // prefill chunk (clamped to n_ctx); cancellation is checked between chunks
  // Without a pool: the threads of the session's own pool (0: one per hardware thread). With
  // one: 0 or the pool's size.
  int32_t n_threads = 0;
  KvType kv_type = KvType::kF16;
  // The threads the session computes on. Sessions of one model share one pool (the CLI, the C API
  // and the engine make one per model and thread count); without one, the session makes its own.
  std::shared_ptr<ThreadPool> pool = nullptr;
  // Optional: the prefix cache the session's prompts are looked up in and stored to (Generate and
  // the engine; prefix_cache.h). Shared by the sessions of one model.
  std::shared_ptr<PrefixCache> prefix_cache = nullptr;
};

// A pool of n_threads threads (0: one per hardware thread; at most 256).
StatusOr<std::shared_ptr<ThreadPool>> MakeThreadPool(int32_t n_threads);

// One candidate continuation scored by Session::Score.
struct CandidateScore {
  int32_t index = 0;                   // its position in the caller's list
  std::vector<int32_t> tokens;         // the token ids scored
  std::vector<double> token_logprobs;  // log p(tokens[j] | prompt, tokens[0..j))
  double logprob = 0.0;                // their sum
  double probability = 0.0;            // exp(logprob), normalized over the candidates
};

// Session::Score's parts that the engine's batched scoring (Engine::SubmitScore) shares: the
// candidates' checks (non-empty, ids in the vocabulary), log p(id) from a row of logits, and the
// totals, normalized probabilities and ranking.
Status CheckCandidates(const std::vector<std::vector<int32_t>>& candidates, int32_t vocab);
double CandidateLogProb(const KernelTable& kernels, const float* logits, int64_t vocab, int32_t id);
std::vector<CandidateScore> RankCandidates(std::vector<CandidateScore> scores);

// One label of the model's classification head, scored by Session::Classify.
struct LabelScore {
  int32_t index = 0;         // the head's row: model().classifier().labels[index]
  std::string label;         // that label
  double logit = 0.0;        // head row . final-norm hidden state of the prompt's last token
  double logprob = 0.0;      // log-softmax over the labels
  double probability = 0.0;  // exp(logprob); the labels' probabilities sum to 1
};

// The labels of `head` for the final-norm hidden state `hidden` [d_model], best first (the logits
// accumulated in double, a log-softmax over the labels).
std::vector<LabelScore> ScoreLabels(const ClassifierHead& head, const float* hidden);

class TokenStep;
class Engine;

class Session {
 public:
  static StatusOr<std::unique_ptr<Session>> Create(std::shared_ptr<const Model> model,
                                                   const SessionOptions& options = {});

  const Model& model() const { return *model_; }
  int32_t n_ctx() const { return kv_.n_ctx(); }
  int32_t n_threads() const { return pool_->n_threads(); }
  // Bytes the session holds: KV cache, activation scratch, and its own buffers (logits, history,
  // and those of scoring and constrained sampling, as far as they have grown).
  size_t memory_bytes() const {
    return kv_.bytes() + scratch_.bytes() + history_.capacity() * sizeof(int32_t) +
           (logits_.capacity() + score_logits_.capacity() + hidden_.capacity() +
            masked_.capacity() + spec_logits_.capacity() + spec_hidden_.capacity()) *
               sizeof(float) +
           mask_bits_.capacity() * sizeof(uint64_t) + spec_tree_.capacity() * sizeof(DraftNode) +
           (spec_slots_.capacity() + spec_path_.capacity() + spec_moved_.capacity()) *
               sizeof(int32_t) +
           spec_segments_.capacity() * sizeof(BatchSegment);
  }
  // Bytes of the KV pages the session holds (its positions in whole pages, and pages kept for
  // reuse).
  size_t kv_bytes() const { return kv_.bytes(); }
  // Of those, the bytes of pages shared with other caches (a restored or stored prefix), held once
  // for all of them.
  size_t kv_shared_bytes() const { return kv_.bytes() - kv_.private_bytes(); }
  // Bytes of one KV page (KvCache: the cache grows and shrinks by pages).
  size_t kv_page_bytes() const { return kv_.page_bytes(); }
  // Tokens whose keys and values are in the cache, in order.
  std::span<const int32_t> history() const { return history_; }

  // Makes the context equal `tokens`: keeps the longest common prefix with the history, then
  // evaluates the rest in chunks (checking for cancellation between them). Afterwards
  // last_logits() are those after the final token. A prompt longer than the context is an error.
  Status SetContext(std::span<const int32_t> tokens, const PrefillProgress& progress = nullptr);
  // Appends tokens to the context (used by decode and by callers feeding tokens one by one).
  // all_logits, when given, receives [tokens.size(), vocab].
  Status Append(std::span<const int32_t> tokens, float* all_logits = nullptr,
                const PrefillProgress& progress = nullptr);
  // Logits after the last evaluated token ([vocab]).
  std::span<const float> last_logits() const { return logits_; }
  // The public form of SetContext (the C API's pocket_session_eval): checks the ids (not empty,
  // each in the vocabulary, naming the first that is not), makes them the context and returns
  // last_logits(). A cancel request stops it between prefill chunks and is used up by it.
  StatusOr<std::span<const float>> EvaluateIds(std::span<const int32_t> ids);

  // Sets the context to `prompt` and generates until a stop condition. Without a drafter it runs
  // as a request of a one-request engine of the session's own (engine.h: the code that batches
  // many sessions, alone); with one, speculative decoding runs as GenerateUnbatched.
  StatusOr<GenerateResult> Generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                                    const StreamCallback& on_text = nullptr);
  // The same without the engine: the prefill, then the token-by-token loop of the session alone.
  // The oracle the engine (batched or not) is tested against, and the speculative path.
  StatusOr<GenerateResult> GenerateUnbatched(std::span<const int32_t> prompt,
                                             const GenerateOptions& options,
                                             const StreamCallback& on_text = nullptr);
  // Tokenizes `text` (special tokens recognised, BOS added if the model wants it) and generates.
  StatusOr<GenerateResult> Generate(std::string_view text, const GenerateOptions& options,
                                    const StreamCallback& on_text = nullptr);

  // Log-probabilities of candidate continuations of `prompt`, best first. The context becomes the
  // prompt (its KV rows are reused as by SetContext); then every candidate is evaluated in ONE
  // forward pass with a tree attention mask: each candidate sees the prompt and its own earlier
  // tokens, at positions that restart after the prompt. The candidates' KV rows are scratch: the
  // history stays the prompt. All candidates' tokens together must fit the prefill chunk
  // (n_batch) and, after the prompt, the context.
  StatusOr<std::vector<CandidateScore>> Score(std::span<const int32_t> prompt,
                                              const std::vector<std::vector<int32_t>>& candidates);
  // The same, one forward pass per candidate after the prompt (the oracle Score is tested
  // against, and the baseline it is measured against).
  StatusOr<std::vector<CandidateScore>> ScoreSeparately(
      std::span<const int32_t> prompt, const std::vector<std::vector<int32_t>>& candidates);

  // The classification-head form of scoring: the labels of the model's head (Model::classifier())
  // for `prompt`, best first. One forward pass over the prompt (KV rows of a prefix shared with
  // the history are reused, the last token is always evaluated, the vocabulary projection is
  // skipped); the head [n_labels, d_model] times the final-norm hidden state of the last prompt
  // token gives the label logits (accumulated in double), then a log-softmax over the labels. The
  // context becomes the prompt. FailedPrecondition when there is no head (classifier()).
  StatusOr<std::vector<LabelScore>> Classify(std::span<const int32_t> prompt);
  // The head Classify uses: the last adapter in the set that carries one (a task = adapter +
  // head), else the model's (empty when neither has one).
  const ClassifierHead& classifier() const;
  // Ok when there is a head, else Classify's FailedPrecondition (saying how to add one).
  Status CheckClassifier() const;

  // Thread-safe: stops a running Generate within one token (or one prefill chunk), a running
  // Score or Classify between prefill chunks. A Cancel() that arrives while no such call runs is
  // not lost: the next Generate, Score or Classify stops at once (Generate with stop reason
  // kCancelled, the others with a Cancelled error). Each of those calls clears the request when
  // it returns, so one Cancel() stops exactly one call.
  void Cancel() { cancel_.store(true, std::memory_order_relaxed); }
  // Forgets a Cancel() that arrived after the call it was meant for had returned (a caller that
  // cancels from another thread and cannot tell when the call ends clears it before the next).
  void ClearCancel() { cancel_.store(false, std::memory_order_relaxed); }
#if POCKET_FORWARD_TRACE
  // Debug builds: every later forward pass hands its intermediates to `trace` (forward.h).
  void set_trace(ForwardTrace trace) {
    trace_ = std::move(trace);
  }
#endif
  // The adapters every later forward pass applies (LoRA; model/adapter.h), each with its scale.
  // An unchanged set (same adapters, order and scales) keeps everything, the KV cache included;
  // a changed set forgets the context, whose keys and values were computed with the old set. The
  // adapters are shared, never copied; the only allocation is the adapter buffers of the
  // scratch, the first time a set needs them larger.
  Status SetAdapters(AdapterSet set);
  const AdapterSet& adapters() const {
    return adapters_;
  }

  // Saved sessions (session_file.cc; docs/format.md, "Session files"). Save writes the context
  // (its tokens, their keys and values in the cache's own type, the logits after the last one)
  // and `user_data` (an application's own state: pocket chat keeps its messages there) to
  // `path`: versioned, checksummed, written to a temporary file renamed at the end. Sampling
  // keeps no state between calls (each Generate seeds its own sampler), so there is none to save.
  Status Save(const std::string& path, std::string_view user_data = {}) const;
  // Makes the context the one `path` holds and returns its user data. The file must come from the
  // same model (its fingerprint, shapes and a sample of its weights), with the same KV type and
  // adapter set (paths, exact scales, a sample of their factors), and fit this session's context;
  // every byte is checked (size, checksum) before the session changes, so an error leaves it as it
  // was and names the file and the field. User data over max_user_data_bytes is refused
  // (ResourceExhausted, session unchanged); *user_data_bytes, when given, receives its size once
  // the header is read. A block drafter's hidden states are not saved: the first Generate with
  // one after a Load evaluates the history again to rebuild them.
  StatusOr<std::string> Load(const std::string& path, uint64_t max_user_data_bytes = UINT64_MAX,
                             uint64_t* user_data_bytes = nullptr);

  // Offers the context to the prefix cache (SessionOptions::prefix_cache; none: nothing), so that
  // other sessions whose prompts start with it copy its keys and values: pocket serve does so
  // with the conversations it loads at start.
  void ShareWithPrefixCache() {
    StoreContext();
  }
  // The prefix cache's salt for this session's later requests (pocket serve: a request's
  // cache_salt): lookups and stores see only the entries of the same salt. A different salt also
  // forgets the context (its pages kept), so that what is reused never crosses salts.
  void SetCacheSalt(std::string_view salt);
  const std::string& cache_salt() const {
    return cache_salt_;
  }

  // Forgets the context and frees its KV pages: memory back to the system.
  void Reset() {
    ResetKeepingPages();
    kv_.Trim();
  }
  // Forgets the context but keeps its KV pages for the next one, which then writes into pages
  // already faulted in (benchmarks repeating a prefill: fresh pages measured 3-7% slower).
  void ResetKeepingPages() {
    Truncate(0);
    logits_at_ = 0;
  }
  // Frees the KV pages kept for reuse (those past the context): memory back to the system.
  void ReleaseKv() {
    kv_.Trim();
  }

  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

 private:
  // The batched engine (engine.h) drives a session's steps from outside: its prefill chunks and
  // decode rows go into the engine's batches, its token steps use the session's buffers.
  friend class Engine;
  Session(std::shared_ptr<const Model> model, KvCache kv, ForwardScratch scratch, int32_t n_batch,
          std::shared_ptr<ThreadPool> pool);
  // One forward pass of `tokens` at the end of the history (without updating it): outputs for
  // `rows` (indices into tokens) as logits and/or final hidden states.
  Status Evaluate(std::span<const int32_t> tokens, std::span<const int32_t> rows, float* logits,
                  float* hidden);
  // The same, also handing the hidden states of every row at the layers `observer` reads
  // (Drafter::target_layers) into spec_hidden_ ([layers, tokens, d_model]).
  Status EvaluateObserved(std::span<const int32_t> tokens, std::span<const int32_t> rows,
                          float* logits, const Drafter& observer);
  // A draft tree's verification pass (speculative.cc): `tokens` at the end of the history in
  // `segments` (a branch each), logits for every row.
  Status EvaluateTree(std::span<const int32_t> tokens, std::span<const BatchSegment> segments,
                      float* logits);
  // Append, handing each chunk's hidden states to `observer` when given (a block drafter).
  Status AppendObserved(std::span<const int32_t> tokens, float* all_logits,
                        const PrefillProgress& progress, Drafter* observer);
  // Cuts the history (and so the valid KV rows) back to n tokens.
  void Truncate(size_t n) {
    history_.resize(std::min(history_.size(), n));
    hidden_synced_ = std::min(hidden_synced_, history_.size());
    kv_.Shrink(static_cast<int32_t>(history_.size()));  // pages kept for reuse
  }
  // The prefiller of Generate: the context becomes `prompt` (reused rows counted in `result`);
  // false when it was cancelled (the result says so).
  StatusOr<bool> PrefillPrompt(std::span<const int32_t> prompt, const GenerateOptions& options,
                               GenerateResult* result);
  // The prefix cache's part of a prefill: after the context's own common prefix `common` with
  // the prompt is known, copies a longer cached prefix in (the history becomes it); returns the
  // new common length.
  StatusOr<size_t> RestorePrefix(std::span<const int32_t> prompt, size_t common,
                                 GenerateResult* result);
  // After an output: stores the context's keys and values (the prompt's and the reply's) in the
  // prefix cache (when there is one), under the session's salt.
  void StoreContext();
  // Cuts a draft tree where the constraint would not follow it (speculative.cc).
  Status PruneTree(TokenStep& step, std::vector<DraftNode>* tree);
  // The decode loop of Generate with a drafter (speculative.cc).
  Status DecodeSpeculative(TokenStep& step, const GenerateOptions& options, GenerateResult* result);
  bool cancelled() const {
    return cancel_.load(std::memory_order_relaxed);
  }
  // Clears a cancel request when the public call that owns it returns.
  struct CancelScope {
    explicit CancelScope(std::atomic<bool>* flag) : flag_(flag) {}
    ~CancelScope() { flag_->store(false, std::memory_order_relaxed); }
    CancelScope(const CancelScope&) = delete;
    CancelScope& operator=(const CancelScope&) = delete;
    std::atomic<bool>* flag_;
  };

  std::shared_ptr<const Model> model_;
  KvCache kv_;
  ForwardScratch scratch_;
  AdapterSet adapters_;
  std::shared_ptr<ThreadPool> pool_;
  std::shared_ptr<PrefixCache> prefix_cache_;
  std::string cache_salt_;
  int32_t n_batch_;
  std::vector<int32_t> history_;
  std::vector<float> logits_;
  size_t logits_at_ = 0;               // the history length logits_ belong to (0: none)
  std::vector<float> score_logits_;    // [batch, vocab] logits of the last Score call
  std::vector<float> hidden_;          // [d_model] final-norm hidden state read by Classify
  std::vector<float> masked_;          // constrained logits (reused)
  std::vector<uint64_t> mask_bits_;    // the constraint's allowed tokens (reused)
  std::vector<int32_t> spec_context_;  // speculative decoding: the drafter's context (reused)
  std::vector<int32_t> spec_rows_;     // [pending, drafted...]
  std::vector<float> spec_logits_;     // their logits
  std::vector<float> spec_hidden_;     // hidden states for a block drafter (reused)
  std::vector<int32_t> spec_draft_;    // the draft (reused)
  std::vector<int32_t> spec_shadow_;   // a draft checked against plain decoding (reused)
  // Draft trees (reused): the nodes, a branch's path tokens (legality checks), the batch's
  // segments and their ancestor slots, the accepted nodes' slots.
  std::vector<DraftNode> spec_tree_;
  std::vector<int32_t> spec_path_;
  std::vector<BatchSegment> spec_segments_;
  std::vector<int32_t> spec_slots_;
  std::vector<int32_t> spec_moved_;
  // The block drafter that has the hidden states of history_[0, hidden_synced_) (every cut of
  // the history lowers the count).
  const Drafter* hidden_drafter_ = nullptr;
  size_t hidden_synced_ = 0;
  std::atomic<bool> cancel_{false};
  // Generate's one-request engine (made at the first Generate without a drafter).
  std::unique_ptr<Engine> engine_;
  // The engine whose request holds the session (Submit to Take; the session's end detaches it).
  Engine* engine_request_ = nullptr;
  Engine* engine_parked_ = nullptr;  // the engine that counts this idle session (Engine::Park)
#if POCKET_FORWARD_TRACE
  ForwardTrace trace_;
#endif
};

// What a session file holds (docs/format.md, "Session files"), read without a model (pocket info,
// and pocket chat resuming a conversation its context cannot hold): the header's fields, with the
// size they imply and the checksum checked, and the user data. Nothing is compared with a model
// here (Session::Load does that).
struct SessionFileInfo {
  std::string path;
  uint32_t version = 0;
  std::string architecture;
  std::string base_fingerprint;
  std::string weights_digest;
  int64_t n_layers = 0, n_kv_heads = 0, head_dim = 0, vocab_size = 0;
  std::string kv_type;   // "f16", "f32" or "q8"
  std::string adapters;  // the adapter set's name ("" for none)
  int64_t n_tokens = 0;
  bool has_logits = false;
  uint64_t user_data_bytes = 0;
  uint64_t kv_bytes = 0;  // the keys and values of the n_tokens positions
  uint64_t file_bytes = 0;
  std::string user_data;
};
// True when `path` is a file that starts as a session file does (its magic).
bool LooksLikeSessionFile(const std::string& path);
StatusOr<SessionFileInfo> DescribeSessionFile(const std::string& path);

}  // namespace pocket
