#include "quant/packed.h"

#include <cstring>
#include <vector>

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
        scales[16 + r] = FloatToFp16(m[row * n_groups + g]);
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
  return cols % kQK == 0;
}

Status RepackGgufRows(DType type, const uint8_t* rows_in, const PackedLayout& l, uint8_t* out) {
  PackedLayout expect;
  if (!PackedLayoutForGguf(type, l.rows, l.cols, &expect) || expect.codes != l.codes ||
      expect.group != l.group) {
    return InvalidArgumentError(DTypeName(type), " does not repack into this layout");
  }
  const int64_t n_groups = l.n_groups();
  const size_t row_bytes = RowBytes(type, l.cols);
  std::vector<uint8_t> codes(static_cast<size_t>(l.rows * l.cols));
  std::vector<float> d(static_cast<size_t>(l.rows * n_groups)), m(d.size());
  for (int64_t r = 0; r < l.rows; ++r) {
    const uint8_t* row = rows_in + static_cast<size_t>(r) * row_bytes;
    for (int64_t g = 0; g < n_groups; ++g) {
      uint8_t* c = &codes[static_cast<size_t>(r * l.cols + g * kQK)];
      const size_t s = static_cast<size_t>(r * n_groups + g);
      if (type == DType::kQ8_0) {
        const BlockQ8_0& b = reinterpret_cast<const BlockQ8_0*>(row)[g];
        d[s] = Fp16ToFloat(b.d);
        m[s] = -128.0f * d[s];  // exact: a power-of-two multiple of an fp16 value
        for (int k = 0; k < kQK; ++k) c[k] = static_cast<uint8_t>(b.qs[k] + 128);
      } else if (type == DType::kQ4_0) {
        const BlockQ4_0& b = reinterpret_cast<const BlockQ4_0*>(row)[g];
        d[s] = Fp16ToFloat(b.d);
        m[s] = -8.0f * d[s];
        for (int k = 0; k < kQK / 2; ++k) {
          c[k] = b.qs[k] & 0x0f;
          c[k + kQK / 2] = b.qs[k] >> 4;
        }
      } else {
        const BlockQ4_1& b = reinterpret_cast<const BlockQ4_1*>(row)[g];
        d[s] = Fp16ToFloat(b.d);
        m[s] = Fp16ToFloat(b.m);
        for (int k = 0; k < kQK / 2; ++k) {
          c[k] = b.qs[k] & 0x0f;
          c[k + kQK / 2] = b.qs[k] >> 4;
        }
      }
    }
  }
  PackCodes(l, codes.data(), d.data(), m.data(), out);
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
  *m = Fp16ToFloat(scales[16 + pr]);
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
