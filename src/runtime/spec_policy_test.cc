// The auto policy's decisions from measurements (no timing here: the measurements are given).
#include "runtime/spec_policy.h"

#include <gtest/gtest.h>

namespace pocket {
namespace {

TEST(SpecPolicy, FixedAlwaysDraftsTheMaximum) {
  SpecPolicy p(8, 1, /*adaptive=*/false);
  EXPECT_EQ(p.DraftLength(), 8);
  for (int i = 0; i < 20; ++i) p.OnVerify(8, 0, 300.0);
  EXPECT_EQ(p.DraftLength(), 8);
  EXPECT_FALSE(p.ShadowDraft());
}

TEST(SpecPolicy, GuardedPausesADrafterThatIsMostlyWrong) {
  // A draft model at a fixed length (pocket run --spec draft:FILE): issue 44 measured one that
  // never agreed taking decoding from 71 to 7.5 tokens/s when every draft was verified.
  SpecPolicy p(8, 1, /*adaptive=*/false, /*guarded=*/true);
  EXPECT_EQ(p.DraftLength(), 0);  // learning: shadow drafts checked first
  EXPECT_TRUE(p.ShadowDraft());
  EXPECT_FALSE(p.rarely_right());
  EXPECT_EQ(p.ShadowLength(8), 3);  // the prior: a = 0.5
  p.OnDraft(8, 30.0);
  for (int i = 0; i < 4; ++i) p.OnShadow(8, 0);
  EXPECT_EQ(p.ShadowLength(8), 1);  // a drafter that is never right: one token per check
  EXPECT_EQ(p.DraftLength(), 0);
  EXPECT_TRUE(p.rarely_right());
  // Checked every kGuardShadowEvery plain steps, whatever the timings.
  p.OnPlainStep(100.0);
  EXPECT_FALSE(p.ShadowDraft());
  for (int i = 2; i < SpecPolicy::kGuardShadowEvery - 1; ++i) p.OnPlainStep(1.0);
  EXPECT_FALSE(p.ShadowDraft());
  p.OnPlainStep(1e6);
  EXPECT_TRUE(p.ShadowDraft());
  // A drafter that agrees gets the fixed length back (not auto's tuned one).
  for (int i = 0; i < 10; ++i) p.OnShadow(8, 8);
  EXPECT_EQ(p.ShadowLength(8), 8);
  EXPECT_EQ(p.DraftLength(), 8);
  EXPECT_FALSE(p.rarely_right());
  // Mostly right, however slow (the target drafting for itself): still verified, the fixed length
  // is what the user asked for.
  for (int i = 0; i < 100; ++i) {
    p.OnDraft(8, 1e7);
    p.OnVerify(8, 6, 200.0);
  }
  EXPECT_EQ(p.DraftLength(), 8);
  // Mostly wrong: paused again.
  for (int i = 0; i < 100; ++i) p.OnVerify(8, 0, 200.0);
  EXPECT_EQ(p.DraftLength(), 0);
}

TEST(SpecPolicy, AutoTimesPlainStepsFirst) {
  SpecPolicy p(8, 1, true);
  EXPECT_EQ(p.DraftLength(), 0);
  EXPECT_TRUE(p.ShadowDraft());  // a draft's cost is unknown: check one against the output
  p.OnPlainStep(200.0);
  EXPECT_EQ(p.DraftLength(), 0);
  p.OnPlainStep(100.0);
  EXPECT_DOUBLE_EQ(p.plain_step_us(), 100.0);  // the cold first step is forgotten
}

TEST(SpecPolicy, HighAcceptanceDraftsLongLowAcceptanceNot) {
  SpecPolicy p(8, 1, true);
  p.OnPlainStep(100.0);
  p.OnPlainStep(100.0);
  EXPECT_EQ(p.DraftLength(), 0);  // no acceptance observed yet
  // Every draft right, verification cheap (c(8) = 1.4): the longest draft.
  for (int i = 0; i < 30; ++i) {
    p.OnDraft(8, 1.0);
    p.OnVerify(8, 8, 140.0);
  }
  EXPECT_GT(p.acceptance(), 0.9);
  EXPECT_EQ(p.DraftLength(), 8);
  // Then nothing is accepted: speculation stops.
  for (int i = 0; i < 60; ++i) p.OnVerify(8, 0, 140.0);
  EXPECT_LT(p.acceptance(), 0.1);
  EXPECT_EQ(p.DraftLength(), 0);
  // Shadow drafts that turn out right bring it back.
  for (int i = 0; i < 60; ++i) p.OnShadow(8, 8);
  EXPECT_GT(p.DraftLength(), 0);
}

TEST(SpecPolicy, MiddlingAcceptanceChoosesAShorterDraft) {
  SpecPolicy p(8, 1, true);
  p.OnPlainStep(100.0);
  p.OnPlainStep(100.0);
  // About 60% per token and c(k) = 1 + 0.15 k: E(k)/c(k) peaks at k = 2.
  for (int i = 0; i < 200; ++i) {
    p.OnVerify(4, 2, 160.0);  // 2 kept, then a miss: acceptance 2/3 per observation
    p.OnShadow(1, 0);         // and a miss: pulls it to about 0.5
  }
  const int32_t k = p.DraftLength();
  EXPECT_GT(k, 0);
  EXPECT_LT(k, 8);
  EXPECT_GT(p.Gain(k), 1.03);
  EXPECT_GE(p.Gain(k), p.Gain(8));
}

TEST(SpecPolicy, ACostlyDrafterIsShadowedRarely) {
  SpecPolicy p(8, 1, true);
  p.OnPlainStep(100.0);
  p.OnPlainStep(100.0);
  p.OnDraft(8, 50.0);  // half a decode step per draft: at most 2% of the time -> every 25 steps
  EXPECT_TRUE(p.ShadowDraft());  // until a few tokens were checked, at any cost
  p.OnShadow(8, 3);
  EXPECT_FALSE(p.ShadowDraft());
  for (int i = 0; i < 23; ++i) p.OnPlainStep(100.0);
  EXPECT_FALSE(p.ShadowDraft());
  p.OnPlainStep(100.0);
  EXPECT_TRUE(p.ShadowDraft());
  // Its shadow drafts decide: all wrong, no speculation; mostly right, speculation.
  for (int i = 0; i < 60; ++i) p.OnShadow(8, 0);
  EXPECT_EQ(p.DraftLength(), 0);
  for (int i = 0; i < 60; ++i) p.OnShadow(8, 8);
  EXPECT_GT(p.DraftLength(), 0);
}

TEST(SpecPolicy, DraftMinBoundsTheChoice) {
  SpecPolicy p(8, 4, true);
  p.OnPlainStep(100.0);
  p.OnPlainStep(100.0);
  for (int i = 0; i < 100; ++i) p.OnVerify(8, 8, 110.0);
  EXPECT_GE(p.DraftLength(), 4);
}

}  // namespace
}  // namespace pocket
