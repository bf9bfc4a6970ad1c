// ThreadPool::Run and ParallelFor allocate nothing (a decode step runs dozens of parallel regions
// per token). A binary of its own: it replaces the global operator new to count allocations.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include "base/thread_pool.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define POCKET_COUNT_ALLOCATIONS 0  // the sanitizers bring their own operator new
#else
#define POCKET_COUNT_ALLOCATIONS 1
#endif

namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

#if POCKET_COUNT_ALLOCATIONS
void* operator new(size_t n_bytes) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n_bytes == 0 ? 1 : n_bytes)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
#endif

namespace pocket {
namespace {

TEST(ThreadPoolAllocTest, ParallelRegionsAllocateNothing) {
  if (!POCKET_COUNT_ALLOCATIONS) GTEST_SKIP() << "allocations are not counted under sanitizers";
  for (int n_threads : {1, 2, 3}) {
    ThreadPool pool(n_threads);
    std::vector<int64_t> out(1000, 0);
    const int64_t step = 3, offset = 7;  // captured by reference, as decode's regions capture
    auto region = [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) out[static_cast<size_t>(i)] += i * step + offset;
    };
    pool.ParallelFor(1000, region);  // warm-up: the workers are running
    const int64_t before = g_allocations.load();
    for (int round = 0; round < 200; ++round) {
      pool.ParallelFor(1000, region);
      pool.Run([&](int t) { out[static_cast<size_t>(t)] += step + offset + round; });
    }
    const int64_t allocated = g_allocations.load() - before;
    EXPECT_EQ(allocated, 0) << n_threads << " threads";
    // The work was done: every item got its 201 additions.
    EXPECT_EQ(out[999], 201 * (999 * step + offset));
  }
}

}  // namespace
}  // namespace pocket
