#include "tokenizer/spec_io.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "tokenizer/bpe_tables.h"

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

// A tokenizer section in memory at an address of the given alignment.
struct PlacedSection {
  std::vector<uint64_t> storage;
  std::string_view bytes;
  PlacedSection(const std::string& section, size_t misalign) {
    storage.assign(section.size() / 8 + 2, 0);
    char* at = reinterpret_cast<char*>(storage.data()) + misalign;
    std::memcpy(at, section.data(), section.size());
    bytes = std::string_view(at, section.size());
  }
};

TEST(SpecIoTest, Qwen3TablesSectionIsUsedInPlaceAndEncodesIdentically) {
  POCKET_QWEN3_OR_FAIL(tok);
  auto section = SerializeTokenizer(*tok);
  ASSERT_TRUE(section.ok()) << section.status().ToString();
  // Aligned: used in place (the tokenizer's tables are the section's bytes); misaligned: copied.
  for (size_t misalign : {0, 1}) {
    PlacedSection placed(*section, misalign);
    auto back = LoadTokenizerSection(placed.bytes, "test", "{{ x }}", nullptr);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ((*back)->vocab_size(), tok->vocab_size());
    EXPECT_EQ((*back)->spec().chat_template, "{{ x }}");
    EXPECT_EQ((*back)->spec().eos_id, tok->spec().eos_id);
    const TokenizerSpec full = (*back)->FullSpec(), expected = tok->FullSpec();
    EXPECT_EQ(full.tokens, expected.tokens);
    EXPECT_EQ(full.types, expected.types);
    EXPECT_EQ(full.merges, expected.merges);
    const std::string_view first = (*back)->TokenBytes(0);
    const bool in_place = first.data() >= placed.bytes.data() &&
                          first.data() < placed.bytes.data() + placed.bytes.size();
    EXPECT_EQ(in_place, misalign == 0);
    for (const char* text : {"Hello world", "中文 <|im_end|> 123", "  tabs\t and 'll <think>"}) {
      EXPECT_EQ(*(*back)->Encode(text), *tok->Encode(text)) << text;
    }
    for (int32_t id : {0, 151643, 151667}) EXPECT_EQ((*back)->IsSpecial(id), tok->IsSpecial(id));
  }
  // The spec of a version 2 section, for tools, is the full one.
  auto spec = DeserializeTokenizerSpec(*section, "test");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->tokens, tok->FullSpec().tokens);
}

// Every single-word corruption of a small table image is either refused with a message that
// names the tables, or gives a tokenizer that stays inside the vocabulary: no crash, no hang
// (run under the sanitizers in the debug preset).
TEST(SpecIoTest, CorruptTablesAreErrorsOrHarmless) {
  TokenizerSpec spec;
  for (int b = 0; b < 256; ++b) {
    spec.tokens.push_back(byte_level::EncodeBytes(std::string(1, static_cast<char>(b))));
  }
  for (const char* t : {"ab", "abc", " a", " ab"})
    spec.tokens.push_back(byte_level::EncodeBytes(t));
  spec.tokens.push_back("<|end|>");
  spec.types.assign(spec.tokens.size(), TokenType::kNormal);
  spec.types.back() = TokenType::kControl;
  spec.merges = {{"a", "b"}, {"ab", "c"}, {"Ġ", "a"}, {"Ġa", "b"}};
  spec.eos_id = static_cast<int32_t>(spec.tokens.size() - 1);
  auto tok = Tokenizer::FromSpec(spec);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto section = SerializeTokenizer(**tok);
  ASSERT_TRUE(section.ok());
  const std::string text = "abc ab a<|end|>b c";
  const std::vector<int32_t> expected = *(*tok)->Encode(text);
  {
    PlacedSection placed(*section, 0);
    auto back = LoadTokenizerSection(placed.bytes, "t", "", nullptr);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(*(*back)->Encode(text), expected);
  }
  for (size_t cut = 0; cut < section->size(); cut += 3) {
    PlacedSection placed(section->substr(0, cut), 0);
    EXPECT_FALSE(LoadTokenizerSection(placed.bytes, "t", "", nullptr).ok()) << cut;
  }
  std::mt19937 rng(7);
  size_t refused = 0, loaded = 0;
  for (size_t word = 0; word < section->size() / 4; ++word) {
    for (uint32_t value : {0u, 1u, 0xFFFFFFFFu, 0x7FFFFFFFu, static_cast<uint32_t>(rng())}) {
      std::string bad = *section;
      std::memcpy(bad.data() + 4 * word, &value, 4);
      PlacedSection placed(bad, 0);
      auto back = LoadTokenizerSection(placed.bytes, "t", "", nullptr);
      if (!back.ok()) {
        ++refused;
        EXPECT_NE(back.status().message().find("t (tokenizer"), std::string::npos)
            << back.status().ToString();
        continue;
      }
      ++loaded;
      auto ids = (*back)->Encode(text);
      ASSERT_TRUE(ids.ok());
      for (int32_t id : *ids) {
        ASSERT_GE(id, 0);
        ASSERT_LT(id, (*back)->vocab_size());
      }
      (void)(*back)->FullSpec();
    }
  }
  EXPECT_GT(refused, 0u);
  EXPECT_GT(loaded, 0u);
  // A package rewritten in place while mapped: the tables change after they were checked. The
  // lookups must still stay inside the image and the vocabulary.
  for (size_t word = 0; word < section->size() / 4; ++word) {
    for (uint32_t value : {0xFFFFFFFFu, 0x7FFFFFFFu, 12345u}) {
      PlacedSection placed(*section, 0);
      auto back = LoadTokenizerSection(placed.bytes, "t", "", nullptr);
      ASSERT_TRUE(back.ok());
      std::memcpy(const_cast<char*>(placed.bytes.data()) + 4 * word, &value, 4);
      auto ids = (*back)->Encode(text);
      ASSERT_TRUE(ids.ok());
      for (int32_t id : *ids) {
        ASSERT_GE(id, 0);
        ASSERT_LT(id, (*back)->vocab_size());
        (void)(*back)->TokenBytes(id);
      }
      (void)(*back)->FullSpec();
    }
  }
}

// Added tokens are matched in raw text before it is split into characters: one that is not valid
// UTF-8 (or empty) could cut a character in two, so such a vocabulary is refused.
TEST(SpecIoTest, AddedTokensMustBeValidUtf8) {
  for (const std::string& added : {std::string("\xE4"), std::string()}) {
    TokenizerSpec spec;
    for (int b = 0; b < 256; ++b)
      spec.tokens.push_back(byte_level::EncodeBytes(std::string(1, static_cast<char>(b))));
    spec.tokens.push_back(added);
    spec.types.assign(spec.tokens.size(), TokenType::kNormal);
    spec.types.back() = TokenType::kControl;
    auto tok = Tokenizer::FromSpec(spec);
    ASSERT_FALSE(tok.ok());
    EXPECT_NE(tok.status().message().find("added token 256"), std::string::npos)
        << tok.status().ToString();
  }
}

}  // namespace
}  // namespace pocket
