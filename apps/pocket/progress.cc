#include "progress.h"

#include <unistd.h>

#include <algorithm>

namespace pocket::cli {
namespace {

// Redraws on a terminal closer together than this are skipped (the final one never is).
constexpr std::chrono::milliseconds kRedrawInterval{100};

}  // namespace

ProgressPrinter::ProgressPrinter(std::FILE* out, bool tty, std::string prefix, std::string unit)
    : out_(out), tty_(tty), prefix_(std::move(prefix)), unit_(std::move(unit)) {}

ProgressPrinter ProgressPrinter::Stderr(std::string prefix, std::string unit) {
  return ProgressPrinter(stderr, ::isatty(2) != 0, std::move(prefix), std::move(unit));
}

void ProgressPrinter::Update(int64_t done, int64_t total, std::string_view what) {
  total = std::max<int64_t>(total, 1);
  done = std::clamp<int64_t>(done, 0, total);
  const int32_t percent = static_cast<int32_t>(100 * done / total);
  const bool last = done == total;
  if (tty_) {
    const auto now = std::chrono::steady_clock::now();
    if (line_open_ && !last && now - last_draw_ < kRedrawInterval) return;
    last_draw_ = now;
    std::fprintf(out_, "\r\033[K%s: %3d%% (%lld/%lld %s) %.*s", prefix_.c_str(), percent,
                 static_cast<long long>(done), static_cast<long long>(total), unit_.c_str(),
                 static_cast<int>(what.size()), what.data());
    std::fflush(out_);
    line_open_ = true;
    return;
  }
  const int32_t step = percent / 10;
  if (step <= last_step_) return;
  last_step_ = step;
  std::fprintf(out_, "%s: %d%% (%lld/%lld %s) %.*s\n", prefix_.c_str(), percent,
               static_cast<long long>(done), static_cast<long long>(total), unit_.c_str(),
               static_cast<int>(what.size()), what.data());
}

void ProgressPrinter::Finish() {
  if (line_open_) {
    std::fprintf(out_, "\n");
    line_open_ = false;
  }
}

}  // namespace pocket::cli
