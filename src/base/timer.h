#pragma once

#include <chrono>
#include <cstdint>

namespace pocket {

inline int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class Stopwatch {
 public:
  Stopwatch() : start_us_(NowMicros()) {}
  int64_t elapsed_us() const { return NowMicros() - start_us_; }
  double elapsed_s() const { return static_cast<double>(elapsed_us()) * 1e-6; }
  void Reset() { start_us_ = NowMicros(); }

 private:
  int64_t start_us_;
};

}  // namespace pocket
