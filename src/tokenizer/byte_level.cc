#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace pocket::byte_level {
namespace {

constexpr bool StandsForItself(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<char32_t, 256> MakeByteToCodePoint() {
  std::array<char32_t, 256> table{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) table[b] = StandsForItself(b) ? static_cast<char32_t>(b) : next++;
  return table;
}
constexpr std::array<char32_t, 256> kByteToCodePoint = MakeByteToCodePoint();

// Inverse for U+0000..U+0143; -1 outside the alphabet.
constexpr std::array<int16_t, 0x144> MakeCodePointToByte() {
  std::array<int16_t, 0x144> table{};
  for (auto& v : table) v = -1;
  for (int b = 0; b < 256; ++b) table[kByteToCodePoint[b]] = static_cast<int16_t>(b);
  return table;
}
constexpr std::array<int16_t, 0x144> kCodePointToByte = MakeCodePointToByte();

}  // namespace

char32_t ByteToCodePoint(uint8_t b) {
  return kByteToCodePoint[b];
}

int CodePointToByte(char32_t cp) {
  return cp < kCodePointToByte.size() ? kCodePointToByte[cp] : -1;
}

bool DecodeToken(std::string_view stored, std::string* bytes) {
  // Every code point of the alphabet is below U+0144, so it takes one or two UTF-8 bytes (lead
  // C2..C5); anything else, valid UTF-8 or not, is outside the alphabet. One pass, no allocation
  // beyond growing `bytes`.
  const size_t old_size = bytes->size();
  bytes->resize(old_size + stored.size());  // an upper bound
  char* out = bytes->data() + old_size;
  const auto* p = reinterpret_cast<const uint8_t*>(stored.data());
  const size_t n = stored.size();
  for (size_t i = 0; i < n;) {
    int b;
    if (p[i] < 0x80) {
      b = kCodePointToByte[p[i]];
      i += 1;
    } else if (p[i] >= 0xC2 && p[i] <= 0xC5 && i + 1 < n && (p[i + 1] & 0xC0) == 0x80) {
      b = CodePointToByte(((p[i] & 0x1Fu) << 6) | (p[i + 1] & 0x3Fu));  // C5 reaches U+017F
      i += 2;
    } else {
      b = -1;
    }
    if (b < 0) {
      bytes->resize(old_size);
      return false;
    }
    *out++ = static_cast<char>(b);
  }
  bytes->resize(static_cast<size_t>(out - bytes->data()));
  return true;
}

std::string EncodeBytes(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) utf8::Append(kByteToCodePoint[static_cast<uint8_t>(c)], &out);
  return out;
}

}  // namespace pocket::byte_level
