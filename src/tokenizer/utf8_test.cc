#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"

namespace pocket {
namespace {

TEST(Utf8Test, FindInvalidUtf8) {
  EXPECT_EQ(FindInvalidUtf8(""), -1);
  EXPECT_EQ(FindInvalidUtf8("plain ascii text that is longer than eight bytes"), -1);
  EXPECT_EQ(FindInvalidUtf8("\xC3\xA9\xE4\xBD\xA0\xF0\x9F\x98\x80"), -1);  // é 你 😀
  EXPECT_EQ(FindInvalidUtf8("\xF4\x8F\xBF\xBF"), -1);                      // U+10FFFF
  EXPECT_EQ(FindInvalidUtf8("\xEF\xBF\xBE"), -1);     // U+FFFE: a noncharacter, but valid UTF-8
  EXPECT_EQ(FindInvalidUtf8("ab\x80"), 2);            // stray continuation byte
  EXPECT_EQ(FindInvalidUtf8("abc\xC0\xAF"), 3);       // overlong '/'
  EXPECT_EQ(FindInvalidUtf8("\xE0\x80\xAF"), 0);      // overlong 3-byte
  EXPECT_EQ(FindInvalidUtf8("\xF0\x80\x80\xAF"), 0);  // overlong 4-byte
  EXPECT_EQ(FindInvalidUtf8("x\xED\xA0\x80"), 1);     // surrogate U+D800
  EXPECT_EQ(FindInvalidUtf8("\xF4\x90\x80\x80"), 0);  // above U+10FFFF
  EXPECT_EQ(FindInvalidUtf8("\xF5\x80\x80\x80"), 0);
  EXPECT_EQ(FindInvalidUtf8("0123456789\xE4\xBD"), 10);  // cut short by the end
  EXPECT_EQ(FindInvalidUtf8("\xC3("), 0);
}

TEST(Utf8Test, Classify) {
  using Info = utf8::SequenceInfo;
  EXPECT_EQ(utf8::Classify("a").kind, Info::kComplete);
  EXPECT_EQ(utf8::Classify("\xF0\x9F\x98\x80").length, 4u);
  EXPECT_EQ(utf8::Classify("\xF0\x9F\x98").kind, Info::kIncomplete);
  EXPECT_EQ(utf8::Classify("\xF0").kind, Info::kIncomplete);
  // Maximal ill-formed subparts: E0 80 is bad at its second byte (1 byte replaced); F0 9F 41 at
  // its third (2 bytes).
  EXPECT_EQ(utf8::Classify("\xE0\x80").kind, Info::kInvalid);
  EXPECT_EQ(utf8::Classify("\xE0\x80").length, 1u);
  EXPECT_EQ(utf8::Classify("\xF0\x9F\x41").length, 2u);
  EXPECT_EQ(utf8::Classify("\xFF").kind, Info::kInvalid);
}

TEST(Utf8Test, DecodeAndAppendRoundTrip) {
  for (char32_t cp : {0x0u, 0x41u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x10FFFFu}) {
    std::string s;
    utf8::Append(cp, &s);
    EXPECT_EQ(FindInvalidUtf8(s), -1) << static_cast<uint32_t>(cp);
    size_t pos = 0;
    EXPECT_EQ(utf8::DecodeAt(s, &pos), cp);
    EXPECT_EQ(pos, s.size());
  }
}

TEST(Utf8Test, ValidateNamesOffsetAndByte) {
  EXPECT_TRUE(utf8::Validate("ok").ok());
  Status status = utf8::Validate("abcd\xFF");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("0xFF at offset 4"), std::string::npos) << status.message();
  status = utf8::Validate("ab\xE4\xBD");
  EXPECT_NE(status.message().find("offset 2"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("cuts short"), std::string::npos) << status.message();
}

}  // namespace
}  // namespace pocket
