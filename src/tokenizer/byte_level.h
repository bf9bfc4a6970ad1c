// GPT-2's byte-to-unicode mapping: byte-level BPE vocabularies write every byte as a printable code
// point ("Ġ" for a space, "Ċ" for a newline) so tokens are valid text. Bytes 0x21..0x7E,
// 0xA1..0xAC and 0xAE..0xFF stand for themselves; the other 68 bytes map to U+0100..U+0143 in
// byte order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pocket::byte_level {

// The code point that stands for byte `b`.
char32_t ByteToCodePoint(uint8_t b);
// The byte that `cp` stands for, or -1 when `cp` is not in the alphabet.
int CodePointToByte(char32_t cp);
// Undoes the mapping: appends the bytes a stored token stands for. False when `stored` is not
// valid UTF-8 or holds a code point outside the alphabet (then *bytes is left as it was).
bool DecodeToken(std::string_view stored, std::string* bytes);
// Applies the mapping to raw bytes.
std::string EncodeBytes(std::string_view bytes);

}  // namespace pocket::byte_level
