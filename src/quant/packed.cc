#include "quant/packed.h"

#include <cstddef>
#include <cstring>

#include "base/float16.h"
#include "quant/blocks.h"

namespace pocket {
namespace {

// Byte offset (within a group's code block) and nibble shift of column kk (0 <= kk < group) of
// panel row r.
inline void CodePosition(const PackedLayout& l, int64_t r, int64_t kk, size_t* byte, int* shift) {
  const int64_t quad = kk / 4, j = kk % 4;
  if (l.codes == PackedCodes::kU8) {
    *byte = static_cast<size_t>(quad * 64 + r * 4 + j);
    *shift = 0;
    return;
  }
  const int64_t half = l.group / 8;  // Q/2 vectors
  const int64_t vec = quad % half;
  *byte = static_cast<size_t>(vec * 64 + r * 4 + j);
  *shift = quad < half ? 0 : 4;
}

}  // namespace

std::string_view PackedCodesName(PackedCodes codes) {
  return codes == PackedCodes::kU4 ? "u4" : "u8";
}

Status PackedLayout::Validate() const {
  if (codes != PackedCodes::kU4 && codes != PackedCodes::kU8) {
    return InvalidArgumentError("packed codes must be 4 or 8 bits");
  }
  if (group < 32 || group % 32 != 0 || group > 4096) {
    return InvalidArgumentError("packed group size ", group, " must be a multiple of 32");
  }
  if (rows <= 0 || cols <= 0) return InvalidArgumentError("packed shape [", rows, ", ", cols, "]");
  if (cols % group != 0) {
    return InvalidArgumentError("packed matrix of ", cols,
                                " columns is not a whole number of groups of ", group);
  }
  return Status::Ok();
}

void PackCodes(const PackedLayout& l, const uint8_t* codes, const float* d, const float* m,
               uint8_t* out) {
  std::memset(out, 0, l.total_bytes());
  const int64_t n_groups = l.n_groups();
  for (int64_t p = 0; p < l.n_panels(); ++p) {
    uint8_t* panel = out + static_cast<size_t>(p) * l.panel_bytes();
    for (int64_t g = 0; g < n_groups; ++g) {
      uint8_t* block = panel + static_cast<size_t>(g) * l.group_bytes();
      uint16_t* scales = reinterpret_cast<uint16_t*>(block + l.code_bytes_per_group());
      for (int64_t r = 0; r < kPanelRows; ++r) {
        const int64_t row = p * kPanelRows + r;
        if (row >= l.rows) continue;  // padding rows: zero codes, zero scales
        scales[r] = FloatToFp16(d[row * n_groups + g]);
        if (l.explicit_min) scales[16 + r] = FloatToFp16(m[row * n_groups + g]);
        for (int64_t kk = 0; kk < l.group; ++kk) {
          size_t byte;
          int shift;
          CodePosition(l, r, kk, &byte, &shift);
          block[byte] |= static_cast<uint8_t>(codes[row * l.cols + g * l.group + kk] << shift);
        }
      }
    }
  }
}

bool PackedLayoutForGguf(DType type, int64_t rows, int64_t cols, PackedLayout* out, int32_t group) {
  if (type != DType::kQ4_0 && type != DType::kQ4_1 && type != DType::kQ8_0) return false;
  if (group < kQK || group % kQK != 0) return false;
  out->codes = type == DType::kQ8_0 ? PackedCodes::kU8 : PackedCodes::kU4;
  out->group = group;
  out->rows = rows;
  out->cols = cols;
  out->explicit_min = type == DType::kQ4_1;
  return cols % group == 0;
}

namespace {

// The fp16 scale (and min) bits of block b of a GGUF row; copied with memcpy, so rows may sit at
// any address.
void BlockScales(DType type, const uint8_t* row, int64_t b, uint16_t* d, uint16_t* m) {
  *m = 0;
  if (type == DType::kQ8_0) {
    std::memcpy(d, row + b * sizeof(BlockQ8_0) + offsetof(BlockQ8_0, d), 2);
  } else if (type == DType::kQ4_0) {
    std::memcpy(d, row + b * sizeof(BlockQ4_0) + offsetof(BlockQ4_0, d), 2);
  } else {
    std::memcpy(d, row + b * sizeof(BlockQ4_1) + offsetof(BlockQ4_1, d), 2);
    std::memcpy(m, row + b * sizeof(BlockQ4_1) + offsetof(BlockQ4_1, m), 2);
  }
}

// The 32 codes of block b (0..15, or 0..255 for Q8_0 with code = q + 128).
void BlockCodes(DType type, const uint8_t* row, int64_t b, uint8_t* c) {
  if (type == DType::kQ8_0) {
    const uint8_t* qs = row + b * sizeof(BlockQ8_0) + offsetof(BlockQ8_0, qs);
    for (int k = 0; k < kQK; ++k) c[k] = static_cast<uint8_t>(qs[k] ^ 0x80);  // int8 + 128
    return;
  }
  const uint8_t* qs = type == DType::kQ4_0 ? row + b * sizeof(BlockQ4_0) + offsetof(BlockQ4_0, qs)
                                           : row + b * sizeof(BlockQ4_1) + offsetof(BlockQ4_1, qs);
  for (int k = 0; k < kQK / 2; ++k) {
    c[k] = qs[k] & 0x0f;
    c[k + kQK / 2] = qs[k] >> 4;
  }
}

}  // namespace

bool GgufRowFitsGroup(DType type, const uint8_t* row, int64_t cols, int32_t group) {
  PackedLayout l;
  if (!PackedLayoutForGguf(type, 1, cols, &l, group)) return false;
  const int64_t per_group = group / kQK, n_blocks = cols / kQK;
  for (int64_t b = 0; b < n_blocks; b += per_group) {
    uint16_t d0, m0;
    BlockScales(type, row, b, &d0, &m0);
    for (int64_t j = 1; j < per_group; ++j) {
      uint16_t d, m;
      BlockScales(type, row, b + j, &d, &m);
      if (d != d0 || m != m0) return false;
    }
  }
  return true;
}

void PackGgufRow(DType type, const uint8_t* row, const PackedLayout& l, int64_t r, uint8_t* panel) {
  const int64_t n_groups = l.n_groups(), per_group = l.group / kQK;
  for (int64_t g = 0; g < n_groups; ++g) {
    uint8_t* block = panel + static_cast<size_t>(g) * l.group_bytes();
    uint8_t* scales = block + l.code_bytes_per_group();
    uint16_t d, m;
    BlockScales(type, row, g * per_group, &d, &m);  // the fp16 bits move unchanged
    std::memcpy(scales + 2 * r, &d, 2);
    if (l.explicit_min) std::memcpy(scales + 2 * (16 + r), &m, 2);
    for (int64_t j = 0; j < per_group; ++j) {
      uint8_t c[kQK];
      BlockCodes(type, row, g * per_group + j, c);
      for (int64_t k = 0; k < kQK; ++k) {
        size_t byte;
        int shift;
        CodePosition(l, r, j * kQK + k, &byte, &shift);
        block[byte] |= static_cast<uint8_t>(c[k] << shift);
      }
    }
  }
}

Status RepackGgufRows(DType type, const uint8_t* rows_in, const PackedLayout& l, uint8_t* out) {
  return RepackGgufPanels(type, rows_in, l, 0, l.n_panels(), out);
}

Status RepackGgufPanels(DType type, const uint8_t* rows_in, const PackedLayout& l,
                        int64_t panel_begin, int64_t panel_end, uint8_t* out) {
  PackedLayout expect;
  if (!PackedLayoutForGguf(type, l.rows, l.cols, &expect, l.group) || expect.codes != l.codes ||
      expect.explicit_min != l.explicit_min) {
    return InvalidArgumentError(DTypeName(type), " does not repack into this layout");
  }
  const size_t row_bytes = RowBytes(type, l.cols);
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    uint8_t* panel = out + static_cast<size_t>(p) * l.panel_bytes();
    std::memset(panel, 0, l.panel_bytes());
    for (int64_t r = 0; r < kPanelRows; ++r) {
      const int64_t row_index = p * kPanelRows + r;
      if (row_index >= l.rows) break;  // padding rows stay zero
      const uint8_t* row = rows_in + static_cast<size_t>(row_index) * row_bytes;
      if (l.group != kQK && !GgufRowFitsGroup(type, row, l.cols, l.group)) {
        return InvalidArgumentError("row ", row_index, ": its ", DTypeName(type),
                                    " blocks do not share scales in groups of ", l.group);
      }
      PackGgufRow(type, row, l, r, panel);
    }
  }
  return Status::Ok();
}

void PackedWeight(const PackedMatrix& w, int64_t r, int64_t k, int* code, float* d, float* m) {
  const PackedLayout& l = w.layout;
  const int64_t g = k / l.group, kk = k % l.group, pr = r % kPanelRows;
  const uint8_t* block = w.panel(r / kPanelRows) + static_cast<size_t>(g) * l.group_bytes();
  size_t byte;
  int shift;
  CodePosition(l, pr, kk, &byte, &shift);
  *code = l.codes == PackedCodes::kU8 ? block[byte] : (block[byte] >> shift) & 0x0f;
  const uint16_t* scales = reinterpret_cast<const uint16_t*>(block + l.code_bytes_per_group());
  *d = Fp16ToFloat(scales[pr]);
  // Symmetric: m = -z * d, exact (z is a power of two).
  *m = l.explicit_min ? Fp16ToFloat(scales[16 + pr]) : -static_cast<float>(l.zero_point()) * *d;
}

void DequantizePackedRow(const PackedMatrix& w, int64_t r, float* out) {
  for (int64_t k = 0; k < w.layout.cols; ++k) {
    int code;
    float d, m;
    PackedWeight(w, r, k, &code, &d, &m);
    out[k] = d * static_cast<float>(code) + m;
  }
}

}  // namespace pocket
