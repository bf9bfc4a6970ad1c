// Constrained generation: with models that would otherwise produce garbage (random weights, the
// tiny stories260K), every constrained output is one of the choices, whatever the sampling.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>

#include "generate/constraint.h"
#include "model/synthetic.h"
#include "runtime/session.h"

namespace pocket {
namespace {

std::shared_ptr<const Model> Stories() {
  LoadOptions o;
  o.tokenizer_path = std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/tok512.bin";
  auto m = Model::Load(std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/stories260K.bin", o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

std::shared_ptr<const Model> RandomQwenTokenizerModel() {
  const std::string tok_path =
      std::string(POCKET_CACHE_DIR) + "/tokenizer-qwen3/package/models/tokenizer.json";
  auto tok = Tokenizer::FromHfJsonFile(tok_path);
  EXPECT_TRUE(tok.ok()) << tok.status().ToString() << " (run scripts/fetch_fixtures.sh)";
  if (!tok.ok()) return nullptr;
  const std::string dir = std::string(POCKET_BINARY_DIR) + "/constraint-test";
  std::filesystem::create_directories(dir);
  SyntheticOptions o;
  auto c = PresetConfig("tiny", Architecture::kQwen3);
  EXPECT_TRUE(c.ok());
  o.config = *c;
  o.seed = 3;
  o.weight_type = DType::kQ8_0;
  o.tokenizer = *tok;
  const std::string path = dir + "/tiny-qwen3-tok.gguf";
  EXPECT_TRUE(WriteSyntheticGguf(o, path).ok());
  auto m = Model::Load(path);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

// n generations with varied sampling; every output must be exactly one of the choices.
void ExpectAlwaysAChoice(std::shared_ptr<const Model> model, const std::string& prompt,
                         const std::vector<std::string>& choices, int n) {
  auto constraint = MakeChoiceConstraint(*model->tokenizer(), choices);
  ASSERT_TRUE(constraint.ok()) << constraint.status().ToString();
  auto s = Session::Create(model, SessionOptions{.n_ctx = 256, .n_batch = 64, .n_threads = 1});
  ASSERT_TRUE(s.ok());
  std::vector<int> seen(choices.size(), 0);
  for (int i = 0; i < n; ++i) {
    GenerateOptions g;
    g.constraint = constraint->get();
    g.max_tokens = 64;
    g.sampling.temperature = i % 4 == 0 ? 0.0f : 0.5f + 0.5f * static_cast<float>(i % 3);
    g.sampling.top_k = i % 2 ? 0 : 40;
    g.sampling.top_p = 1.0f;
    g.sampling.min_p = 0.0f;
    g.sampling.seed = static_cast<uint64_t>(i);
    auto r = (*s)->Generate(std::string_view(prompt), g);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto it = std::find(choices.begin(), choices.end(), r->text);
    ASSERT_NE(it, choices.end()) << "generation " << i << " produced " << r->text;
    ++seen[static_cast<size_t>(it - choices.begin())];
  }
  int distinct = 0;
  for (int k : seen) distinct += k > 0;
  std::printf("[ constraint ] %d generations, all valid, %d of %zu choices produced\n", n, distinct,
              choices.size());
  EXPECT_GT(distinct, 1) << "sampling should reach more than one choice";
}

TEST(ConstraintTest, ChoiceOutputsAreAlwaysAChoiceStories260K) {
  auto model = Stories();
  ASSERT_TRUE(model);
  ExpectAlwaysAChoice(model, "Once upon a time",
                      {" happy", " sad", " very angry", " a dragon ate the cake", " sa"}, 600);
}

TEST(ConstraintTest, ChoiceOutputsAreAlwaysAChoiceRandomWeights) {
  auto model = RandomQwenTokenizerModel();
  ASSERT_TRUE(model);
  ExpectAlwaysAChoice(model, "Label the review: great phone!",
                      {"positive", "negative", "neutral", "正面", "负面", "mixed 😐"}, 500);
}

// n generations per pattern; every output must match it in full, checked by std::regex (an
// independent implementation), for ASCII patterns. The patterns are bounded in length, so the
// token budget always suffices (an unbounded one may legitimately run out: that is an error).
void ExpectAlwaysMatches(std::shared_ptr<const Model> model, const std::string& prompt,
                         const std::vector<std::string>& patterns, int n) {
  auto s = Session::Create(model, SessionOptions{.n_ctx = 256, .n_batch = 64, .n_threads = 1});
  ASSERT_TRUE(s.ok());
  int total = 0;
  for (const std::string& pattern : patterns) {
    auto constraint = MakeRegexConstraint(*model->tokenizer(), pattern);
    ASSERT_TRUE(constraint.ok()) << pattern << ": " << constraint.status().ToString();
    const std::regex re(pattern, std::regex::ECMAScript);
    std::set<std::string> distinct;
    for (int i = 0; i < n; ++i) {
      GenerateOptions g;
      g.constraint = constraint->get();
      g.max_tokens = 96;
      g.sampling.temperature = i % 3 == 0 ? 0.0f : 1.0f;
      g.sampling.top_k = 0;
      g.sampling.top_p = 1.0f;
      g.sampling.min_p = 0.0f;
      g.sampling.seed = static_cast<uint64_t>(i);
      auto r = (*s)->Generate(std::string_view(prompt), g);
      ASSERT_TRUE(r.ok()) << pattern << ": " << r.status().ToString();
      ASSERT_TRUE(std::regex_match(r->text, re)) << pattern << " produced '" << r->text << "'";
      distinct.insert(r->text);
      ++total;
    }
    EXPECT_GT(distinct.size(), 1u) << pattern;
  }
  std::printf("[ constraint ] %d regex generations over %zu patterns, all matching\n", total,
              patterns.size());
}

const std::vector<std::string> kPatterns = {
    R"( [0-9]{4}-[0-9]{2}-[0-9]{2})",
    R"( (a|the) (big|small) (dog|cat)( and (a|the) (bird|fish))?\.)",
    R"(\+?[1-9][0-9]{0,2} [0-9]{3}-[0-9]{4})",
    R"([a-z]{2,8}@[a-z]{3,6}\.(com|org))",
    R"(-?(0|[1-9][0-9]{0,3})(\.[0-9]{1,2})?)",
    R"(\w{1,12}( \w{1,12}){0,3}[.!?])",
    R"([ -/:-~]{3,12}\n)",  // printable ASCII but digits (std::regex counts bytes)
};

TEST(ConstraintTest, RegexOutputsAlwaysMatchStories260K) {
  auto model = Stories();
  ASSERT_TRUE(model);
  ExpectAlwaysMatches(model, "Once upon a time", kPatterns, 40);
}

TEST(ConstraintTest, RegexOutputsAlwaysMatchRandomWeights) {
  auto model = RandomQwenTokenizerModel();
  ASSERT_TRUE(model);
  ExpectAlwaysMatches(model, "Extract:", kPatterns, 30);
  // Non-ASCII alternatives (std::regex works on bytes, so membership is checked directly).
  auto c = MakeRegexConstraint(*model->tokenizer(), "(好评|差评|中评)[!！]?( 😀)?");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto s = Session::Create(model, SessionOptions{.n_ctx = 128, .n_batch = 32, .n_threads = 1});
  ASSERT_TRUE(s.ok());
  for (int i = 0; i < 60; ++i) {
    GenerateOptions g;
    g.constraint = c->get();
    g.max_tokens = 32;
    g.sampling.temperature = 1.0f;
    g.sampling.top_k = 0;
    g.sampling.top_p = 1.0f;
    g.sampling.min_p = 0.0f;
    g.sampling.seed = static_cast<uint64_t>(i);
    auto r = (*s)->Generate(std::string_view("评价:"), g);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    bool ok = false;
    for (const char* head : {"好评", "差评", "中评"}) {
      for (const char* mark : {"", "!", "！"}) {
        for (const char* tail : {"", " 😀"}) {
          ok = ok || r->text == std::string(head) + mark + tail;
        }
      }
    }
    ASSERT_TRUE(ok) << "'" << r->text << "'";
  }
}

TEST(ConstraintTest, RegexErrorsNameTheProblem) {
  auto model = Stories();
  ASSERT_TRUE(model);
  for (const char* bad : {"(ab", "a)", "[a-", "a{2", "a{3,1}", "*a", "a*?", "(?=a)", "^a", "\\1",
                          "a{5000}", "[z-a]", "\\"}) {
    auto c = MakeRegexConstraint(*model->tokenizer(), bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().message().find("regex"), std::string::npos) << c.status().message();
  }
}

TEST(ConstraintTest, ABudgetThatCutsTheOutputIsAnError) {
  auto model = Stories();
  ASSERT_TRUE(model);
  auto constraint = MakeChoiceConstraint(*model->tokenizer(), {" a dragon ate the cake"});
  ASSERT_TRUE(constraint.ok());
  auto s = Session::Create(model);
  ASSERT_TRUE(s.ok());
  GenerateOptions g;
  g.constraint = constraint->get();
  g.max_tokens = 2;
  auto r = (*s)->Generate(std::string_view("Once upon a time"), g);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
  EXPECT_FALSE(MakeChoiceConstraint(*model->tokenizer(), {}).ok());
  EXPECT_FALSE(MakeChoiceConstraint(*model->tokenizer(), {"ok", ""}).ok());
  EXPECT_FALSE(MakeChoiceConstraint(*model->tokenizer(), {std::string("\xff\xfe")}).ok());
}

}  // namespace
}  // namespace pocket
