// A small thread pool of our own (iOS has no OpenMP): the calling thread plus n-1 workers that
// spin briefly for the next job, then sleep. Work is split into contiguous ranges that depend only
// on the item count and the thread count, and every output is computed by exactly one thread, so
// results are bit-identical for any thread count.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace pocket {

// A non-owning reference to a callable taking the thread index: two pointers, no allocation
// (a std::function holding a lambda with more than two captured references allocates on the
// heap, once per parallel region: dozens of times per decoded token). Valid while the callable
// it was made from lives; ThreadPool::Run only uses it until it returns.
class TaskRef {
 public:
  // Implicit, so Run([&](int t) { ... }) reads naturally; a temporary callable lives until the
  // end of the full expression that calls Run, which is as long as Run uses it.
  template <typename Fn>
  requires(!std::is_same_v<std::remove_cvref_t<Fn>, TaskRef>) TaskRef(Fn&& fn)
  noexcept  // NOLINT(google-explicit-constructor)
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(fn)))),
        call_([](void* object, int thread_index) {
          (*static_cast<std::remove_reference_t<Fn>*>(object))(thread_index);
        }) {}
  // Does nothing (the pool's job before the first Run).
  TaskRef() noexcept : object_(nullptr), call_([](void*, int) {}) {}
  void operator()(int thread_index) const { call_(object_, thread_index); }

 private:
  void* object_;
  void (*call_)(void*, int);
};

// A one-use barrier for the threads of one ThreadPool::Run job (every thread runs the job, so
// every thread must arrive): spins, as the pool's workers do between regions. Allocates nothing.
class SpinBarrier {
 public:
  explicit SpinBarrier(int n_threads) : n_threads_(n_threads) {}
  // Returns once n_threads threads have arrived; writes before it are visible after it.
  void ArriveAndWait();

 private:
  const int n_threads_;
  std::atomic<int> arrived_{0};
};

class ThreadPool {
 public:
  // n_threads >= 1 (values < 1 mean 1). The caller is thread 0.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Runs fn(thread_index) once on every thread and returns when all are done. Allocates nothing.
  // Several threads may call it (sessions of one model share one pool): their jobs take turns,
  // one parallel region at a time, first come first served (a caller that runs region after
  // region cannot starve another: pocket serve's scoring beside its decoding). Not from inside a
  // job.
  void Run(TaskRef fn);

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
  TaskRef job_;                          // published by the generation_ bump that announces it
  std::atomic<uint64_t> generation_{0};  // bumped to publish a job
  std::atomic<int> pending_{0};          // workers still running the current job
  std::atomic<int> sleeping_{0};         // workers waiting on generation_
  std::atomic<bool> stop_{false};
  // One job at a time when several callers share the pool, in the order they came: a ticket
  // each, served in turn.
  std::atomic<uint64_t> next_ticket_{0};
  std::atomic<uint64_t> serving_{0};
  std::atomic<int> ticket_waiters_{0};  // callers asleep on serving_
};

}  // namespace pocket
