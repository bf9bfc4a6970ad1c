// Reference (scalar, portable) conversion between float rows and every DType. These are the
// ground truth the fast kernels are tested against; they are not on any hot path.
#pragma once

#include <cstdint>

#include "quant/dtype.h"

namespace pocket {

// dst[0..n) = the n weights stored at src. n must be block-aligned for the type.
void DequantizeRow(DType type, const void* src, float* dst, int64_t n);
// Writes RowBytes(type, n) bytes at dst. Quantizers here are plain and deterministic (amax /
// min-max per block); the error-minimizing search for packages lives with the converter.
void QuantizeRow(DType type, const float* src, void* dst, int64_t n);
// Q4_1 as quantization-aware training exports it: one UINT4 grid (fp16 scale d, integer zero
// point z, stored min m = -d * z) per `grid` columns (a multiple of 32), written as grid / 32
// consecutive blocks with identical d and m. n is a multiple of grid.
void QuantizeRowQ4_1OnGrid(const float* src, void* dst, int64_t n, int32_t grid);

// Unpacks the 6-bit scale and min of sub-block j (0..7) of a Q4_K super-block.
void Q4KScaleMin(const uint8_t* scales, int j, uint8_t* scale, uint8_t* min);

}  // namespace pocket
