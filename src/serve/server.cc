#include "serve/server.h"

#include <errno.h>
#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/json_nesting.h"
#include "base/memory.h"
#include "base/output_file.h"
#include "base/str.h"
#include "runtime/engine.h"
#include "runtime/prefix_cache.h"
#include "runtime/request.h"
#include "runtime/session.h"
#include "serve/connections.h"
#include "serve/http_policy.h"
#include "serve/openai.h"
#include "serve/score_worker.h"
#include "serve/session_store.h"

namespace pocket::serve {
namespace {

using nlohmann::json;

// One request (one choice of a response) between its HTTP thread and the scheduler.
struct Job {
  std::string id;  // the response's id (chatcmpl-..., cmpl-...)
  PreparedRequest prepared;
  // tool_choice "auto": the model's output is watched for kToolCallOpen; when it opens a call, the
  // request stops there and continues from "<tool_call>\n" with `call` (its options constrain the
  // call's JSON to the tools). Streamed text holds back what may be the start of kToolCallOpen.
  std::optional<PreparedRequest> call;
  bool forced_call = false;  // required / a named function: the whole output is the call's JSON
  AdapterSet adapters;       // the adapter the request picked (empty: the base)
  std::string cache_salt;    // the request's cache_salt: the contexts it may reuse
  bool stream = false;       // the client reads the text as it comes (else only the result)
  std::mutex mu;
  std::condition_variable cv;
  // Streamed text the HTTP thread has not sent yet. The scheduler wakes the HTTP thread for the
  // first piece only (time to first token) and at the end; in between the HTTP thread flushes
  // every kFlushInterval, so a token costs no thread switch on a machine whose cores compute.
  std::string pending;
  bool woke = false;
  bool finished = false;
  Status status;
  GenerateResult result;               // the request's (auto: until the call opened)
  bool call_opened = false;            // auto: the model wrote kToolCallOpen
  std::string content;                 // auto: the text before the call
  GenerateResult call_result;          // auto: the call's JSON
  std::atomic<bool> cancelled{false};  // the client went away
  // When the job was made (its HTTP handler parsed the request): the log's duration.
  std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();
  // The scheduler thread's own: all text so far and how much of it was handed to `pending`.
  std::string seen;
  size_t streamed = 0;
};

constexpr auto kFlushInterval = std::chrono::milliseconds(40);
void FinishJob(Job& job, Status status) {
  std::lock_guard<std::mutex> lock(job.mu);
  job.status = std::move(status);
  job.finished = true;
  job.cv.notify_all();
}

// How many trailing bytes of `text` could begin `marker` (held back from the stream).
size_t PartialMarker(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// What /metrics reports (Prometheus text format). Counters only grow; the scheduler thread writes
// the engine's figures, HTTP threads count responses.
struct Metrics {
  std::atomic<int64_t> prompt_tokens{0};     // prompt tokens of finished requests
  std::atomic<int64_t> cached_tokens{0};     // of them, reused (session context or prefix cache)
  std::atomic<int64_t> generated_tokens{0};  // tokens of finished requests' completions
  std::atomic<int64_t> decode_rows{0};       // decode rows evaluated (one token each), live
  std::atomic<int64_t> prefill_rows{0};      // prompt rows evaluated, live
  std::atomic<int64_t> steps{0};             // engine steps (forward passes)
  std::atomic<int64_t> drafted_tokens{0};
  std::atomic<int64_t> accepted_draft_tokens{0};
  std::atomic<int64_t> cancelled{0};  // requests whose client went away
  std::atomic<int32_t> running{0};
  std::atomic<int64_t> kv_bytes{0};  // KV pages held by the sessions and the prefix cache
  std::atomic<int64_t> prefix_bytes{0};
  std::atomic<int64_t> prefix_lookups{0};
  std::atomic<int64_t> prefix_hits{0};
  std::atomic<int64_t> prefix_hit_tokens{0};
  std::atomic<int64_t> swaps_out{0};
  std::atomic<int64_t> swapped_sessions{0};
  std::atomic<int64_t> swapped_bytes{0};
  std::atomic<int64_t> swaps_in{0};

  std::mutex mu;
  std::map<std::pair<std::string, int>, int64_t> responses;  // (path, HTTP status) -> count
  // (seconds since start, decode_rows) at most every 250 ms over the last 10 s: tokens/s.
  std::deque<std::pair<double, int64_t>> rate_samples;
  const std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  double Now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // Paths outside the API count as "other" (a scanner's random paths add no label values).
  void CountResponse(const std::string& path, int status) {
    static constexpr std::string_view kPaths[] = {
        "/v1/chat/completions", "/v1/completions", "/v1/models", "/v1/score",
        "/v1/classify",         "/health",         "/metrics",   "/tokenize",
        "/detokenize"};
    std::string label = "other";
    for (std::string_view p : kPaths) {
      if (path == p) label = p;
    }
    std::lock_guard<std::mutex> lock(mu);
    ++responses[{std::move(label), status}];
  }
  void SampleRate() {
    const double now = Now();
    std::lock_guard<std::mutex> lock(mu);
    if (!rate_samples.empty() && now - rate_samples.back().first < 0.25) return;
    rate_samples.emplace_back(now, decode_rows.load());
    while (rate_samples.size() > 2 && now - rate_samples.front().first > 10.0) {
      rate_samples.pop_front();
    }
  }
  // Decode tokens per second over the last 10 s (0 when nothing ran in the last second).
  double TokensPerSecond() {
    const double now = Now();
    std::lock_guard<std::mutex> lock(mu);
    if (rate_samples.size() < 2 || now - rate_samples.back().first > 1.0) return 0.0;
    const auto& [t0, n0] = rate_samples.front();
    const auto& [t1, n1] = rate_samples.back();
    return t1 > t0 ? static_cast<double>(n1 - n0) / (t1 - t0) : 0.0;
  }
};

// Owns the engine and the sessions; one thread admits, steps and finishes requests.
class Scheduler {
 public:
  Scheduler(std::unique_ptr<Engine> engine, std::vector<std::unique_ptr<Session>> sessions,
            std::shared_ptr<PrefixCache> cache, int32_t queue_limit,
            std::function<void(std::string_view)> log, Metrics* metrics,
            std::shared_ptr<const Model> model)
      : engine_(std::move(engine)),
        engine_model_(std::move(model)),
        sessions_(std::move(sessions)),
        cache_(std::move(cache)),
        queue_limit_(queue_limit),
        log_(std::move(log)),
        metrics_(metrics) {
    // Free sessions keep their contexts for later requests, counted by the engine (and under
    // --kv-budget given to the prefix cache when room is needed: Engine::Park).
    for (auto& s : sessions_) {
      free_.push_back(s.get());
      engine_->Park(s.get());
    }
    n_ctx_ = sessions_.front()->n_ctx();
    thread_ = std::thread([this] { Loop(); });
  }
  ~Scheduler() { Stop(); }

  // Queues a response's jobs (all or none); ResourceExhausted when the queue is full or the
  // server stops.
  Status Enqueue(const std::vector<std::shared_ptr<Job>>& jobs) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return ResourceExhaustedError("the server is shutting down");
    if (queue_.size() + jobs.size() > static_cast<size_t>(queue_limit_) + free_.size()) {
      return ResourceExhaustedError("the request queue is full (", queue_limit_,
                                    " requests waiting)");
    }
    for (const auto& job : jobs) queue_.push_back(job);
    cv_.notify_one();
    return Status::Ok();
  }
  void Wake() { cv_.notify_one(); }

  // /v1/score's work as engine requests (Engine::SubmitScore) beside the streams, `chunk` rows a
  // step: the caller (ScoreWorker's thread, one at a time) waits for the result. session->Cancel()
  // stops it (a Cancelled error).
  StatusOr<std::vector<CandidateScore>> Score(Session* session, std::span<const int32_t> prompt,
                                              std::vector<std::vector<int32_t>> candidates,
                                              int32_t chunk) {
    auto task = std::make_shared<ScoreTask>();
    task->session = session;
    task->prompt.assign(prompt.begin(), prompt.end());
    task->candidates = std::move(candidates);
    task->chunk = chunk;
    std::unique_lock<std::mutex> lock(mu_);
    if (stopping_) return ResourceExhaustedError("the server is shutting down");
    score_queue_.push_back(task);
    cv_.notify_one();
    cv_.wait(lock, [&] { return task->finished; });
    return std::move(task->result);
  }
  // Cancels what runs, fails what waits, and ends the thread. Any thread, any number of times.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      // A speculative request (outside the engine) stops within a token or a prefill chunk.
      if (speculating_ != nullptr) speculating_->Cancel();
      cv_.notify_one();
    }
    std::lock_guard<std::mutex> lock(join_mu_);
    if (thread_.joinable()) thread_.join();
  }
  // The sessions, for saving them: only after Stop().
  const std::vector<std::unique_ptr<Session>>& sessions() const { return sessions_; }
  int32_t queued() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int32_t>(queue_.size());
  }

 private:
  struct Running {
    std::shared_ptr<Job> job;
    Session* session = nullptr;
    int64_t id = 0;
  };
  struct ScoreTask {
    Session* session = nullptr;
    std::vector<int32_t> prompt;
    std::vector<std::vector<int32_t>> candidates;
    int32_t chunk = 0;
    int64_t id = -1;  // its engine request once submitted
    StatusOr<std::vector<CandidateScore>> result = std::vector<CandidateScore>{};
    bool finished = false;  // under mu_
  };
  void FinishScore(ScoreTask& task, StatusOr<std::vector<CandidateScore>> result) {
    std::lock_guard<std::mutex> lock(mu_);
    task.result = std::move(result);
    task.finished = true;
    cv_.notify_all();
  }

  void Loop() {
    std::vector<std::pair<std::shared_ptr<Job>, Session*>> admitted;
    std::deque<std::shared_ptr<ScoreTask>> admitted_scores;
    while (true) {
      bool stopping = false;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] {
          return stopping_ || !queue_.empty() || !running_.empty() || !score_queue_.empty() ||
                 !scoring_.empty();
        });
        stopping = stopping_;
        if (stopping) {
          for (auto& job : queue_) {
            FinishJob(*job, ResourceExhaustedError("the server is shutting down"));
          }
          queue_.clear();
        }
        admitted_scores.swap(score_queue_);
        while (!queue_.empty() && !free_.empty()) {
          const auto slot = free_.begin() + BestSlot(*queue_.front());
          admitted.emplace_back(std::move(queue_.front()), *slot);
          queue_.pop_front();
          free_.erase(slot);
        }
      }
      for (auto& [job, session] : admitted) {
        if (job->cancelled.load()) {
          job->result.stop_reason = StopReason::kCancelled;
          FinishJob(*job, Status::Ok());
          Release(session);
          continue;
        }
        engine_->Unpark(session);  // used outside the engine below (Submit would unpark it)
        if (Status a = session->SetAdapters(job->adapters); !a.ok()) {
          FinishJob(*job, a);
          Release(session);
          continue;
        }
        session->SetCacheSalt(job->cache_salt);
        if (job->prepared.options.drafter != nullptr) {
          RunSpeculative(job, session);
          continue;
        }
        StatusOr<int64_t> id = Submit(*job, session);
        if (!id.ok()) {
          FinishJob(*job, id.status());
          Release(session);
          continue;
        }
        running_.push_back({std::move(job), session, *id});
      }
      admitted.clear();
      for (auto& task : admitted_scores) {
        StatusOr<int64_t> id =
            stopping ? StatusOr<int64_t>(ResourceExhaustedError("the server is shutting down"))
                     : engine_->SubmitScore(task->session, task->prompt,
                                            std::move(task->candidates), task->chunk);
        if (!id.ok()) {
          FinishScore(*task, id.status());
          continue;
        }
        task->id = *id;
        scoring_.push_back(std::move(task));
      }
      admitted_scores.clear();
      if (running_.empty() && scoring_.empty()) {
        if (stopping) return;
        continue;
      }
      for (Running& r : running_) {
        if (stopping || r.job->cancelled.load()) r.session->Cancel();
      }
      if (stopping) {
        for (auto& task : scoring_) task->session->Cancel();
      }
      const StatusOr<int32_t> active = engine_->Step();
      static_cast<void>(active);  // Step fails only when called from a stream callback
      metrics_->steps.fetch_add(1);
      metrics_->decode_rows.fetch_add(engine_->last_decode_rows());
      metrics_->prefill_rows.fetch_add(engine_->last_rows() - engine_->last_decode_rows());
      metrics_->SampleRate();
      for (size_t i = 0; i < running_.size();) {
        Running& r = running_[i];
        if (!engine_->done(r.id)) {
          ++i;
          continue;
        }
        if (Conclude(r, engine_->Take(r.id))) {
          ++i;  // it continues (an opened tool call)
          continue;
        }
        Release(r.session);
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      }
      for (size_t i = 0; i < scoring_.size();) {
        if (!engine_->done(scoring_[i]->id)) {
          ++i;
          continue;
        }
        FinishScore(*scoring_[i], engine_->TakeScores(scoring_[i]->id));
        scoring_.erase(scoring_.begin() + static_cast<std::ptrdiff_t>(i));
      }
      PublishMemory();
    }
  }

  // The free session for `job` (an index into free_): the one whose context shares the longest
  // prefix with the job's prompt, under the same adapters and salt; among equals the one free the
  // longest, so the contexts used last stay for their conversations' next turns.
  size_t BestSlot(const Job& job) const {
    const std::span<const int32_t> prompt = job.prepared.prompt.ids;
    size_t best = 0, best_common = 0;
    for (size_t i = 0; i < free_.size(); ++i) {
      const Session& s = *free_[i];
      if (s.cache_salt() != job.cache_salt || !SameAdapters(s.adapters(), job.adapters)) continue;
      const std::span<const int32_t> context = s.history();
      const size_t limit = std::min(context.size(), prompt.size());
      size_t common = 0;
      while (common < limit && context[common] == prompt[common]) ++common;
      if (common > best_common) {
        best = i;
        best_common = common;
      }
    }
    return best;
  }

  // The KV bytes held (each session's private pages, the prefix cache's entries: a page shared by
  // a session and the cache counted once) and the cache's and swaps' counters, for /metrics.
  void PublishMemory() {
    size_t kv = 0;
    for (const auto& s : sessions_) kv += s->kv_bytes() - s->kv_shared_bytes();
    const PrefixCacheStats ps = cache_->stats();
    kv += ps.bytes;
    metrics_->kv_bytes.store(static_cast<int64_t>(kv));
    metrics_->prefix_bytes.store(static_cast<int64_t>(ps.bytes));
    metrics_->prefix_lookups.store(ps.lookups);
    metrics_->prefix_hits.store(ps.hits);
    metrics_->prefix_hit_tokens.store(ps.hit_tokens);
    const EngineStats es = engine_->stats();
    metrics_->swaps_out.store(es.swaps_out);
    metrics_->swaps_in.store(es.swaps_in);
    metrics_->swapped_sessions.store(es.n_swapped);
    metrics_->swapped_bytes.store(static_cast<int64_t>(es.swapped_bytes));
    metrics_->running.store(static_cast<int32_t>(running_.size()));
  }

  // A request's result (from Take, or from a speculative run): an auto tool call the model opened
  // continues (true; r.id is the continuation's), else the job finishes (false; the caller
  // releases the session).
  bool Conclude(Running& r, StatusOr<GenerateResult> result) {
    Job& job = *r.job;
    if (result.ok() && !job.call_opened && job.call.has_value() && !job.cancelled.load() &&
        result->stop_reason == StopReason::kCallback && !CallFits(job, *result)) {
      // No budget or context left for the call: the text as it is, cut for length.
      result->stop_reason = StopReason::kMaxTokens;
    }
    if (result.ok() && !job.call_opened && job.call.has_value() && !job.cancelled.load() &&
        result->stop_reason == StopReason::kCallback) {
      // The model opened a tool call: continue on the same session (its context reused)
      // from the text before it and "<tool_call>\n", the call constrained to the tools.
      job.call_opened = true;
      job.result = std::move(*result);
      StatusOr<int64_t> id = SubmitCall(job, r.session);
      if (id.ok()) {
        r.id = *id;
        return true;
      }
      result = id.status();
    }
    if (log_) {
      log_(result.ok()
               ? StrCat(job.id, ": ", job.prepared.prompt.ids.size(), " prompt tokens (",
                        (job.call_opened ? job.result : *result).n_reused_tokens, " reused), ",
                        (job.call_opened ? job.result.tokens.size() : 0) + result->tokens.size(),
                        " generated, ",
                        job.cancelled.load() ? std::string_view("the client went away")
                                             : StopReasonName(result->stop_reason),
                        job.call_opened ? " (a tool call)" : "", ", ",
                        std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - job.created)
                            .count(),
                        " ms")
               : StrCat(job.id, ": error: ", result.status().message()));
    }
    if (result.ok()) {
      const GenerateResult& first = job.call_opened ? job.result : *result;
      metrics_->prompt_tokens.fetch_add(static_cast<int64_t>(job.prepared.prompt.ids.size()));
      metrics_->cached_tokens.fetch_add(first.n_reused_tokens);
      metrics_->generated_tokens.fetch_add(static_cast<int64_t>(
          result->tokens.size() + (job.call_opened ? job.result.tokens.size() : 0)));
      metrics_->drafted_tokens.fetch_add(result->n_drafted);
      metrics_->accepted_draft_tokens.fetch_add(result->n_draft_accepted);
      if (job.cancelled.load()) metrics_->cancelled.fetch_add(1);
      {
        std::lock_guard<std::mutex> lock(job.mu);
        if (job.call_opened) {
          job.call_result = std::move(*result);
        } else {
          job.result = std::move(*result);
          // Auto tools: the text held back was not the start of a call after all.
          if (job.call.has_value() && job.streamed < job.seen.size()) {
            job.pending.append(job.seen, job.streamed);
            job.streamed = job.seen.size();
          }
        }
      }
      FinishJob(job, Status::Ok());
    } else {
      FinishJob(job, result.status());
    }
    return false;
  }

  // A request with a drafter (--spec, one session): speculative decoding runs on this thread
  // (the engine batches plain decoding only), its text streamed as it comes.
  void RunSpeculative(std::shared_ptr<Job> job, Session* session) {
    Running r{job, session, -1};
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) session->Cancel();
      speculating_ = session;
    }
    StatusOr<GenerateResult> result =
        session->GenerateUnbatched(job->prepared.prompt.ids, job->prepared.options, OnText(*job));
    {
      std::lock_guard<std::mutex> lock(mu_);
      speculating_ = nullptr;
    }
    if (Conclude(r, std::move(result))) {
      running_.push_back(std::move(r));
      return;
    }
    Release(session);
  }

  // Starts `job` on `session`: its text streamed (auto tools: watched for a call; a forced call:
  // not streamed, the response carries it whole).
  StatusOr<int64_t> Submit(Job& job, Session* session) {
    return engine_->Submit(session, job.prepared.prompt.ids, job.prepared.options, OnText(job));
  }

  // The stream callback of `job`'s request.
  StreamCallback OnText(Job& job) {
    Job* j = &job;
    StreamCallback on_text;
    if (job.forced_call) {
      on_text = [j](std::string_view) { return !j->cancelled.load(); };
    } else if (job.call.has_value()) {
      on_text = [j](std::string_view piece) {
        j->seen.append(piece);
        const size_t open = j->seen.find(kToolCallOpen, j->streamed);
        const size_t end = open != std::string::npos
                               ? open
                               : j->seen.size() - PartialMarker(j->seen, kToolCallOpen);
        if (end > j->streamed && j->stream) {
          std::lock_guard<std::mutex> lock(j->mu);
          j->pending.append(j->seen, j->streamed, end - j->streamed);
          if (!j->woke) {
            j->woke = true;
            j->cv.notify_all();
          }
        }
        j->streamed = std::max(j->streamed, end);
        if (open != std::string::npos) {
          j->content = j->seen.substr(0, open);
          return false;
        }
        return !j->cancelled.load();
      };
    } else if (job.stream) {
      on_text = [j](std::string_view piece) {
        std::lock_guard<std::mutex> lock(j->mu);
        j->pending.append(piece);
        if (!j->woke) {
          j->woke = true;
          j->cv.notify_all();
        }
        return !j->cancelled.load();
      };
    } else {
      on_text = [j](std::string_view) { return !j->cancelled.load(); };
    }
    return on_text;
  }

  // Auto tools: the call's continuation: the prompt, the text before the call, kToolCallOpen and a
  // newline.
  StatusOr<std::vector<int32_t>> CallPrompt(const Job& job) const {
    EncodeOptions eo;
    eo.parse_special = true;  // the call marker is the model's token where it has one
    POCKET_ASSIGN_OR_RETURN(
        std::vector<int32_t> more,
        engine_model_->tokenizer()->Encode(StrCat(job.content, kToolCallOpen, "\n"), eo));
    std::vector<int32_t> ids = job.prepared.prompt.ids;
    ids.insert(ids.end(), more.begin(), more.end());
    return ids;
  }
  // Whether the call has a token of budget left and room in the context.
  bool CallFits(const Job& job, const GenerateResult& first) const {
    if (static_cast<int32_t>(first.tokens.size()) >= job.prepared.options.max_tokens) return false;
    StatusOr<std::vector<int32_t>> ids = CallPrompt(job);
    return ids.ok() && ids->size() < static_cast<size_t>(n_ctx_);
  }
  StatusOr<int64_t> SubmitCall(Job& job, Session* session) {
    POCKET_ASSIGN_OR_RETURN(std::vector<int32_t> ids, CallPrompt(job));
    GenerateOptions& options = job.call->options;
    const int32_t used = static_cast<int32_t>(job.result.tokens.size());
    options.max_tokens =
        std::min(job.prepared.options.max_tokens - used, n_ctx_ - static_cast<int32_t>(ids.size()));
    Job* j = &job;
    return engine_->Submit(session, ids, options,
                           [j](std::string_view) { return !j->cancelled.load(); });
  }

  // On the scheduler's thread.
  void Release(Session* s) {
    engine_->Park(s);
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(s);
  }

  std::unique_ptr<Engine> engine_;
  std::shared_ptr<const Model> engine_model_;
  int32_t n_ctx_ = 0;  // the sessions' context
  std::vector<std::unique_ptr<Session>> sessions_;
  std::shared_ptr<PrefixCache> cache_;
  const int32_t queue_limit_;
  std::function<void(std::string_view)> log_;
  Metrics* metrics_;
  std::mutex join_mu_;  // Stop() from two threads joins once
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<Session*> free_;
  bool stopping_ = false;
  Session* speculating_ = nullptr;  // under mu_: the session RunSpeculative generates on
  std::vector<Running> running_;    // the scheduler thread's own
  std::deque<std::shared_ptr<ScoreTask>> score_queue_;  // under mu_: waiting for the engine
  std::vector<std::shared_ptr<ScoreTask>> scoring_;     // the scheduler thread's own: submitted
  std::thread thread_;
};

// Compares without an early exit (the time does not tell how much of a key was right).
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

// The method a route takes ("GET" or "POST"); "" for paths pocket serve does not serve.
std::string AllowedMethods(const std::string& path) {
  if (path == "/health" || path == "/metrics" || path == "/v1/models") return "GET";
  if (path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/score" ||
      path == "/v1/classify" || path == "/tokenize" || path == "/detokenize") {
    return "POST";
  }
  return "";
}

void SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  if (e.http_status == 503) res.set_header("Retry-After", "1");
  res.set_content(ErrorJson(e), "application/json");
}

}  // namespace

// cpp-httplib's task queue over the server's connection table (serve/connections.h).
class ConnectionQueue : public httplib::TaskQueue {
 public:
  explicit ConnectionQueue(Connections* connections) : connections_(connections) {}
  void enqueue(std::function<void()> fn) override { connections_->Enqueue(std::move(fn)); }
  void shutdown() override { connections_->Shutdown(); }

 private:
  Connections* connections_;
};

struct Server::Impl {
  std::shared_ptr<const Model> model;
  ServeOptions options;
  Metrics metrics;  // before the scheduler, which writes it until it ends
  ModelLoader load;
  // Set by Start on the loader thread (Serve): requests are served once ready says so; until then
  // /health answers "loading" and everything else a 503.
  std::atomic<bool> ready{false};
  std::mutex start_mu;   // Start's handing over of the scheduler, against CancelAll
  bool stopped = false;  // under start_mu: CancelAll came
  Status Start(ServeModel loaded);
  // --spec: one drafter for the server's life, made at start with the server's pool, context
  // and KV type (null: plain decoding); only the scheduler's thread drafts with it.
  std::unique_ptr<Drafter> drafter;
  bool spec_auto = false;
  bool spec_guard = false;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<ScoreWorker> scorer;
  // Before http, which serves its connections (and is stopped before it goes).
  std::unique_ptr<Connections> connections;
  httplib::Server http;
  std::mt19937_64 ids_rng{std::random_device{}()};
  std::mutex ids_mu;
  int bound_port = -1;
  HttpPolicy policy;
  // When each request in flight arrived (the access log's duration), by its Request's address:
  // cpp-httplib routes and logs a request on one thread with the same object.
  // And its tokens, for the same line (-1: not a generation or scoring request, or not known).
  struct Arrival {
    std::chrono::steady_clock::time_point at;
    int64_t prompt_tokens = -1;
    int64_t completion_tokens = -1;
  };
  std::mutex arrivals_mu;
  std::unordered_map<const httplib::Request*, Arrival> arrivals;

  void NoteTokens(const httplib::Request& req, int64_t prompt, int64_t completion) {
    std::lock_guard<std::mutex> lock(arrivals_mu);
    auto it = arrivals.find(&req);
    if (it == arrivals.end()) return;
    it->second.prompt_tokens = prompt;
    it->second.completion_tokens = completion;
  }
  // The drain (Stop): new requests get a 503 while the requests in flight, counted from their
  // routing to their logging (after a stream's last byte), finish; then the listener stops.
  // cpp-httplib ends every stream the moment it stops, so it must not stop before they do.
  std::atomic<bool> draining{false};
  std::mutex drain_mu;
  std::condition_variable drain_cv;
  int64_t in_flight = 0;      // under drain_mu
  bool cancel_drain = false;  // under drain_mu: CancelAll came, streams end with what they have
  std::thread drainer;
  std::atomic<int64_t> last_trim_ms{0};  // TrimHeap's last call (steady clock)

  void Drain() {
    std::unique_lock<std::mutex> lock(drain_mu);
    drain_cv.wait(lock, [&] { return in_flight == 0 || cancel_drain; });
    // Cancelled requests still write their last chunks: a short grace for them.
    drain_cv.wait_for(lock, std::chrono::seconds(5), [&] { return in_flight == 0; });
    lock.unlock();
    http.stop();
  }

  std::string NewId(std::string_view prefix) {
    std::lock_guard<std::mutex> lock(ids_mu);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string id(prefix);
    for (int i = 0; i < 24; ++i) id.push_back(kHex[ids_rng() & 15]);
    return id;
  }

  // ErrorFromStatus without this machine's file paths: a client sees the model's name (and an
  // adapter's), never where the files are.
  ApiError FromStatus(const Status& status, std::string_view param = "") const {
    ApiError e = ErrorFromStatus(status, param);
    auto scrub = [&e](const std::string& path, const std::string& name) {
      if (path.empty()) return;
      for (const std::string& p : {path, std::filesystem::absolute(path).string()}) {
        for (size_t at = e.message.find(p); at != std::string::npos;
             at = e.message.find(p, at + name.size())) {
          e.message.replace(at, p.size(), name);
        }
      }
    };
    scrub(model->source().path(), StrCat("model '", options.model_name, "'"));
    for (const auto& [name, set] : options.adapters) {
      for (const AdapterUse& u : set) scrub(u.adapter->path(), StrCat("adapter '", name, "'"));
    }
    return e;
  }

  // A body nesting deeper than kMaxJsonNesting is a 400 before it is parsed (the OpenAI routes
  // check in ParseRequest / ParseScoreRequest).
  bool NestsTooDeep(const httplib::Request& req, httplib::Response& res) {
    Status nesting = CheckJsonNesting(req.body, "the request body");
    if (nesting.ok()) return false;
    ApiError e;
    e.message = nesting.message();
    SendError(res, e);
    return true;
  }

  bool Authorized(const httplib::Request& req, httplib::Response& res) {
    if (options.api_key.empty()) return true;
    const std::string auth = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    const bool ok =
        auth.size() > kBearer.size() && auth.compare(0, kBearer.size(), kBearer) == 0 &&
        ConstantTimeEquals(std::string_view(auth).substr(kBearer.size()), options.api_key);
    if (!ok) {
      ApiError e;
      e.http_status = 401;
      e.message = auth.empty() ? "No API key provided (Authorization: Bearer KEY)"
                               : "Incorrect API key provided";
      e.code = "invalid_api_key";
      SendError(res, e);
    }
    return ok;
  }

  AdapterSet AdaptersOf(const std::string& name) const {
    for (const auto& [n, set] : options.adapters) {
      if (n == name) return set;
    }
    return {};
  }

  ApiLimits Limits() const {
    ApiLimits limits;
    limits.max_tokens = options.max_tokens;
    limits.n_ctx = options.n_ctx;
    limits.max_n = options.parallel;
    limits.max_tool_calls = options.max_tool_calls;
    limits.vocab_size = model->tokenizer()->vocab_size();
    for (const auto& [name, set] : options.adapters) limits.adapters.push_back(name);
    return limits;
  }

  // /v1/score and /v1/classify.
  void Score(bool classify, const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res)) return;
    ScoreRequest sr;
    if (auto e = ParseScoreRequest(classify, req.body, options.model_name, Limits(), &sr)) {
      return SendError(res, *e);
    }
    StatusOr<PromptTokens> prompt = EncodeRequestPrompt(*model, sr.prompt);
    if (!prompt.ok()) return SendError(res, FromStatus(prompt.status()));
    const std::string_view input_param = sr.chat ? "messages" : "prompt";
    const int32_t n_ctx = scorer->session().n_ctx();
    if (prompt->ids.size() >= static_cast<size_t>(n_ctx)) {
      ApiError e;
      e.param = std::string(input_param);
      e.code = "context_length_exceeded";
      e.message = StrCat("the prompt is ", prompt->ids.size(), " tokens; the context holds ", n_ctx,
                         " tokens");
      return SendError(res, e);
    }
    const int fd = connections->CurrentSocket();
    const auto client_gone = [fd] { return fd >= 0 && PeerClosed(fd); };
    json out = {{"model", options.model_name}, {"usage", {{"prompt_tokens", prompt->ids.size()}}}};
    NoteTokens(req, static_cast<int64_t>(prompt->ids.size()), 0);
    if (classify) {
      std::vector<LabelScore> labels;
      const Status s = scorer->Run(
          AdaptersOf(sr.adapter),
          [&](Session& session) -> Status {
            session.SetCacheSalt(sr.cache_salt);
            POCKET_ASSIGN_OR_RETURN(labels, session.Classify(prompt->ids));
            return Status::Ok();
          },
          client_gone);
      if (!s.ok())
        return SendError(res,
                         FromStatus(s, s.code() == StatusCode::kFailedPrecondition ? "model" : ""));
      json results = json::array();
      for (const LabelScore& l : labels) {
        results.push_back({{"index", l.index},
                           {"label", l.label},
                           {"logit", l.logit},
                           {"logprob", l.logprob},
                           {"probability", l.probability}});
      }
      out["object"] = "classification";
      out["labels"] = std::move(results);
    } else {
      StatusOr<std::vector<std::vector<int32_t>>> candidates =
          EncodeCandidates(*model, sr.prompt, *prompt, sr.candidates);
      if (!candidates.ok()) return SendError(res, FromStatus(candidates.status(), "candidates"));
      std::vector<CandidateScore> scores;
      const Status s = scorer->Run(
          AdaptersOf(sr.adapter),
          [&](Session& session) -> Status {
            session.SetCacheSalt(sr.cache_salt);
            POCKET_ASSIGN_OR_RETURN(scores,
                                    scheduler->Score(&session, prompt->ids, std::move(*candidates),
                                                     options.score_chunk));
            return Status::Ok();
          },
          client_gone);
      if (!s.ok()) return SendError(res, FromStatus(s, "candidates"));
      json results = json::array();
      for (const CandidateScore& c : scores) {
        results.push_back({{"index", c.index},
                           {"candidate", sr.candidates[static_cast<size_t>(c.index)]},
                           {"logprob", c.logprob},
                           {"probability", c.probability},
                           {"tokens", c.tokens.size()}});
      }
      out["object"] = "score";
      out["results"] = std::move(results);
    }
    res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  }

  // A choice of the response from its finished job: text, tool calls, finish reason, logprobs.
  Choice ChoiceOf(const ApiRequest& api, Job& job, int32_t index) {
    Choice c;
    c.index = index;
    const Tokenizer* tok = model->tokenizer();
    if (api.logprobs) {
      c.with_logprobs = true;
      // One entry per kept token (a final stop token has one too: dropped).
      // (an opened call: the tokens before it, the marker's included, then the call's).
      for (const GenerateResult* r : {&job.result, &job.call_result}) {
        const size_t n = std::min(r->logprobs.size(), r->tokens.size());
        for (size_t i = 0; i < n; ++i) {
          const TokenLogprobs& e = r->logprobs[i];
          TokenLogprob t;
          t.token = std::string(tok->TokenBytes(e.token));
          t.logprob = e.logprob;
          for (const auto& [id, lp] : e.top) t.top.emplace_back(tok->TokenBytes(id), lp);
          c.logprobs.push_back(std::move(t));
        }
      }
    }
    if (job.forced_call || job.call_opened) {
      // The calls: the output after the format's call prefix (one call, or several in a row).
      const chat::ChatFormat format = chat::ChatFormat::Default();
      const GenerateResult& call = job.forced_call ? job.result : job.call_result;
      std::optional<std::vector<ToolCall>> parsed =
          call.stop_reason == StopReason::kEos ? format.ParseCalls(call.text) : std::nullopt;
      const std::string before = job.forced_call ? std::string() : job.content;
      if (parsed.has_value()) {
        c.text = before;  // as it was streamed
        c.null_content = c.text.empty();
        for (ToolCall& t : *parsed) t.id = NewId("call_");
        c.tool_calls = std::move(*parsed);
        c.finish_reason = "tool_calls";
        return c;
      }
      // The budget ran out inside a call (or the client left): the text as it is.
      c.text = StrCat(before, job.forced_call ? "" : format.CallPrefix(), call.text);
      c.finish_reason = FinishReason(call.stop_reason);
      return c;
    }
    c.text = job.result.text;
    c.finish_reason = FinishReason(job.result.stop_reason);
    return c;
  }

  void Generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res)) return;
    ApiRequest api;
    if (auto e = ParseRequest(endpoint, req.body, options.model_name, Limits(), &api)) {
      return SendError(res, *e);
    }
    // The n choices: requests of their own, seeds seed, seed + 1, ... (or each drawn).
    std::vector<std::shared_ptr<Job>> jobs;
    ResponseIds ids;
    ids.id = NewId(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
    ids.created = static_cast<int64_t>(std::time(nullptr));
    ids.model = options.model_name;
    for (int32_t i = 0; i < api.n; ++i) {
      GenerateRequest g = api.generate;
      if (drafter != nullptr) g.draft_max = options.draft_max;
      g.sampling.seed += static_cast<uint64_t>(i);
      StatusOr<PreparedRequest> prepared = PrepareRequest(*model, g);
      // --spec: the server's one drafter (made at start), used on the scheduler's thread only.
      if (prepared.ok() && drafter != nullptr) {
        prepared->options.drafter = drafter.get();
        prepared->options.spec_auto = spec_auto;
        prepared->options.spec_guard = spec_guard;
      }
      if (!prepared.ok()) {
        return SendError(
            res, FromStatus(prepared.status(), api.tool_choice == ToolChoice::kRequired ||
                                                       api.tool_choice == ToolChoice::kFunction
                                                   ? "tools"
                                                   : ""));
      }
      auto job = std::make_shared<Job>();
      job->id = ids.id;
      job->prepared = std::move(*prepared);
      job->adapters = AdaptersOf(api.adapter);
      job->cache_salt = api.cache_salt;
      if (!api.assistant_prefix.empty()) {
        EncodeOptions eo;
        eo.parse_special = true;
        StatusOr<std::vector<int32_t>> more = model->tokenizer()->Encode(api.assistant_prefix, eo);
        if (!more.ok()) return SendError(res, FromStatus(more.status()));
        job->prepared.prompt.ids.insert(job->prepared.prompt.ids.end(), more->begin(), more->end());
      }
      job->stream = api.stream;
      job->forced_call =
          api.tool_choice == ToolChoice::kRequired || api.tool_choice == ToolChoice::kFunction;
      // Auto: a call the model opens continues constrained to the tools (not inside an output
      // constrained by response_format: that constraint decides the whole output).
      if (api.tool_choice == ToolChoice::kAuto && api.generate.constraint.empty()) {
        GenerateRequest call = g;  // the call runs on the engine, without the drafter
        call.constraint = api.call_constraint;
        call.stop.clear();
        StatusOr<PreparedRequest> p = PrepareRequest(*model, call);
        if (!p.ok()) return SendError(res, FromStatus(p.status(), "tools"));
        p->options.partial_constrained_output = true;
        p->options.logprobs = api.logprobs ? api.top_logprobs : -1;
        job->call = std::move(*p);
      }
      // A budget that ends a constrained output early: finish_reason "length" (OpenAI's answer).
      job->prepared.options.partial_constrained_output = true;
      job->prepared.options.ignore_stop_tokens = api.ignore_eos;
      job->prepared.options.logprobs = api.logprobs ? api.top_logprobs : -1;
      jobs.push_back(std::move(job));
    }
    const size_t n_prompt = jobs.front()->prepared.prompt.ids.size();
    const size_t n_ctx = static_cast<size_t>(options.n_ctx);
    if (n_prompt >= n_ctx) {
      ApiError e;
      e.param = endpoint == Endpoint::kChat ? "messages" : "prompt";
      e.code = "context_length_exceeded";
      e.message = StrCat("the prompt is ", n_prompt, " tokens; the context holds ", n_ctx,
                         " tokens (prompt + completion)");
      return SendError(res, e);
    }
    if (api.max_tokens_given && n_prompt + static_cast<size_t>(api.generate.max_tokens) > n_ctx) {
      ApiError e;
      e.param = "max_tokens";
      e.code = "context_length_exceeded";
      e.message = StrCat("the prompt is ", n_prompt, " tokens and max_tokens ",
                         api.generate.max_tokens, ": more than the context of ", n_ctx, " tokens");
      return SendError(res, e);
    }
    if (Status q = scheduler->Enqueue(jobs); !q.ok()) return SendError(res, FromStatus(q));
    if (!api.stream) {
      // A whole response: its client is watched while the jobs run, and one that goes away
      // cancels them (the scheduler stops them within a step).
      const int fd = connections->CurrentSocket();
      bool gone = false;
      std::vector<Choice> choices;
      Usage usage;
      for (size_t i = 0; i < jobs.size(); ++i) {
        Job& job = *jobs[i];
        {
          std::unique_lock<std::mutex> lock(job.mu);
          while (!job.cv.wait_for(lock, kAlivePollInterval, [&] { return job.finished; })) {
            if (gone || fd < 0 || !PeerClosed(fd)) continue;
            gone = true;
            for (auto& other : jobs) other->cancelled.store(true);
            scheduler->Wake();
          }
        }
        if (!job.status.ok()) {
          for (auto& other : jobs) other->cancelled.store(true);
          scheduler->Wake();
          return SendError(res, FromStatus(job.status));
        }
        choices.push_back(ChoiceOf(api, job, static_cast<int32_t>(i)));
        const Usage u = UsageOf(job.result, n_prompt);
        if (i == 0) usage = u;
        if (i > 0) usage.completion_tokens += u.completion_tokens;
        usage.completion_tokens += static_cast<int32_t>(job.call_result.tokens.size());
      }
      NoteTokens(req, usage.prompt_tokens, usage.completion_tokens);
      res.set_content(CompletionJson(endpoint, ids, choices, usage), "application/json");
      return;
    }
    // Streaming: the provider runs on this connection's thread until the jobs end or the client
    // goes away (a write fails: the jobs are cancelled, the scheduler stops them within a step).
    res.set_header("Cache-Control", "no-cache");
    struct StreamState {
      bool started = false;
      bool sent_text = false;  // after the first text, flush every kFlushInterval
      std::vector<bool> done;  // each choice's finish event sent
      Usage usage;
    };
    auto state = std::make_shared<StreamState>();
    state->done.assign(jobs.size(), false);
    Scheduler* sched = scheduler.get();
    auto api_shared = std::make_shared<ApiRequest>(std::move(api));
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, jobs, state, ids, endpoint, n_prompt, sched, api_shared, reqp = &req](
            size_t, httplib::DataSink& sink) {
          const ApiRequest& request = *api_shared;
          auto cancel_all = [&] {
            for (auto& job : jobs) job->cancelled.store(true);
            sched->Wake();
          };
          auto write = [&](const std::string& s) {
            if (sink.write(s.data(), s.size())) return true;
            cancel_all();
            return false;
          };
          if (!state->started) {
            state->started = true;
            if (endpoint == Endpoint::kChat) {
              for (size_t i = 0; i < jobs.size(); ++i) {
                if (!write(StreamRoleEvent(ids, static_cast<int32_t>(i)))) return false;
              }
            }
          }
          // Wait for news from the first choice still running (the others' are read as well).
          size_t waiting = 0;
          while (waiting < jobs.size() && state->done[waiting]) ++waiting;
          {
            Job& job = *jobs[waiting];
            std::unique_lock<std::mutex> lock(job.mu);
            job.cv.wait_for(lock, kFlushInterval, [&] {
              return job.finished || (!state->sent_text && !job.pending.empty());
            });
          }
          bool wrote = false;
          for (size_t i = 0; i < jobs.size(); ++i) {
            if (state->done[i]) continue;
            Job& job = *jobs[i];
            const int32_t index = static_cast<int32_t>(i);
            std::string text;
            bool finished = false;
            {
              std::lock_guard<std::mutex> lock(job.mu);
              text.swap(job.pending);
              finished = job.finished;
            }
            if (!text.empty()) {
              wrote = true;
              state->sent_text = true;
              if (!write(StreamTextEvent(endpoint, ids, index, text, nullptr))) return false;
            }
            if (!finished) continue;
            state->done[i] = true;
            wrote = true;
            if (!job.status.ok()) {
              // An explicit error event, then the end of the stream, never a silent close.
              write(StrCat("data: ", ErrorJson(FromStatus(job.status)), "\n\n"));
              write(std::string(kStreamDone));
              cancel_all();
              sink.done();
              return true;
            }
            const Choice c = ChoiceOf(request, job, index);
            if (c.with_logprobs && !c.logprobs.empty() &&
                !write(StreamTextEvent(endpoint, ids, index, "", &c.logprobs))) {
              return false;
            }
            if (!c.tool_calls.empty()) {
              if (!write(StreamToolCallsEvent(ids, index, c.tool_calls))) return false;
            } else if (job.forced_call && !c.text.empty() &&
                       !write(StreamTextEvent(endpoint, ids, index, c.text, nullptr))) {
              return false;  // a forced call cut short: its text, as the response has it
            } else if (job.call_opened &&
                       !write(StreamTextEvent(endpoint, ids, index,
                                              c.text.substr(job.content.size()), nullptr))) {
              return false;
            }
            if (!write(StreamFinishEvent(endpoint, ids, index, c.finish_reason))) return false;
            const Usage u = UsageOf(job.result, n_prompt);
            if (i == 0) {
              const int32_t so_far = state->usage.completion_tokens;
              state->usage = u;
              state->usage.completion_tokens += so_far;
            } else {
              state->usage.completion_tokens += u.completion_tokens;
            }
            state->usage.completion_tokens += static_cast<int32_t>(job.call_result.tokens.size());
          }
          if (std::find(state->done.begin(), state->done.end(), false) != state->done.end()) {
            // Nothing new: a probe that the client is still there.
            if (!wrote && !sink.is_writable()) {
              cancel_all();
              return false;
            }
            return true;
          }
          NoteTokens(*reqp, state->usage.prompt_tokens, state->usage.completion_tokens);
          if (request.include_usage && !write(StreamUsageEvent(endpoint, ids, state->usage))) {
            return false;
          }
          if (!write(std::string(kStreamDone))) return false;
          sink.done();
          return true;
        },
        [jobs, sched](bool success) {
          if (!success) {
            for (auto& job : jobs) job->cancelled.store(true);
            sched->Wake();
          }
        });
  }

  // Prometheus' text exposition format.
  std::string MetricsText() {
    std::string out;
    auto metric = [&](std::string_view name, std::string_view type, std::string_view help,
                      auto value) {
      out += StrCat("# HELP pocket_", name, " ", help, "\n# TYPE pocket_", name, " ", type,
                    "\npocket_", name, " ", value, "\n");
    };
    {
      std::lock_guard<std::mutex> lock(metrics.mu);
      out +=
          "# HELP pocket_http_responses_total HTTP responses by path and status.\n"
          "# TYPE pocket_http_responses_total counter\n";
      for (const auto& [key, n] : metrics.responses) {
        out += StrCat("pocket_http_responses_total{path=\"", key.first, "\",status=\"", key.second,
                      "\"} ", n, "\n");
      }
    }
    const Metrics& m = metrics;
    metric("prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
           m.prompt_tokens.load());
    metric("prompt_tokens_cached_total", "counter",
           "Prompt tokens reused from a session's context or the prefix cache.",
           m.cached_tokens.load());
    metric("generated_tokens_total", "counter", "Completion tokens of finished requests.",
           m.generated_tokens.load());
    metric("decode_tokens_total", "counter", "Decode rows evaluated (one token each).",
           m.decode_rows.load());
    metric("prefill_tokens_total", "counter", "Prompt rows evaluated.", m.prefill_rows.load());
    metric("engine_steps_total", "counter", "Batched forward passes.", m.steps.load());
    metric("decode_tokens_per_second", "gauge",
           "Decode tokens per second, all requests, over the last 10 s.",
           metrics.TokensPerSecond());
    metric("requests_running", "gauge", "Requests generating now.", m.running.load());
    metric("requests_queued", "gauge", "Requests waiting for a free slot.", scheduler->queued());
    metric("requests_cancelled_total", "counter", "Requests whose client went away.",
           m.cancelled.load());
    metric("kv_bytes", "gauge",
           "KV-cache bytes held by the sessions (generating, idle and scoring) and the prefix "
           "cache.",
           m.kv_bytes.load() + static_cast<int64_t>(scorer->kv_bytes()));
    metric("prefix_cache_bytes", "gauge",
           "Bytes of the prefix cache's entries (pages shared with sessions counted here too).",
           m.prefix_bytes.load());
    metric("prefix_cache_lookups_total", "counter", "Prefix-cache lookups.",
           m.prefix_lookups.load());
    metric("prefix_cache_hits_total", "counter", "Prefix-cache lookups that restored a prefix.",
           m.prefix_hits.load());
    metric("prefix_cache_hit_tokens_total", "counter", "Positions restored from the prefix cache.",
           m.prefix_hit_tokens.load());
    metric("kv_swaps_out_total", "counter", "Sessions saved to disk under the KV budget.",
           m.swaps_out.load());
    metric("kv_swaps_in_total", "counter", "Sessions restored from disk.", m.swaps_in.load());
    metric("kv_swapped_sessions", "gauge", "Sessions saved to disk under the KV budget now.",
           m.swapped_sessions.load());
    metric("kv_swapped_bytes", "gauge", "Bytes of the session files swapped to disk now.",
           m.swapped_bytes.load());
    metric("process_resident_bytes", "gauge", "Resident memory of the server process.",
           ReadProcessMemory().rss_bytes);
    const ConnectionCounts cc = connections->Counts();
    metric("connections_open", "gauge", "HTTP connections open now.", cc.open);
    metric("connections_total", "counter", "HTTP connections accepted and served.", cc.accepted);
    metric("connections_refused_total", "counter",
           "Connections answered 503 beyond --max-connections and the probes' reserve.",
           cc.refused);
    metric("connections_timed_out_total", "counter",
           "Connections closed because a request did not arrive within --request-timeout.",
           cc.timed_out);
    metric("draft_tokens_total", "counter", "Tokens drafted for speculative decoding.",
           m.drafted_tokens.load());
    metric("draft_tokens_accepted_total", "counter", "Drafted tokens the model kept.",
           m.accepted_draft_tokens.load());
    return out;
  }

  // A POST route: its request has arrived once cpp-httplib read the body and calls it.
  template <typename Handler>
  void Post(const char* path, Handler handler) {
    http.Post(path, [this, handler](const httplib::Request& req, httplib::Response& res) {
      connections->RequestArrived();
      handler(req, res);
    });
  }

  void Routes() {
    http.set_payload_max_length(options.max_body_bytes);
    // A client that reads nothing for 10 s loses its connection (a stream's request is then
    // cancelled); every request's headers and body must arrive within --request-timeout, and idle
    // keep-alive connections close after 5 s (serve/connections.h), so a slow or idle client
    // holds a connection for a bounded time and never the scheduler. Headers are limited to
    // 8 KiB a line by cpp-httplib (a longer one is a 400).
    http.set_read_timeout(10);
    http.set_write_timeout(10);
    http.set_keep_alive_timeout(5);
    http.set_keep_alive_max_count(1000);
    ConnectionLimits limits;
    limits.max_connections = std::max(1, options.max_connections);
    limits.request_timeout = std::chrono::milliseconds(options.request_timeout_ms);
    limits.keep_alive = std::chrono::seconds(5);
    connections = std::make_unique<Connections>(limits, options.log);
    http.new_task_queue = [this] { return new ConnectionQueue(connections.get()); };
    http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      ApiError e;
      e.http_status = res.status;
      if (res.status == 413) {
        e.message = "the request body is larger than this server's limit";
      } else if (res.status == 404) {
        e.message = "no such endpoint";
        e.code = "not_found";
      } else {
        e.message = StrCat("HTTP ", res.status);
      }
      res.set_content(ErrorJson(e), "application/json");
    });
    http.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
          ApiError e;
          e.http_status = 500;
          e.type = "server_error";
          e.message = "internal error";
          SendError(res, e);
        });
    policy.bind_host = options.host;
    policy.allowed_hosts = options.allowed_hosts;
    policy.cors_origins = options.cors_origins;
    // Before the body is read: the browser policy (Host, Origin, preflight), methods a route does
    // not take (405), and the request id.
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard<std::mutex> lock(arrivals_mu);
        arrivals[&req] = Arrival{std::chrono::steady_clock::now()};
      }
      {
        std::lock_guard<std::mutex> lock(drain_mu);
        ++in_flight;  // until the logger, which cpp-httplib calls after the response's last byte
      }
      std::string id = ClientRequestId(req.get_header_value("X-Request-Id"));
      if (id.empty()) id = NewId("req-");
      res.set_header("X-Request-Id", id);
      // A request without a body has arrived whole; one with a body once its handler runs.
      if (req.method != "POST" && req.method != "PUT" && req.method != "PATCH") {
        connections->RequestArrived();
      }
      auto refuse = [this, &res](int status, std::string message, std::string code) {
        connections->RequestArrived();
        ApiError e;
        e.http_status = status;
        e.message = std::move(message);
        e.code = std::move(code);
        SendError(res, e);
        if (status == 503) res.set_header("Retry-After", "1");
        res.set_header("Connection", "close");  // the body, if any, is never read
        return httplib::Server::HandlerResponse::Handled;
      };
      const std::string host_refusal = HostRefusal(policy, req.get_header_value("Host"));
      if (!host_refusal.empty()) return refuse(403, host_refusal, "host_not_allowed");
      const bool probe = req.path == "/health" || req.path == "/metrics";
      if (!probe && connections->CurrentKind() == ServingKind::kProbesOnly) {
        return refuse(503,
                      StrCat("too many connections (--max-connections ", options.max_connections,
                             "); retry later"),
                      "too_many_connections");
      }
      if (!ready.load()) {
        if (req.path == "/health") {
          connections->RequestArrived();
          res.status = 503;
          res.set_header("Retry-After", "1");
          res.set_content(R"({"status":"loading"})", "application/json");
          return httplib::Server::HandlerResponse::Handled;
        }
        return refuse(503, "the model is loading; retry shortly", "model_loading");
      }
      if (draining.load() && req.path != "/metrics") {
        // Load balancers read /health's 503; clients retry elsewhere or after the restart.
        if (req.path == "/health") {
          res.status = 503;
          res.set_header("Retry-After", "1");
          res.set_content(R"({"status":"draining"})", "application/json");
          return httplib::Server::HandlerResponse::Handled;
        }
        return refuse(503, "the server is shutting down", "server_draining");
      }
      const std::string allowed = AllowedMethods(req.path);
      if (req.has_header("Origin")) {
        const std::string origin = req.get_header_value("Origin");
        std::optional<std::string> allow = CorsAllowOrigin(policy, origin);
        if (!allow) {
          return refuse(403,
                        StrCat("cross-origin requests from '", origin.substr(0, 100),
                               "' are not served (pocket serve --cors-origin ORIGIN allows one)"),
                        "origin_not_allowed");
        }
        res.set_header("Access-Control-Allow-Origin", *allow);
        res.set_header("Vary", "Origin");
        if (req.method == "OPTIONS" && !allowed.empty()) {  // a preflight
          res.set_header("Access-Control-Allow-Methods", allowed + ", OPTIONS");
          res.set_header("Access-Control-Allow-Headers",
                         "Authorization, Content-Type, X-Request-Id");
          res.set_header("Access-Control-Max-Age", "600");
          res.status = 204;
          return httplib::Server::HandlerResponse::Handled;
        }
      }
      if (allowed.empty()) return httplib::Server::HandlerResponse::Unhandled;  // 404 later
      if (req.method == "OPTIONS") {
        res.set_header("Allow", allowed + ", OPTIONS");
        res.status = 204;
        return httplib::Server::HandlerResponse::Handled;
      }
      const bool head_of_get = req.method == "HEAD" && allowed == "GET";
      if (req.method != allowed && !head_of_get) {
        res.set_header("Allow", allowed + ", OPTIONS");
        return refuse(405, StrCat(req.path, " takes ", allowed, ", not ", req.method.substr(0, 16)),
                      "method_not_allowed");
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      connections->ResponseSent();  // cpp-httplib logs after the response's last byte
      metrics.CountResponse(req.path, res.status);
      Arrival arrived{std::chrono::steady_clock::now()};
      bool routed = false;  // a request cpp-httplib refused before routing was never counted
      {
        std::lock_guard<std::mutex> lock(arrivals_mu);
        auto it = arrivals.find(&req);
        if (it != arrivals.end()) {
          arrived = it->second;
          arrivals.erase(it);
          routed = true;
        }
      }
      bool idle = false;
      if (routed) {
        {
          std::lock_guard<std::mutex> lock(drain_mu);
          idle = --in_flight == 0;
        }
        drain_cv.notify_all();
      }
      // A large request's memory goes back to the OS: when the server falls idle, and at most
      // once a second under load (glibc keeps freed memory in each thread's arena otherwise).
      const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count();
      int64_t last = last_trim_ms.load();
      if ((idle || now_ms - last >= 1000) && last_trim_ms.compare_exchange_strong(last, now_ms)) {
        TrimHeap(uint64_t{4} << 20);
      }
      if (!options.log) return;
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - arrived.at)
                          .count();
      // The path only up to its query: a query string may hold what a client meant to keep.
      const std::string path = req.path.substr(0, std::min<size_t>(req.path.find('?'), 200));
      std::string tokens;
      if (arrived.prompt_tokens >= 0) {
        tokens = StrCat(" prompt ", arrived.prompt_tokens, " completion ",
                        std::max<int64_t>(arrived.completion_tokens, 0));
      }
      options.log(StrCat("http ", res.get_header_value("X-Request-Id"), " ",
                         req.method.substr(0, 16), " ", path, " ", res.status, " ", ms, " ms",
                         tokens));
    });
    http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res)) return;
      res.set_content(MetricsText(), "text/plain; version=0.0.4; charset=utf-8");
    });
    http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res)) return;
      json data = json::array({{{"id", options.model_name},
                                {"object", "model"},
                                {"created", 0},
                                {"owned_by", "pocket"}}});
      for (const auto& [name, set] : options.adapters) {
        data.push_back({{"id", StrCat(options.model_name, ":", name)},
                        {"object", "model"},
                        {"created", 0},
                        {"owned_by", "pocket"},
                        {"parent", options.model_name},
                        {"adapter", AdapterSetName(set)}});
      }
      res.set_content(json{{"object", "list"}, {"data", std::move(data)}}.dump(
                          -1, ' ', false, json::error_handler_t::replace),
                      "application/json");
    });
    Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Generate(Endpoint::kChat, req, res);
    });
    Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Generate(Endpoint::kCompletion, req, res);
    });
    Post("/v1/score",
         [this](const httplib::Request& req, httplib::Response& res) { Score(false, req, res); });
    Post("/v1/classify",
         [this](const httplib::Request& req, httplib::Response& res) { Score(true, req, res); });
    Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res) || NestsTooDeep(req, res)) return;
      const json body = json::parse(req.body, nullptr, false);
      if (body.is_discarded() || !body.is_object() || !body.contains("content") ||
          !body["content"].is_string()) {
        ApiError e;
        e.param = "content";
        e.message = "the body must be a JSON object with a string 'content'";
        return SendError(res, e);
      }
      bool add_special = false;
      if (body.contains("add_special")) {
        if (!body["add_special"].is_boolean()) {
          ApiError e;
          e.param = "add_special";
          e.message = "'add_special' must be a boolean";
          return SendError(res, e);
        }
        add_special = body["add_special"].get<bool>();
      }
      const Tokenizer* tok = model->tokenizer();
      if (tok == nullptr) return SendError(res, FromStatus(InternalError("no tokenizer")));
      EncodeOptions eo;
      eo.add_bos = add_special && tok->spec().add_bos;
      eo.parse_special = false;
      StatusOr<std::vector<int32_t>> ids = tok->Encode(body["content"].get<std::string>(), eo);
      if (!ids.ok()) return SendError(res, FromStatus(ids.status(), "content"));
      res.set_content(json{{"tokens", *ids}}.dump(), "application/json");
    });
    Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res) || NestsTooDeep(req, res)) return;
      const json body = json::parse(req.body, nullptr, false);
      ApiError bad;
      bad.param = "tokens";
      bad.message = "the body must be a JSON object with 'tokens', an array of token ids";
      if (body.is_discarded() || !body.is_object() || !body.contains("tokens") ||
          !body["tokens"].is_array()) {
        return SendError(res, bad);
      }
      const Tokenizer* tok = model->tokenizer();
      if (tok == nullptr) return SendError(res, FromStatus(InternalError("no tokenizer")));
      std::vector<int32_t> ids;
      for (const json& t : body["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
            t.get<int64_t>() >= tok->vocab_size()) {
          bad.message = StrCat("'tokens' must hold token ids from 0 to ", tok->vocab_size() - 1);
          return SendError(res, bad);
        }
        ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
      StatusOr<std::string> text = tok->Decode(ids);
      if (!text.ok()) return SendError(res, FromStatus(text.status(), "tokens"));
      res.set_content(json{{"content", *text}}.dump(/*indent=*/-1, ' ', /*ensure_ascii=*/false,
                                                    json::error_handler_t::replace),
                      "application/json");
    });
  }
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() {
  Stop();
  CancelAll();
  if (impl_->drainer.joinable()) impl_->drainer.join();
}

StatusOr<std::unique_ptr<Server>> Server::Create(std::shared_ptr<const Model> model,
                                                 const ServeOptions& options) {
  if (!model) return InvalidArgumentError("no model");
  return Create(
      [model, adapters = options.adapters]() -> StatusOr<ServeModel> {
        return ServeModel{model, adapters};
      },
      options);
}

StatusOr<std::unique_ptr<Server>> Server::Create(ModelLoader load, const ServeOptions& options) {
  if (!load) return InvalidArgumentError("no model loader");
  if (options.parallel < 1 || options.parallel > 256) {
    return InvalidArgumentError("--parallel must be 1 to 256, got ", options.parallel);
  }
  if (options.queue_limit < 0) return InvalidArgumentError("the queue limit must be >= 0");
  if (!options.spec.empty() && options.spec != "none") {
    GenerateRequest spec_request;
    spec_request.spec = options.spec;
    spec_request.draft_max = options.draft_max;
    POCKET_RETURN_IF_ERROR(ParseSpec(spec_request).status());
    if (options.parallel != 1) {
      return InvalidArgumentError(
          "--spec needs --parallel 1 (the engine batches plain decoding "
          "only; a speculative request runs alone), got --parallel ",
          options.parallel);
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->load = std::move(load);
  impl->options = options;
  impl->Routes();
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

// The model's part of the server (on the loader thread while /health says "loading").
Status Server::Impl::Start(ServeModel loaded) {
  std::shared_ptr<const Model> model = std::move(loaded.model);
  if (!model) return InvalidArgumentError("no model");
  if (model->tokenizer() == nullptr) {
    return FailedPreconditionError("the model has no tokenizer (give one with --tokenizer)");
  }
  options.adapters = std::move(loaded.adapters);
  GenerateRequest spec_request;
  if (!options.spec.empty() && options.spec != "none") {
    spec_request.spec = options.spec;
    spec_request.draft_max = options.draft_max;
  }
  POCKET_ASSIGN_OR_RETURN(std::shared_ptr<ThreadPool> pool, MakeThreadPool(options.n_threads));
  SessionOptions so;
  so.n_ctx = options.n_ctx;
  so.n_batch = options.n_batch;
  so.kv_type = options.kv_type;
  so.pool = pool;
  // Scoring's own session (ScoreWorker). Under --kv-budget its whole context is set aside from
  // the budget (at most half of it: a longer context is cut to fit), and the engine gets the rest,
  // so that generation, idle contexts, the prefix cache and scoring together stay within it.
  SessionOptions score_so = so;
  size_t engine_budget = options.kv_budget_bytes;
  if (options.kv_budget_bytes > 0) {
    POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Session> probe, Session::Create(model, so));
    const size_t page = probe->kv_page_bytes();
    const int64_t pages_max = static_cast<int64_t>(options.kv_budget_bytes / 2 / page);
    if (pages_max < 1) {
      return InvalidArgumentError("--kv-budget ", options.kv_budget_bytes,
                                  " bytes is too small: it must hold two KV pages of ", page,
                                  " bytes");
    }
    const int64_t pages =
        std::min<int64_t>(pages_max, (probe->n_ctx() + kKvPagePositions - 1) / kKvPagePositions);
    score_so.n_ctx =
        static_cast<int32_t>(std::min<int64_t>(probe->n_ctx(), pages * kKvPagePositions));
    engine_budget -= static_cast<size_t>(pages) * page;
  }
  EngineOptions eo;
  eo.max_requests = options.parallel + 1;  // and /v1/score's request
  eo.max_chunk = options.n_batch;
  eo.kv_budget_bytes = engine_budget;
  eo.swap_dir = options.swap_dir;
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, pool, eo));
  PrefixCacheOptions po;
  po.max_bytes = options.prefix_cache_bytes;
  auto cache = std::make_shared<PrefixCache>(po);
  std::vector<std::unique_ptr<Session>> sessions;
  if (options.prefix_cache_bytes > 0) so.prefix_cache = cache;
  for (int32_t i = 0; i < options.parallel; ++i) {
    POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::Create(model, so));
    sessions.push_back(std::move(s));
  }
  options.n_ctx = sessions.front()->n_ctx();  // clamped to the model's
  if (!spec_request.spec.empty()) {
    SessionOptions dso = so;
    dso.n_ctx = options.n_ctx;
    dso.prefix_cache = nullptr;
    POCKET_ASSIGN_OR_RETURN(drafter, MakeDrafter(spec_request, *model, dso));
    POCKET_ASSIGN_OR_RETURN(SpecMode mode, ParseSpec(spec_request));
    spec_auto = mode.automatic;
    spec_guard = mode.guarded();
  }
  if (!options.session_dir.empty()) LoadSessions(options, sessions);
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Session> score_session, Session::Create(model, score_so));
  this->model = model;
  std::lock_guard<std::mutex> lock(start_mu);
  if (stopped) return CancelledError("stopped while loading");
  scorer = std::make_unique<ScoreWorker>(std::move(score_session), options.queue_limit,
                                         /*release_kv=*/options.kv_budget_bytes > 0);
  scheduler = std::make_unique<Scheduler>(std::move(engine), std::move(sessions), cache,
                                          options.queue_limit, options.log, &metrics, model);
  ready.store(true);
  return Status::Ok();
}

Status Server::Bind() {
  Impl& m = *impl_;
  if (m.options.port == 0) {
    m.bound_port = m.http.bind_to_any_port(m.options.host);
  } else if (m.http.bind_to_port(m.options.host, m.options.port)) {
    m.bound_port = m.options.port;
  }
  if (m.bound_port < 0) {
    return IoError("cannot listen on ", m.options.host, ":", m.options.port,
                   " (in use, or not an address of this machine)");
  }
  m.connections->SetListenPort(m.bound_port);
  return Status::Ok();
}

int Server::port() const {
  return impl_->bound_port;
}

Status Server::Serve() {
  Impl& m = *impl_;
  if (m.bound_port < 0) POCKET_RETURN_IF_ERROR(Bind());
  // The model loads while the listener answers /health with "loading"; a load that fails stops
  // the listener and is Serve's error.
  Status loaded;
  std::thread loader([&m, &loaded] {
    StatusOr<ServeModel> model = m.load();
    loaded = model.ok() ? m.Start(std::move(*model)) : model.status();
    if (loaded.ok()) {
      if (m.options.on_ready) m.options.on_ready();
      return;
    }
    // The listener starts beside this thread: stop it once it runs (or gave up).
    for (int i = 0; i < 5000 && !m.http.is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    m.http.stop();
  });
  const bool listened = m.http.listen_after_bind();
  loader.join();
  if (m.drainer.joinable()) m.drainer.join();
  if (!loaded.ok()) return loaded;
  if (!listened && m.http.is_running()) {
    return InternalError("the HTTP server stopped unexpectedly");
  }
  impl_->scheduler->Stop();
  impl_->scorer->Stop();
  if (!impl_->options.session_dir.empty()) {
    POCKET_RETURN_IF_ERROR(SaveSessions(impl_->options, impl_->scheduler->sessions()));
  }
  return Status::Ok();
}

void Server::Stop() {
  Impl& m = *impl_;
  if (m.draining.exchange(true)) return;
  m.drainer = std::thread([&m] { m.Drain(); });
}

void Server::CancelAll() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.start_mu);
    m.stopped = true;  // a load still running ends there
    if (m.scheduler)
      m.scheduler->Stop();  // running requests end as cancelled ("length"),
                            // queued ones with an error
    if (m.scorer) m.scorer->Stop();
  }
  {
    std::lock_guard<std::mutex> lock(m.drain_mu);
    m.cancel_drain = true;
  }
  m.drain_cv.notify_all();
}

}  // namespace pocket::serve
