// pocket serve's scheduler: the one thread that owns the engine and the slots' sessions. It
// admits queued jobs (each the request of one choice, from an HTTP thread) to the free session
// whose context shares the longest prefix with the prompt, steps the engine, hands streamed text
// back, continues auto tool calls, submits /v1/score's work to the engine, and publishes the
// figures /metrics reports. Used by server.cc only.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "base/str.h"
#include "runtime/engine.h"
#include "runtime/prefix_cache.h"
#include "runtime/request.h"
#include "runtime/session.h"
#include "serve/openai.h"

namespace pocket::serve {

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
  // every --stream-interval (40 ms), so a token costs no thread switch on a machine whose cores
  // compute.
  std::string pending;
  bool woke = false;
  bool each_piece = false;  // --stream-interval 0: every piece wakes the HTTP thread
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

inline void FinishJob(Job& job, Status status) {
  std::lock_guard<std::mutex> lock(job.mu);
  job.status = std::move(status);
  job.finished = true;
  job.cv.notify_all();
}

// How many trailing bytes of `text` could begin `marker` (held back from the stream).
inline size_t PartialMarker(std::string_view text, std::string_view marker) {
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
        if (!j->woke || j->each_piece) {
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

}  // namespace pocket::serve
