// The packed integer weight layout the fast kernels consume, and the .pocket package stores.
//
// A matrix [rows, cols] is cut into panels of 16 rows (the last panel is zero-padded) and each
// panel into groups of `group` columns. Within a group every weight is
//     w[r][k] = d[r] * code[r][k] + m[r]            (d, m: fp16, one pair per row and group)
// with unsigned codes of 4 bits (kU4: 0..15) or 8 bits (kU8: 0..255). A group is stored as its
// codes followed by its scales: 16 fp16 d, then 16 fp16 m (64 bytes). Symmetric layouts
// (explicit_min false) store only d and use m = -z * d with the fixed zero point z = 8 (kU4) or
// 128 (kU8): 32 bytes of scales, as GGUF's Q4_0 and Q8_0 spend.
//
// Codes are arranged in "quads" of 4 consecutive columns: the 64-byte vector i holds, for rows
// r = 0..15, bytes 4r..4r+3 = the codes of columns 4i..4i+3 of the group. This is the operand
// layout of x86 VPDPBUSD (16 int32 lanes, each a dot product of 4 bytes), of AMX's VNNI tile B
// (rows of 16 x 4 bytes) and of ARM SDOT/USDOT by lane (4 rows x 4 bytes per 128-bit register).
// kU4 packs two quads per vector: low nibbles = quad i, high nibbles = quad i + Q/2, where Q =
// group / 4 quads per group, for i < Q/2.
//
// Every supported GGUF block type with one scale per block maps onto this exactly:
//   Q4_0 -> kU4, group 32, symmetric;   Q4_1 -> kU4, group 32, explicit min;
//   Q8_0 -> kU8, group 32, symmetric, code = q + 128;
// and at group 64 (or any multiple of 32) when each run of blocks in a group shares its scale
// (and min) bit for bit, as quantization-aware-trained exports do (GgufRowFitsGroup).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "quant/dtype.h"

namespace pocket {

inline constexpr int kPanelRows = 16;

enum class PackedCodes : uint8_t { kU4 = 4, kU8 = 8 };

struct PackedLayout {
  PackedCodes codes = PackedCodes::kU4;
  int32_t group = 64;  // columns per scale group: a multiple of 32
  int64_t rows = 0;
  int64_t cols = 0;
  bool explicit_min = true;  // false: m = -zero_point() * d, not stored

  int32_t zero_point() const { return codes == PackedCodes::kU4 ? 8 : 128; }

  int64_t n_panels() const { return (rows + kPanelRows - 1) / kPanelRows; }
  int64_t n_groups() const { return cols / group; }
  size_t code_bytes_per_group() const {
    return static_cast<size_t>(group) * kPanelRows * static_cast<size_t>(codes) / 8;
  }
  size_t scale_bytes_per_group() const { return explicit_min ? 64 : 32; }
  size_t group_bytes() const { return code_bytes_per_group() + scale_bytes_per_group(); }
  size_t panel_bytes() const { return group_bytes() * static_cast<size_t>(n_groups()); }
  size_t total_bytes() const { return panel_bytes() * static_cast<size_t>(n_panels()); }
  double bits_per_weight() const {
    return 8.0 * static_cast<double>(group_bytes()) / (kPanelRows * static_cast<double>(group));
  }
  Status Validate() const;
};

// A packed matrix: a layout and its bytes (in a mapped .pocket file or a repacked buffer).
struct PackedMatrix {
  PackedLayout layout;
  const uint8_t* data = nullptr;

  const uint8_t* panel(int64_t p) const {
    return data + static_cast<size_t>(p) * layout.panel_bytes();
  }
};

// Packs rows of (already quantized) codes and per-(row, group) scales into `out`
// (layout.total_bytes()). codes: [rows, cols] (0..15 or 0..255); d, m: [rows, n_groups] floats,
// stored as fp16 (the caller chooses values exactly representable when it needs exactness); m is
// ignored (may be null) for symmetric layouts.
void PackCodes(const PackedLayout& layout, const uint8_t* codes, const float* d, const float* m,
               uint8_t* out);

// Repacks a GGUF matrix of Q4_0, Q4_1 or Q8_0 rows exactly (no value changes). `rows_in` points
// at rows * RowBytes(type, cols) bytes. Writes layout.total_bytes() bytes at out. layout.group may
// be any multiple of 32 at which every row's blocks share their scales (GgufRowFitsGroup);
// a row that does not is an error.
Status RepackGgufRows(DType type, const uint8_t* rows_in, const PackedLayout& layout, uint8_t* out);
// The same for panels [panel_begin, panel_end) only (rows_in and out are the whole matrices), so
// a large matrix can be repacked piece by piece with a small working set.
Status RepackGgufPanels(DType type, const uint8_t* rows_in, const PackedLayout& layout,
                        int64_t panel_begin, int64_t panel_end, uint8_t* out);
// The packed layout a GGUF type repacks into exactly (kU4/kU8, symmetric for Q4_0 / Q8_0) with
// `group` columns per scale; false if it does not (other types, or cols not whole groups).
bool PackedLayoutForGguf(DType type, int64_t rows, int64_t cols, PackedLayout* out,
                         int32_t group = 32);
// True when every run of group / 32 consecutive blocks of the GGUF row (cols values) has the same
// scale (and, for Q4_1, the same min) bit for bit: the row's codes and scales then pack exactly at
// that group. This is how quantization-aware-trained Q4_1 files built on a g64 grid look.
bool GgufRowFitsGroup(DType type, const uint8_t* row, int64_t cols, int32_t group);
// Writes one GGUF row (which fits layout.group) as row r (0..15) of a packed panel whose bytes
// were zeroed.
void PackGgufRow(DType type, const uint8_t* row, const PackedLayout& layout, int64_t r,
                 uint8_t* panel);

// Row r of the matrix as floats (cols values): w = d * code + m in float arithmetic.
void DequantizePackedRow(const PackedMatrix& w, int64_t r, float* out);
// The code, d and m of one weight (for tests and converters).
void PackedWeight(const PackedMatrix& w, int64_t r, int64_t k, int* code, float* d, float* m);

std::string_view PackedCodesName(PackedCodes codes);

}  // namespace pocket
