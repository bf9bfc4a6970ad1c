#include "tokenizer/spec_io.h"

#include <gtest/gtest.h>

#include "tokenizer/test_fixtures.h"

namespace pocket {
namespace {

TEST(SpecIoTest, Qwen3RoundTripEncodesIdentically) {
  POCKET_QWEN3_OR_FAIL(tok);
  auto bytes = SerializeTokenizerSpec(tok->spec());
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto spec = DeserializeTokenizerSpec(*bytes, "test");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->tokens, tok->spec().tokens);
  EXPECT_EQ(spec->merges, tok->spec().merges);
  EXPECT_EQ(spec->eos_id, tok->spec().eos_id);
  auto back = Tokenizer::FromSpec(*spec);
  ASSERT_TRUE(back.ok());
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

}  // namespace
}  // namespace pocket
