#include <gtest/gtest.h>

#include "base/rng.h"
#include "base/str.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/test_fixtures.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace pocket {
namespace {

std::string StreamAll(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                      std::vector<std::string>* outputs = nullptr) {
  StreamDecoder decoder(&tokenizer);
  std::string text;
  for (int32_t id : ids) {
    std::string part = decoder.Push(id);
    EXPECT_EQ(FindInvalidUtf8(part), -1) << "a Push output split a character";
    if (outputs != nullptr) outputs->push_back(part);
    text += part;
  }
  text += decoder.Flush();
  return text;
}

TEST(StreamDecoderTest, EmojiSplitAcrossByteTokens) {
  POCKET_QWEN3_OR_FAIL(tokenizer);
  // 😀 (F0 9F 98 80) as four single-byte tokens.
  std::vector<int32_t> ids = {tokenizer->FindToken("a")};
  for (char c : std::string("\xF0\x9F\x98\x80")) {
    ids.push_back(tokenizer->FindToken(byte_level::EncodeBytes(std::string(1, c))));
  }
  ids.push_back(tokenizer->FindToken("b"));
  std::vector<std::string> outputs;
  EXPECT_EQ(StreamAll(*tokenizer, ids, &outputs),
            "a\xF0\x9F\x98\x80"
            "b");
  EXPECT_EQ(outputs, (std::vector<std::string>{"a", "", "", "", "\xF0\x9F\x98\x80", "b"}));
}

TEST(StreamDecoderTest, PushThenFlushEqualsDecode) {
  POCKET_QWEN3_OR_FAIL(tokenizer);
  const std::vector<std::string> texts = {
      "Hello, world!", "你好，世界！这是一个测试。",
      "emoji 😀👍🏽 family 👨‍👩‍👧‍👦 🇨🇳",
      "<|im_start|>user\n数学 x² + y² = z²<|im_end|>",
      "mixed \u0915\u093C\u0301 e\u0301 \U00011935"};
  for (const std::string& text : texts) {
    auto ids = tokenizer->Encode(text);
    ASSERT_TRUE(ids.ok());
    auto decoded = tokenizer->Decode(*ids);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(StreamAll(*tokenizer, *ids), *decoded) << text;
  }
  // Random valid UTF-8 from all planes.
  Rng rng(99);
  for (int i = 0; i < 300; ++i) {
    std::string text;
    for (int j = 0; j < 20; ++j) {
      char32_t cp;
      do {
        cp = static_cast<char32_t>(rng.NextBelow(rng.NextBelow(2) ? 0x800 : 0x110000));
      } while (cp >= 0xD800 && cp <= 0xDFFF);
      utf8::Append(cp, &text);
    }
    auto ids = tokenizer->Encode(text);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(StreamAll(*tokenizer, *ids), *tokenizer->Decode(*ids)) << QuoteBytes(text);
  }
}

TEST(StreamDecoderTest, InvalidAndUnfinishedBytesBecomeReplacementCharacters) {
  POCKET_QWEN3_OR_FAIL(tokenizer);
  auto byte_token = [&](uint8_t b) {
    return tokenizer->FindToken(byte_level::EncodeBytes(std::string(1, static_cast<char>(b))));
  };
  StreamDecoder decoder(tokenizer.get());
  EXPECT_EQ(decoder.Push(byte_token(0xE4)), "");
  EXPECT_EQ(decoder.Push(byte_token(0x41)),
            "\uFFFD"
            "A");  // E4 cannot continue with 'A'
  EXPECT_EQ(decoder.Push(byte_token(0xFF)), "\uFFFD");
  EXPECT_EQ(decoder.Push(byte_token(0xF0)), "");
  EXPECT_EQ(decoder.Push(byte_token(0x9F)), "");
  EXPECT_EQ(decoder.Flush(), "\uFFFD");            // the unfinished emoji
  EXPECT_EQ(decoder.Push(byte_token(0x42)), "B");  // Flush reset the decoder
  EXPECT_EQ(decoder.Push(-5), "");                 // out of range: nothing
  EXPECT_EQ(decoder.Flush(), "");
}

}  // namespace
}  // namespace pocket
