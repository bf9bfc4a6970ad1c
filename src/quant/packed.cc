#include "quant/packed.h"

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

bool PackedLayoutForGguf(DType type, int64_t rows, int64_t cols, PackedLayout* out) {
  if (type != DType::kQ4_0 && type != DType::kQ4_1 && type != DType::kQ8_0) return false;
  out->codes = type == DType::kQ8_0 ? PackedCodes::kU8 : PackedCodes::kU4;
  out->group = kQK;
  out->rows = rows;
  out->cols = cols;
  out->explicit_min = type == DType::kQ4_1;
  return cols % kQK == 0;
}

Status RepackGgufRows(DType type, const uint8_t* rows_in, const PackedLayout& l, uint8_t* out) {
  return RepackGgufPanels(type, rows_in, l, 0, l.n_panels(), out);
}

Status RepackGgufPanels(DType type, const uint8_t* rows_in, const PackedLayout& l,
                        int64_t panel_begin, int64_t panel_end, uint8_t* out) {
  PackedLayout expect;
  if (!PackedLayoutForGguf(type, l.rows, l.cols, &expect) || expect.codes != l.codes ||
      expect.group != l.group || expect.explicit_min != l.explicit_min) {
    return InvalidArgumentError(DTypeName(type), " does not repack into this layout");
  }
  const int64_t n_groups = l.n_groups();
  const size_t row_bytes = RowBytes(type, l.cols);
  const size_t code_bytes = l.code_bytes_per_group();
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    uint8_t* panel = out + static_cast<size_t>(p) * l.panel_bytes();
    std::memset(panel, 0, l.panel_bytes());
    for (int64_t r = 0; r < kPanelRows; ++r) {
      const int64_t row_index = p * kPanelRows + r;
      if (row_index >= l.rows) break;  // padding rows stay zero
      const uint8_t* row = rows_in + static_cast<size_t>(row_index) * row_bytes;
      for (int64_t g = 0; g < n_groups; ++g) {
        uint8_t* block = panel + static_cast<size_t>(g) * l.group_bytes();
        uint16_t* scales = reinterpret_cast<uint16_t*>(block + code_bytes);
        uint8_t c[kQK];
        if (type == DType::kQ8_0) {
          const BlockQ8_0& b = reinterpret_cast<const BlockQ8_0*>(row)[g];
          scales[r] = b.d;  // the fp16 bits move unchanged
          for (int k = 0; k < kQK; ++k) c[k] = static_cast<uint8_t>(b.qs[k] + 128);
        } else {
          const uint8_t* qs;
          if (type == DType::kQ4_0) {
            const BlockQ4_0& b = reinterpret_cast<const BlockQ4_0*>(row)[g];
            scales[r] = b.d;
            qs = b.qs;
          } else {
            const BlockQ4_1& b = reinterpret_cast<const BlockQ4_1*>(row)[g];
            scales[r] = b.d;
            scales[16 + r] = b.m;
            qs = b.qs;
          }
          for (int k = 0; k < kQK / 2; ++k) {
            c[k] = qs[k] & 0x0f;
            c[k + kQK / 2] = qs[k] >> 4;
          }
        }
        for (int64_t kk = 0; kk < kQK; ++kk) {
          size_t byte;
          int shift;
          CodePosition(l, r, kk, &byte, &shift);
          block[byte] |= static_cast<uint8_t>(c[kk] << shift);
        }
      }
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
