// Small string helpers (C++20 on GCC 12 has no <format>; the core library avoids fmt to stay
// light).
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace pocket {

namespace internal {
inline void StrAppendOne(std::ostringstream& os, const std::string& v) {
  os << v;
}
inline void StrAppendOne(std::ostringstream& os, std::string_view v) {
  os << v;
}
inline void StrAppendOne(std::ostringstream& os, const char* v) {
  os << v;
}
inline void StrAppendOne(std::ostringstream& os, char v) {
  os << v;
}
inline void StrAppendOne(std::ostringstream& os, bool v) {
  os << (v ? "true" : "false");
}
inline void StrAppendOne(std::ostringstream& os, int8_t v) {
  os << static_cast<int>(v);
}
inline void StrAppendOne(std::ostringstream& os, uint8_t v) {
  os << static_cast<unsigned>(v);
}
template <typename T>
void StrAppendOne(std::ostringstream& os, const T& v) {
  os << v;
}
}  // namespace internal

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (internal::StrAppendOne(os, args), ...);
  return os.str();
}

// "[896, 1024]"
std::string ShapeString(const std::vector<int64_t>& shape);

// Quotes and escapes a byte string for a message: non-printable bytes as \xNN.
std::string QuoteBytes(std::string_view bytes, size_t max_len = 64);

std::vector<std::string> SplitString(std::string_view text, char sep);
bool StartsWith(std::string_view text, std::string_view prefix);
bool EndsWith(std::string_view text, std::string_view suffix);
// Human-readable byte count: "1.23 MB" (decimal units, as file managers show).
std::string HumanBytes(uint64_t bytes);

}  // namespace pocket
