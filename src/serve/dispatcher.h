// pocket serve's side of the runtime's Scheduler (runtime/scheduler.h, which owns the engine and
// the slots' sessions and runs them on its thread): the Dispatcher turns jobs (each the request of
// one choice, from an HTTP thread) into scheduler requests, hands streamed text back to the HTTP
// threads, continues auto tool calls, waits for /v1/score's work, and publishes the figures
// /metrics reports. Used by the server only.
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
#include "runtime/scheduler.h"
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
  std::atomic<int64_t> ticket{0};      // its id in the scheduler (Dispatcher::Cancel)
  int32_t priority = 0;                // the request's priority (higher first)
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

// Jobs to the runtime's scheduler and back.
class Dispatcher {
 public:
  Dispatcher(std::unique_ptr<Engine> engine, std::vector<std::unique_ptr<Session>> sessions,
             std::shared_ptr<PrefixCache> cache, int32_t queue_limit,
             std::function<void(std::string_view)> log, Metrics* metrics,
             std::shared_ptr<const Model> model)
      : model_(std::move(model)),
        n_ctx_(sessions.front()->n_ctx()),
        cache_(std::move(cache)),
        log_(std::move(log)),
        metrics_(metrics) {
    SchedulerOptions so;
    so.queue_limit = queue_limit;
    so.stopping_message = "the server is shutting down";
    so.after_step = [this] { Publish(); };
    scheduler_ = std::make_unique<Scheduler>(std::move(engine), std::move(sessions), so);
    scheduler_->Start();
  }
  ~Dispatcher() { Stop(); }

  // Queues a response's jobs (all or none); ResourceExhausted when the queue is full or the
  // server stops.
  Status Enqueue(const std::vector<std::shared_ptr<Job>>& jobs) {
    std::vector<SchedulerRequest> requests;
    for (const auto& job : jobs) {
      SchedulerRequest r;
      r.prompt = job->prepared.prompt.ids;
      r.options = job->prepared.options;
      r.on_text = OnText(*job);
      r.adapters = job->adapters;
      r.cache_salt = job->cache_salt;
      r.priority = job->priority;
      r.on_generated = [this, job](StatusOr<GenerateResult> result) {
        return Conclude(*job, std::move(result));
      };
      requests.push_back(std::move(r));
    }
    POCKET_ASSIGN_OR_RETURN(std::vector<int64_t> ids, scheduler_->Submit(std::move(requests)));
    for (size_t i = 0; i < jobs.size(); ++i) jobs[i]->ticket.store(ids[i]);
    return Status::Ok();
  }
  // The client went away: the jobs stop within a step.
  void Cancel(const std::vector<std::shared_ptr<Job>>& jobs) {
    for (const auto& job : jobs) {
      job->cancelled.store(true);
      scheduler_->Cancel(job->ticket.load());
    }
  }

  // /v1/score's and /v1/classify's work as engine requests (Engine::SubmitScore,
  // SubmitClassify) beside the streams, `chunk` rows a step, on `session` (ScoreWorker's); the
  // caller waits for the result. session->Cancel() stops it (a Cancelled error).
  StatusOr<std::vector<CandidateScore>> Score(Session* session, std::span<const int32_t> prompt,
                                              std::vector<std::vector<int32_t>> candidates,
                                              int32_t chunk) {
    SchedulerRequest r;
    r.score = true;
    r.candidates = std::move(candidates);
    return Wait<std::vector<CandidateScore>>(std::move(r), session, prompt, chunk,
                                             &SchedulerRequest::on_scored);
  }
  StatusOr<std::vector<LabelScore>> Classify(Session* session, std::span<const int32_t> prompt,
                                             int32_t chunk) {
    SchedulerRequest r;
    r.classify = true;
    return Wait<std::vector<LabelScore>>(std::move(r), session, prompt, chunk,
                                         &SchedulerRequest::on_classified);
  }
  // Cancels what runs, fails what waits, and ends the scheduler's thread. Any thread, any number
  // of times.
  void Stop() { scheduler_->Stop(); }
  // The sessions, for saving them: only after Stop().
  const std::vector<std::unique_ptr<Session>>& sessions() const { return scheduler_->slots(); }
  int32_t queued() const { return scheduler_->queued(); }

 private:
  // After each engine step, on the scheduler's thread: the rows evaluated, the KV bytes held
  // (each session's private pages, the prefix cache's entries: a page shared by a session and the
  // cache counted once) and the cache's and swaps' counters, for /metrics.
  void Publish() {
    Engine& engine = scheduler_->engine();
    metrics_->steps.fetch_add(1);
    metrics_->decode_rows.fetch_add(engine.last_decode_rows());
    metrics_->prefill_rows.fetch_add(engine.last_rows() - engine.last_decode_rows());
    metrics_->SampleRate();
    size_t kv = 0;
    for (const auto& s : scheduler_->slots()) kv += s->kv_bytes() - s->kv_shared_bytes();
    const PrefixCacheStats ps = cache_->stats();
    kv += ps.bytes;
    metrics_->kv_bytes.store(static_cast<int64_t>(kv));
    metrics_->prefix_bytes.store(static_cast<int64_t>(ps.bytes));
    metrics_->prefix_lookups.store(ps.lookups);
    metrics_->prefix_hits.store(ps.hits);
    metrics_->prefix_hit_tokens.store(ps.hit_tokens);
    const EngineStats es = engine.stats();
    metrics_->swaps_out.store(es.swaps_out);
    metrics_->swaps_in.store(es.swaps_in);
    metrics_->swapped_sessions.store(es.n_swapped);
    metrics_->swapped_bytes.store(static_cast<int64_t>(es.swapped_bytes));
    metrics_->running.store(scheduler_->running());
  }

  // Submits `r` on `session` and waits for the result its `callback` receives.
  template <typename T>
  StatusOr<T> Wait(SchedulerRequest r, Session* session, std::span<const int32_t> prompt,
                   int32_t chunk, std::function<void(StatusOr<T>)> SchedulerRequest::*callback) {
    struct State {
      std::mutex mu;
      std::condition_variable cv;
      std::optional<StatusOr<T>> result;
    };
    auto state = std::make_shared<State>();
    r.session = session;
    r.prompt.assign(prompt.begin(), prompt.end());
    r.score_chunk = chunk;
    r.*callback = [state](StatusOr<T> result) {
      std::lock_guard<std::mutex> lock(state->mu);
      state->result.emplace(std::move(result));
      state->cv.notify_all();
    };
    POCKET_RETURN_IF_ERROR(scheduler_->Submit(std::move(r)).status());
    std::unique_lock<std::mutex> lock(state->mu);
    state->cv.wait(lock, [&] { return state->result.has_value(); });
    return std::move(*state->result);
  }

  // A request's result: an auto tool call the model opened continues on the same session (the
  // follow-up returned), else the job finishes.
  std::optional<SchedulerFollowUp> Conclude(Job& job, StatusOr<GenerateResult> result) {
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
      StatusOr<SchedulerFollowUp> next = CallFollowUp(job);
      if (next.ok()) return std::move(*next);
      result = next.status();
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
    return std::nullopt;
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
        model_->tokenizer()->Encode(StrCat(job.content, kToolCallOpen, "\n"), eo));
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
  StatusOr<SchedulerFollowUp> CallFollowUp(Job& job) const {
    SchedulerFollowUp next;
    POCKET_ASSIGN_OR_RETURN(next.prompt, CallPrompt(job));
    next.options = job.call->options;
    const int32_t used = static_cast<int32_t>(job.result.tokens.size());
    next.options.max_tokens = std::min(job.prepared.options.max_tokens - used,
                                       n_ctx_ - static_cast<int32_t>(next.prompt.size()));
    Job* j = &job;
    next.on_text = [j](std::string_view) { return !j->cancelled.load(); };
    return next;
  }

  std::shared_ptr<const Model> model_;
  int32_t n_ctx_ = 0;  // the sessions' context
  std::shared_ptr<PrefixCache> cache_;
  std::function<void(std::string_view)> log_;
  Metrics* metrics_;
  std::unique_ptr<Scheduler> scheduler_;  // last: its thread ends before the rest
};

}  // namespace pocket::serve
