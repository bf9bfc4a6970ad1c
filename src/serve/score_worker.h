// /v1/score and /v1/classify off the scheduler's thread (ScoreWorker), and how a handler notices
// that its client left (PeerClosed).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "base/status.h"
#include "model/adapter.h"
#include "runtime/session.h"

namespace pocket::serve {

// How often a handler waiting for a whole (non-streamed) response checks that its client is there.
constexpr auto kAlivePollInterval = std::chrono::milliseconds(20);

// Whether the client closed (or reset) the connection: a read that would return end-of-file. Reads
// nothing (a request the client pipelined stays for the next handler).
bool PeerClosed(int fd);

// /v1/score and /v1/classify: one request at a time on a session of their own (its adapters set
// here), submitted from this thread to the scheduler as engine work beside the streams
// (Dispatcher::Score, Classify). A client that leaves cancels its request (queued: dropped;
// running: stopped at the next step).
class ScoreWorker {
 public:
  ScoreWorker(std::unique_ptr<Session> session, int32_t queue_limit, bool release_kv)
      : session_(std::move(session)), queue_limit_(queue_limit), release_kv_(release_kv) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~ScoreWorker() { Stop(); }

  const Session& session() const { return *session_; }
  size_t kv_bytes() {
    std::lock_guard<std::mutex> lock(mu_);
    return kv_bytes_;
  }

  // Runs `task` on the worker's session with `adapters` and waits for it; `gone` is asked every
  // kAlivePollInterval whether the client left (then the task is cancelled: Cancelled error).
  Status Run(AdapterSet adapters, std::function<Status(Session&)> task,
             const std::function<bool()>& gone);

  // Cancels what runs, fails what waits, ends the thread. Any thread, any number of times.
  void Stop();

 private:
  struct Task {
    AdapterSet adapters;
    std::function<Status(Session&)> fn;
    Status status;
    bool finished = false;   // under mu_
    bool cancelled = false;  // under mu_
  };

  void Loop();

  std::unique_ptr<Session> session_;
  const int32_t queue_limit_;
  const bool release_kv_;
  std::mutex mu_;
  std::condition_variable cv_;  // a task queued or finished, or stopping
  std::deque<std::shared_ptr<Task>> queue_;
  Task* running_ = nullptr;
  bool stopping_ = false;
  size_t kv_bytes_ = 0;
  std::mutex join_mu_;
  std::thread thread_;
};

}  // namespace pocket::serve
