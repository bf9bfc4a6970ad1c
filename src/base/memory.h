// Process memory figures (for `pocket bench` and load reports).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace pocket {

struct ProcessMemory {
  uint64_t rss_bytes = 0;       // resident now
  uint64_t peak_rss_bytes = 0;  // high-water mark since start (or since ResetPeakRss)
};

// Reads /proc/self/status on Linux; zeros where the platform does not say.
ProcessMemory ReadProcessMemory();
// Resets the kernel's high-water mark (Linux: writes 5 to /proc/self/clear_refs). Returns false if
// the platform refused, in which case the peak includes earlier work.
bool ResetPeakRss();
// Bytes mapped with huge pages (Linux smaps: AnonHugePages + FilePmdMapped + ShmemPmdMapped) in
// the mappings that overlap [begin, end); 0 where the platform does not say.
uint64_t HugePageMappedBytes(const void* begin, const void* end);
// A large buffer straight from the OS (POSIX: an anonymous private mapping, zero-filled when first
// touched), given back to it when the last reference goes, whatever the allocator's thresholds
// (glibc keeps freed blocks of this size in its heap once its mmap threshold has grown, so the
// resident set would not shrink when KV pages are freed). Null when the OS refuses.
std::shared_ptr<uint8_t[]> AllocateOsPages(size_t bytes);
// Gives the allocator's free memory back to the OS when it holds more than `min_free_bytes` unused
// (glibc: every arena, malloc_trim), so that a burst of large requests does not leave the resident
// set at its peak. Returns the free bytes it saw (0 where the allocator does not say).
uint64_t TrimHeap(uint64_t min_free_bytes);
// Caps what the allocator keeps after frees, for a long-running process (pocket serve): blocks of
// `bytes` or more are mapped on their own and unmapped when freed, and a heap's free top beyond
// `bytes` is given back at once (glibc: fixed M_MMAP_THRESHOLD and M_TRIM_THRESHOLD instead of the
// thresholds that grow after each large free; a thread's arena keeps its free top otherwise,
// which malloc_trim does not release). Process-wide: for programs, not libraries. False where the
// allocator has no such settings.
bool LimitHeapRetention(uint64_t bytes);
// CPU time (user + system) used by the process so far, in seconds.
double ProcessCpuSeconds();

}  // namespace pocket
