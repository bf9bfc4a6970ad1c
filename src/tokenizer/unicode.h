// Character properties as Hugging Face `tokenizers` sees them, built on utf8proc.
//
// utf8proc 2.8 implements Unicode 15.0, but HF `tokenizers` (the reference for the Qwen
// tokenizers) mixes two other versions: its pre-tokenizer regex runs on Oniguruma with Unicode
// 16.0 tables, and its NFC normalizer (the `unicode-normalization-alignments` crate) uses Unicode
// 9.0 tables. The tables in unicode.cc bridge both gaps; they were derived by scanning every code
// point through the HF Node binding (testdata/hf_unicode_scan.js) and are checked by
// unicode_test.cc, which also pins the utf8proc version they were derived against.
#pragma once

#include <cstdint>

namespace pocket::unicode {

// The classes the Qwen2 pre-tokenizer regex distinguishes.
enum class RegexClass : uint8_t {
  kLetter,      // \p{L}: Lu Ll Lt Lm Lo
  kNumber,      // \p{N}: Nd Nl No
  kWhiteSpace,  // \s in Oniguruma: the Unicode White_Space property
  kOther,
};

// Class of `cp` under Unicode 16.0 (Oniguruma as built into HF tokenizers).
RegexClass ClassifyForRegex(char32_t cp);

// True when `cp` cannot change under NFC and cannot combine with its neighbours (a starter with no
// canonical decomposition that takes part in no composition). Conservative: false means "maybe".
bool IsNfcInert(char32_t cp);

// True for characters that Unicode 9.0 did not assign but that NFC in utf8proc's Unicode treats
// as combining (reorderable or composing). HF's normalizer treats them as plain starters, so we
// do the same: they split the text into independently normalized runs.
bool IsNfcOpaqueForHf(char32_t cp);

}  // namespace pocket::unicode

#include <string>
#include <string_view>

namespace pocket::unicode {

// Appends NFC(text) as HF tokenizers computes it (see IsNfcOpaqueForHf). `text` must be valid
// UTF-8. Text that is already normalized is copied without calling utf8proc.
void AppendNfc(std::string_view text, std::string* out);

}  // namespace pocket::unicode
