// The scheduler: the one place where requests wait, are admitted to a session, run on the batched
// engine and end. pocket serve (on a thread the scheduler runs), pocket voice and the C API's
// batches (stepped by their own thread) drive the engine through it; Session::Generate is the one
// request of a one-request engine and needs none of it (no queue, no slot to choose).
//
//   Submit (any thread) -> waiting queue (priority, then arrival; deadline; queue limit)
//     -> admission (Step, the driving thread): a slot chosen by the longest common prefix of its
//        context with the prompt (same adapters and salt), or the caller's own session
//     -> the engine: generate and score requests batched in one forward pass a step; a
//        speculative request runs alone on the driving thread (the engine batches plain decoding)
//     -> the end: the request's callback, on the driving thread; a follow-up it returns (a tool
//        call the model opened) continues on the same session under the same id; a slot is
//        parked (Engine::Park: its context kept for the next turn, under the KV budget).
//
// Cancel stops a request from any thread: a waiting one ends at the next step, a running one
// within a step (a token or a prefill chunk).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "model/adapter.h"
#include "runtime/engine.h"
#include "runtime/generate_types.h"
#include "runtime/session.h"

namespace pocket {

struct SchedulerOptions {
  // Requests for a slot that may wait beyond the free slots; Submit refuses more
  // (ResourceExhausted). Requests on their own session are not counted.
  int32_t queue_limit = 64;
  // The message of the ResourceExhausted error that Stop gives the requests still waiting, and
  // Submit after Stop.
  std::string stopping_message = "the scheduler is stopping";
  // Called on the driving thread after every engine step (figures for /metrics).
  std::function<void()> after_step;
};

// What a generate request continues with on its session when its result asks for it.
struct SchedulerFollowUp {
  std::vector<int32_t> prompt;
  GenerateOptions options;
  StreamCallback on_text;
};

struct SchedulerRequest {
  // What: generate from `prompt` with `options` (speculative when options.drafter is set), its
  // text to `on_text`; or, with `score`, score `candidates` as continuations of `prompt`
  // (Engine::SubmitScore, `score_chunk` rows a step); or, with `classify`, the labels of the
  // session's head for `prompt` (Engine::SubmitClassify, `score_chunk` rows a step).
  std::vector<int32_t> prompt;
  GenerateOptions options;
  StreamCallback on_text;
  bool score = false;
  std::vector<std::vector<int32_t>> candidates;
  bool classify = false;
  int32_t score_chunk = 0;
  // Where: the caller's `session` (nothing else uses it until the request ends), or, when null,
  // a slot: the free one whose context shares the longest prefix with the prompt under the same
  // `adapters` and `cache_salt` (set on the slot before the request runs), among equals the one
  // free the longest.
  Session* session = nullptr;
  AdapterSet adapters;
  std::string cache_salt;
  // When: a higher priority is admitted first, equals in the order they came; a request still
  // waiting at `deadline` fails (ResourceExhausted, naming the wait).
  int32_t priority = 0;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // How it ends, on the driving thread (called once, or again for a follow-up's result): a
  // generate request's result (cancelled ones: stop reason kCancelled), which may return a
  // follow-up to continue on the same session; a score request's ranked candidates.
  std::function<std::optional<SchedulerFollowUp>(StatusOr<GenerateResult>)> on_generated;
  std::function<void(StatusOr<std::vector<CandidateScore>>)> on_scored;
  std::function<void(StatusOr<std::vector<LabelScore>>)> on_classified;
};

class Scheduler {
 public:
  // The engine, and the slots (sessions of the engine's model that the scheduler owns; none when
  // every request brings its own session). Free slots are parked in the engine.
  Scheduler(std::unique_ptr<Engine> engine, std::vector<std::unique_ptr<Session>> slots,
            SchedulerOptions options = {});
  // Started: stops (as Stop). Else the requests are dropped without their callbacks, the
  // sessions handed back as the engine's end leaves them (Engine::~Engine).
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues requests (all or none) and returns their ids. Any thread. Refused: a request without
  // its callback, one that both scores and classifies, a slot request when the scheduler has no
  // slots, more slot requests than the queue takes, and everything after Stop.
  StatusOr<std::vector<int64_t>> Submit(std::vector<SchedulerRequest> requests);
  StatusOr<int64_t> Submit(SchedulerRequest request);
  // Stops request `id` (unknown or ended ids are ignored). Any thread.
  void Cancel(int64_t id);

  // The driving thread: admits what can start (Admit), runs one engine step and ends the requests
  // that finished. Returns the requests still waiting or running.
  int32_t Step();
  // The driving thread: admits the waiting requests that can start now, without a step (a request
  // refused by the engine ends at once, its callback called).
  void Admit();
  // Runs Step on a thread of the scheduler's own until Stop (pocket serve).
  void Start();
  // Fails the waiting requests (ResourceExhausted, options.stopping_message), cancels the
  // running ones and steps until they end (on the scheduler's thread when started, else here:
  // then from the driving thread). Any number of times.
  void Stop();

  // Requests waiting; requests running (either thread).
  int32_t queued() const;
  int32_t running() const;
  // For the driving thread (after_step) and, after Stop, anyone.
  Engine& engine() { return *engine_; }
  const std::vector<std::unique_ptr<Session>>& slots() const { return slots_; }

 private:
  struct Entry {
    int64_t id = 0;
    uint64_t order = 0;  // arrival
    SchedulerRequest request;
    Session* session = nullptr;  // once admitted
    bool slot = false;           // the session is one of the slots
    int64_t engine_id = -1;
  };
  bool Idle() const;  // under mu_: nothing waits or runs
  void Loop();
  // Starts an admitted generate entry on its session: in the engine, or (speculative) run here to
  // its end.
  void Launch(std::unique_ptr<Entry> e);
  // A generate entry's result to its callback: a follow-up launches it again, else it ends.
  void End(std::unique_ptr<Entry> e, StatusOr<GenerateResult> result);
  // A score or classify entry's error to its callback.
  void Fail(Entry& e, const Status& status);
  // Its session free again (a slot parked).
  void Release(Entry& e);
  size_t BestSlot(const SchedulerRequest& r) const;  // an index into free_

  std::unique_ptr<Engine> engine_;
  std::vector<std::unique_ptr<Session>> slots_;
  SchedulerOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  // Under mu_:
  std::vector<std::unique_ptr<Entry>> waiting_;  // sorted: priority, then arrival
  std::vector<int64_t> cancels_;                 // ids asked to stop, applied by Step
  std::vector<Session*> free_;                   // free slots, longest free first
  std::vector<Session*> busy_;                   // the callers' sessions in requests
  int64_t next_id_ = 1;
  uint64_t next_order_ = 0;
  bool stopping_ = false;
  Session* speculating_ = nullptr;  // the session RunSpeculative generates on
  int64_t speculating_id_ = 0;
  int32_t n_running_ = 0;
  // The driving thread's own:
  std::vector<std::unique_ptr<Entry>> running_;  // in the engine
  std::vector<std::unique_ptr<Entry>> done_;     // Step's: finished in the last engine step
  std::mutex join_mu_;                           // Stop from two threads joins once
  std::thread thread_;
};

}  // namespace pocket
