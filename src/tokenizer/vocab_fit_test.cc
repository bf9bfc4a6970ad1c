#include "tokenizer/vocab_fit.h"

#include <gtest/gtest.h>

#include "base/rng.h"
#include "base/str.h"
#include "tokenizer/test_fixtures.h"
#include "tokenizer/utf8.h"

namespace pocket {
namespace {

TEST(VocabFitTest, Qwen3To64K) {
  POCKET_QWEN3_OR_FAIL(full);
  auto spec = TruncateVocab(full->FullSpec(), 65536);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->tokens.size(), 65536u);
  EXPECT_EQ(spec->merges.size(), 65510u - 256u);
  EXPECT_EQ(spec->eos_id, 65512);  // <|im_end|>: the MNN-Pocket-0.3B facts
  EXPECT_EQ(spec->pad_id, 65510);  // <|endoftext|>
  EXPECT_EQ(spec->bos_id, -1);
  EXPECT_EQ(spec->chat_template, full->spec().chat_template);
  auto small = Tokenizer::FromSpec(*spec);
  ASSERT_TRUE(small.ok()) << small.status().ToString();
  const auto& tokenizer = *small;
  EXPECT_EQ(tokenizer->FindToken("<|endoftext|>"), 65510);
  EXPECT_EQ(tokenizer->FindToken("<|im_start|>"), 65511);
  EXPECT_EQ(tokenizer->FindToken("<|im_end|>"), 65512);
  EXPECT_EQ(tokenizer->FindToken("</think>"), 65535);
  EXPECT_TRUE(tokenizer->IsSpecial(65512));
  // Regular ids below the cut are unchanged.
  EXPECT_EQ(tokenizer->FindToken("Ġworld"), 1879);
  EXPECT_EQ(*tokenizer->Encode("Hello world<|im_end|>"), (std::vector<int32_t>{9707, 1879, 65512}));

  // Lossless on random UTF-8 (NFC applied), and never an id above the cut.
  Rng rng(2024);
  for (int i = 0; i < 500; ++i) {
    std::string text;
    const int length = static_cast<int>(rng.NextBelow(40));
    for (int j = 0; j < length; ++j) {
      char32_t cp;
      do {
        const uint64_t kind = rng.NextBelow(4);
        cp = static_cast<char32_t>(kind == 0   ? 0x20 + rng.NextBelow(0x60)
                                   : kind == 1 ? 0x4E00 + rng.NextBelow(0x5200)
                                               : rng.NextBelow(0x110000));
      } while (cp >= 0xD800 && cp <= 0xDFFF);
      utf8::Append(cp, &text);
    }
    auto ids = tokenizer->Encode(text);
    ASSERT_TRUE(ids.ok());
    for (int32_t id : *ids) ASSERT_LT(id, 65536);
    EXPECT_EQ(*tokenizer->Decode(*ids), NormalizeNfc(text)) << QuoteBytes(text);
  }
}

TEST(VocabFitTest, FullSizeIsIdentity) {
  POCKET_QWEN3_OR_FAIL(full);
  auto spec = TruncateVocab(full->FullSpec(), full->vocab_size());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->tokens, full->FullSpec().tokens);
  EXPECT_EQ(spec->merges, full->FullSpec().merges);
  EXPECT_EQ(spec->eos_id, full->spec().eos_id);
}

TEST(VocabFitTest, Errors) {
  POCKET_QWEN3_OR_FAIL(full);
  EXPECT_EQ(TruncateVocab(full->FullSpec(), 200).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(TruncateVocab(full->FullSpec(), 200000).status().code(), StatusCode::kInvalidArgument);
  // A vocabulary whose ids are not in merge-rank order is not closed under the cut.
  TokenizerSpec shuffled = full->FullSpec();
  std::swap(shuffled.tokens[300], shuffled.tokens[100000]);
  auto broken = TruncateVocab(shuffled, 65536);
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(broken.status().message().find("not closed under merges"), std::string::npos)
      << broken.status().message();
  TokenizerSpec llama2c;
  llama2c.kind = TokenizerKind::kLlama2c;
  EXPECT_EQ(TruncateVocab(llama2c, 10).status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace pocket
