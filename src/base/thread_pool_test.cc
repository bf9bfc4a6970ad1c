#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace pocket {
namespace {

TEST(ThreadPoolTest, EveryItemExactlyOnceForAnyThreadCount) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 100, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.ParallelFor(n, [&](int64_t begin, int64_t end, int t) {
        EXPECT_GE(t, 0);
        EXPECT_LT(t, threads);
        for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    }
  }
}

// Every thread sees every other thread's write before the barrier, in many jobs in a row (a
// barrier that let a thread through early would show a stale slot).
TEST(ThreadPoolTest, SpinBarrierInsideAJob) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<int> slots(static_cast<size_t>(threads), -1);
    std::atomic<int> stale{0};
    for (int job = 0; job < 2000; ++job) {
      SpinBarrier barrier(threads);
      pool.Run([&](int t) {
        slots[static_cast<size_t>(t)] = job;
        barrier.ArriveAndWait();
        for (int u = 0; u < threads; ++u) {
          if (slots[static_cast<size_t>(u)] != job) stale.fetch_add(1);
        }
      });
    }
    EXPECT_EQ(stale.load(), 0) << threads << " threads";
  }
}

TEST(ThreadPoolTest, RangesAreContiguousAndBalanced) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.RangeBegin(10, 0), 0);
  EXPECT_EQ(pool.RangeBegin(10, 1), 4);
  EXPECT_EQ(pool.RangeBegin(10, 2), 7);
  EXPECT_EQ(pool.RangeBegin(10, 3), 10);
}

TEST(ThreadPoolTest, WorkersWakeAfterSleeping) {
  ThreadPool pool(2);
  std::atomic<int> runs{0};
  for (int round = 0; round < 3; ++round) {
    // Long enough for the worker to stop spinning and sleep.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    pool.Run([&](int) { runs++; });
  }
  EXPECT_EQ(runs.load(), 6);
}

TEST(ThreadPoolTest, ManyShortJobs) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int i = 0; i < 20000; ++i) {
    pool.ParallelFor(4, [&](int64_t b, int64_t e, int) { total += e - b; });
  }
  EXPECT_EQ(total.load(), 80000);
}

// Sessions of one model share one pool and may run on different threads at once: their parallel
// regions take turns, and every region still covers each item exactly once.
TEST(ThreadPoolTest, SharedByConcurrentCallers) {
  ThreadPool pool(3);
  constexpr int kCallers = 4, kRegions = 2000, kItems = 37;
  std::vector<int64_t> totals(kCallers, 0);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int r = 0; r < kRegions; ++r) {
        std::vector<int> seen(kItems, 0);
        pool.ParallelFor(kItems, [&](int64_t b, int64_t e, int) {
          for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)]++;
        });
        for (int v : seen) totals[static_cast<size_t>(c)] += v == 1 ? 1 : 1000000;
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) EXPECT_EQ(totals[static_cast<size_t>(c)], kRegions * kItems);
}

// Callers take turns in the order they came: one that runs region after region (a server's
// decoding) does not starve another (its scoring), as an unfair lock let it.
TEST(ThreadPoolTest, ACallerThatComesBackQueuesBehindOneWaiting) {
  // Callers take turns (a ticket each): one that ends its region and calls again goes behind a
  // caller already waiting. With a plain mutex it took the lock again at once, over and over, and
  // a scoring request starved the server's decoding (issue 43). Ordered by construction, not by
  // timing a loop (CI preempted a thread between calls and failed a bound on a whole loop): A holds
  // the turn, B waits for it, A calls again, and B's region must come first.
  ThreadPool pool(2);
  for (int round = 0; round < 5; ++round) {
    std::atomic<bool> release{false}, a_inside{false};
    std::mutex mu;
    std::vector<char> order;
    auto record = [&](char c) {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(c);
    };
    std::thread a([&] {
      pool.Run([&](int t) {
        if (t != 0) return;
        a_inside = true;
        while (!release.load()) std::this_thread::yield();
      });
      pool.Run([&](int t) {
        if (t == 0) record('A');
      });
    });
    while (!a_inside.load()) std::this_thread::yield();
    std::thread b([&] {
      pool.Run([&](int t) {
        if (t == 0) record('B');
      });
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // B is waiting for its turn
    release = true;
    a.join();
    b.join();
    EXPECT_EQ(order, (std::vector<char>{'B', 'A'})) << "round " << round;
  }
}

}  // namespace
}  // namespace pocket
