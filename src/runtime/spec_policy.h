// When speculation pays, and with how long a draft: the `--spec auto` policy.
//
// On a CPU a verification pass is not free (llama.cpp #10664, #10455): a pass over k + 1 rows
// costs c(k) decode steps, c(k) > 1 and growing with k once the pass stops being bound by the
// weight stream. With a per-token acceptance probability a, a draft of k tokens emits
// E(k) = 1 + a + ... + a^k = (1 - a^(k+1)) / (1 - a) tokens per pass, so speculation pays when
//
//   max over k of  E(k) / (c(k) + drafter time / step time)  >  1.
//
// The policy measures all of it as it goes: the plain step time and the verification times (c(k)
// as a line 1 + slope * k fitted to the passes seen), the drafter's time, and the acceptance
// (from verified drafts, and from drafts that were not verified but checked against the tokens
// plain decoding then produced: "shadow" drafts, cheap for a cheap drafter). Estimates are
// exponentially weighted, so a change of regime (a copying passage starts) is followed.
// Decisions depend on timings, never the output: verification is lossless whatever is chosen.
#pragma once

#include <cstdint>

namespace pocket {

class SpecPolicy {
 public:
  // draft_max: the longest draft; draft_min: shorter drafts are not verified; adaptive: choose
  // the length and whether to speculate (auto), else always draft_max. guarded (fixed length
  // only): no verification while the drafter's guesses are mostly wrong (running acceptance
  // below kGuardMinAcceptance); a shadow draft every kGuardShadowEvery plain steps goes on
  // measuring, so verification resumes when the drafter starts agreeing. The guard counts tokens,
  // never time, so a seed still reproduces a sampled draft model's text exactly.
  SpecPolicy(int32_t draft_max, int32_t draft_min, bool adaptive, bool guarded = false);
  static constexpr double kGuardMinAcceptance = 0.5;
  static constexpr int32_t kGuardShadowEvery = 16;

  // Whether the guard holds verification back (DraftLength 0 for a guarded fixed policy): while
  // it learns the acceptance (the first tokens), or because the drafter is mostly wrong.
  bool paused() const;
  // The latter only: the guard measured the drafter and found it mostly wrong.
  bool rarely_right() const;

  // The draft length to ask for now (0: decode plainly, no verification this step).
  int32_t DraftLength() const;
  // Whether to draft this plain step anyway, to check the guess against what is decoded.
  bool ShadowDraft() const;
  // How many tokens such a shadow draft asks for (at most cap): about twice the run of right
  // guesses the acceptance predicts, plus one, so a drafter that is never right costs one drafted
  // token per check and a good one is measured over whole drafts.
  int32_t ShadowLength(int32_t cap) const;

  // Measurements.
  void OnPlainStep(double us);
  void OnVerify(int32_t drafted, int32_t accepted, double us);
  // A draft tree of `drafted` rows whose accepted path has `accepted` tokens; rejected: the path
  // ended where the target chose a token no branch had (else the branch ran out).
  void OnVerify(int32_t drafted, int32_t accepted, bool rejected, double us);
  void OnDraft(int32_t asked, double us);
  // A shadow draft of `drafted` tokens whose first `matched` equalled the decoded tokens
  // (matched < drafted: the next one differed).
  void OnShadow(int32_t drafted, int32_t matched);

  // Estimates (for reports and tests).
  double acceptance() const { return accept_; }
  double verify_slope() const { return slope_; }
  double plain_step_us() const { return plain_us_; }
  // Expected tokens per step time of a draft of k tokens (1 for plain decoding).
  double Gain(int32_t k) const;

 private:
  void Observe(double successes, double failures);

  int32_t draft_max_;
  int32_t draft_min_;
  bool adaptive_;
  bool guarded_;
  // Exponentially weighted sums (decay per observation).
  double successes_ = 0.5, failures_ = 0.5;  // a weak prior of a = 0.5
  double observations_ = 0;                  // acceptance observations so far
  double accept_ = 0.5;
  double plain_us_ = 0;  // 0: not measured yet
  double slope_ = -1;    // c(k) = 1 + slope * k; < 0: not measured yet
  double draft_us_ = 0;  // drafter time per draft
  int32_t n_plain_ = 0, n_verify_ = 0, n_drafts_ = 0;
  int32_t since_shadow_ = 0;  // plain steps since the last draft
};

}  // namespace pocket
