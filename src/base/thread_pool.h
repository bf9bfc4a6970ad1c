// A small thread pool of our own (iOS has no OpenMP): the calling thread plus n-1 workers that
// spin briefly for the next job, then sleep. Work is split into contiguous ranges that depend only
// on the item count and the thread count, and every output is computed by exactly one thread, so
// results are bit-identical for any thread count.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace pocket {

class ThreadPool {
 public:
  // n_threads >= 1 (values < 1 mean 1). The caller is thread 0.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Runs fn(thread_index) once on every thread and returns when all are done.
  void Run(const std::function<void(int thread_index)>& fn);

  // Splits [0, n) into n_threads() contiguous ranges; fn(begin, end, thread_index) per range
  // (empty ranges are skipped). With one thread or n <= 1, runs inline.
  template <typename Fn>
  void ParallelFor(int64_t n, Fn&& fn) {
    if (n <= 0) return;
    if (n_threads_ == 1 || n == 1) {
      fn(int64_t{0}, n, 0);
      return;
    }
    Run([&](int t) {
      const int64_t begin = RangeBegin(n, t), end = RangeBegin(n, t + 1);
      if (begin < end) fn(begin, end, t);
    });
  }

  // Start of thread t's range when [0, n) is split into n_threads() parts.
  int64_t RangeBegin(int64_t n, int t) const {
    const int64_t base = n / n_threads_, extra = n % n_threads_;
    return t * base + (t < extra ? t : extra);
  }

 private:
  void WorkerLoop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // bumped to publish a job
  std::atomic<int> pending_{0};          // workers still running the current job
  std::atomic<int> sleeping_{0};         // workers waiting on generation_
  std::atomic<bool> stop_{false};
};

}  // namespace pocket
