#include "tokenizer/unicode.h"

#include <gtest/gtest.h>
#include <utf8proc.h>

#include <string>
#include <vector>

namespace pocket::unicode {
namespace {

// The compatibility tables in unicode.cc were derived for utf8proc's Unicode 15.0 against HF
// tokenizers 0.23.2 (Oniguruma: Unicode 16.0; unicode-normalization-alignments: Unicode 9.0). With
// another utf8proc, re-derive them with testdata/hf_unicode_scan.js and update this pin.
TEST(UnicodeTest, TablesMatchTheUtf8procVersion) {
  EXPECT_EQ(std::string(utf8proc_unicode_version()), "15.0.0")
      << "utf8proc's Unicode version changed: re-derive the tables in src/tokenizer/unicode.cc "
         "(see testdata/hf_unicode_scan.js)";
}

TEST(UnicodeTest, RegexClasses) {
  EXPECT_EQ(ClassifyForRegex('a'), RegexClass::kLetter);
  EXPECT_EQ(ClassifyForRegex('7'), RegexClass::kNumber);
  EXPECT_EQ(ClassifyForRegex(' '), RegexClass::kWhiteSpace);
  EXPECT_EQ(ClassifyForRegex('\v'), RegexClass::kWhiteSpace);
  EXPECT_EQ(ClassifyForRegex(0x1C), RegexClass::kOther);  // not White_Space (Python says it is)
  EXPECT_EQ(ClassifyForRegex('_'), RegexClass::kOther);
  EXPECT_EQ(ClassifyForRegex(0x85), RegexClass::kWhiteSpace);
  EXPECT_EQ(ClassifyForRegex(0xA0), RegexClass::kWhiteSpace);
  EXPECT_EQ(ClassifyForRegex(0x3000), RegexClass::kWhiteSpace);
  EXPECT_EQ(ClassifyForRegex(0x200B), RegexClass::kOther);  // zero width space: Cf
  EXPECT_EQ(ClassifyForRegex(0x180E), RegexClass::kOther);  // no longer White_Space since 6.3
  EXPECT_EQ(ClassifyForRegex(0x4E2D), RegexClass::kLetter);
  EXPECT_EQ(ClassifyForRegex(0xD55C), RegexClass::kLetter);
  EXPECT_EQ(ClassifyForRegex(0x0663), RegexClass::kNumber);   // Arabic-Indic three
  EXPECT_EQ(ClassifyForRegex(0x2460), RegexClass::kNumber);   // circled one (No)
  EXPECT_EQ(ClassifyForRegex(0x216B), RegexClass::kNumber);   // roman numeral twelve (Nl)
  EXPECT_EQ(ClassifyForRegex(0x0301), RegexClass::kOther);    // combining acute
  EXPECT_EQ(ClassifyForRegex(0x1F600), RegexClass::kOther);   // emoji
  EXPECT_EQ(ClassifyForRegex(0x1C89), RegexClass::kLetter);   // Unicode 16.0
  EXPECT_EQ(ClassifyForRegex(0x2EBF0), RegexClass::kLetter);  // Unicode 15.1
  EXPECT_EQ(ClassifyForRegex(0x10D40), RegexClass::kNumber);  // Unicode 16.0 Garay digit
  EXPECT_EQ(ClassifyForRegex(0x143FA), RegexClass::kLetter);
  EXPECT_EQ(ClassifyForRegex(0x143FB), RegexClass::kOther);  // unassigned
  EXPECT_EQ(ClassifyForRegex(0x10FFFF), RegexClass::kOther);
}

TEST(UnicodeTest, NfcOpaqueForHf) {
  EXPECT_FALSE(IsNfcOpaqueForHf(0x0301));
  EXPECT_TRUE(IsNfcOpaqueForHf(0x07FD));   // Unicode 11.0 mark
  EXPECT_TRUE(IsNfcOpaqueForHf(0x1DF6));   // Unicode 10.0 mark
  EXPECT_FALSE(IsNfcOpaqueForHf(0x1DF5));  // Unicode 7.0 mark: HF knows it
  EXPECT_TRUE(IsNfcOpaqueForHf(0x11930));  // Dives Akuru composition (Unicode 13.0)
  EXPECT_TRUE(IsNfcOpaqueForHf(0x1E4EF));
  EXPECT_FALSE(IsNfcOpaqueForHf(0x1E4F0));
}

// IsNfcInert must never claim a character that NFC could touch.
TEST(UnicodeTest, InertCharactersAreStableStarters) {
  // Every character that can be the second of a canonical composition is the last character of
  // the decomposition of a primary composite (Hangul jamo aside, which compose algorithmically).
  std::vector<bool> may_be_second(0x110000, false);
  for (char32_t cp = 0xC0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    utf8proc_int32_t buffer[8];
    int options = 0;
    const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buffer, 8,
                                                       UTF8PROC_DECOMPOSE, &options);
    if (n < 2) continue;
    const utf8proc_int32_t last = buffer[n - 1];
    const utf8proc_ssize_t m = utf8proc_normalize_utf32(
        buffer, n, static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE | UTF8PROC_STABLE));
    if (m == 1 && static_cast<char32_t>(buffer[0]) == cp) may_be_second[last] = true;
  }
  int inert = 0;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    if (!IsNfcInert(cp)) continue;
    ++inert;
    ASSERT_FALSE(may_be_second[cp]) << std::hex << static_cast<uint32_t>(cp);
    ASSERT_FALSE(cp >= 0x1161 && cp <= 0x11C2) << std::hex << static_cast<uint32_t>(cp);
    const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
    ASSERT_EQ(p->combining_class, 0) << std::hex << static_cast<uint32_t>(cp);
    // No canonical decomposition other than that of a primary composite (which NFC keeps; this
    // also rules out composition exclusions and singletons): NFC(cp) == cp.
    utf8proc_int32_t buffer[8];
    int options = 0;
    const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(cp), buffer, 8,
                                                       UTF8PROC_DECOMPOSE, &options);
    ASSERT_GE(n, 1);
    if (n > 1) {
      const utf8proc_ssize_t m = utf8proc_normalize_utf32(
          buffer, n, static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE | UTF8PROC_STABLE));
      ASSERT_EQ(m, 1) << std::hex << static_cast<uint32_t>(cp);
      ASSERT_EQ(static_cast<char32_t>(buffer[0]), cp) << std::hex << static_cast<uint32_t>(cp);
    }
  }
  EXPECT_GT(inert, 200000);
}

}  // namespace
}  // namespace pocket::unicode
