#include "serve/score_worker.h"

#include <errno.h>
#include <sys/socket.h>

#include <utility>

namespace pocket::serve {

bool PeerClosed(int fd) {
  char c;
  const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;
  if (n == 0) return true;
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

Status ScoreWorker::Run(AdapterSet adapters, std::function<Status(Session&)> task,
                        const std::function<bool()>& gone) {
  auto t = std::make_shared<Task>();
  t->adapters = std::move(adapters);
  t->fn = std::move(task);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return ResourceExhaustedError("the server is shutting down");
    if (queue_.size() >= static_cast<size_t>(queue_limit_) + 1) {
      return ResourceExhaustedError("the scoring queue is full (", queue_limit_,
                                    " requests waiting)");
    }
    queue_.push_back(t);
    cv_.notify_all();
  }
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, kAlivePollInterval, [&] { return t->finished; })) {
    if (t->cancelled || !gone()) continue;
    t->cancelled = true;
    if (running_ == t.get()) session_->Cancel();  // else the worker drops it
  }
  return t->status;
}

void ScoreWorker::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (running_ != nullptr) session_->Cancel();
    cv_.notify_all();
  }
  std::lock_guard<std::mutex> lock(join_mu_);  // CancelAll and Serve may stop it together
  if (thread_.joinable()) thread_.join();
}

void ScoreWorker::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping
    std::shared_ptr<Task> t = std::move(queue_.front());
    queue_.pop_front();
    if (t->cancelled || stopping_) {
      t->status = stopping_ ? ResourceExhaustedError("the server is shutting down")
                            : CancelledError("the client went away");
      t->finished = true;
      cv_.notify_all();
      continue;
    }
    running_ = t.get();
    session_->ClearCancel();  // a late Cancel() meant for the task before
    lock.unlock();
    Status s = session_->SetAdapters(t->adapters);
    if (s.ok()) s = t->fn(*session_);
    if (release_kv_) session_->Reset();  // under --kv-budget: its pages go back at once
    const size_t kv = session_->kv_bytes();
    lock.lock();
    running_ = nullptr;
    kv_bytes_ = kv;
    t->status = std::move(s);
    t->finished = true;
    cv_.notify_all();
  }
}

}  // namespace pocket::serve
