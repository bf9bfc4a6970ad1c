// UTF-8 primitives used by the tokenizers: validation (with the offset of the first bad byte),
// decoding and encoding code points, and classifying a possibly unfinished sequence (for the
// streaming detokenizer). "Valid" follows Unicode Table 3-7: no overlongs, no surrogates, nothing
// above U+10FFFF.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace pocket::utf8 {

// What the bytes at the start of a buffer are.
struct SequenceInfo {
  enum Kind : uint8_t {
    kComplete,    // a whole valid character of `length` bytes
    kIncomplete,  // a valid start of a character whose remaining bytes are not there yet
    kInvalid,     // the maximal ill-formed subpart has `length` bytes (>= 1); never becomes valid
  };
  Kind kind;
  uint32_t length;
};

// Classifies the sequence at the start of `bytes` (which must be non-empty).
SequenceInfo Classify(std::string_view bytes);

// Byte length of the character whose lead byte is `lead` (1 for ASCII and for invalid leads).
inline size_t LengthFromLead(uint8_t lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Decodes the character at text[*pos] and advances *pos. `text` must be valid UTF-8.
inline char32_t DecodeAt(std::string_view text, size_t* pos) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data()) + *pos;
  uint8_t b0 = p[0];
  if (b0 < 0x80) {
    *pos += 1;
    return b0;
  }
  if (b0 < 0xE0) {
    *pos += 2;
    return (static_cast<char32_t>(b0 & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (b0 < 0xF0) {
    *pos += 3;
    return (static_cast<char32_t>(b0 & 0x0F) << 12) | (static_cast<char32_t>(p[1] & 0x3F) << 6) |
           (p[2] & 0x3F);
  }
  *pos += 4;
  return (static_cast<char32_t>(b0 & 0x07) << 18) | (static_cast<char32_t>(p[1] & 0x3F) << 12) |
         (static_cast<char32_t>(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

// Appends the UTF-8 encoding of `cp` (which must be a scalar value).
void Append(char32_t cp, std::string* out);

// OK, or InvalidArgument naming the offset and value of the first invalid byte.
Status Validate(std::string_view text);

inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace pocket::utf8
