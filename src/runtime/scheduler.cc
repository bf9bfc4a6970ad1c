#include "runtime/scheduler.h"

#include <algorithm>
#include <utility>

#include "base/str.h"

namespace pocket {

Scheduler::Scheduler(std::unique_ptr<Engine> engine, std::vector<std::unique_ptr<Session>> slots,
                     SchedulerOptions options)
    : engine_(std::move(engine)), slots_(std::move(slots)), options_(std::move(options)) {
  // Free slots keep their contexts for later requests, counted by the engine (and under a KV
  // budget given to the prefix cache when room is needed: Engine::Park).
  for (auto& s : slots_) {
    free_.push_back(s.get());
    engine_->Park(s.get());
  }
  waiting_.reserve(static_cast<size_t>(std::max(options_.queue_limit, 0)) + slots_.size());
  running_.reserve(static_cast<size_t>(engine_->max_requests()));
  done_.reserve(static_cast<size_t>(engine_->max_requests()));
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(join_mu_);
    if (!thread_.joinable()) return;  // the engine drops what runs, handing the sessions back
  }
  Stop();
}

StatusOr<std::vector<int64_t>> Scheduler::Submit(std::vector<SchedulerRequest> requests) {
  size_t for_slots = 0;
  for (const SchedulerRequest& r : requests) {
    if (r.score && r.classify) return InvalidArgumentError("a request scores or classifies");
    if (r.score ? !r.on_scored : r.classify ? !r.on_classified : !r.on_generated) {
      return InvalidArgumentError(
          "a request needs its callback (on_scored, on_classified or on_generated)");
    }
    if (r.session == nullptr) ++for_slots;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_) return ResourceExhaustedError(options_.stopping_message);
  if (for_slots > 0 && slots_.empty()) {
    return InvalidArgumentError("the scheduler has no slots: a request must bring its session");
  }
  size_t waiting_for_slots = 0;
  for (const auto& e : waiting_) waiting_for_slots += e->request.session == nullptr ? 1 : 0;
  if (waiting_for_slots + for_slots >
      static_cast<size_t>(std::max(options_.queue_limit, 0)) + free_.size()) {
    return ResourceExhaustedError("the request queue is full (", options_.queue_limit,
                                  " requests waiting)");
  }
  std::vector<int64_t> ids;
  ids.reserve(requests.size());
  for (SchedulerRequest& r : requests) {
    auto e = std::make_unique<Entry>();
    e->id = next_id_++;
    e->order = next_order_++;
    e->request = std::move(r);
    // After the waiting requests of the same or a higher priority.
    auto at = std::find_if(waiting_.begin(), waiting_.end(), [&](const auto& w) {
      return w->request.priority < e->request.priority;
    });
    ids.push_back(e->id);
    waiting_.insert(at, std::move(e));
  }
  cv_.notify_all();
  return ids;
}

StatusOr<int64_t> Scheduler::Submit(SchedulerRequest request) {
  std::vector<SchedulerRequest> one;
  one.push_back(std::move(request));
  POCKET_ASSIGN_OR_RETURN(std::vector<int64_t> ids, Submit(std::move(one)));
  return ids.front();
}

void Scheduler::Cancel(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (speculating_ != nullptr && speculating_id_ == id) {
    speculating_->Cancel();
    return;
  }
  cancels_.push_back(id);
  cv_.notify_all();
}

int32_t Scheduler::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int32_t>(waiting_.size());
}

int32_t Scheduler::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return n_running_;
}

bool Scheduler::Idle() const {
  return waiting_.empty() && n_running_ == 0;
}

size_t Scheduler::BestSlot(const SchedulerRequest& r) const {
  const std::span<const int32_t> prompt = r.prompt;
  size_t best = 0, best_common = 0;
  for (size_t i = 0; i < free_.size(); ++i) {
    const Session& s = *free_[i];
    if (s.cache_salt() != r.cache_salt || !SameAdapters(s.adapters(), r.adapters)) continue;
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

void Scheduler::Admit() {
  // Decided under the lock, run outside it (callbacks and the engine may take long).
  std::vector<std::unique_ptr<Entry>> ended;  // cancelled, past their deadline, or stopping
  std::vector<Status> why;                    // ... and why
  std::vector<std::unique_ptr<Entry>> admitted;
  std::vector<int64_t> cancels;
  bool stopping = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping = stopping_;
    cancels.swap(cancels_);
    const auto now = std::chrono::steady_clock::now();
    int32_t room = engine_->max_requests() - n_running_;
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      Entry& e = **it;
      const bool cancelled = std::find(cancels.begin(), cancels.end(), e.id) != cancels.end();
      const bool late = e.request.deadline.has_value() && now >= *e.request.deadline;
      if (stopping || cancelled || late) {
        why.push_back(stopping    ? ResourceExhaustedError(options_.stopping_message)
                      : cancelled ? CancelledError("the request was cancelled before it started")
                                  : ResourceExhaustedError("the request waited past its deadline"));
        ended.push_back(std::move(*it));
        it = waiting_.erase(it);
        continue;
      }
      if (room <= 0) break;
      Session* session = nullptr;
      bool slot = false;
      if (e.request.session == nullptr) {
        if (free_.empty()) {
          ++it;
          continue;
        }
        const auto best = free_.begin() + static_cast<std::ptrdiff_t>(BestSlot(e.request));
        session = *best;
        slot = true;
        free_.erase(best);
      } else {
        session = e.request.session;
        if (std::find(busy_.begin(), busy_.end(), session) != busy_.end()) {
          ++it;
          continue;
        }
        busy_.push_back(session);
      }
      e.session = session;
      e.slot = slot;
      --room;
      ++n_running_;
      admitted.push_back(std::move(*it));
      it = waiting_.erase(it);
    }
  }
  for (size_t i = 0; i < ended.size(); ++i) {
    SchedulerRequest& r = ended[i]->request;
    if (r.score) {
      r.on_scored(why[i]);
    } else if (r.classify) {
      r.on_classified(why[i]);
    } else if (why[i].code() == StatusCode::kCancelled) {
      GenerateResult cancelled;  // a generate request cancelled: no tokens, not an error
      cancelled.stop_reason = StopReason::kCancelled;
      static_cast<void>(r.on_generated(std::move(cancelled)));
    } else {
      static_cast<void>(r.on_generated(why[i]));
    }
  }
  // Requests that run: a cancel asked for stops them within a step, as does Stop.
  for (auto& e : running_) {
    if (!engine_->has(e->engine_id)) continue;  // dropped with its session (Step ends it)
    if (stopping || std::find(cancels.begin(), cancels.end(), e->id) != cancels.end()) {
      e->session->Cancel();
    }
  }
  for (auto& e : admitted) {
    if (e->slot) {
      engine_->Unpark(e->session);  // used outside the engine below (Submit would unpark it)
      Session& s = *e->session;
      s.SetCacheSalt(e->request.cache_salt);
      if (Status a = s.SetAdapters(e->request.adapters); !a.ok()) {
        if (e->request.score || e->request.classify) {
          Fail(*e, a);
          Release(*e);
        } else {
          End(std::move(e), a);
        }
        continue;
      }
    }
    if (e->request.score || e->request.classify) {
      StatusOr<int64_t> id =
          e->request.score
              ? engine_->SubmitScore(e->session, e->request.prompt,
                                     std::move(e->request.candidates), e->request.score_chunk)
              : engine_->SubmitClassify(e->session, e->request.prompt, e->request.score_chunk);
      if (!id.ok()) {
        Fail(*e, id.status());
        Release(*e);
        continue;
      }
      e->engine_id = *id;
      running_.push_back(std::move(e));
      continue;
    }
    Launch(std::move(e));
  }
}

void Scheduler::Launch(std::unique_ptr<Entry> e) {
  SchedulerRequest& r = e->request;
  if (r.options.drafter != nullptr) {
    // Speculative decoding runs alone, here (the engine batches plain decoding only).
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_ || std::find(cancels_.begin(), cancels_.end(), e->id) != cancels_.end()) {
        e->session->Cancel();
      }
      speculating_ = e->session;
      speculating_id_ = e->id;
    }
    StatusOr<GenerateResult> result = e->session->GenerateUnbatched(r.prompt, r.options, r.on_text);
    {
      std::lock_guard<std::mutex> lock(mu_);
      speculating_ = nullptr;
      speculating_id_ = 0;
    }
    End(std::move(e), std::move(result));
    return;
  }
  StatusOr<int64_t> id = engine_->Submit(e->session, r.prompt, r.options, r.on_text);
  if (!id.ok()) {
    End(std::move(e), id.status());
    return;
  }
  e->engine_id = *id;
  running_.push_back(std::move(e));
}

void Scheduler::End(std::unique_ptr<Entry> e, StatusOr<GenerateResult> result) {
  std::optional<SchedulerFollowUp> next = e->request.on_generated(std::move(result));
  if (next.has_value()) {
    e->request.prompt = std::move(next->prompt);
    e->request.options = std::move(next->options);
    e->request.on_text = std::move(next->on_text);
    Launch(std::move(e));
    return;
  }
  Release(*e);
}

void Scheduler::Fail(Entry& e, const Status& status) {
  if (e.request.score) {
    e.request.on_scored(status);
  } else if (e.request.classify) {
    e.request.on_classified(status);
  }
}

void Scheduler::Release(Entry& e) {
  if (e.slot) engine_->Park(e.session);
  std::lock_guard<std::mutex> lock(mu_);
  --n_running_;
  if (e.slot) {
    free_.push_back(e.session);
  } else {
    busy_.erase(std::find(busy_.begin(), busy_.end(), e.session));
  }
  cv_.notify_all();
}

int32_t Scheduler::Step() {
  Admit();
  if (!running_.empty()) {
    const StatusOr<int32_t> active = engine_->Step();
    static_cast<void>(active);  // a failed pass fails its requests: Take says so
    if (options_.after_step) options_.after_step();
    for (size_t i = 0; i < running_.size();) {
      // Done, or dropped by the engine with its session (destroyed by its owner while it ran:
      // Take says NotFound).
      const int64_t id = running_[i]->engine_id;
      if (engine_->done(id) || !engine_->has(id)) {
        done_.push_back(std::move(running_[i]));
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    for (auto& e : done_) {
      if (e->request.score) {
        e->request.on_scored(engine_->TakeScores(e->engine_id));
        Release(*e);
      } else if (e->request.classify) {
        e->request.on_classified(engine_->TakeLabels(e->engine_id));
        Release(*e);
      } else {
        StatusOr<GenerateResult> result = engine_->Take(e->engine_id);
        End(std::move(e), std::move(result));
      }
    }
    done_.clear();
  }
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int32_t>(waiting_.size()) + n_running_;
}

void Scheduler::Loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !Idle() || !cancels_.empty(); });
    }
    const int32_t left = Step();
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && left == 0) return;
  }
}

void Scheduler::Start() {
  std::lock_guard<std::mutex> lock(join_mu_);
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void Scheduler::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    // A speculative request (outside the engine) stops within a token or a prefill chunk.
    if (speculating_ != nullptr) speculating_->Cancel();
    cv_.notify_all();
  }
  std::lock_guard<std::mutex> lock(join_mu_);
  if (thread_.joinable()) {
    thread_.join();
    return;
  }
  // Not started (or joined by an earlier Stop: then nothing is left): the driving thread is
  // this one.
  while (Step() > 0) {
  }
}

}  // namespace pocket
