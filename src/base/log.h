// Logging goes through a sink the caller passes in (no global logger). A null sink is silent.
#pragma once

#include <functional>
#include <string_view>

#include "base/str.h"

namespace pocket {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

std::string_view LogLevelName(LogLevel level);

class Logger {
 public:
  using Sink = std::function<void(LogLevel, std::string_view)>;
  Logger() = default;
  Logger(Sink sink, LogLevel min_level) : sink_(std::move(sink)), min_level_(min_level) {}

  // A logger that writes "pocket: warning: ..." lines to stderr.
  static Logger Stderr(LogLevel min_level);

  bool enabled(LogLevel level) const { return sink_ && level >= min_level_; }
  template <typename... Args>
  void Log(LogLevel level, const Args&... args) const {
    if (enabled(level)) sink_(level, StrCat(args...));
  }
  template <typename... Args>
  void Info(const Args&... args) const {
    Log(LogLevel::kInfo, args...);
  }
  template <typename... Args>
  void Warning(const Args&... args) const {
    Log(LogLevel::kWarning, args...);
  }
  template <typename... Args>
  void Debug(const Args&... args) const {
    Log(LogLevel::kDebug, args...);
  }

 private:
  Sink sink_;
  LogLevel min_level_ = LogLevel::kInfo;
};

}  // namespace pocket
