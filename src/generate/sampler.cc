#include "generate/sampler.h"

#include <algorithm>
#include <cmath>

namespace pocket {

Status SamplerParams::Validate() const {
  if (!(temperature >= 0.0f) || temperature > 100.0f) {
    return InvalidArgumentError("temperature must be in [0, 100], got ", temperature);
  }
  if (top_k < 0) return InvalidArgumentError("top-k must be >= 0, got ", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f))
    return InvalidArgumentError("top-p must be in (0, 1], got ", top_p);
  if (!(min_p >= 0.0f && min_p < 1.0f))
    return InvalidArgumentError("min-p must be in [0, 1), got ", min_p);
  if (!(repetition_penalty > 0.0f)) {
    return InvalidArgumentError("repetition penalty must be > 0, got ", repetition_penalty);
  }
  if (!std::isfinite(presence_penalty) || !std::isfinite(frequency_penalty)) {
    return InvalidArgumentError("presence and frequency penalties must be finite");
  }
  for (const auto& [id, bias] : logit_bias) {
    if (!std::isfinite(bias)) {
      return InvalidArgumentError("the logit bias of token ", id, " must be finite");
    }
  }
  if (penalty_last_n < 0) return InvalidArgumentError("penalty window must be >= 0");
  return Status::Ok();
}

Sampler::Sampler(const SamplerParams& params, int32_t vocab_size)
    : params_(params),
      vocab_size_(vocab_size),
      rng_(params.seed),
      candidates_(static_cast<size_t>(vocab_size)),
      counts_(static_cast<size_t>(vocab_size), 0),
      probs_(static_cast<size_t>(vocab_size)) {
  if (HasPenalties() || !params_.logit_bias.empty()) {
    work_.reserve(static_cast<size_t>(vocab_size));
  }
}

bool Sampler::HasPenalties() const {
  return params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
         params_.frequency_penalty != 0.0f;
}

bool Sampler::Adjusts(std::span<const int32_t> recent) const {
  return !params_.logit_bias.empty() ||
         (HasPenalties() && params_.penalty_last_n != 0 && !recent.empty());
}

void Sampler::ApplyPenalties(float* logits, std::span<const int32_t> recent) {
  for (const auto& [id, bias] : params_.logit_bias) {
    if (id >= 0 && id < vocab_size_) logits[id] += bias;
  }
  if (!HasPenalties() || params_.penalty_last_n == 0 || recent.empty()) return;
  const size_t n = std::min(recent.size(), static_cast<size_t>(params_.penalty_last_n));
  const std::span<const int32_t> window = recent.subspan(recent.size() - n);
  for (int32_t id : window) {
    if (id >= 0 && id < vocab_size_) ++counts_[static_cast<size_t>(id)];
  }
  for (int32_t id : window) {
    if (id < 0 || id >= vocab_size_) continue;
    int32_t& count = counts_[static_cast<size_t>(id)];
    if (count == 0) continue;  // already applied for this id
    float& l = logits[id];
    l = l > 0.0f ? l / params_.repetition_penalty : l * params_.repetition_penalty;
    l -= params_.presence_penalty + params_.frequency_penalty * static_cast<float>(count);
    count = 0;
  }
}

int32_t Sampler::Sample(float* logits, std::span<const int32_t> recent) {
  ApplyPenalties(logits, recent);
  return Pick(logits);
}

int32_t Sampler::Sample(std::span<const float> logits, std::span<const int32_t> recent) {
  if (!Adjusts(recent)) return Pick(logits.data());
  work_.assign(logits.begin(), logits.begin() + vocab_size_);
  ApplyPenalties(work_.data(), recent);
  return Pick(work_.data());
}

int32_t Sampler::Argmax(const float* logits) const {
  int32_t best = 0;
  for (int32_t i = 1; i < vocab_size_; ++i) {
    if (logits[i] > logits[best]) best = i;  // first maximum wins: deterministic ties
  }
  return best;
}

size_t Sampler::Survivors(const float* logits, double* total) {
  size_t n = static_cast<size_t>(vocab_size_);
  const float inv_t = 1.0f / params_.temperature;
  for (int32_t i = 0; i < vocab_size_; ++i)
    candidates_[static_cast<size_t>(i)] = {i, logits[i] * inv_t};
  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  // Keep only the top k (or a working set large enough for top-p), sorted best first.
  size_t keep = params_.top_k > 0 ? std::min(n, static_cast<size_t>(params_.top_k)) : n;
  if (keep < n) {
    std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(keep),
                     candidates_.begin() + static_cast<ptrdiff_t>(n), by_logit);
    n = keep;
  }
  if (params_.top_p >= 1.0f) {
    // No nucleus: nothing needs the order by probability (min-p is relative to the best alone),
    // so the survivors are walked in id order and the vocabulary is not sorted (OpenAI's
    // defaults, top_p 1 and no top-k, would sort it whole for every token). The top k are put in
    // id order too (nth_element leaves an order of its library's choosing).
    if (static_cast<size_t>(vocab_size_) > n) {
      std::sort(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(n),
                [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
    }
    float max_logit = -INFINITY;
    for (size_t i = 0; i < n; ++i) max_logit = std::max(max_logit, candidates_[i].logit);
    const double threshold = params_.min_p > 0.0f ? params_.min_p : 0.0;
    size_t m = 0;
    *total = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const float p = std::exp(candidates_[i].logit - max_logit);
      if (threshold > 0.0 && p < threshold) continue;  // min-p: below min_p x p(best)
      candidates_[m] = candidates_[i];
      probs_[m] = p;
      *total += p;
      ++m;
    }
    return m;
  }
  std::sort(candidates_.begin(), candidates_.begin() + static_cast<ptrdiff_t>(n), by_logit);
  // Softmax over the survivors.
  const float max_logit = candidates_[0].logit;
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    probs_[i] = std::exp(candidates_[i].logit - max_logit);
    sum += probs_[i];
  }
  // top-p: the smallest prefix whose probability reaches p. min-p: relative to the best.
  size_t cut = n;
  if (params_.top_p < 1.0f) {
    double acc = 0.0;
    for (size_t i = 0; i < n; ++i) {
      acc += probs_[i] / sum;
      if (acc >= params_.top_p) {
        cut = i + 1;
        break;
      }
    }
  }
  if (params_.min_p > 0.0f) {
    const float threshold = params_.min_p * probs_[0];
    size_t m = 1;
    while (m < cut && probs_[m] >= threshold) ++m;
    cut = m;
  }
  *total = 0.0;
  for (size_t i = 0; i < cut; ++i) *total += probs_[i];
  return cut;
}

int32_t Sampler::Pick(const float* logits) {
  if (params_.temperature == 0.0f) return Argmax(logits);
  double total = 0.0;
  const size_t cut = Survivors(logits, &total);
  const double r = rng_.NextDouble() * total;
  double acc = 0.0;
  for (size_t i = 0; i < cut; ++i) {
    acc += probs_[i];
    if (r < acc) return candidates_[i].id;
  }
  return candidates_[cut - 1].id;
}

int32_t Sampler::PickDraft(const float* logits, int32_t draft, std::span<const float> q) {
  // Greedy: p is one-hot at the argmax, so the draft is kept exactly when it is the argmax (p/q
  // >= 1 there, 0 elsewhere) and the residual max(0, p - q) is the argmax alone.
  if (params_.temperature == 0.0f) return Argmax(logits);
  double total = 0.0;
  const size_t cut = Survivors(logits, &total);
  double p_draft = 0.0;
  for (size_t i = 0; i < cut; ++i) {
    if (candidates_[i].id == draft) {
      p_draft = probs_[i] / total;
      break;
    }
  }
  const double q_draft =
      draft >= 0 && static_cast<size_t>(draft) < q.size() ? q[static_cast<size_t>(draft)] : 0.0;
  if (p_draft > 0.0) {
    // Accept with probability min(1, p/q); q = 0 (a token the drafter could not have drawn) is
    // accepted when p > 0, as the limit of the rule.
    if (q_draft <= 0.0 || p_draft >= q_draft || rng_.NextDouble() * q_draft < p_draft) return draft;
  }
  // Rejected: draw from norm(max(0, p - q)), which lives on the survivors (p is 0 elsewhere).
  double residual = 0.0;
  for (size_t i = 0; i < cut; ++i) {
    const size_t id = static_cast<size_t>(candidates_[i].id);
    const double qi = id < q.size() ? q[id] : 0.0;
    residual += std::max(0.0, probs_[i] / total - qi);
  }
  if (!(residual > 0.0)) {
    // p <= q everywhere yet the draft was rejected: only rounding can get here; p itself is then
    // the right distribution.
    const double r = rng_.NextDouble() * total;
    double acc = 0.0;
    for (size_t i = 0; i < cut; ++i) {
      acc += probs_[i];
      if (r < acc) return candidates_[i].id;
    }
    return candidates_[cut - 1].id;
  }
  const double r = rng_.NextDouble() * residual;
  double acc = 0.0;
  size_t last = 0;
  for (size_t i = 0; i < cut; ++i) {
    const size_t id = static_cast<size_t>(candidates_[i].id);
    const double qi = id < q.size() ? q[id] : 0.0;
    const double w = std::max(0.0, probs_[i] / total - qi);
    if (w <= 0.0) continue;
    last = i;
    acc += w;
    if (r < acc) return candidates_[i].id;
  }
  return candidates_[last].id;
}

int32_t Sampler::SampleDraft(float* logits, std::span<const int32_t> recent, int32_t draft,
                             std::span<const float> q) {
  ApplyPenalties(logits, recent);
  return PickDraft(logits, draft, q);
}

int32_t Sampler::SampleDraft(std::span<const float> logits, std::span<const int32_t> recent,
                             int32_t draft, std::span<const float> q) {
  if (!Adjusts(recent)) return PickDraft(logits.data(), draft, q);
  work_.assign(logits.begin(), logits.begin() + vocab_size_);
  ApplyPenalties(work_.data(), recent);
  return PickDraft(work_.data(), draft, q);
}

}  // namespace pocket
