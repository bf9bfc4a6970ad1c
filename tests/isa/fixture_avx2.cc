// Compiled with -mavx2 -mfma, linked first: its copy of isa_fixture::SumOfSquares (VEX-encoded
// scalar arithmetic) is the one the linker keeps, a planted leak check_isa_leaks.py must find.
// The kernel-namespace functions here are allowed and must not be reported.
#include <immintrin.h>

#include "fixture_shared.h"

namespace pocket::avx2 {
namespace {

[[gnu::noinline]] float Dot8(const float* a, const float* b) {
  __m256 p = _mm256_mul_ps(_mm256_loadu_ps(a), _mm256_loadu_ps(b));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(p), _mm256_extractf128_ps(p, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace

float KernelEntry(const float* x, int n) {
  return Dot8(x, x) + isa_fixture::SumOfSquares(x, n);
}

}  // namespace pocket::avx2
