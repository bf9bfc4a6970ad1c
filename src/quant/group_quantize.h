// Quantizers for the packed layouts: one group of weights to integer codes and fp16 scales.
// Unlike the plain min/max of GGUF's reference quantizers, the 4-bit quantizer searches the
// clipping range and refits scale and offset by least squares, keeping the stored (fp16-rounded)
// scales that minimize the group's squared error.
#pragma once

#include <cstdint>

namespace pocket {

// Asymmetric 4-bit: w ~= d * code + m, code in 0..15. d and m are returned fp16-exact.
// Returns the squared error of the group with the stored values.
double QuantizeGroupU4(const float* x, int32_t n, uint8_t* codes, float* d, float* m);

// Symmetric 8-bit: w ~= d * (code - 128), code in 1..255; d is returned fp16-exact.
double QuantizeGroupU8(const float* x, int32_t n, uint8_t* codes, float* d);

}  // namespace pocket
