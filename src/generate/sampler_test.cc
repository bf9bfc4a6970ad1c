#include "generate/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

namespace pocket {
namespace {

TEST(SamplerTest, GreedyPicksArgmaxAndFirstOnTies) {
  SamplerParams p;
  p.temperature = 0.0f;
  Sampler s(p, 5);
  std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f, 2.0f};
  EXPECT_EQ(s.Sample(logits.data(), {}), 1);
}

TEST(SamplerTest, SameSeedSameOutput) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 99;
  std::vector<int32_t> a, b, c;
  Sampler sa(p, 100), sb(p, 100);
  p.seed = 100;
  Sampler sc(p, 100);
  for (int i = 0; i < 200; ++i) {
    std::vector<float> logits(100, 0.0f);
    std::vector<float> l2 = logits, l3 = logits;
    a.push_back(sa.Sample(logits.data(), {}));
    b.push_back(sb.Sample(l2.data(), {}));
    c.push_back(sc.Sample(l3.data(), {}));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(SamplerTest, TopKRestrictsAndFrequenciesFollowSoftmax) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 7;
  Sampler s(p, 4);
  std::map<int32_t, int> hist;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    std::vector<float> logits = {0.0f, std::log(3.0f), -5.0f, -9.0f};
    ++hist[s.Sample(logits.data(), {})];
  }
  EXPECT_EQ(hist.count(2), 0u);
  EXPECT_EQ(hist.count(3), 0u);
  EXPECT_NEAR(hist[1] / double(n), 0.75, 0.02);  // 3:1 odds
}

TEST(SamplerTest, TopPAndMinP) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 0.5f;  // the best token alone has p > 0.5
  p.min_p = 0.0f;
  Sampler s(p, 3);
  for (int i = 0; i < 100; ++i) {
    std::vector<float> logits = {2.0f, 0.0f, 0.0f};
    EXPECT_EQ(s.Sample(logits.data(), {}), 0);
  }
  p.top_p = 1.0f;
  p.min_p = 0.5f;  // token 1 has p(1)/p(0) = e^-1 < 0.5: dropped
  Sampler m(p, 3);
  for (int i = 0; i < 100; ++i) {
    std::vector<float> logits = {1.0f, 0.0f, -3.0f};
    EXPECT_EQ(m.Sample(logits.data(), {}), 0);
  }
}

TEST(SamplerTest, Penalties) {
  SamplerParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 2.0f;
  Sampler s(p, 3);
  std::vector<float> logits = {1.5f, 1.0f, -1.0f};
  const std::vector<int32_t> recent = {0, 0, 2};
  EXPECT_EQ(s.Sample(logits.data(), recent), 1);  // 1.5 / 2 = 0.75 < 1.0
  EXPECT_FLOAT_EQ(logits[0], 0.75f);
  EXPECT_FLOAT_EQ(logits[2], -2.0f);
  SamplerParams f;
  f.temperature = 0.0f;
  f.frequency_penalty = 0.5f;
  f.presence_penalty = 0.25f;
  Sampler t(f, 3);
  std::vector<float> l2 = {1.0f, 1.0f, 0.0f};
  t.Sample(l2.data(), recent);
  EXPECT_FLOAT_EQ(l2[0], 1.0f - 0.25f - 2 * 0.5f);
  EXPECT_FLOAT_EQ(l2[1], 1.0f);
  EXPECT_FLOAT_EQ(l2[2], 0.0f - 0.25f - 0.5f);
}

TEST(SamplerTest, LogitBiasOnACopyAndInPlace) {
  SamplerParams p;
  p.temperature = 0.0f;
  p.logit_bias = {{2, 5.0f}, {0, -100.0f}, {7, 50.0f}};  // 7: outside the vocabulary, ignored
  Sampler s(p, 3);
  const std::vector<float> logits = {3.0f, 1.0f, -1.0f};
  // No recent tokens (no penalties apply): the bias still does, on a copy.
  EXPECT_EQ(s.Sample(std::span<const float>(logits), {}), 2);  // -1 + 5 = 4 > 3 - 100, 1
  EXPECT_EQ(logits[2], -1.0f);
  std::vector<float> in_place = logits;
  EXPECT_EQ(s.Sample(in_place.data(), {}), 2);
  EXPECT_FLOAT_EQ(in_place[0], -97.0f);
  // Sampled at temperature 1: +100 all but forces the token, every seed.
  SamplerParams q;
  q.temperature = 1.0f;
  q.top_k = 0;
  q.top_p = 1.0f;
  q.min_p = 0.0f;
  q.logit_bias = {{1, 100.0f}};
  for (uint64_t seed = 0; seed < 20; ++seed) {
    q.seed = seed;
    Sampler t(q, 3);
    EXPECT_EQ(t.Sample(std::span<const float>(logits), {}), 1);
  }
  SamplerParams bad;
  bad.logit_bias = {{1, NAN}};
  EXPECT_FALSE(bad.Validate().ok());
}

TEST(SamplerTest, ValidateNamesTheParameter) {
  SamplerParams p;
  p.top_p = 0.0f;
  EXPECT_NE(p.Validate().message().find("top-p"), std::string::npos);
  p = SamplerParams();
  p.temperature = -1.0f;
  EXPECT_NE(p.Validate().message().find("temperature"), std::string::npos);
}

}  // namespace
}  // namespace pocket
