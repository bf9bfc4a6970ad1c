#include "model/dflash.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <new>
#include <optional>
#include <unordered_map>

#include "base/mapped_file.h"
#include "base/str.h"
#include "format/safetensors.h"
#include "model/project.h"
#include "model/synthetic.h"
#include "quant/group_quantize.h"
#include "quant/packed.h"
#include "quant/quantize.h"

namespace pocket {
namespace {

constexpr const char* kArchitecture = "DFlashDraftModel";
// Largest block accepted: blocks are a few to a few dozen tokens; the bound keeps the scratch
// (logits of every row) sane for a malformed file.
constexpr int32_t kMaxBlockSize = 256;
// Context rows per pass of AppendContext: a long prompt is appended in chunks of this many rows.
constexpr int32_t kContextChunk = 64;

// ----------------------------------------------------------------------------- config

// A float in JSON: 9 significant digits, so that a float reads back exactly.
std::string FormatFloat(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

class ConfigReader {
 public:
  ConfigReader(const std::map<std::string, ConfigValue>& values, std::string where)
      : values_(values), where_(std::move(where)) {}

  const ConfigValue* Find(const std::string& key) const {
    auto it = values_.find(key);
    if (it == values_.end() || it->second.kind == ConfigValue::Kind::kNull) return nullptr;
    return &it->second;
  }

  // An integer field in [lo, hi]; `fallback` when absent (nullopt: required).
  Status Int(const std::string& key, int64_t lo, int64_t hi, std::optional<int64_t> fallback,
             int32_t* out) const {
    const ConfigValue* v = Find(key);
    if (v == nullptr) {
      if (!fallback) return InvalidArgumentError(where_, ": ", key, " is missing");
      *out = static_cast<int32_t>(*fallback);
      return Status::Ok();
    }
    if (v->kind != ConfigValue::Kind::kInt) {
      return InvalidArgumentError(where_, ": ", key, " is ", v->json, ", expected an integer");
    }
    if (v->i < lo || v->i > hi) {
      return InvalidArgumentError(where_, ": ", key, " is ", v->i, " (expected ", lo, " to ", hi,
                                  ")");
    }
    *out = static_cast<int32_t>(v->i);
    return Status::Ok();
  }

  Status Float(const std::string& key, double fallback, float* out) const {
    const ConfigValue* v = Find(key);
    if (v == nullptr) {
      *out = static_cast<float>(fallback);
      return Status::Ok();
    }
    if (v->kind != ConfigValue::Kind::kInt && v->kind != ConfigValue::Kind::kFloat) {
      return InvalidArgumentError(where_, ": ", key, " is ", v->json, ", expected a number");
    }
    *out =
        static_cast<float>(v->kind == ConfigValue::Kind::kInt ? static_cast<double>(v->i) : v->f);
    return Status::Ok();
  }

  const std::string& where() const { return where_; }

 private:
  const std::map<std::string, ConfigValue>& values_;
  std::string where_;
};

// The drafter's configuration from config.json's fields (`values`; a package's meta "drafter"
// object holds the same fields), checked against the target; `name` leads every error.
StatusOr<DFlashConfig> ParseConfig(const std::map<std::string, ConfigValue>& values,
                                   const std::string& name, const ModelConfig& target) {
  const ConfigReader r(values, name);
  DFlashConfig out;
  const ConfigValue* arch = r.Find("architectures");
  if (arch == nullptr) {
    return InvalidArgumentError(name, ": architectures is missing (expected [\"", kArchitecture,
                                "\"])");
  }
  if (arch->kind != ConfigValue::Kind::kArray ||
      std::find(arch->strings.begin(), arch->strings.end(), kArchitecture) == arch->strings.end()) {
    return InvalidArgumentError(name, ": architectures is ", arch->json, ", expected [\"",
                                kArchitecture, "\"] (a DFlash block drafter)");
  }
  if (const ConfigValue* v = r.Find("rope_scaling")) {
    return UnimplementedError(name, ": rope_scaling ", v->json, " is not supported");
  }
  if (const ConfigValue* v = r.Find("attention_bias");
      v != nullptr && v->kind == ConfigValue::Kind::kBool && v->b) {
    return UnimplementedError(name, ": attention_bias true is not supported");
  }
  if (const ConfigValue* v = r.Find("use_sliding_window");
      v != nullptr && v->kind == ConfigValue::Kind::kBool && v->b) {
    return UnimplementedError(name, ": use_sliding_window true is not supported");
  }
  if (const ConfigValue* v = r.Find("hidden_act");
      v != nullptr && (v->kind != ConfigValue::Kind::kString || v->s != "silu")) {
    return UnimplementedError(name, ": hidden_act ", v->json, " is not supported (silu only)");
  }

  ModelConfig& c = out.layers;
  c.arch = Architecture::kQwen3;
  c.rope_style = RopeStyle::kNeox;
  c.qk_norm = true;
  c.qkv_bias = false;
  c.tied_output = false;
  c.vocab_size = target.vocab_size;
  c.n_ctx_train = target.n_ctx_train;
  POCKET_RETURN_IF_ERROR(r.Int("hidden_size", 1, 65536, std::nullopt, &c.d_model));
  if (c.d_model != target.d_model) {
    return InvalidArgumentError(name, ": hidden_size ", c.d_model,
                                " differs from the target's hidden size ", target.d_model,
                                " (the block rows are the target's embeddings)");
  }
  POCKET_RETURN_IF_ERROR(r.Int("num_hidden_layers", 1, 1024, std::nullopt, &c.n_layers));
  POCKET_RETURN_IF_ERROR(r.Int("num_attention_heads", 1, 1024, std::nullopt, &c.n_heads));
  POCKET_RETURN_IF_ERROR(r.Int("num_key_value_heads", 1, 1024, c.n_heads, &c.n_kv_heads));
  if (c.n_heads % c.n_kv_heads != 0) {
    return InvalidArgumentError(name, ": num_attention_heads ", c.n_heads,
                                " is not a multiple of num_key_value_heads ", c.n_kv_heads);
  }
  POCKET_RETURN_IF_ERROR(r.Int("head_dim", 2, 1024, c.d_model / c.n_heads, &c.head_dim));
  if (c.head_dim % 2 != 0) {
    return InvalidArgumentError(name, ": head_dim ", c.head_dim, " is odd; RoPE needs pairs");
  }
  POCKET_RETURN_IF_ERROR(r.Int("intermediate_size", 1, 1 << 20, std::nullopt, &c.d_ff));
  int32_t vocab = 0;
  POCKET_RETURN_IF_ERROR(r.Int("vocab_size", 1, 1 << 24, target.vocab_size, &vocab));
  if (vocab != target.vocab_size) {
    return InvalidArgumentError(name, ": vocab_size ", vocab,
                                " differs from the target's vocabulary of ", target.vocab_size,
                                " tokens");
  }
  // Qwen3's defaults (transformers' Qwen3Config) where a field is absent.
  POCKET_RETURN_IF_ERROR(r.Float("rms_norm_eps", 1e-6, &c.rms_eps));
  if (!(c.rms_eps > 0.0f) || !(c.rms_eps < 1.0f)) {
    return InvalidArgumentError(name, ": rms_norm_eps is ", c.rms_eps, " (expected 0 to 1)");
  }
  POCKET_RETURN_IF_ERROR(r.Float("rope_theta", 10000.0, &c.rope_base));
  if (!(c.rope_base > 1.0f) || !(c.rope_base < 1e12f)) {
    return InvalidArgumentError(name, ": rope_theta is ", c.rope_base);
  }
  POCKET_RETURN_IF_ERROR(r.Int("block_size", 2, kMaxBlockSize, std::nullopt, &out.block_size));

  const ConfigValue* dc = r.Find("dflash_config");
  if (dc == nullptr) {
    return InvalidArgumentError(name, ": dflash_config is missing (expected {\"mask_token_id\": ",
                                "..., \"target_layer_ids\": [...]})");
  }
  if (dc->kind != ConfigValue::Kind::kObject) {
    return InvalidArgumentError(name, ": dflash_config is ", dc->json, ", expected an object");
  }
  POCKET_ASSIGN_OR_RETURN(const auto inner, ParseConfigJson(dc->json, name + " dflash_config"));
  const ConfigReader d(inner, name);
  // Field names are reported with their object: "dflash_config.mask_token_id".
  {
    const ConfigValue* v = d.Find("mask_token_id");
    if (v == nullptr) return InvalidArgumentError(name, ": dflash_config.mask_token_id is missing");
    if (v->kind != ConfigValue::Kind::kInt) {
      return InvalidArgumentError(name, ": dflash_config.mask_token_id is ", v->json,
                                  ", expected an integer");
    }
    if (v->i < 0 || v->i >= target.vocab_size) {
      return OutOfRangeError(name, ": dflash_config.mask_token_id ", v->i,
                             " is outside the target's vocabulary (0 to ", target.vocab_size - 1,
                             ")");
    }
    out.mask_token_id = static_cast<int32_t>(v->i);
  }
  {
    const ConfigValue* v = d.Find("target_layer_ids");
    if (v == nullptr) {
      return InvalidArgumentError(name, ": dflash_config.target_layer_ids is missing");
    }
    if (v->kind != ConfigValue::Kind::kArray || v->array_size == 0 ||
        v->ints.size() != v->array_size) {
      return InvalidArgumentError(name, ": dflash_config.target_layer_ids is ", v->json,
                                  ", expected a non-empty array of layer indices");
    }
    for (size_t j = 0; j < v->ints.size(); ++j) {
      const int64_t id = v->ints[j];
      if (id < 0 || id >= target.n_layers) {
        return OutOfRangeError(name, ": dflash_config.target_layer_ids[", j, "] is ", id,
                               ", past the target's depth (layers 0 to ", target.n_layers - 1, ")");
      }
      out.target_layer_ids.push_back(static_cast<int32_t>(id));
    }
  }
  out.target_d_model = target.d_model;
  POCKET_RETURN_IF_ERROR(c.Validate().WithContext(name));
  return out;
}

// ----------------------------------------------------------------------------- weights

// Packs a float matrix (rows of `cols` floats from `row`) into the integer layout, as the
// converter's quantizers do (group_quantize.h: least-squares 4-bit, symmetric 8-bit).
template <typename RowFn>
void PackRows(const PackedLayout& layout, RowFn&& row, uint8_t* out) {
  const int64_t cols = layout.cols, n_groups = layout.n_groups();
  std::vector<float> values(static_cast<size_t>(cols));
  std::vector<uint8_t> codes(static_cast<size_t>(kPanelRows * cols));
  std::vector<float> d(static_cast<size_t>(kPanelRows * n_groups)), m(d.size());
  PackedLayout panel = layout;
  for (int64_t p = 0; p < layout.n_panels(); ++p) {
    panel.rows = std::min<int64_t>(kPanelRows, layout.rows - p * kPanelRows);
    std::fill(codes.begin(), codes.end(), uint8_t{0});
    for (int64_t r = 0; r < panel.rows; ++r) {
      row(p * kPanelRows + r, values.data());
      for (int64_t g = 0; g < n_groups; ++g) {
        const size_t s = static_cast<size_t>(r * n_groups + g);
        uint8_t* c = &codes[static_cast<size_t>(r * cols + g * layout.group)];
        const float* x = &values[static_cast<size_t>(g * layout.group)];
        if (layout.codes == PackedCodes::kU4) {
          QuantizeGroupU4(x, layout.group, c, &d[s], &m[s]);
        } else {
          QuantizeGroupU8(x, layout.group, c, &d[s]);
        }
      }
    }
    PackCodes(panel, codes.data(), d.data(), m.data(),
              out + static_cast<size_t>(p) * layout.panel_bytes());
  }
}

class Binder {
 public:
  Binder(const HfDirectory& hf, DFlashWeights kind,
         std::vector<std::unique_ptr<float[]>>* owned_floats,
         std::vector<std::unique_ptr<uint8_t[]>>* owned_packed)
      : hf_(hf), kind_(kind), floats_(owned_floats), packed_(owned_packed) {
    for (const TensorInfo& t : hf.tensors()) by_name_[t.name] = &t;
  }

  StatusOr<const TensorInfo*> Find(const std::string& name, const std::vector<int64_t>& shape) {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return NotFoundError(hf_.dir(), ": tensor ", name, " is missing");
    const TensorInfo* t = it->second;
    if (!t->type_supported || t->packed ||
        (t->type != DType::kF32 && t->type != DType::kF16 && t->type != DType::kBF16)) {
      return UnimplementedError(hf_.dir(), ": tensor ", name, " has type ",
                                t->type_supported ? std::string(DTypeName(t->type)) : t->type_name,
                                " (supported: f32, f16, bf16)");
    }
    if (t->shape != shape) {
      return InvalidArgumentError(hf_.dir(), ": tensor ", name, ": expected ", ShapeString(shape),
                                  ", file has ", ShapeString(t->shape));
    }
    return t;
  }

  Status Vector(const std::string& name, int64_t n, const float** out) {
    POCKET_ASSIGN_OR_RETURN(const TensorInfo* t, Find(name, {n}));
    std::unique_ptr<float[]> buf(new float[static_cast<size_t>(n)]);
    DequantizeRow(t->type, t->data, buf.get(), n);  // byte-wise reads: any alignment
    *out = buf.get();
    floats_->push_back(std::move(buf));
    return Status::Ok();
  }

  Status Matrix(const std::string& name, int64_t rows, int64_t cols, Linear* out) {
    POCKET_ASSIGN_OR_RETURN(const TensorInfo* t, Find(name, {rows, cols}));
    const size_t row_bytes = RowBytes(t->type, cols);
    const uint8_t* data = t->data;
    auto row = [&](int64_t r, float* dst) {
      DequantizeRow(t->type, data + static_cast<size_t>(r) * row_bytes, dst, cols);
    };
    // Packed groups are multiples of 32 columns; other widths stay as stored.
    if (kind_ != DFlashWeights::kFloat && cols % 32 == 0) {
      PackedLayout l;
      l.codes = kind_ == DFlashWeights::kInt4 ? PackedCodes::kU4 : PackedCodes::kU8;
      l.group = kind_ == DFlashWeights::kInt4 && cols % 64 == 0 ? 64 : 32;
      l.rows = rows;
      l.cols = cols;
      l.explicit_min = kind_ == DFlashWeights::kInt4;
      std::unique_ptr<uint8_t[]> buf(new (std::nothrow) uint8_t[l.total_bytes()]);
      if (!buf) {
        return ResourceExhaustedError("cannot allocate ", HumanBytes(l.total_bytes()),
                                      " to pack tensor ", name);
      }
      PackRows(l, row, buf.get());
      out->packed = true;
      out->p = PackedMatrix{l, buf.get()};
      packed_->push_back(std::move(buf));
      return Status::Ok();
    }
    // The float kernels read the stored type in place; a tensor at an odd address (a safetensors
    // header of odd length) is copied once to an aligned buffer.
    if (reinterpret_cast<uintptr_t>(data) % alignof(float) != 0) {
      std::unique_ptr<float[]> copy(new float[(t->n_bytes + 3) / 4]);
      std::memcpy(copy.get(), data, t->n_bytes);
      data = reinterpret_cast<const uint8_t*>(copy.get());
      floats_->push_back(std::move(copy));
    }
    out->packed = false;
    out->w = WeightMatrix{t->type, rows, cols, data, row_bytes};
    return Status::Ok();
  }

 private:
  const HfDirectory& hf_;
  DFlashWeights kind_;
  std::vector<std::unique_ptr<float[]>>* floats_;
  std::vector<std::unique_ptr<uint8_t[]>>* packed_;
  std::unordered_map<std::string, const TensorInfo*> by_name_;
};

// Binds the tensors of a drafter stored in a .pocket package ("drafter." + the released name) as
// views into the mapping: matrices packed or dense (f32, f16, bf16) as written, vectors f32.
class PackageBinder {
 public:
  explicit PackageBinder(const ModelSource& source) : source_(source) {}

  StatusOr<const TensorInfo*> Find(const std::string& name) const {
    const std::string full = kPocketDrafterTensorPrefix + name;
    const TensorInfo* t = source_.FindTensor(full);
    if (t == nullptr) {
      return NotFoundError(source_.path(), ": the block drafter's tensor ", full, " is missing");
    }
    return t;
  }

  Status Vector(const std::string& name, int64_t n, const float** out) const {
    POCKET_ASSIGN_OR_RETURN(const TensorInfo* t, Find(name));
    if (t->packed || t->type != DType::kF32 || t->shape != std::vector<int64_t>{n} ||
        reinterpret_cast<uintptr_t>(t->data) % alignof(float) != 0) {
      return InvalidArgumentError(source_.path(), ": tensor ", t->name, ": expected f32 ",
                                  ShapeString({n}), ", file has ", t->type_name, " ",
                                  ShapeString(t->shape));
    }
    *out = reinterpret_cast<const float*>(t->data);
    return Status::Ok();
  }

  Status Matrix(const std::string& name, int64_t rows, int64_t cols, Linear* out) const {
    POCKET_ASSIGN_OR_RETURN(const TensorInfo* t, Find(name));
    if (t->packed) {
      if (t->layout.rows != rows || t->layout.cols != cols) {
        return InvalidArgumentError(source_.path(), ": tensor ", t->name, ": expected ",
                                    ShapeString({rows, cols}), ", file has ",
                                    ShapeString({t->layout.rows, t->layout.cols}));
      }
      out->packed = true;
      out->p = PackedMatrix{t->layout, t->data};
      return Status::Ok();
    }
    if (t->type != DType::kF32 && t->type != DType::kF16 && t->type != DType::kBF16) {
      return UnimplementedError(source_.path(), ": tensor ", t->name, " has type ", t->type_name,
                                " (a block drafter's dense matrices are f32, f16 or bf16)");
    }
    if (t->shape != std::vector<int64_t>{rows, cols}) {
      return InvalidArgumentError(source_.path(), ": tensor ", t->name, ": expected ",
                                  ShapeString({rows, cols}), ", file has ", ShapeString(t->shape));
    }
    out->packed = false;
    out->w = WeightMatrix{t->type, rows, cols, t->data, RowBytes(t->type, cols)};
    return Status::Ok();
  }

 private:
  const ModelSource& source_;
};

size_t LinearBytes(const Linear& l) {
  return l.present() ? l.bytes() : 0;
}

// ----------------------------------------------------------------------------- the pass

// out = W · norm?(x) for rows [0, n): the forward pass's forms (model/project.h), chosen from the
// row count as Forward chooses them for a segment.
void Project(const ProjectContext& p, const Linear& l, const float* x, int64_t ldx, int64_t n,
             const float* norm, const GemmOut& out) {
  if (!l.packed) {
    ProjectDense(p, l, x, ldx, n, norm, out);
  } else if (n == 1) {
    ProjectOneRow(p, l, x, ldx, norm, out);
  } else {
    ProjectPacked(p, l, x, ldx, n, norm, out, n >= kTileFormMinRows);
  }
}

// cos / sin of rows [0, n) at positions first..first+n-1 (angles in double, as the forward).
void RopeTables(const std::vector<double>& inv_freq, int32_t first, int32_t n, ForwardScratch& s) {
  const size_t half = inv_freq.size();
  for (int32_t t = 0; t < n; ++t) {
    const double pos = static_cast<double>(first + t);
    for (size_t i = 0; i < half; ++i) {
      const double angle = pos * inv_freq[i];
      s.rope_cos[static_cast<size_t>(t) * half + i] = static_cast<float>(std::cos(angle));
      s.rope_sin[static_cast<size_t>(t) * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

// K and V of rows [0, n) (already in the k and v parts of qkv): k_norm, RoPE, then stored at
// slots first..first+n-1 of every KV head of `layer`. With `q`, the q part gets q_norm and RoPE.
void FinishQkvAndStore(const ProjectContext& p, const DFlashLayerWeights& l, int32_t layer, bool q,
                       int32_t first, int32_t n, const KvCache& kv) {
  const ModelConfig& c = p.c;
  ForwardScratch& s = p.s;
  const int64_t qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim, ld = qd + 2 * kvd;
  const int32_t half = c.head_dim / 2;
  p.pool.ParallelFor(n, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      float* qr = s.qkv + t * ld;
      float* kr = qr + qd;
      const float* cs = s.rope_cos + t * half;
      const float* sn = s.rope_sin + t * half;
      if (q) {
        for (int32_t h = 0; h < c.n_heads; ++h)
          p.k.rmsnorm(qr + h * hd, l.q_norm, c.rms_eps, hd, qr + h * hd);
        p.k.rope(qr, c.n_heads, hd, cs, sn, false);
      }
      for (int32_t h = 0; h < c.n_kv_heads; ++h)
        p.k.rmsnorm(kr + h * hd, l.k_norm, c.rms_eps, hd, kr + h * hd);
      p.k.rope(kr, c.n_kv_heads, hd, cs, sn, false);
    }
  });
  p.pool.ParallelFor(c.n_kv_heads, [&](int64_t b, int64_t e, int) {
    for (int64_t g = b; g < e; ++g) {
      p.k.kv_store(kv.head(layer, static_cast<int32_t>(g)), first, n, s.qkv + qd + g * hd, ld,
                   s.qkv + qd + kvd + g * hd, ld);
    }
  });
}

}  // namespace

std::string_view DFlashWeightsName(DFlashWeights w) {
  switch (w) {
    case DFlashWeights::kFloat:
      return "f32";
    case DFlashWeights::kInt8:
      return "int8";
    case DFlashWeights::kInt4:
      return "int4";
  }
  return "?";
}

bool ParseDFlashWeights(std::string_view name, DFlashWeights* out) {
  for (DFlashWeights w : {DFlashWeights::kFloat, DFlashWeights::kInt8, DFlashWeights::kInt4}) {
    if (name == DFlashWeightsName(w)) {
      *out = w;
      return true;
    }
  }
  return false;
}

template <typename Self, typename MatrixFn, typename VectorFn>
Status DFlashDrafter::VisitTensors(Self& self, MatrixFn&& matrix, VectorFn&& vector) {
  const ModelConfig& c = self.config_.layers;
  const int64_t d = c.d_model, q = c.q_dim(), kv = c.kv_dim(), ff = c.d_ff, hd = c.head_dim;
  const int64_t features =
      static_cast<int64_t>(self.config_.target_layer_ids.size()) * self.config_.target_d_model;
  POCKET_RETURN_IF_ERROR(matrix(std::string("fc.weight"), d, features, self.fc_));
  POCKET_RETURN_IF_ERROR(vector(std::string("hidden_norm.weight"), d, self.hidden_norm_));
  POCKET_RETURN_IF_ERROR(vector(std::string("norm.weight"), d, self.norm_));
  for (int32_t i = 0; i < c.n_layers; ++i) {
    auto& l = self.layers_[static_cast<size_t>(i)];
    auto name = [i](const char* suffix) { return StrCat("layers.", i, ".", suffix); };
    POCKET_RETURN_IF_ERROR(vector(name("input_layernorm.weight"), d, l.attn_norm));
    POCKET_RETURN_IF_ERROR(vector(name("post_attention_layernorm.weight"), d, l.ffn_norm));
    POCKET_RETURN_IF_ERROR(matrix(name("self_attn.q_proj.weight"), q, d, l.wq));
    POCKET_RETURN_IF_ERROR(matrix(name("self_attn.k_proj.weight"), kv, d, l.wk));
    POCKET_RETURN_IF_ERROR(matrix(name("self_attn.v_proj.weight"), kv, d, l.wv));
    POCKET_RETURN_IF_ERROR(matrix(name("self_attn.o_proj.weight"), d, q, l.wo));
    POCKET_RETURN_IF_ERROR(vector(name("self_attn.q_norm.weight"), hd, l.q_norm));
    POCKET_RETURN_IF_ERROR(vector(name("self_attn.k_norm.weight"), hd, l.k_norm));
    POCKET_RETURN_IF_ERROR(matrix(name("mlp.gate_proj.weight"), ff, d, l.w_gate));
    POCKET_RETURN_IF_ERROR(matrix(name("mlp.up_proj.weight"), ff, d, l.w_up));
    POCKET_RETURN_IF_ERROR(matrix(name("mlp.down_proj.weight"), d, ff, l.w_down));
  }
  return Status::Ok();
}

void DFlashDrafter::InitRope() {
  const ModelConfig& c = config_.layers;
  const int32_t half = c.head_dim / 2;
  rope_inv_freq_.resize(static_cast<size_t>(half));
  for (int32_t i = 0; i < half; ++i) {
    rope_inv_freq_[static_cast<size_t>(i)] =
        std::pow(static_cast<double>(c.rope_base),
                 -2.0 * static_cast<double>(i) / static_cast<double>(c.head_dim));
  }
}

StatusOr<std::shared_ptr<const DFlashDrafter>> DFlashDrafter::Load(
    const std::string& dir, std::shared_ptr<const Model> target, const DFlashLoadOptions& options) {
  if (!target) return InvalidArgumentError("a block drafter needs its target model");
  std::shared_ptr<DFlashDrafter> m(new DFlashDrafter());
  m->target_ = std::move(target);
  m->weights_kind_ = options.weights;
  POCKET_ASSIGN_OR_RETURN(m->hf_, HfDirectory::Open(dir));
  const ModelConfig& tc = m->target_->config();
  POCKET_ASSIGN_OR_RETURN(m->config_,
                          ParseConfig(m->hf_->config(), m->hf_->dir() + "/config.json", tc));
  m->layers_.resize(static_cast<size_t>(m->config_.layers.n_layers));
  Binder b(*m->hf_, options.weights, &m->owned_floats_, &m->owned_packed_);
  POCKET_RETURN_IF_ERROR(VisitTensors(
      *m,
      [&b](const std::string& name, int64_t rows, int64_t cols, Linear& out) {
        return b.Matrix(name, rows, cols, &out);
      },
      [&b](const std::string& name, int64_t n, const float*& out) {
        return b.Vector(name, n, &out);
      }));
  m->InitRope();
  return std::shared_ptr<const DFlashDrafter>(std::move(m));
}

bool HasPackagedDrafter(const Model& model) {
  const PocketFile* pocket = model.source().pocket();
  return pocket != nullptr && pocket->Find(kPocketDrafterKey) != nullptr;
}

StatusOr<std::shared_ptr<const DFlashDrafter>> DFlashDrafter::LoadFromModel(
    std::shared_ptr<const Model> target) {
  if (!target) return InvalidArgumentError("a block drafter needs its target model");
  const ModelSource& source = target->source();
  const PocketFile* pocket = source.pocket();
  if (pocket == nullptr) {
    return NotFoundError(source.path(), " is a ", SourceKindName(source.kind()),
                         ", not a .pocket package: it holds no block drafter (store one with "
                         "pocket convert --drafter DIR, or give the drafter's directory)");
  }
  const std::string where = pocket->name() + " (meta " + kPocketDrafterKey + ")";
  const ConfigValue* v = pocket->Find(kPocketDrafterKey);
  if (v == nullptr) {
    return NotFoundError(pocket->name(), " holds no block drafter (store one with pocket convert ",
                         "--drafter DIR)");
  }
  if (v->kind != ConfigValue::Kind::kObject) {
    return DataLossError(where, ": expected an object, found ", v->json);
  }
  POCKET_ASSIGN_OR_RETURN(const auto values, ParseConfigJson(v->json, where));
  std::shared_ptr<DFlashDrafter> m(new DFlashDrafter());
  m->target_ = std::move(target);
  POCKET_ASSIGN_OR_RETURN(m->config_, ParseConfig(values, where, m->target_->config()));
  auto kind = values.find("weights");
  if (kind == values.end() || kind->second.kind != ConfigValue::Kind::kString ||
      !ParseDFlashWeights(kind->second.s, &m->weights_kind_)) {
    return InvalidArgumentError(where, ": weights is ",
                                kind == values.end() ? std::string("missing") : kind->second.json,
                                ", expected \"f32\", \"int8\" or \"int4\"");
  }
  m->layers_.resize(static_cast<size_t>(m->config_.layers.n_layers));
  const PackageBinder b(m->target_->source());
  POCKET_RETURN_IF_ERROR(VisitTensors(
      *m,
      [&b](const std::string& name, int64_t rows, int64_t cols, Linear& out) {
        return b.Matrix(name, rows, cols, &out);
      },
      [&b](const std::string& name, int64_t n, const float*& out) {
        return b.Vector(name, n, &out);
      }));
  m->InitRope();
  return std::shared_ptr<const DFlashDrafter>(std::move(m));
}

std::string DFlashDrafter::PackageConfigJson() const {
  const ModelConfig& c = config_.layers;
  std::string ids;
  for (int32_t id : config_.target_layer_ids) ids += StrCat(ids.empty() ? "" : ", ", id);
  // The floats with 9 significant digits: they read back to the values the drafter computes with.
  return StrCat("{\"architectures\": [\"", kArchitecture, "\"], \"hidden_size\": ", c.d_model,
                ", \"num_hidden_layers\": ", c.n_layers, ", \"num_attention_heads\": ", c.n_heads,
                ", \"num_key_value_heads\": ", c.n_kv_heads, ", \"head_dim\": ", c.head_dim,
                ", \"intermediate_size\": ", c.d_ff, ", \"vocab_size\": ", c.vocab_size,
                ", \"rms_norm_eps\": ", FormatFloat(c.rms_eps),
                ", \"rope_theta\": ", FormatFloat(c.rope_base),
                ", \"block_size\": ", config_.block_size,
                ", \"dflash_config\": {\"mask_token_id\": ", config_.mask_token_id,
                ", \"target_layer_ids\": [", ids, "]}, \"weights\": \"",
                DFlashWeightsName(weights_kind_), "\"}");
}

std::vector<DFlashDrafter::PackageTensor> DFlashDrafter::PackageTensors() const {
  std::vector<PackageTensor> out;
  const Status s = VisitTensors(
      *this,
      [&out](const std::string& name, int64_t, int64_t, const Linear& m) {
        out.push_back({kPocketDrafterTensorPrefix + name, &m, nullptr, 0});
        return Status::Ok();
      },
      [&out](const std::string& name, int64_t n, const float* const& v) {
        out.push_back({kPocketDrafterTensorPrefix + name, nullptr, v, n});
        return Status::Ok();
      });
  (void)s;  // the callbacks cannot fail
  return out;
}

size_t DFlashDrafter::weight_bytes() const {
  size_t total = LinearBytes(fc_);
  for (const DFlashLayerWeights& l : layers_) {
    for (const Linear* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      total += LinearBytes(*m);
    }
  }
  return total;
}

StatusOr<DFlashState> DFlashState::Create(std::shared_ptr<const DFlashDrafter> drafter,
                                          int32_t n_ctx, ThreadPool* pool, KvType kv_type) {
  if (!drafter) return InvalidArgumentError("no drafter");
  if (pool == nullptr) return InvalidArgumentError("the drafter state needs a thread pool");
  if (n_ctx <= 0) return InvalidArgumentError("drafter context must be positive, got ", n_ctx);
  const DFlashConfig& dc = drafter->config();
  const ModelConfig& c = dc.layers;
  // The block's rows take the slots just past the context.
  POCKET_ASSIGN_OR_RETURN(KvCache kv, KvCache::Create(c, n_ctx + dc.block_size, kv_type));
  // The drafter writes its cache directly (not through Forward): every page up front.
  POCKET_RETURN_IF_ERROR(kv.Reserve(0, kv.n_ctx()));
  DFlashState st(std::move(drafter), std::move(kv));
  st.pool_ = pool;
  st.n_ctx_ = n_ctx;
  st.max_rows_ = std::max(dc.block_size, kContextChunk);
  st.fs_ = std::make_unique<ForwardScratch>();
  ForwardScratch& s = *st.fs_;

  const size_t rows = static_cast<size_t>(st.max_rows_), f = sizeof(float);
  const size_t d = static_cast<size_t>(c.d_model), qd = static_cast<size_t>(c.q_dim()),
               kvd = static_cast<size_t>(c.kv_dim()), ff = static_cast<size_t>(c.d_ff),
               half = static_cast<size_t>(c.head_dim / 2),
               features = dc.target_layer_ids.size() * static_cast<size_t>(dc.target_d_model),
               vocab = static_cast<size_t>(c.vocab_size);
  const size_t max_cols = std::max({d, qd, ff, features});
  const size_t groups = (max_cols + 31) / 32;
  s.per_thread_floats = static_cast<int64_t>(std::max<size_t>(
      max_cols, static_cast<size_t>(AttentionScratchFloats(c.gqa_group(), c.head_dim))));
  s.per_thread_floats = (s.per_thread_floats + 15) / 16 * 16;
  ScratchPlan plan;
  auto at = [](auto** p) { return reinterpret_cast<void**>(p); };
  plan.Add("drafter residual", rows * d * f, at(&s.x));
  plan.Add("drafter normalized input", rows * max_cols * f, at(&s.xn));
  plan.Add("drafter qkv", rows * (qd + 2 * kvd) * f, at(&s.qkv));
  plan.Add("drafter attention out", rows * qd * f, at(&s.attn));
  plan.Add("drafter gate", rows * ff * f, at(&s.gate));
  plan.Add("drafter up", rows * ff * f, at(&s.up));
  plan.Add("drafter int8 activations", rows * max_cols, at(&s.quant.q));
  plan.Add("drafter activation scales", rows * groups * f, at(&s.quant.scale));
  plan.Add("drafter activation sums", rows * groups * f, at(&s.quant.sum));
  plan.Add("drafter rope cos", rows * half * f, at(&s.rope_cos));
  plan.Add("drafter rope sin", rows * half * f, at(&s.rope_sin));
  plan.Add("drafter per-thread",
           static_cast<size_t>(pool->n_threads()) * static_cast<size_t>(s.per_thread_floats) * f,
           at(&s.thread_scratch));
  plan.Add("drafter context features", rows * features * f, at(&st.features_));
  plan.Add("drafter logits", static_cast<size_t>(dc.block_size) * vocab * f, at(&st.logits_));
  POCKET_ASSIGN_OR_RETURN(st.buffer_, plan.Allocate(&st.scratch_bytes_));
  return st;
}

Status DFlashState::AppendContext(int32_t pos, int32_t n, const float* hidden,
                                  int64_t layer_stride) {
  const DFlashDrafter& dr = *drafter_;
  const DFlashConfig& dc = dr.config();
  const ModelConfig& c = dc.layers;
  if (pos < 0 || pos > n_past_) {
    return OutOfRangeError("drafter context position ", pos, " is outside the context of ", n_past_,
                           " tokens");
  }
  if (n < 0) return InvalidArgumentError("cannot append ", n, " context tokens");
  if (int64_t{pos} + n > n_ctx_) {
    return OutOfRangeError("drafter context positions ", pos, " to ", int64_t{pos} + n - 1,
                           " do not fit its context of ", n_ctx_, " tokens");
  }
  const int64_t td = dc.target_d_model;
  const size_t n_ids = dc.target_layer_ids.size();
  if (n > 0 && hidden == nullptr) return InvalidArgumentError("no hidden states to append");
  if (n > 0 && n_ids > 1 && layer_stride < int64_t{n} * td) {
    return InvalidArgumentError("hidden-state layer stride ", layer_stride, " is below ", n,
                                " rows of ", td);
  }
  n_past_ = pos;  // rows past pos are dead: the target rejected them
  ForwardScratch& s = *fs_;
  const ProjectContext p{c, dr.target().kernels(), s, *pool_};
  const int64_t d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim(), ld = qd + 2 * kvd;
  const int64_t features = static_cast<int64_t>(n_ids) * td;
  for (int32_t done = 0; done < n; done += max_rows_) {
    const int32_t m = std::min(max_rows_, n - done);
    const int32_t first = pos + done;
    // Rows of [layer j's hidden state ...] in target_layer_ids order: fc's column order.
    for (int32_t i = 0; i < m; ++i) {
      for (size_t j = 0; j < n_ids; ++j) {
        std::memcpy(features_ + i * features + static_cast<int64_t>(j) * td,
                    hidden + static_cast<int64_t>(j) * layer_stride + int64_t{done + i} * td,
                    static_cast<size_t>(td) * sizeof(float));
      }
    }
    Project(p, dr.fc(), features_, features, m, nullptr, {s.x, d, Epilogue::kStore});
    pool_->ParallelFor(m, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t)
        p.k.rmsnorm(s.x + t * d, dr.hidden_norm(), c.rms_eps, d, s.x + t * d);
    });
    RopeTables(dr.rope_inv_freq(), first, m, s);
    for (int32_t layer = 0; layer < c.n_layers; ++layer) {
      const DFlashLayerWeights& l = dr.layers()[static_cast<size_t>(layer)];
      // The context features enter K and V as they are (no input_layernorm).
      Project(p, l.wk, s.x, d, m, nullptr, {s.qkv + qd, ld, Epilogue::kStore});
      Project(p, l.wv, s.x, d, m, nullptr, {s.qkv + qd + kvd, ld, Epilogue::kStore});
      FinishQkvAndStore(p, l, layer, /*q=*/false, first, m, kv_);
    }
  }
  n_past_ = pos + n;
  return Status::Ok();
}

Status DFlashState::DraftBlock(int32_t last_token, int32_t max_tokens, std::vector<int32_t>* draft,
                               float* logits_out) {
  const DFlashDrafter& dr = *drafter_;
  const DFlashConfig& dc = dr.config();
  const ModelConfig& c = dc.layers;
  const Model& target = dr.target();
  if (draft == nullptr) return InvalidArgumentError("no draft vector");
  const int64_t vocab = c.vocab_size;
  if (last_token < 0 || last_token >= vocab) {
    return OutOfRangeError("token id ", last_token, " at position ", n_past_,
                           " is outside the vocabulary (0 to ", vocab - 1, ")");
  }
  const int32_t B = dc.block_size, n = n_past_;
  ForwardScratch& s = *fs_;
  const ProjectContext p{c, target.kernels(), s, *pool_};
  const int64_t d = c.d_model, qd = c.q_dim(), kvd = c.kv_dim(), ff = c.d_ff, hd = c.head_dim,
                ld = qd + 2 * kvd;
  // The block's input: the target's embeddings of [last_token, mask, ..., mask].
  const Linear& e = target.weights().token_embd;
  for (int32_t t = 0; t < B; ++t) {
    const int32_t id = t == 0 ? last_token : dc.mask_token_id;
    float* row = s.x + int64_t{t} * d;
    if (e.packed) {
      DequantizePackedRow(e.p, id, row);
    } else {
      DequantizeRow(e.w.type, e.w.row(id), row, e.w.cols);
    }
  }
  RopeTables(dr.rope_inv_freq(), n, B, s);
  const int32_t group = c.gqa_group();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t row_blocks = (B + 15) / 16;
  for (int32_t layer = 0; layer < c.n_layers; ++layer) {
    const DFlashLayerWeights& l = dr.layers()[static_cast<size_t>(layer)];
    Project(p, l.wq, s.x, d, B, l.attn_norm, {s.qkv, ld, Epilogue::kStore});
    Project(p, l.wk, s.x, d, B, l.attn_norm, {s.qkv + qd, ld, Epilogue::kStore});
    Project(p, l.wv, s.x, d, B, l.attn_norm, {s.qkv + qd + kvd, ld, Epilogue::kStore});
    FinishQkvAndStore(p, l, layer, /*q=*/true, n, B, kv_);
    // Every row sees the context and the whole block: slots [0, n + B).
    pool_->ParallelFor(c.n_kv_heads * row_blocks, [&](int64_t b, int64_t end, int thread) {
      for (int64_t task_id = b; task_id < end; ++task_id) {
        const int64_t g = task_id / row_blocks, block = task_id % row_blocks;
        AttentionTask task;
        task.q = s.qkv + g * group * hd;
        task.ldq = ld;
        task.out = s.attn + g * group * hd;
        task.ldo = qd;
        task.kv = kv_.head(layer, static_cast<int32_t>(g));
        task.n_q_heads = group;
        task.pos0 = n;
        task.t_begin = block * 16;
        task.t_end = std::min<int64_t>(B, block * 16 + 16);
        task.scale = scale;
        task.visible_end = n + B;
        p.k.attention(task, p.thread_scratch(thread));
      }
    });
    Project(p, l.wo, s.attn, qd, B, nullptr, {s.x, d, Epilogue::kAccumulate});
    Project(p, l.w_gate, s.x, d, B, l.ffn_norm, {s.gate, ff, Epilogue::kStore});
    Project(p, l.w_up, s.x, d, B, l.ffn_norm, {s.up, ff, Epilogue::kStore});
    pool_->ParallelFor(B, [&](int64_t b, int64_t end, int) {
      p.k.silu_mul(s.gate + b * ff, s.up + b * ff, (end - b) * ff, s.gate + b * ff);
    });
    Project(p, l.w_down, s.gate, ff, B, nullptr, {s.x, d, Epilogue::kAccumulate});
  }
  // The drafter's own final norm, then the target's output matrix: the largest cost of a block at
  // a real vocabulary (pocket-0.3b: 65,536 rows), so only the rows drafted are multiplied (row 0
  // and rows past max_tokens too when the caller asks for every row's logits).
  const int32_t k = std::max(0, std::min(B - 1, max_tokens));
  float* logits = logits_out != nullptr ? logits_out : logits_;
  const int32_t first = logits_out != nullptr ? 0 : 1;
  const int32_t last = logits_out != nullptr ? B : 1 + k;
  if (last > first) {
    Project(p, target.weights().output, s.x + int64_t{first} * d, d, last - first, dr.output_norm(),
            {logits + int64_t{first} * vocab, vocab, Epilogue::kStore});
  }
  draft->resize(static_cast<size_t>(k));
  for (int32_t j = 1; j <= k; ++j) {
    const float* row = logits + int64_t{j} * vocab;
    (*draft)[static_cast<size_t>(j - 1)] =
        static_cast<int32_t>(std::max_element(row, row + vocab) - row);  // first maximum
  }
  return Status::Ok();
}

// ----------------------------------------------------------------------------- synthetic

std::vector<int32_t> DefaultTargetLayerIds(int32_t n_target_layers) {
  const int32_t L = n_target_layers;
  std::vector<int32_t> ids;
  for (int32_t id : {1, L / 2, L - 2}) {
    if (id >= 0 && id < L && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  for (int32_t id = L - 1; id >= 0 && static_cast<int32_t>(ids.size()) < std::min(3, L); --id) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

Status WriteSyntheticDFlashDrafter(const DFlashSyntheticOptions& o, const std::string& dir) {
  const ModelConfig& t = o.target;
  POCKET_RETURN_IF_ERROR(t.Validate());
  if (o.weight_type != DType::kF32 && o.weight_type != DType::kF16 &&
      o.weight_type != DType::kBF16) {
    return InvalidArgumentError("a DFlash drafter holds f32, f16 or bf16 weights, not ",
                                DTypeName(o.weight_type));
  }
  if (o.n_layers < 1) return InvalidArgumentError("drafter layers must be positive");
  if (o.block_size < 2 || o.block_size > kMaxBlockSize) {
    return InvalidArgumentError("block size ", o.block_size, " (expected 2 to ", kMaxBlockSize,
                                ")");
  }
  const int32_t mask = o.mask_token_id >= 0 ? o.mask_token_id : t.vocab_size - 1;
  if (mask >= t.vocab_size) {
    return OutOfRangeError("mask token ", mask, " is outside the vocabulary of ", t.vocab_size);
  }
  const std::vector<int32_t> ids =
      o.target_layer_ids.empty() ? DefaultTargetLayerIds(t.n_layers) : o.target_layer_ids;
  if (!IsDirectory(dir)) return NotFoundError("output directory ", dir, " does not exist");
  std::string id_list;
  for (int32_t id : ids) id_list += StrCat(id_list.empty() ? "" : ", ", id);
  const char* dtype = o.weight_type == DType::kF32   ? "float32"
                      : o.weight_type == DType::kF16 ? "float16"
                                                     : "bfloat16";
  const std::string config = StrCat(
      "{\n  \"architectures\": [\"", kArchitecture, "\"],\n  \"model_type\": \"qwen3\"",
      ",\n  \"hidden_size\": ", t.d_model, ",\n  \"intermediate_size\": ", t.d_ff,
      ",\n  \"num_hidden_layers\": ", o.n_layers, ",\n  \"num_attention_heads\": ", t.n_heads,
      ",\n  \"num_key_value_heads\": ", t.n_kv_heads, ",\n  \"head_dim\": ", t.head_dim,
      ",\n  \"hidden_act\": \"silu\",\n  \"rms_norm_eps\": ", FormatFloat(t.rms_eps),
      ",\n  \"rope_theta\": ", FormatFloat(t.rope_base), ",\n  \"vocab_size\": ", t.vocab_size,
      ",\n  \"max_position_embeddings\": ", t.n_ctx_train,
      ",\n  \"tie_word_embeddings\": false,\n  \"attention_bias\": false",
      ",\n  \"block_size\": ", o.block_size, ",\n  \"num_target_layers\": ", t.n_layers,
      ",\n  \"dflash_config\": {\"mask_token_id\": ", mask, ", \"target_layer_ids\": [", id_list,
      "]},\n  \"torch_dtype\": \"", dtype, "\"\n}\n");

  const int64_t d = t.d_model, q = t.q_dim(), kv = t.kv_dim(), ff = t.d_ff, hd = t.head_dim;
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {"fc.weight", {d, static_cast<int64_t>(ids.size()) * d}},
      {"hidden_norm.weight", {d}},
      {"norm.weight", {d}}};
  for (int32_t i = 0; i < o.n_layers; ++i) {
    auto n = [i](const char* s) { return StrCat("layers.", i, ".", s); };
    tensors.push_back({n("input_layernorm.weight"), {d}});
    tensors.push_back({n("self_attn.q_proj.weight"), {q, d}});
    tensors.push_back({n("self_attn.k_proj.weight"), {kv, d}});
    tensors.push_back({n("self_attn.v_proj.weight"), {kv, d}});
    tensors.push_back({n("self_attn.o_proj.weight"), {d, q}});
    tensors.push_back({n("self_attn.q_norm.weight"), {hd}});
    tensors.push_back({n("self_attn.k_norm.weight"), {hd}});
    tensors.push_back({n("post_attention_layernorm.weight"), {d}});
    tensors.push_back({n("mlp.gate_proj.weight"), {ff, d}});
    tensors.push_back({n("mlp.up_proj.weight"), {ff, d}});
    tensors.push_back({n("mlp.down_proj.weight"), {d, ff}});
  }
  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  const uint64_t seed = o.seed;
  const DType type = o.weight_type;
  for (const auto& [name, shape] : tensors) {
    POCKET_RETURN_IF_ERROR(w.AddTensor(
        name, type, shape, [name = name, shape = shape, type, seed](uint8_t* out, size_t) {
          // Names differ from the target's ("layers.0..." vs "model.layers.0..."), so the
          // drafter's values are not the target's even for the same seed.
          const std::vector<float> v = SyntheticTensor("dflash." + name, shape, seed);
          QuantizeRow(type, v.data(), out, static_cast<int64_t>(v.size()));
          return Status::Ok();
        }));
  }
  POCKET_RETURN_IF_ERROR(w.Write(dir + "/model.safetensors", o.input_paths));
  return WriteFileAtomically(dir + "/config.json", config, o.input_paths);
}

}  // namespace pocket
