// Progress of long work (a conversion, a benchmark) on stderr. On a terminal: one line redrawn in
// place ("\r\033[K"), at most every 100 ms, and always at the end. Otherwise (a log file, a pipe,
// CI): a line only when the work crosses each 10% step (0%, 10%, ..., 100%), so a log holds at
// most 11 lines however many steps the work has.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace pocket::cli {

class ProgressPrinter {
 public:
  // Lines read "<prefix>: 45% (21/47 <unit>) <what>".
  ProgressPrinter(std::FILE* out, bool tty, std::string prefix, std::string unit);
  // On stderr, redrawn in place when stderr is a terminal.
  static ProgressPrinter Stderr(std::string prefix, std::string unit);

  // `done` of `total` units are finished; `what` names the current (or last) one.
  void Update(int64_t done, int64_t total, std::string_view what);
  // Ends the redrawn line, if any (call before printing anything else).
  void Finish();

 private:
  std::FILE* out_;
  bool tty_;
  std::string prefix_, unit_;
  int32_t last_step_ = -1;  // the last 10% step printed (not a tty)
  bool line_open_ = false;  // a redrawn line is on the terminal
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace pocket::cli
