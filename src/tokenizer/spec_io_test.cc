#include "tokenizer/spec_io.h"

#include <gtest/gtest.h>

#include "tokenizer/byte_level.h"
#include "tokenizer/test_fixtures.h"

namespace pocket {
namespace {

TEST(SpecIoTest, Qwen3RoundTripEncodesIdentically) {
  POCKET_QWEN3_OR_FAIL(tok);
  auto bytes = SerializeTokenizerSpec(tok->FullSpec());
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto spec = DeserializeTokenizerSpec(*bytes, "test");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->tokens, tok->FullSpec().tokens);
  // Merges come back by id; the tokenizer built from them gives the same merges as strings.
  EXPECT_TRUE(spec->merges.empty());
  ASSERT_EQ(spec->merge_ids.size(), tok->FullSpec().merges.size());
  EXPECT_EQ(spec->tokens[spec->merge_ids[0].first] + spec->tokens[spec->merge_ids[0].second],
            tok->FullSpec().merges[0].first + tok->FullSpec().merges[0].second);
  EXPECT_EQ(spec->eos_id, tok->spec().eos_id);
  auto back = Tokenizer::FromSpec(*spec);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ((*back)->FullSpec().merges, tok->FullSpec().merges);
  // Written again from the id form, the bytes are the same.
  auto again = SerializeTokenizerSpec(*spec);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *bytes);
  for (const char* text : {"Hello world", "中文 <|im_end|> 123", "  tabs\\t and 'll"}) {
    EXPECT_EQ(*(*back)->Encode(text), *tok->Encode(text)) << text;
  }
}

TEST(SpecIoTest, CorruptBytesAreErrors) {
  TokenizerSpec spec;
  spec.tokens = {"a", "b", "ab"};
  spec.merges = {{"a", "b"}};
  spec.eos_id = 2;
  auto bytes = SerializeTokenizerSpec(spec);
  ASSERT_TRUE(bytes.ok());
  for (size_t cut = 0; cut < bytes->size(); ++cut) {
    EXPECT_FALSE(DeserializeTokenizerSpec(bytes->substr(0, cut), "t").ok()) << cut;
  }
  spec.merges = {{"a", "zz"}};
  EXPECT_FALSE(SerializeTokenizerSpec(spec).ok());
}

TEST(SpecIoTest, MergesByIdAreChecked) {
  TokenizerSpec spec;
  for (int b = 0; b < 256; ++b) {
    spec.tokens.push_back(byte_level::EncodeBytes(std::string(1, static_cast<char>(b))));
  }
  const auto id = [&](const char* text) {
    spec.tokens.push_back(byte_level::EncodeBytes(text));
    return static_cast<int32_t>(spec.tokens.size() - 1);
  };
  const int32_t ab = id("ab");
  spec.tokens.push_back("<|end|>");
  spec.types.assign(spec.tokens.size(), TokenType::kNormal);
  spec.types.back() = TokenType::kControl;
  const int32_t end = static_cast<int32_t>(spec.tokens.size() - 1);
  spec.merge_ids = {{'a', 'b'}};
  auto tok = Tokenizer::FromSpec(spec);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ(*(*tok)->Encode("ab"), (std::vector<int32_t>{ab}));
  EXPECT_EQ((*tok)->FullSpec().merges,
            (std::vector<std::pair<std::string, std::string>>{{"a", "b"}}));
  // A merged token missing from the vocabulary, a control token as a part, an id out of range.
  for (const std::pair<int32_t, int32_t>& bad :
       {std::pair<int32_t, int32_t>{'b', 'a'}, {'a', end}, {'a', 9999}}) {
    spec.merge_ids = {bad};
    auto broken = Tokenizer::FromSpec(spec);
    ASSERT_FALSE(broken.ok());
    EXPECT_NE(broken.status().message().find("merge 0"), std::string::npos)
        << broken.status().ToString();
  }
}

}  // namespace
}  // namespace pocket
