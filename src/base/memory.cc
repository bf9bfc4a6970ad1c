#include "base/memory.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>

namespace pocket {

ProcessMemory ReadProcessMemory() {
  ProcessMemory mem;
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return mem;
  char line[256];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long long kb = 0;
    if (std::sscanf(line, "VmRSS: %llu kB", &kb) == 1) mem.rss_bytes = kb * 1024ull;
    if (std::sscanf(line, "VmHWM: %llu kB", &kb) == 1) mem.peak_rss_bytes = kb * 1024ull;
  }
  std::fclose(f);
  return mem;
}

std::shared_ptr<uint8_t[]> AllocateOsPages(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  try {
    return std::shared_ptr<uint8_t[]>(static_cast<uint8_t*>(p),
                                      [bytes](uint8_t* q) { ::munmap(q, bytes); });
  } catch (const std::bad_alloc&) {  // the reference count's block
    ::munmap(p, bytes);
    return nullptr;
  }
}

bool ResetPeakRss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) return false;
  bool ok = std::fputs("5", f) >= 0;
  ok = (std::fclose(f) == 0) && ok;
  return ok;
}

uint64_t HugePageMappedBytes(const void* begin, const void* end) {
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (f == nullptr) return 0;
  const auto lo = reinterpret_cast<uintptr_t>(begin), hi = reinterpret_cast<uintptr_t>(end);
  uint64_t total = 0;
  bool overlaps = false;
  char line[512];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long long start = 0, stop = 0, kb = 0;
    char key[64];
    // A mapping's line starts with its lowercase hex range; its fields start with a capital.
    const char c = line[0];
    const bool range_line = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    if (range_line && std::sscanf(line, "%llx-%llx", &start, &stop) == 2) {
      overlaps = start < hi && lo < stop;
    } else if (overlaps && std::sscanf(line, "%63[A-Za-z]: %llu kB", key, &kb) == 2 &&
               (std::strcmp(key, "AnonHugePages") == 0 || std::strcmp(key, "FilePmdMapped") == 0 ||
                std::strcmp(key, "ShmemPmdMapped") == 0)) {
      total += kb * 1024ull;
    }
  }
  std::fclose(f);
  return total;
}

uint64_t TrimHeap(uint64_t min_free_bytes) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 info = mallinfo2();
  const uint64_t free_bytes = info.fordblks;  // free in the arenas (mmapped blocks go at free)
  if (free_bytes > min_free_bytes) malloc_trim(0);
  return free_bytes;
#else
  (void)min_free_bytes;
  return 0;
#endif
}

bool LimitHeapRetention(uint64_t bytes) {
#if defined(__GLIBC__)
  const int b = static_cast<int>(std::min<uint64_t>(bytes, 1u << 30));
  return mallopt(M_MMAP_THRESHOLD, b) == 1 && mallopt(M_TRIM_THRESHOLD, b) == 1;
#else
  (void)bytes;
  return false;
#endif
}

double ProcessCpuSeconds() {
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0.0;
  auto secs = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6;
  };
  return secs(ru.ru_utime) + secs(ru.ru_stime);
}

}  // namespace pocket
