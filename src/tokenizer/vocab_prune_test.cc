// Vocabulary pruning of the real Qwen3 tokenizer: merge closure, lossless round trips, identical
// tokens on texts whose tokens are kept, and the tokenizer.json it writes reading back the same.
#include "tokenizer/vocab_prune.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <unordered_set>

#include "tokenizer/byte_level.h"
#include "tokenizer/test_fixtures.h"

namespace pocket {
namespace {

// A pruned Qwen3 tokenizer: counts from the first 150 KB of each corpus file.
struct Fixture {
  std::shared_ptr<const Tokenizer> full, small;
  TokenizerSpec full_spec;
  PrunedVocab pruned;
  std::vector<std::string> held_out;  // the next 30 KB of each file
};

std::string Cut(const std::string& s, size_t begin, size_t n) {
  if (begin >= s.size()) return "";
  while (begin < s.size() && (static_cast<uint8_t>(s[begin]) & 0xC0) == 0x80) ++begin;
  size_t end = std::min(s.size(), begin + n);
  while (end < s.size() && (static_cast<uint8_t>(s[end]) & 0xC0) == 0x80) ++end;
  return s.substr(begin, end - begin);
}

const Fixture* Pruned(int32_t size) {
  static std::map<int32_t, std::unique_ptr<Fixture>>* cache =
      new std::map<int32_t, std::unique_ptr<Fixture>>();
  auto& slot = (*cache)[size];
  if (slot) return slot.get();
  auto f = std::make_unique<Fixture>();
  f->full = testing::Qwen3();
  if (!f->full) return nullptr;
  f->full_spec = f->full->FullSpec();
  std::vector<int64_t> counts(f->full_spec.tokens.size(), 0);
  for (const std::string& path : testing::CorpusFiles()) {
    const std::string text = testing::ReadFileOrEmpty(path);
    auto ids = f->full->Encode(Cut(text, 0, 150000));
    if (!ids.ok()) return nullptr;
    for (int32_t id : *ids) ++counts[static_cast<size_t>(id)];
    f->held_out.push_back(Cut(text, 150000, 30000));
  }
  auto pruned = PruneVocab(f->full_spec, counts, size);
  EXPECT_TRUE(pruned.ok()) << pruned.status().ToString();
  if (!pruned.ok()) return nullptr;
  f->pruned = std::move(*pruned);
  auto json = HfTokenizerJson(f->pruned.spec);
  EXPECT_TRUE(json.ok()) << json.status().ToString();
  if (!json.ok()) return nullptr;
  auto small = Tokenizer::FromHfJson(*json, "pruned tokenizer.json");
  EXPECT_TRUE(small.ok()) << small.status().ToString();
  if (!small.ok()) return nullptr;
  f->small = *small;
  slot = std::move(f);
  return slot.get();
}

TEST(VocabPruneTest, KeepsSpecialsBytesAndIsMergeClosed) {
  const Fixture* f = Pruned(20000);
  ASSERT_NE(f, nullptr);
  const TokenizerSpec& s = f->pruned.spec;
  EXPECT_EQ(s.tokens.size(), 20000u);
  std::unordered_set<std::string> kept(s.tokens.begin(), s.tokens.end());
  // Every added / special token stays, with its type.
  for (size_t id = 0; id < f->full_spec.tokens.size(); ++id) {
    const TokenType t = f->full_spec.types[id];
    if (t == TokenType::kControl || t == TokenType::kUserDefined) {
      const int32_t n = f->pruned.new_id[id];
      ASSERT_GE(n, 0) << "added token " << f->full_spec.tokens[id] << " dropped";
      EXPECT_EQ(s.types[static_cast<size_t>(n)], t);
    }
  }
  EXPECT_EQ(s.eos_id, f->pruned.new_id[static_cast<size_t>(f->full_spec.eos_id)]);
  for (int b = 0; b < 256; ++b) {
    EXPECT_TRUE(kept.contains(byte_level::EncodeBytes(std::string(1, static_cast<char>(b)))))
        << "byte " << b;
  }
  // Every kept merge's parts and result are kept; every kept longer token is built by one.
  std::unordered_set<std::string> built;
  for (const auto& [a, b] : s.merges) {
    EXPECT_TRUE(kept.contains(a) && kept.contains(b) && kept.contains(a + b)) << a << " " << b;
    built.insert(a + b);
  }
  for (size_t id = 0; id < s.tokens.size(); ++id) {
    if (s.types[id] != TokenType::kNormal) continue;
    std::string bytes;
    ASSERT_TRUE(byte_level::DecodeToken(s.tokens[id], &bytes));
    if (bytes.size() > 1) {
      EXPECT_TRUE(built.contains(s.tokens[id])) << s.tokens[id];
    }
  }
  // Ids are dense and follow the original order.
  for (size_t i = 1; i < f->pruned.old_id.size(); ++i) {
    ASSERT_LT(f->pruned.old_id[i - 1], f->pruned.old_id[i]);
  }
}

std::string RandomUtf8(std::mt19937& rng, int n_chars) {
  std::string s;
  std::uniform_int_distribution<int> kind(0, 9);
  for (int i = 0; i < n_chars; ++i) {
    uint32_t cp;
    switch (kind(rng)) {
      case 0:
        cp = std::uniform_int_distribution<uint32_t>(0x4e00, 0x9fff)(rng);  // CJK
        break;
      case 1:
        cp = std::uniform_int_distribution<uint32_t>(0x1f300, 0x1faff)(rng);  // emoji
        break;
      case 2:
        cp = std::uniform_int_distribution<uint32_t>(0x80, 0xd7ff)(rng);
        break;
      case 3:
        cp = std::uniform_int_distribution<uint32_t>(0xe000, 0x10ffff)(rng);
        break;
      case 4:
        cp = std::uniform_int_distribution<uint32_t>(0, 31)(rng);  // controls, newlines
        break;
      default:
        cp = std::uniform_int_distribution<uint32_t>(32, 126)(rng);
    }
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xc0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xe0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      s += static_cast<char>(0xf0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  return s;
}

// Decoding the pruned tokens gives back what the full vocabulary gives back (the text itself,
// up to NFC normalization, which both apply).
void ExpectRoundTrip(const Fixture& f, const std::string& text) {
  auto a = f.full->Encode(text);
  auto b = f.small->Encode(text);
  ASSERT_TRUE(a.ok() && b.ok());
  auto da = f.full->Decode(*a);
  auto db = f.small->Decode(*b);
  ASSERT_TRUE(da.ok() && db.ok());
  ASSERT_EQ(*db, *da) << "text: " << text;
}

TEST(VocabPruneTest, RoundTripIsLosslessOnRandomUtf8AndCorpus) {
  const Fixture* f = Pruned(20000);
  ASSERT_NE(f, nullptr);
  std::mt19937 rng(5);
  for (int i = 0; i < 300; ++i) ExpectRoundTrip(*f, RandomUtf8(rng, 1 + i % 40));
  for (const std::string& text : f->held_out) ExpectRoundTrip(*f, text);
}

TEST(VocabPruneTest, TextsWhoseTokensAreKeptEncodeTheSame) {
  const Fixture* f = Pruned(20000);
  ASSERT_NE(f, nullptr);
  int checked = 0, differs = 0;
  for (const std::string& text : f->held_out) {
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      end = end == std::string::npos ? text.size() : end + 1;
      const std::string line = text.substr(start, end - start);
      start = end;
      auto a = f->full->Encode(line);
      ASSERT_TRUE(a.ok());
      bool all_kept = true;
      std::vector<int32_t> mapped;
      for (int32_t id : *a) {
        const int32_t n = f->pruned.new_id[static_cast<size_t>(id)];
        all_kept = all_kept && n >= 0;
        mapped.push_back(n);
      }
      auto b = f->small->Encode(line);
      ASSERT_TRUE(b.ok());
      if (all_kept) {
        ++checked;
        EXPECT_EQ(*b, mapped) << "line: " << line;
      } else {
        ++differs;
        EXPECT_GE(b->size(), a->size());  // dropped tokens are spelled with others
      }
    }
  }
  std::printf(
      "[ prune ] %d held-out lines fully kept and encoded identically, %d use dropped "
      "tokens\n",
      checked, differs);
  EXPECT_GT(checked, 100);
  EXPECT_GT(differs, 0);
}

TEST(VocabPruneTest, TokenizerJsonKeepsTheBaseFieldsAndReadsBack) {
  const Fixture* f = Pruned(20000);
  ASSERT_NE(f, nullptr);
  const std::string base = testing::ReadFileOrEmpty(testing::Qwen3TokenizerJsonPath());
  ASSERT_FALSE(base.empty());
  auto json = HfTokenizerJson(f->pruned.spec, base);
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  auto back = Tokenizer::FromHfJson(*json, "pruned");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const TokenizerSpec s = (*back)->FullSpec();
  EXPECT_EQ(s.tokens, f->pruned.spec.tokens);
  EXPECT_EQ(s.merges, f->pruned.spec.merges);
}

TEST(VocabPruneTest, ErrorsAreClear) {
  POCKET_QWEN3_OR_FAIL(full);
  const TokenizerSpec spec = full->FullSpec();
  std::vector<int64_t> counts(spec.tokens.size(), 0);
  auto too_small = PruneVocab(spec, counts, 100);
  ASSERT_FALSE(too_small.ok());
  EXPECT_NE(too_small.status().message().find("must stay"), std::string::npos);
  auto wrong_counts = PruneVocab(spec, std::vector<int64_t>(5, 0), 30000);
  EXPECT_FALSE(wrong_counts.ok());
}

}  // namespace
}  // namespace pocket
