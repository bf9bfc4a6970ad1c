// Generic code calling the shared helper (and the kernel only when asked, as after a CPU check).
// Built, never run by the tests: check_isa_leaks.py only disassembles it.
#include <cstdio>

#include "fixture_shared.h"

namespace pocket::avx2 {
float KernelEntry(const float* x, int n);
}  // namespace pocket::avx2

int main(int argc, char** argv) {
  (void)argv;
  const float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  if (argc > 1) std::printf("%g\n", pocket::avx2::KernelEntry(x, 8));
  std::printf("%g\n", isa_fixture::SumOfSquares(x, 8));
  return 0;
}
