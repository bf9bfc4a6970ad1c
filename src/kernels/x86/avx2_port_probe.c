// The AVX2 integer ceilings of the machine it runs on (issue 46): how many VPMADDUBSW, VPADDW,
// VPMADDWD, VPSHUFB and VPAND one core retires per cycle (ten independent chains each), and the
// multiply-accumulate rate of the few-row kernel's inner step (8 rows: VPMADDUBSW of a code
// vector against each row's activations, VPADDW into the row's int16 sum) with the activations
// broadcast from 4 bytes (VPBROADCASTD, as src/kernels/x86/avx2_packed.cc does) or read
// pre-expanded (32 bytes per 4 columns), with no unpacking and no epilogue: the most that step can
// give. A standalone program, not part of the library (a probe, not a kernel; the suite only
// compiles it):
//   gcc -O2 -mavx2 -o /tmp/avx2_port_probe src/kernels/x86/avx2_port_probe.c &&
//   /tmp/avx2_port_probe
// The clock is measured by a chain of dependent scalar adds (one a cycle).
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double Ghz(void) {
  const long n = 400000000;
  long x = 0;
  const double t0 = Now();
  for (long i = 0; i < n; ++i) {
    __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
  }
  return 4.0 * (double)n / (Now() - t0) / 1e9;
}

#define CHAINS(op)                                                                         \
  c0 = op(c0, b);                                                                          \
  c1 = op(c1, b);                                                                          \
  c2 = op(c2, b);                                                                          \
  c3 = op(c3, b);                                                                          \
  c4 = op(c4, b);                                                                          \
  c5 = op(c5, b);                                                                          \
  c6 = op(c6, b);                                                                          \
  c7 = op(c7, b);                                                                          \
  c8 = op(c8, b);                                                                          \
  c9 = op(c9, b);                                                                          \
  __asm__ volatile(""                                                                      \
                   : "+x"(c0), "+x"(c1), "+x"(c2), "+x"(c3), "+x"(c4), "+x"(c5), "+x"(c6), \
                     "+x"(c7), "+x"(c8), "+x"(c9))

#define THROUGHPUT(name, op)                                                                \
  do {                                                                                      \
    __m256i c0 = a, c1 = a, c2 = a, c3 = a, c4 = a, c5 = a, c6 = a, c7 = a, c8 = a, c9 = a; \
    const double t0 = Now();                                                                \
    for (long i = 0; i < m; ++i) {                                                          \
      CHAINS(op);                                                                           \
    }                                                                                       \
    const double t = Now() - t0;                                                            \
    __m256i s = _mm256_xor_si256(_mm256_xor_si256(c0, c1), _mm256_xor_si256(c2, c3));       \
    s = _mm256_xor_si256(s, _mm256_xor_si256(_mm256_xor_si256(c4, c5), c6));                \
    s = _mm256_xor_si256(s, _mm256_xor_si256(_mm256_xor_si256(c7, c8), c9));                \
    __asm__ volatile("" : : "x"(s));                                                        \
    printf("%-11s %.2f per cycle\n", name, 10.0 * (double)m / t / 1e9 / ghz);               \
  } while (0)

static int8_t act[64 * 64] __attribute__((aligned(64)));
static int8_t act_x[64 * 64 * 8] __attribute__((aligned(64)));

// 8 rows x 2 VPMADDUBSW (low and high nibbles' vectors) + 2 VPADDW per iteration.
static double RowStep(int expanded, double ghz) {
  __m256i lo = _mm256_set1_epi8(3), hi = _mm256_set1_epi8(5);
  __asm__ volatile("" : "+x"(lo), "+x"(hi));
  __m256i s0 = lo, s1 = lo, s2 = lo, s3 = lo, s4 = lo, s5 = lo, s6 = lo, s7 = lo;
  const long m = 40000000;
  const double t0 = Now();
  for (long it = 0; it < m; ++it) {
    const int8_t* a = act + (it & 63) * 64;
    const int8_t* ax = act_x + (it & 31) * 512;
#define BCAST(k) _mm256_set1_epi32(*(const int32_t*)(a + 4 * (k)))
#define WIDE(k) _mm256_load_si256((const __m256i*)(ax + 32 * (k)))
#define ROW(s, k, A)                                       \
  s = _mm256_add_epi16(s, _mm256_maddubs_epi16(lo, A(k))); \
  s = _mm256_add_epi16(s, _mm256_maddubs_epi16(hi, A((k) + 8)))
#define EIGHT_ROWS(A) \
  ROW(s0, 0, A);      \
  ROW(s1, 1, A);      \
  ROW(s2, 2, A);      \
  ROW(s3, 3, A);      \
  ROW(s4, 4, A);      \
  ROW(s5, 5, A);      \
  ROW(s6, 6, A);      \
  ROW(s7, 7, A)
    if (expanded) {
      EIGHT_ROWS(WIDE);
    } else {
      EIGHT_ROWS(BCAST);
    }
    __asm__ volatile(""
                     : "+x"(s0), "+x"(s1), "+x"(s2), "+x"(s3), "+x"(s4), "+x"(s5), "+x"(s6),
                       "+x"(s7), "+x"(lo), "+x"(hi));
  }
  const double t = Now() - t0;
  return 16.0 * 32.0 * (double)m / t / 1e9 / ghz;  // MACs per cycle
}

int main(void) {
  for (int i = 0; i < (int)sizeof act; ++i) act[i] = (int8_t)(i * 7);
  for (int i = 0; i < (int)sizeof act_x; ++i) act_x[i] = (int8_t)(i * 3);
  const double ghz = Ghz();
  printf("clock       %.2f GHz (dependent adds)\n", ghz);
  __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(2);
  __asm__ volatile("" : "+x"(a), "+x"(b));
  const long m = 100000000;
  THROUGHPUT("vpmaddubsw", _mm256_maddubs_epi16);
  THROUGHPUT("vpaddw", _mm256_add_epi16);
  THROUGHPUT("vpmaddwd", _mm256_madd_epi16);
  THROUGHPUT("vpshufb", _mm256_shuffle_epi8);
  THROUGHPUT("vpand", _mm256_and_si256);
  printf("8-row step, activations broadcast:    %.1f MAC per cycle\n", RowStep(0, ghz));
  printf("8-row step, activations pre-expanded: %.1f MAC per cycle\n", RowStep(1, ghz));
  return 0;
}
