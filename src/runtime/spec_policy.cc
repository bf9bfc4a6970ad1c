#include "runtime/spec_policy.h"

#include <algorithm>
#include <cmath>

namespace pocket {

namespace {
// Weight of the past per observation (a token's acceptance; the timings: per pass or step).
constexpr double kDecay = 0.95;
// Before a verification pass was timed: c(k) = 1 + 0.1 k, about what a bandwidth-bound pass of a
// few rows costs on a phone-class CPU (docs/benchmarks.md has measured curves).
constexpr double kPriorSlope = 0.1;
// Speculate only for an expected gain of at least this much (measurements are noisy).
constexpr double kMinGain = 1.03;
// Shadow drafts may cost at most this share of the plain decode time.
constexpr double kShadowShare = 0.02;
// Acceptance observations (drafted tokens checked, by verification or against plain decoding)
// before the first verification: at 0% acceptance no pass is wasted on finding that out.
constexpr double kMinObservations = 4;
}  // namespace

SpecPolicy::SpecPolicy(int32_t draft_max, int32_t draft_min, bool adaptive, bool guarded)
    : draft_max_(std::max(draft_max, 1)),
      draft_min_(std::clamp(draft_min, 1, std::max(draft_max, 1))),
      adaptive_(adaptive),
      guarded_(guarded && !adaptive) {}

bool SpecPolicy::paused() const {
  if (!guarded_) return false;
  // Learn first, as auto does (shadow drafts): at 0% acceptance no pass is wasted finding out.
  return observations_ < kMinObservations || accept_ < kGuardMinAcceptance;
}

bool SpecPolicy::rarely_right() const {
  return guarded_ && observations_ >= kMinObservations && accept_ < kGuardMinAcceptance;
}

double SpecPolicy::Gain(int32_t k) const {
  if (k <= 0) return 1.0;
  const double a = std::clamp(accept_, 0.0, 0.999);
  const double expected = (1.0 - std::pow(a, k + 1)) / (1.0 - a);
  const double slope = slope_ >= 0 ? slope_ : kPriorSlope;
  const double draft_steps = plain_us_ > 0 ? draft_us_ / plain_us_ : 0.0;
  return expected / (1.0 + slope * k + draft_steps);
}

int32_t SpecPolicy::DraftLength() const {
  if (!adaptive_) return paused() ? 0 : draft_max_;
  // The plain step is the unit everything is measured in: time two of them first (the first
  // after the prompt runs on cold caches).
  if (n_plain_ < 2 || observations_ < kMinObservations) return 0;
  int32_t best_k = 0;
  double best = kMinGain;
  for (int32_t k = draft_min_; k <= draft_max_; ++k) {
    const double g = Gain(k);
    if (g > best) {
      best = g;
      best_k = k;
    }
  }
  return best_k;
}

bool SpecPolicy::ShadowDraft() const {
  if (guarded_) return observations_ < kMinObservations || since_shadow_ + 1 >= kGuardShadowEvery;
  if (!adaptive_) return false;
  // The first observations at any cost: without them the policy cannot decide.
  if (n_drafts_ == 0 || plain_us_ <= 0 || observations_ < kMinObservations) return true;
  const double every = draft_us_ / (kShadowShare * plain_us_);
  return static_cast<double>(since_shadow_ + 1) >= every;
}

int32_t SpecPolicy::ShadowLength(int32_t cap) const {
  const double a = std::clamp(accept_, 0.0, 0.999);
  const double n = 1.0 + std::round(2.0 * a / (1.0 - a));
  return std::clamp(static_cast<int32_t>(std::min(n, 1e6)), 1, std::max(cap, 1));
}

void SpecPolicy::Observe(double successes, double failures) {
  // The past fades per token observed (a pass of 8 accepted tokens is 8 observations), so the
  // estimate follows the last 20 or so tokens however they were grouped into passes.
  observations_ += successes + failures;
  const double fade = std::pow(kDecay, successes + failures);
  successes_ = successes_ * fade + successes;
  failures_ = failures_ * fade + failures;
  accept_ = successes_ / (successes_ + failures_);
}

void SpecPolicy::OnPlainStep(double us) {
  ++n_plain_;
  ++since_shadow_;
  // The first step is kept only until a second one replaces it.
  plain_us_ = n_plain_ <= 2 ? us : plain_us_ * kDecay + us * (1.0 - kDecay);
}

void SpecPolicy::OnVerify(int32_t drafted, int32_t accepted, double us) {
  OnVerify(drafted, accepted, accepted < drafted, us);
}

void SpecPolicy::OnVerify(int32_t drafted, int32_t accepted, bool rejected, double us) {
  ++n_verify_;
  Observe(accepted, rejected ? 1.0 : 0.0);
  if (plain_us_ > 0 && drafted > 0) {
    const double slope = std::max(0.0, (us / plain_us_ - 1.0) / drafted);
    slope_ = slope_ < 0 ? slope : slope_ * kDecay + slope * (1.0 - kDecay);
  }
}

void SpecPolicy::OnDraft(int32_t /*asked*/, double us) {
  ++n_drafts_;
  since_shadow_ = 0;
  draft_us_ = n_drafts_ == 1 ? us : draft_us_ * kDecay + us * (1.0 - kDecay);
}

void SpecPolicy::OnShadow(int32_t drafted, int32_t matched) {
  if (drafted <= 0) return;
  Observe(matched, matched < drafted ? 1.0 : 0.0);
}

}  // namespace pocket
