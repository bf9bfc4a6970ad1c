#include "tokenizer/llama2c_tokenizer.h"

#include <gtest/gtest.h>

#include <map>

#include "base/rng.h"
#include "base/str.h"
#include "tokenizer/test_fixtures.h"
#include "tokenizer/utf8.h"

namespace pocket {
namespace {

std::shared_ptr<const Tokenizer> LoadTok512() {
  auto tokenizer =
      Tokenizer::FromLlama2cFile(testing::SharedTestdataPath("stories260K/tok512.bin"), 512);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  return tokenizer.ok() ? *tokenizer : nullptr;
}

// A direct transcription of run.c's encode(): O(n^2), rescans all pairs after every merge.
std::vector<int32_t> RunCEncode(const TokenizerSpec& spec, const std::string& text, bool bos) {
  std::map<std::string, int32_t> lookup;
  for (size_t i = 0; i < spec.tokens.size(); ++i) lookup.emplace(spec.tokens[i], int32_t(i));
  std::vector<int32_t> tokens;
  if (bos) tokens.push_back(1);
  if (!text.empty()) tokens.push_back(lookup.at(" "));
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8::LengthFromLead(static_cast<uint8_t>(text[i]));
    auto it = lookup.find(text.substr(i, n));
    if (it != lookup.end()) {
      tokens.push_back(it->second);
    } else {
      for (size_t j = 0; j < n; ++j) tokens.push_back(static_cast<uint8_t>(text[i + j]) + 3);
    }
    i += n;
  }
  while (true) {
    float best_score = -1e10f;
    int best_id = -1, best_idx = -1;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      auto it = lookup.find(spec.tokens[tokens[i]] + spec.tokens[tokens[i + 1]]);
      if (it != lookup.end() && spec.scores[it->second] > best_score) {
        best_score = spec.scores[it->second];
        best_id = it->second;
        best_idx = static_cast<int>(i);
      }
    }
    if (best_idx == -1) break;
    tokens[best_idx] = best_id;
    tokens.erase(tokens.begin() + best_idx + 1);
  }
  return tokens;
}

TEST(Llama2cTokenizerTest, ReadsTok512) {
  auto tokenizer = LoadTok512();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->vocab_size(), 512);
  const TokenizerSpec& spec = tokenizer->spec();
  EXPECT_EQ(spec.tokens[1], "\n<s>\n");
  EXPECT_EQ(spec.tokens[3], "<0x00>");
  EXPECT_EQ(spec.tokens[259], " t");
  EXPECT_EQ(spec.scores[260], -1.0f);
  EXPECT_EQ(spec.bos_id, 1);
  EXPECT_EQ(spec.eos_id, 2);
  EXPECT_TRUE(tokenizer->IsSpecial(1));
  EXPECT_EQ(tokenizer->FindToken(" t"), 259);
  EXPECT_EQ(tokenizer->TokenBytes(3 + 0x41), "A");  // <0x41>
  EXPECT_EQ(tokenizer->TokenBytes(1), "");          // BOS decodes to nothing
}

TEST(Llama2cTokenizerTest, EncodesAsRunC) {
  auto tokenizer = LoadTok512();
  ASSERT_NE(tokenizer, nullptr);
  EncodeOptions bos;
  bos.add_bos = true;
  // Expected ids from a Python transcription of run.c's encode().
  EXPECT_EQ(*tokenizer->Encode("Once upon a time, there was a little girl named Lily.", bos),
            (std::vector<int32_t>{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421,
                                  395, 317, 426}));
  EXPECT_EQ(*tokenizer->Encode("Hello", bos), (std::vector<int32_t>{1, 346, 306, 414}));
  EXPECT_EQ(*tokenizer->Encode("", bos), (std::vector<int32_t>{1}));
  EXPECT_EQ(*tokenizer->Encode("Hello"), (std::vector<int32_t>{346, 306, 414}));
  EXPECT_EQ(*tokenizer->Encode("naïve café 你好 😀", bos),
            (std::vector<int32_t>{1,   297, 412, 198, 178, 360, 280, 412, 431, 485, 410,
                                  231, 192, 163, 232, 168, 192, 410, 243, 162, 155, 131}));
  EXPECT_FALSE(tokenizer->Encode("bad \xC3").ok());
  // Random text against the O(n^2) transcription.
  Rng rng(7);
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyz      .,!?'\nTHEODLY";
  for (int i = 0; i < 300; ++i) {
    std::string text;
    const int length = static_cast<int>(rng.NextBelow(60));
    for (int j = 0; j < length; ++j) {
      if (rng.NextBelow(20) == 0) {
        utf8::Append(static_cast<char32_t>(0x80 + rng.NextBelow(0x3000)), &text);
      } else {
        text += alphabet[rng.NextBelow(alphabet.size())];
      }
    }
    ASSERT_EQ(*tokenizer->Encode(text, bos), RunCEncode(tokenizer->spec(), text, true))
        << QuoteBytes(text);
  }
}

TEST(Llama2cTokenizerTest, DecodeStripsSpaceAfterBosAndMapsBytes) {
  auto tokenizer = LoadTok512();
  ASSERT_NE(tokenizer, nullptr);
  EncodeOptions bos;
  bos.add_bos = true;
  const std::string text = "Once upon a time, naïve 你好 😀!";
  auto ids = tokenizer->Encode(text, bos);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*tokenizer->Decode(*ids), text);  // the dummy-prefix space is dropped after BOS
  // Without BOS the dummy prefix stays.
  EXPECT_EQ(*tokenizer->Decode(*tokenizer->Encode(text)), " " + text);
  // A <0x20> byte piece right after BOS keeps its space, as in run.c.
  const std::vector<int32_t> space_byte = {1, 3 + 0x20, tokenizer->FindToken("a")};
  EXPECT_EQ(*tokenizer->Decode(space_byte), " a");
  // Streaming gives the same text.
  StreamDecoder stream(tokenizer.get());
  std::string streamed;
  for (int32_t id : *ids) streamed += stream.Push(id);
  streamed += stream.Flush();
  EXPECT_EQ(streamed, text);
}

TEST(Llama2cTokenizerTest, FileErrors) {
  const std::string path = testing::SharedTestdataPath("stories260K/tok512.bin");
  auto wrong_size = Tokenizer::FromLlama2cFile(path, 600);
  ASSERT_FALSE(wrong_size.ok());
  EXPECT_EQ(wrong_size.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(wrong_size.status().message().find("token 512"), std::string::npos)
      << wrong_size.status().message();
  auto too_few = Tokenizer::FromLlama2cFile(path, 500);
  ASSERT_FALSE(too_few.ok());
  EXPECT_NE(too_few.status().message().find("left after"), std::string::npos);
  EXPECT_FALSE(Tokenizer::FromLlama2cFile(path + ".missing", 512).ok());
  EXPECT_FALSE(Llama2cTokenizer::ReadSpec("ab", 512, "short.bin").ok());
}

}  // namespace
}  // namespace pocket
