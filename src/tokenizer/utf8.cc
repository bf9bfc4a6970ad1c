#include "tokenizer/utf8.h"

#include <cstring>

#include "tokenizer/tokenizer.h"

namespace pocket {
namespace utf8 {

SequenceInfo Classify(std::string_view bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t size = bytes.size();
  const uint8_t b0 = p[0];
  if (b0 < 0x80) return {SequenceInfo::kComplete, 1};
  // Lead byte: sequence length and the allowed range of the second byte (Table 3-7).
  uint32_t length = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    length = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    length = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    length = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlongs
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {SequenceInfo::kInvalid, 1};  // continuation byte, C0, C1 or F5..FF
  }
  for (uint32_t i = 1; i < length; ++i) {
    if (i >= size) return {SequenceInfo::kIncomplete, i};
    const uint8_t b = p[i];
    const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {SequenceInfo::kInvalid, i};
  }
  return {SequenceInfo::kComplete, length};
}

void Append(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

Status Validate(std::string_view text) {
  const int64_t bad = FindInvalidUtf8(text);
  if (bad < 0) return Status::Ok();
  const auto byte = static_cast<uint8_t>(text[static_cast<size_t>(bad)]);
  const char* hex = "0123456789ABCDEF";
  std::string byte_hex = {hex[byte >> 4], hex[byte & 15]};
  const bool cut_short =
      Classify(text.substr(static_cast<size_t>(bad))).kind == SequenceInfo::kIncomplete;
  return InvalidArgumentError(
      "text is not valid UTF-8: byte 0x", byte_hex, " at offset ", bad,
      cut_short ? " starts a character that the text cuts short" : " cannot appear there");
}

}  // namespace utf8

int64_t FindInvalidUtf8(std::string_view text) {
  size_t pos = 0;
  const size_t size = text.size();
  while (pos < size) {
    // ASCII fast path, 8 bytes at a time.
    while (pos + 8 <= size) {
      uint64_t word;
      std::memcpy(&word, text.data() + pos, 8);
      if (word & 0x8080808080808080ull) break;
      pos += 8;
    }
    if (pos >= size) break;
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    utf8::SequenceInfo info = utf8::Classify(text.substr(pos));
    if (info.kind != utf8::SequenceInfo::kComplete) return static_cast<int64_t>(pos);
    pos += info.length;
  }
  return -1;
}

}  // namespace pocket
