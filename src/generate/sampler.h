// The sampler chain: (constraint mask, later) -> repetition / presence / frequency penalties ->
// temperature -> top-k -> top-p -> min-p -> pick. Temperature 0 is greedy (argmax after the
// penalties). Buffers are allocated once for the vocabulary; sampling a token allocates nothing.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "base/rng.h"
#include "base/status.h"

namespace pocket {

struct SamplerParams {
  float temperature = 0.8f;         // 0: greedy
  int32_t top_k = 40;               // 0: off
  float top_p = 0.95f;              // 1: off
  float min_p = 0.05f;              // 0: off; drop tokens below min_p * p(best)
  float repetition_penalty = 1.0f;  // 1: off; as in llama.cpp (divide positive logits)
  float presence_penalty = 0.0f;    // subtracted once from every token seen
  float frequency_penalty = 0.0f;   // subtracted per occurrence
  int32_t penalty_last_n = 64;      // window of recent tokens the penalties look at
  uint64_t seed = 0;                // same seed, same output
  // Added to the logits of these token ids before the penalties and the chain (OpenAI's
  // logit_bias: -100 bans a token in practice, +100 all but forces it). Ids outside the
  // vocabulary are ignored.
  std::vector<std::pair<int32_t, float>> logit_bias;

  Status Validate() const;
};

class Sampler {
 public:
  Sampler(const SamplerParams& params, int32_t vocab_size);

  // Picks the next token from logits [vocab_size] (modified in place by the penalties).
  // `recent`: the tokens generated and prompted so far (the tail is used for penalties).
  int32_t Sample(float* logits, std::span<const int32_t> recent);
  // The same on logits that stay as they are (a session's cached logits: a later call with the
  // same context reuses them): the penalties, when any apply, work on a copy.
  int32_t Sample(std::span<const float> logits, std::span<const int32_t> recent);

  // Speculative decoding with a sampled draft (a token `draft` drawn from the distribution q,
  // [vocab_size] probabilities): returns `draft` with probability min(1, p(draft) / q(draft)),
  // where p is the distribution this chain samples from (penalties, temperature, top-k, top-p,
  // min-p; one-hot at the argmax when greedy), and otherwise a token drawn from
  // norm(max(0, p - q)). The token returned is thereby distributed exactly as p (Leviathan et al.,
  // 2023). `logits` as for the span form of Sample (left as they are).
  int32_t SampleDraft(std::span<const float> logits, std::span<const int32_t> recent, int32_t draft,
                      std::span<const float> q);
  // The same on logits the chain may modify (a masked copy).
  int32_t SampleDraft(float* logits, std::span<const int32_t> recent, int32_t draft,
                      std::span<const float> q);

  const SamplerParams& params() const { return params_; }

 private:
  struct Candidate {
    int32_t id;
    float logit;
  };
  bool HasPenalties() const;
  // Whether the logits are changed before the chain (penalties that apply, a logit bias).
  bool Adjusts(std::span<const int32_t> recent) const;
  void ApplyPenalties(float* logits, std::span<const int32_t> recent);
  int32_t Pick(const float* logits);  // the chain after the penalties
  int32_t Argmax(const float* logits) const;
  // The chain after the penalties up to the pick (temperature > 0): the surviving candidates in
  // candidates_[0, n) with unnormalized probabilities probs_[0, n) (best first when top-p needs
  // the order; in id order without top-p: the vocabulary is then not sorted, only the top k when
  // there is a top-k); returns n, their sum in *total.
  size_t Survivors(const float* logits, double* total);
  int32_t PickDraft(const float* logits, int32_t draft, std::span<const float> q);

  SamplerParams params_;
  int32_t vocab_size_;
  Rng rng_;
  std::vector<Candidate> candidates_;  // vocab_size entries, reused
  std::vector<int32_t> counts_;        // vocab_size, zero between calls
  std::vector<float> probs_;
  std::vector<float> work_;  // the penalized copy (grown on first use)
};

}  // namespace pocket
