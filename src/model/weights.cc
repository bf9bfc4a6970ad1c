#include "model/weights.h"

#include <cstdio>
#include <cstring>

#include "quant/quantize.h"

namespace pocket {
namespace {

// Canonical (GGUF) name suffix of a per-layer tensor -> Hugging Face suffix.
struct NamePair {
  const char* gguf;
  const char* hf;
};
constexpr NamePair kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};
constexpr NamePair kGlobalNames[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};

std::string SupportedTypes() {
  std::string s;
  for (int i = 0; i < static_cast<int>(DType::kCount); ++i) {
    if (i) s += ", ";
    s += DTypeName(static_cast<DType>(i));
  }
  return s;
}

class Binder {
 public:
  Binder(const ModelSource& source, ModelWeights* w) : source_(source), w_(w) {}

  StatusOr<const TensorInfo*> Find(const std::string& canonical) const {
    std::string name = canonical;
    if (source_.kind() == SourceKind::kHfDirectory) name = HfTensorName(canonical);
    const TensorInfo* t = source_.FindTensor(name);
    if (t == nullptr) {
      return NotFoundError(source_.path(), ": tensor ", name, " is missing");
    }
    if (!t->type_supported) {
      return UnimplementedError(source_.path(), ": tensor ", t->name, " has type ", t->type_name,
                                ", which pocket does not support (supported: ", SupportedTypes(),
                                ")");
    }
    return t;
  }

  Status Matrix(const std::string& canonical, int64_t rows, int64_t cols, WeightMatrix* out) {
    POCKET_ASSIGN_OR_RETURN(const TensorInfo* t, Find(canonical));
    if (t->shape != std::vector<int64_t>{rows, cols}) {
      return InvalidArgumentError(source_.path(), ": tensor ", t->name, ": expected ",
                                  ShapeString({rows, cols}), ", file has ", ShapeString(t->shape));
    }
    *out = WeightMatrix{t->type, rows, cols, t->data, RowBytes(t->type, cols)};
    w_->mapped_bytes += t->n_bytes;
    return Status::Ok();
  }

  Status Vector(const std::string& canonical, int64_t n, const float** out) {
    POCKET_ASSIGN_OR_RETURN(const TensorInfo* t, Find(canonical));
    if (t->shape != std::vector<int64_t>{n}) {
      return InvalidArgumentError(source_.path(), ": tensor ", t->name, ": expected ",
                                  ShapeString({n}), ", file has ", ShapeString(t->shape));
    }
    if (!IsBlockAligned(t->type, n)) {
      return InvalidArgumentError(source_.path(), ": tensor ", t->name, " of ", n,
                                  " elements cannot be ", DTypeName(t->type));
    }
    std::unique_ptr<float[]> buf(new float[static_cast<size_t>(n)]);
    DequantizeRow(t->type, t->data, buf.get(), n);
    *out = buf.get();
    w_->owned_bytes += static_cast<size_t>(n) * sizeof(float);
    w_->owned.push_back(std::move(buf));
    return Status::Ok();
  }

 private:
  const ModelSource& source_;
  ModelWeights* w_;
};

}  // namespace

std::string HfTensorName(const std::string& canonical) {
  for (const NamePair& p : kGlobalNames) {
    if (canonical == p.gguf) return p.hf;
  }
  int layer = -1;
  int consumed = 0;
  if (std::sscanf(canonical.c_str(), "blk.%d.%n", &layer, &consumed) == 1 && consumed > 0) {
    const std::string rest = canonical.substr(static_cast<size_t>(consumed));
    for (const NamePair& p : kLayerNames) {
      if (rest == p.gguf) return StrCat("model.layers.", layer, ".", p.hf);
    }
  }
  return "";
}

StatusOr<ModelWeights> BindWeights(const ModelSource& source, const ModelConfig& c) {
  ModelWeights w;
  Binder b(source, &w);
  // Llama 3 style frequency factors mean RoPE scaling, which the forward does not implement.
  if (source.FindTensor("rope_freqs.weight") != nullptr) {
    return UnimplementedError(source.path(), ": tensor rope_freqs.weight (RoPE scaling) is not ",
                              "supported yet");
  }
  const int64_t d = c.d_model, q = c.q_dim(), kv = c.kv_dim(), ff = c.d_ff, hd = c.head_dim;
  POCKET_RETURN_IF_ERROR(b.Matrix("token_embd.weight", c.vocab_size, d, &w.token_embd));
  POCKET_RETURN_IF_ERROR(b.Vector("output_norm.weight", d, &w.output_norm));
  if (c.tied_output) {
    w.output = w.token_embd;
  } else {
    POCKET_RETURN_IF_ERROR(b.Matrix("output.weight", c.vocab_size, d, &w.output));
  }
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (int i = 0; i < c.n_layers; ++i) {
    LayerWeights& l = w.layers[static_cast<size_t>(i)];
    auto name = [i](const char* suffix) { return StrCat("blk.", i, ".", suffix); };
    POCKET_RETURN_IF_ERROR(b.Vector(name("attn_norm.weight"), d, &l.attn_norm));
    POCKET_RETURN_IF_ERROR(b.Matrix(name("attn_q.weight"), q, d, &l.wq));
    POCKET_RETURN_IF_ERROR(b.Matrix(name("attn_k.weight"), kv, d, &l.wk));
    POCKET_RETURN_IF_ERROR(b.Matrix(name("attn_v.weight"), kv, d, &l.wv));
    if (c.qkv_bias) {
      POCKET_RETURN_IF_ERROR(b.Vector(name("attn_q.bias"), q, &l.bq));
      POCKET_RETURN_IF_ERROR(b.Vector(name("attn_k.bias"), kv, &l.bk));
      POCKET_RETURN_IF_ERROR(b.Vector(name("attn_v.bias"), kv, &l.bv));
    }
    if (c.qk_norm) {
      POCKET_RETURN_IF_ERROR(b.Vector(name("attn_q_norm.weight"), hd, &l.q_norm));
      POCKET_RETURN_IF_ERROR(b.Vector(name("attn_k_norm.weight"), hd, &l.k_norm));
    }
    POCKET_RETURN_IF_ERROR(b.Matrix(name("attn_output.weight"), d, q, &l.wo));
    POCKET_RETURN_IF_ERROR(b.Vector(name("ffn_norm.weight"), d, &l.ffn_norm));
    POCKET_RETURN_IF_ERROR(b.Matrix(name("ffn_gate.weight"), ff, d, &l.w_gate));
    POCKET_RETURN_IF_ERROR(b.Matrix(name("ffn_up.weight"), ff, d, &l.w_up));
    POCKET_RETURN_IF_ERROR(b.Matrix(name("ffn_down.weight"), d, ff, &l.w_down));
  }
  return w;
}

}  // namespace pocket
