#include "base/log.h"

#include <cstdio>
#include <string>

namespace pocket {

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "log";
}

Logger Logger::Stderr(LogLevel min_level) {
  return Logger(
      [](LogLevel level, std::string_view message) {
        std::string line = StrCat("pocket: ", LogLevelName(level), ": ", message, "\n");
        std::fwrite(line.data(), 1, line.size(), stderr);
      },
      min_level);
}

}  // namespace pocket
