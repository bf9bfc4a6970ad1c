#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>

namespace pocket::unicode {
namespace {

struct Range {
  char32_t first;
  char32_t last;
  RegexClass cls;
};

// Letters and numbers assigned in Unicode 15.1 and 16.0, which Oniguruma in HF tokenizers knows
// and utf8proc 2.8 (Unicode 15.0) reports as unassigned (Cn). Sorted, non-overlapping.
constexpr std::array<Range, 29> kUnicode16Additions = {{
    {0x1C89, 0x1C8A, RegexClass::kLetter},    // Cyrillic TJE
    {0xA7CB, 0xA7CD, RegexClass::kLetter},    // Latin Extended-D
    {0xA7DA, 0xA7DC, RegexClass::kLetter},    // Latin Extended-D
    {0x105C0, 0x105F3, RegexClass::kLetter},  // Todhri
    {0x10D40, 0x10D49, RegexClass::kNumber},  // Garay digits
    {0x10D4A, 0x10D65, RegexClass::kLetter},  // Garay
    {0x10D6F, 0x10D85, RegexClass::kLetter},  // Garay
    {0x10EC2, 0x10EC4, RegexClass::kLetter},  // Arabic Extended-C
    {0x11380, 0x11389, RegexClass::kLetter},  // Tulu-Tigalari
    {0x1138B, 0x1138B, RegexClass::kLetter},
    {0x1138E, 0x1138E, RegexClass::kLetter},
    {0x11390, 0x113B5, RegexClass::kLetter},
    {0x113B7, 0x113B7, RegexClass::kLetter},
    {0x113D1, 0x113D1, RegexClass::kLetter},
    {0x113D3, 0x113D3, RegexClass::kLetter},
    {0x116D0, 0x116E3, RegexClass::kNumber},  // Myanmar Extended-C digits
    {0x11BC0, 0x11BE0, RegexClass::kLetter},  // Sunuwar
    {0x11BF0, 0x11BF9, RegexClass::kNumber},  // Sunuwar digits
    {0x13460, 0x143FA, RegexClass::kLetter},  // Egyptian Hieroglyphs Extended-A
    {0x16100, 0x1611D, RegexClass::kLetter},  // Gurung Khema
    {0x16130, 0x16139, RegexClass::kNumber},  // Gurung Khema digits
    {0x16D40, 0x16D6C, RegexClass::kLetter},  // Kirat Rai
    {0x16D70, 0x16D79, RegexClass::kNumber},  // Kirat Rai digits
    {0x18CFF, 0x18CFF, RegexClass::kLetter},  // Khitan Small Script
    {0x1CCF0, 0x1CCF9, RegexClass::kNumber},  // outlined digits
    {0x1E5D0, 0x1E5ED, RegexClass::kLetter},  // Ol Onal
    {0x1E5F0, 0x1E5F0, RegexClass::kLetter},
    {0x1E5F1, 0x1E5FA, RegexClass::kNumber},  // Ol Onal digits
    {0x2EBF0, 0x2EE5D, RegexClass::kLetter},  // CJK Unified Ideographs Extension I (15.1)
}};

struct CodeRange {
  char32_t first;
  char32_t last;
};

// Characters added after Unicode 9.0 that utf8proc (15.0) normalizes as combining marks (canonical
// combining class != 0) or composes (Dives Akuru U+11935 + U+11930 = U+11938, Unicode 13.0).
constexpr std::array<CodeRange, 39> kNfcOpaqueForHf = {{
    {0x07FD, 0x07FD},   {0x0898, 0x089F},   {0x08CA, 0x08D3},   {0x09FE, 0x09FE},
    {0x0C3C, 0x0C3C},   {0x0D3B, 0x0D3C},   {0x0EBA, 0x0EBA},   {0x1715, 0x1715},
    {0x1ABF, 0x1ACE},   {0x1DF6, 0x1DFA},   {0xA82C, 0xA82C},   {0x10D24, 0x10D27},
    {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF}, {0x10F46, 0x10F50}, {0x10F82, 0x10F85},
    {0x11070, 0x11070}, {0x1133B, 0x1133B}, {0x1145E, 0x1145E}, {0x11839, 0x1183A},
    {0x11930, 0x11930}, {0x11935, 0x11935}, {0x11938, 0x11938}, {0x1193D, 0x1193E},
    {0x11943, 0x11943}, {0x119E0, 0x119E0}, {0x11A34, 0x11A34}, {0x11A47, 0x11A47},
    {0x11A99, 0x11A99}, {0x11D42, 0x11D42}, {0x11D44, 0x11D45}, {0x11D97, 0x11D97},
    {0x11F41, 0x11F42}, {0x16FF0, 0x16FF1}, {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136},
    {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF},
}};

// ASCII classes for the regex, indexed by byte.
constexpr std::array<RegexClass, 128> MakeAsciiClasses() {
  std::array<RegexClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    RegexClass cls = RegexClass::kOther;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) cls = RegexClass::kLetter;
    if (c >= '0' && c <= '9') cls = RegexClass::kNumber;
    if ((c >= 0x09 && c <= 0x0D) || c == ' ') cls = RegexClass::kWhiteSpace;
    t[c] = cls;
  }
  return t;
}
constexpr std::array<RegexClass, 128> kAsciiClasses = MakeAsciiClasses();

bool IsWhiteSpace(char32_t cp) {
  // Unicode White_Space (PropList.txt), unchanged since Unicode 6.3.
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace

RegexClass ClassifyForRegex(char32_t cp) {
  if (cp < 0x80) return kAsciiClasses[cp];
  // Hot ranges: CJK ideographs and Hangul syllables (all Lo).
  if ((cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
      (cp >= 0xAC00 && cp <= 0xD7A3)) {
    return RegexClass::kLetter;
  }
  if (IsWhiteSpace(cp)) return RegexClass::kWhiteSpace;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return RegexClass::kLetter;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return RegexClass::kNumber;
    case UTF8PROC_CATEGORY_CN: {
      auto it = std::upper_bound(kUnicode16Additions.begin(), kUnicode16Additions.end(), cp,
                                 [](char32_t c, const Range& r) { return c < r.first; });
      if (it != kUnicode16Additions.begin() && cp <= (it - 1)->last) return (it - 1)->cls;
      return RegexClass::kOther;
    }
    default:
      return RegexClass::kOther;
  }
}

bool IsNfcInert(char32_t cp) {
  if (cp < 0x300) return true;
  // Hot ranges known to be stable starters that never compose as a second character.
  if ((cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
      (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xFF00 && cp <= 0xFFEF) ||
      (cp >= 0x2002 && cp <= 0x206F) || (cp >= 0x3000 && cp <= 0x3029) ||
      (cp >= 0x3030 && cp <= 0x3098) || (cp >= 0x309B && cp <= 0x30FF) ||
      (cp >= 0x1F000 && cp <= 0x1FAFF)) {
    return true;
  }
  // Hangul jamo compose algorithmically (utf8proc has no table entry for them).
  if ((cp >= 0x1100 && cp <= 0x11FF) || (cp >= 0xA960 && cp <= 0xA97F) ||
      (cp >= 0xD7B0 && cp <= 0xD7FF)) {
    return false;
  }
  const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
  // comb_index == UINT16_MAX: neither the first nor the second character of any composition. (In
  // utf8proc >= 2.9 this field is narrower and never equals UINT16_MAX, which only makes this
  // function more conservative.)
  return p->combining_class == 0 && p->decomp_seqindex == UINT16_MAX && p->comb_index == UINT16_MAX;
}

bool IsNfcOpaqueForHf(char32_t cp) {
  if (cp < 0x07FD) return false;
  auto it = std::upper_bound(kNfcOpaqueForHf.begin(), kNfcOpaqueForHf.end(), cp,
                             [](char32_t c, const CodeRange& r) { return c < r.first; });
  return it != kNfcOpaqueForHf.begin() && cp <= (it - 1)->last;
}

}  // namespace pocket::unicode
