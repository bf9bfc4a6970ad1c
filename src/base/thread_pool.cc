#include "base/thread_pool.h"

#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define POCKET_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define POCKET_CPU_RELAX() asm volatile("yield" ::: "memory")
#else
#define POCKET_CPU_RELAX() ((void)0)
#endif

namespace pocket {
namespace {
// A thread that waits on others spins this many times, then yields its core at every further
// check: when the cores are shared (another app, another process, more threads than cores) the
// thread it waits for may be the one that needs the core, and a bare spin would hold it until
// the scheduler's time slice ends (milliseconds per parallel region). On a core of its own a
// yield returns at once, so the uncontended cost is a system call per check after the spin.
constexpr int kSpinsBeforeYield = 1 << 11;
// An idle worker spins, then yields this many times before it sleeps: long enough to bridge the
// gaps between the parallel regions of one decoded token (tens of microseconds), short enough
// not to burn a core when idle.
constexpr int kWorkerChecks = kSpinsBeforeYield + 256;

// One waiting step: a pause while `spins` is small, a yield after.
inline void Relax(int& spins) {
  if (spins < kSpinsBeforeYield) {
    ++spins;
    POCKET_CPU_RELAX();
  } else {
    std::this_thread::yield();
  }
}
}  // namespace

void SpinBarrier::ArriveAndWait() {
  arrived_.fetch_add(1, std::memory_order_acq_rel);
  int spins = 0;
  while (arrived_.load(std::memory_order_acquire) < n_threads_) Relax(spins);
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Run(TaskRef fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  const uint64_t ticket = next_ticket_.fetch_add(1);
  uint64_t now = serving_.load(std::memory_order_acquire);
  if (now != ticket) {
    int spins = 0;
    while (now != ticket && spins < kSpinsBeforeYield) {
      Relax(spins);
      now = serving_.load(std::memory_order_acquire);
    }
    if (now != ticket) {
      // seq_cst with the release below: either it sees this waiter, or this sees its turn.
      ticket_waiters_.fetch_add(1);
      while ((now = serving_.load()) != ticket) serving_.wait(now);
      ticket_waiters_.fetch_sub(1);
    }
  }
  struct NextTurn {
    ThreadPool* pool;
    ~NextTurn() {
      pool->serving_.fetch_add(1);
      if (pool->ticket_waiters_.load() > 0) pool->serving_.notify_all();
    }
  } next_turn{this};
  job_ = fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  // seq_cst on both sides (here and in WorkerLoop): either we see the worker's sleeping_
  // increment and notify, or the worker sees the new generation and does not sleep.
  generation_.fetch_add(1);
  if (sleeping_.load() > 0) generation_.notify_all();
  fn(0);
  int spins = 0;
  while (pending_.load(std::memory_order_acquire) != 0) Relax(spins);
}

void ThreadPool::WorkerLoop(int index) {
  // Generation 0 is the pool's start: a worker that starts late must still run job 1.
  uint64_t seen = 0;
  while (true) {
    uint64_t now = generation_.load(std::memory_order_acquire);
    for (int spin = 0, relax = 0; now == seen && spin < kWorkerChecks; ++spin) {
      Relax(relax);
      now = generation_.load(std::memory_order_acquire);
    }
    if (now == seen) {
      sleeping_.fetch_add(1);
      // Re-checks generation_ after announcing the sleep: Run() reads sleeping_ after bumping it.
      generation_.wait(seen);
      sleeping_.fetch_sub(1);
      now = generation_.load(std::memory_order_acquire);
    }
    seen = now;
    if (stop_.load(std::memory_order_relaxed)) return;
    job_(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace pocket
