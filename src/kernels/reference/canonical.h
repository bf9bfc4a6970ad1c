// The canonical order of float reductions that every kernel table reproduces exactly: element i
// goes to partial sum i % 16 (accumulated in increasing i, with fused multiply-add for products),
// then the 16 partials are combined as a fixed tree: p[j] += p[j + 8], p[j] += p[j + 4],
// p[j] += p[j + 2], p[0] + p[1]. A 16-lane vector register (AVX-512), two 8-lane ones (AVX2) or
// four 4-lane ones (NEON) all reproduce it, so every ISA gets bit-identical results.
#pragma once

#include <cmath>
#include <cstdint>

namespace pocket::canonical {

inline float Combine(float p[16]) {
  for (int j = 0; j < 8; ++j) p[j] += p[j + 8];
  for (int j = 0; j < 4; ++j) p[j] += p[j + 4];
  for (int j = 0; j < 2; ++j) p[j] += p[j + 2];
  return p[0] + p[1];
}

inline float Dot(const float* a, const float* b, int64_t n) {
  float p[16] = {};
  for (int64_t i = 0; i < n; ++i) p[i % 16] = std::fma(a[i], b[i], p[i % 16]);
  return Combine(p);
}

inline float SumOfSquares(const float* a, int64_t n) {
  return Dot(a, a, n);
}

}  // namespace pocket::canonical
