// Candidate scoring: every candidate in one forward pass with a tree attention mask gives the
// same log-probabilities as scoring each candidate on its own after the prompt.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "kernels/select.h"
#include "model/synthetic.h"
#include "runtime/session.h"

namespace pocket {
namespace {

std::shared_ptr<const Model> SyntheticModel(DType type, const char* name,
                                            const KernelTable* kernels = nullptr) {
  const std::string dir = std::string(POCKET_BINARY_DIR) + "/score-test";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + name;
  auto c = PresetConfig("tiny", Architecture::kQwen3);
  EXPECT_TRUE(c.ok());
  SyntheticOptions o;
  o.config = *c;
  o.seed = 21;
  o.weight_type = type;
  const Status s = WriteSyntheticGguf(o, path);
  EXPECT_TRUE(s.ok()) << s.ToString();
  LoadOptions lo;
  lo.kernels = kernels;
  auto m = Model::Load(path, lo);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

std::vector<std::vector<int32_t>> RandomCandidates(std::mt19937& rng, int n, int32_t vocab) {
  std::uniform_int_distribution<int32_t> id(0, vocab - 1), len(1, 7);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(n));
  for (auto& c : out) {
    c.resize(static_cast<size_t>(len(rng)));
    for (int32_t& t : c) t = id(rng);
  }
  // Some share a prefix with another (a tree, as real label sets do), one repeats another.
  if (n >= 3) {
    out[1] = out[0];
    out[1].push_back(id(rng));
    out[2] = out[0];
  }
  return out;
}

void ExpectSameScores(Session& s, std::span<const int32_t> prompt,
                      const std::vector<std::vector<int32_t>>& candidates, double tolerance) {
  auto one = s.Score(prompt, candidates);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  auto sep = s.ScoreSeparately(prompt, candidates);
  ASSERT_TRUE(sep.ok()) << sep.status().ToString();
  ASSERT_EQ(one->size(), candidates.size());
  std::vector<const CandidateScore*> by_index(candidates.size());
  for (const CandidateScore& c : *sep) by_index[static_cast<size_t>(c.index)] = &c;
  double worst = 0.0, total_p = 0.0;
  for (const CandidateScore& a : *one) {
    const CandidateScore& b = *by_index[static_cast<size_t>(a.index)];
    ASSERT_EQ(a.tokens, candidates[static_cast<size_t>(a.index)]);
    ASSERT_EQ(a.token_logprobs.size(), b.token_logprobs.size());
    for (size_t j = 0; j < a.token_logprobs.size(); ++j) {
      worst = std::max(worst, std::fabs(a.token_logprobs[j] - b.token_logprobs[j]));
    }
    total_p += a.probability;
  }
  for (size_t i = 1; i < one->size(); ++i) {
    EXPECT_GE((*one)[i - 1].logprob, (*one)[i].logprob) << "ranked best first";
  }
  EXPECT_NEAR(total_p, 1.0, 1e-9);
  EXPECT_LE(worst, tolerance) << candidates.size() << " candidates";
}

TEST(ScoreTest, OnePassEqualsSeparatePassesF32) {
  auto model = SyntheticModel(DType::kF32, "score-f32.gguf");
  ASSERT_TRUE(model);
  SessionOptions so;
  so.n_ctx = 1024;
  so.n_batch = 512;
  so.n_threads = 2;
  auto s = Session::Create(model, so);
  ASSERT_TRUE(s.ok());
  std::mt19937 rng(4);
  const int32_t vocab = model->config().vocab_size;
  for (int n : {2, 3, 5, 16, 33, 64}) {
    std::vector<int32_t> prompt(static_cast<size_t>(10 + n % 23));
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    ExpectSameScores(**s, prompt, RandomCandidates(rng, n, vocab), 1e-4);
  }
}

TEST(ScoreTest, OnePassMatchesOnTheIntegerPathOfEveryTable) {
  // Q4_0 runs the packed W4A8 kernels. A table with a tile engine quantizes the activations of a
  // large batch per block rather than per group (a different rounding, issue 3), so each table
  // is compared with itself in the exact form: the tables without prefill_gemm.
  for (const KernelTable* table : AvailableKernelTables()) {
    if (table->prefill_gemm != nullptr) continue;
    SCOPED_TRACE(std::string(table->name));
    auto model = SyntheticModel(DType::kQ4_0, "score-q4_0.gguf", table);
    ASSERT_TRUE(model);
    auto s = Session::Create(model, SessionOptions{.n_ctx = 512, .n_batch = 256, .n_threads = 2});
    ASSERT_TRUE(s.ok());
    std::mt19937 rng(9);
    std::vector<int32_t> prompt(40);
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % 1024);
    ExpectSameScores(**s, prompt, RandomCandidates(rng, 16, model->config().vocab_size), 1e-4);
  }
}

TEST(ScoreTest, OnTheTileFormScoresStayCloseToSeparatePasses) {
  // On a tile table: the kernel form is chosen per candidate (issue 12), so candidates of a few
  // tokens take the per-group form in the one-pass batch too; the tolerance is still that of the
  // tile form (block-wise activation rounding). A wrong mask would move them by nats.
  // Every tile table this CPU runs (avx512 and amx), whatever POCKET_KERNELS makes the default.
  int32_t tested = 0;
  for (const KernelTable* table : AvailableKernelTables()) {
    if (table->prefill_gemm == nullptr) continue;
    SCOPED_TRACE(std::string(table->name));
    auto model = SyntheticModel(DType::kQ4_0, "score-q4_0.gguf", table);
    ASSERT_TRUE(model);
    auto s = Session::Create(model, SessionOptions{.n_ctx = 512, .n_batch = 256, .n_threads = 2});
    ASSERT_TRUE(s.ok());
    std::mt19937 rng(13);
    std::vector<int32_t> prompt(40);
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % 1024);
    ExpectSameScores(**s, prompt, RandomCandidates(rng, 24, model->config().vocab_size), 0.25);
    ++tested;
  }
  if (tested == 0) GTEST_SKIP() << "no table with a tile engine on this CPU";
}

TEST(ScoreTest, HistoryStaysThePromptAndErrorsAreClear) {
  auto model = SyntheticModel(DType::kF32, "score-f32.gguf");
  ASSERT_TRUE(model);
  auto s = Session::Create(model, SessionOptions{.n_ctx = 64, .n_batch = 32, .n_threads = 1});
  ASSERT_TRUE(s.ok());
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  ASSERT_TRUE((*s)->Score(prompt, {{6, 7}, {8}}).ok());
  EXPECT_EQ(std::vector<int32_t>((*s)->history().begin(), (*s)->history().end()), prompt);
  EXPECT_FALSE((*s)->Score(prompt, {}).ok());
  EXPECT_FALSE((*s)->Score(prompt, {{}}).ok());
  EXPECT_FALSE((*s)->Score(prompt, {{1, 5000}}).ok());
  EXPECT_FALSE((*s)->Score({}, {{1}}).ok());
  auto too_many = (*s)->Score(prompt, std::vector<std::vector<int32_t>>(20, {1, 2, 3}));
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("prefill chunk"), std::string::npos);
}

}  // namespace
}  // namespace pocket
