// A helper shared by generic code and an ISA file, the way a header's inline function is: each
// file that calls it emits a weak copy compiled with its own flags, and the linker keeps one.
#pragma once

namespace isa_fixture {

[[gnu::noinline]] inline float SumOfSquares(const float* x, int n) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += x[i] * x[i];
  return sum;
}

}  // namespace isa_fixture
