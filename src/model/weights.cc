#include "model/weights.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>

#include "base/mapped_file.h"
#include "quant/packed.h"

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

  bool Has(const std::string& canonical) const {
    return source_.FindTensor(source_.kind() == SourceKind::kHfDirectory ? HfTensorName(canonical)
                                                                         : canonical) != nullptr;
  }

  Status Matrix(const std::string& canonical, int64_t rows, int64_t cols, Linear* out) {
    POCKET_ASSIGN_OR_RETURN(const TensorInfo* t, Find(canonical));
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
    if (t->shape != std::vector<int64_t>{rows, cols}) {
      return InvalidArgumentError(source_.path(), ": tensor ", t->name, ": expected ",
                                  ShapeString({rows, cols}), ", file has ", ShapeString(t->shape));
    }
    out->packed = false;
    out->w = WeightMatrix{t->type, rows, cols, AlignedData(*t), RowBytes(t->type, cols)};
    return Status::Ok();
  }

  Status Vector(const std::string& canonical, int64_t n, const float** out) {
    POCKET_ASSIGN_OR_RETURN(const TensorInfo* t, Find(canonical));
    if (t->shape != std::vector<int64_t>{n}) {
      return InvalidArgumentError(source_.path(), ": tensor ", t->name, ": expected ",
                                  ShapeString({n}), ", file has ", ShapeString(t->shape));
    }
    if (t->packed || !IsBlockAligned(t->type, n)) {
      return InvalidArgumentError(source_.path(), ": tensor ", t->name, " of ", n,
                                  " elements cannot be ", DTypeName(t->type));
    }
    if (t->type == DType::kF32) {  // used in place, like the matrices
      *out = reinterpret_cast<const float*>(AlignedData(*t));
      return Status::Ok();
    }
    std::unique_ptr<float[]> buf(new float[static_cast<size_t>(n)]);
    DequantizeRow(t->type, AlignedData(*t), buf.get(), n);
    *out = buf.get();
    w_->owned_bytes += static_cast<size_t>(n) * sizeof(float);
    w_->owned.push_back(std::move(buf));
    return Status::Ok();
  }

 private:
  // The tensor's bytes at an address aligned for its element type. Files normally align their
  // data (GGUF to general.alignment, safetensors writers pad the header), but a safetensors
  // header of odd length leaves every tensor misaligned; those are copied once, and counted.
  const uint8_t* AlignedData(const TensorInfo& t) {
    if (reinterpret_cast<uintptr_t>(t.data) % alignof(float) == 0) return t.data;
    const size_t floats = (t.n_bytes + sizeof(float) - 1) / sizeof(float);
    std::unique_ptr<float[]> copy(new float[floats]);
    std::memcpy(copy.get(), t.data, t.n_bytes);
    const uint8_t* data = reinterpret_cast<const uint8_t*>(copy.get());
    w_->owned_bytes += floats * sizeof(float);
    w_->owned.push_back(std::move(copy));
    return data;
  }

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

namespace {

// Repacking plan: which dense GGUF matrices become packed, and where in the one buffer.
class Repacker {
 public:
  // Plans a packed matrix made of `parts` (their rows concatenated or, when `interleave`, two
  // parts whose panels alternate) to be stored in *target (and *also) by Execute. Returns false,
  // planning nothing, when the parts cannot be packed together exactly.
  bool Add(std::vector<Linear> parts, bool interleave, Linear* target, Linear* also = nullptr) {
    // Files exported on a g64 grid (quantization-aware training: pairs of blocks share scale and
    // min) are kept at g64, which reads 10% fewer bytes per Q4_1 weight than g32.
    int32_t group = 64;
    for (const Linear& part : parts) {
      if (!LayoutOf(part, 32, nullptr)) return false;
      if (group == 64 && !FitsGroup(part, 64)) group = 32;
    }
    PackedLayout first;
    LayoutOf(parts[0], group, &first);
    int64_t rows = 0;
    for (const Linear& part : parts) {
      PackedLayout l;
      if (!LayoutOf(part, group, &l) || l.codes != first.codes ||
          l.explicit_min != first.explicit_min || l.cols != first.cols) {
        return false;
      }
      if (parts.size() > 1 && l.rows % kPanelRows != 0) return false;  // panels must not straddle
      rows += l.rows;
    }
    if (interleave && (parts.size() != 2 || parts[0].w.rows != parts[1].w.rows)) return false;
    PackedLayout fused = first;
    fused.rows = rows;
    jobs_.push_back({std::move(parts), interleave, fused, total_, target, also});
    total_ += (fused.total_bytes() + 63) / 64 * 64;
    return true;
  }

  Status Execute(ModelWeights* w, bool huge_pages) {
    if (jobs_.empty()) return Status::Ok();
    // Aligned to a huge page, so that the buffer can be backed by huge pages from its start (the
    // unused head is never touched, so it costs address space only).
    const size_t align = huge_pages ? kHugePageBytes : 64;
    w->repacked.reset(new (std::nothrow) uint8_t[total_ + align]);
    if (!w->repacked) {
      return ResourceExhaustedError("cannot allocate ", HumanBytes(total_), " to repack weights");
    }
    uint8_t* base = w->repacked.get();
    base += (align - reinterpret_cast<uintptr_t>(base) % align) % align;
    if (huge_pages) AdviseHugePages(base, total_);
    w->repacked_bytes = total_;
    std::vector<uint8_t> tmp;
    for (const Job& job : jobs_) {
      uint8_t* dst = base + job.offset;
      size_t offset = 0;
      for (size_t i = 0; i < job.parts.size(); ++i) {
        const Linear& part = job.parts[i];
        PackedLayout l;
        LayoutOf(part, job.layout.group, &l);
        const size_t panel = l.panel_bytes();
        const size_t src_panel = part.w.row_bytes * kPanelRows;
        // A few panels at a time, releasing the source pages as they are consumed, so the
        // resident set grows by the packed copy only.
        constexpr int64_t kStep = 64;
        for (int64_t j = 0; j < l.n_panels(); j += kStep) {
          const int64_t end = std::min(l.n_panels(), j + kStep);
          if (job.interleave) {
            tmp.resize(panel);
            for (int64_t q = j; q < end; ++q) {  // part i's panel q becomes panel 2q + i
              PackedLayout one = l;
              one.rows = std::min<int64_t>(kPanelRows, l.rows - q * kPanelRows);
              POCKET_RETURN_IF_ERROR(RepackGgufPanels(part.w.type, part.w.data + q * src_panel, one,
                                                      0, 1, tmp.data()));
              std::memcpy(dst + (2 * static_cast<size_t>(q) + i) * panel, tmp.data(), panel);
            }
          } else {
            POCKET_RETURN_IF_ERROR(
                RepackGgufPanels(part.w.type, part.w.data, l, j, end, dst + offset));
          }
          const size_t src_end = std::min(part.w.row_bytes * static_cast<size_t>(part.w.rows),
                                          static_cast<size_t>(end) * src_panel);
          ReleaseMappedPages(part.w.data + static_cast<size_t>(j) * src_panel,
                             src_end - static_cast<size_t>(j) * src_panel);
        }
        if (!job.interleave) offset += l.total_bytes();
      }
      Linear packed;
      packed.packed = true;
      packed.p = PackedMatrix{job.layout, dst};
      *job.target = packed;
      if (job.also != nullptr) *job.also = packed;
    }
    // Once more over every source, whole: where the page cache holds the file in large folios,
    // reading the next stretch maps the whole folio again, stretches released before included.
    for (const Job& job : jobs_) {
      for (const Linear& part : job.parts) {
        ReleaseMappedPages(part.w.data, part.w.row_bytes * static_cast<size_t>(part.w.rows));
      }
    }
    return Status::Ok();
  }

 private:
  static bool LayoutOf(const Linear& l, int32_t group, PackedLayout* out) {
    PackedLayout unused;
    return !l.packed && l.w.data != nullptr &&
           PackedLayoutForGguf(l.w.type, l.w.rows, l.w.cols, out ? out : &unused, group);
  }
  // Whether every row's blocks share their scales in groups of `group` columns. Reads the matrix
  // once, releasing the pages it has read, so the check adds no resident memory.
  static bool FitsGroup(const Linear& l, int32_t group) {
    if (!LayoutOf(l, group, nullptr)) return false;
    constexpr int64_t kStep = 1024;
    for (int64_t r0 = 0; r0 < l.w.rows; r0 += kStep) {
      const int64_t r1 = std::min(l.w.rows, r0 + kStep);
      bool fits = true;
      for (int64_t r = r0; r < r1 && fits; ++r) {
        fits = GgufRowFitsGroup(l.w.type, l.w.row(r), l.w.cols, group);
      }
      ReleaseMappedPages(l.w.row(r0), static_cast<size_t>(r1 - r0) * l.w.row_bytes);
      if (!fits) return false;
    }
    return true;
  }
  struct Job {
    std::vector<Linear> parts;
    bool interleave;
    PackedLayout layout;
    size_t offset;
    Linear* target;
    Linear* also;
  };
  std::vector<Job> jobs_;
  size_t total_ = 0;
};

size_t LinearBytes(const Linear& l) {
  return l.present() ? l.bytes() : 0;
}

}  // namespace

size_t ModelWeights::decode_weight_bytes() const {
  size_t total = LinearBytes(output);
  for (const LayerWeights& l : layers) {
    total += LinearBytes(l.qkv) + LinearBytes(l.wq) + LinearBytes(l.wk) + LinearBytes(l.wv) +
             LinearBytes(l.wo) + LinearBytes(l.gate_up) + LinearBytes(l.w_gate) +
             LinearBytes(l.w_up) + LinearBytes(l.w_down);
  }
  return total;
}

std::pair<const uint8_t*, const uint8_t*> ModelWeights::decode_weight_span() const {
  const uint8_t *lo = nullptr, *hi = nullptr;
  auto take = [&](const Linear& l) {
    if (!l.present()) return;
    const uint8_t* data = l.packed ? l.p.data : l.w.data;
    if (lo == nullptr || data < lo) lo = data;
    if (hi == nullptr || data + l.bytes() > hi) hi = data + l.bytes();
  };
  take(output);
  for (const LayerWeights& l : layers) {
    for (const Linear* m :
         {&l.qkv, &l.wq, &l.wk, &l.wv, &l.wo, &l.gate_up, &l.w_gate, &l.w_up, &l.w_down}) {
      take(*m);
    }
  }
  return {lo, hi};
}

StatusOr<ModelWeights> BindWeights(const ModelSource& source, const ModelConfig& c,
                                   const BindOptions& options) {
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
    // Packages store Q/K/V fused (rows q | k | v) and gate/up as interleaved panel pairs.
    if (b.Has(name("attn_qkv.weight"))) {
      POCKET_RETURN_IF_ERROR(b.Matrix(name("attn_qkv.weight"), q + 2 * kv, d, &l.qkv));
      if (!l.qkv.packed)
        return InvalidArgumentError(source.path(), ": ", name("attn_qkv.weight"),
                                    " must be packed");
    } else {
      POCKET_RETURN_IF_ERROR(b.Matrix(name("attn_q.weight"), q, d, &l.wq));
      POCKET_RETURN_IF_ERROR(b.Matrix(name("attn_k.weight"), kv, d, &l.wk));
      POCKET_RETURN_IF_ERROR(b.Matrix(name("attn_v.weight"), kv, d, &l.wv));
    }
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
    if (b.Has(name("ffn_gate_up.weight"))) {
      POCKET_RETURN_IF_ERROR(b.Matrix(name("ffn_gate_up.weight"), 2 * ff, d, &l.gate_up));
      if (!l.gate_up.packed || ff % kPanelRows != 0) {
        return InvalidArgumentError(source.path(), ": ", name("ffn_gate_up.weight"),
                                    " must be packed with whole panels");
      }
    } else {
      POCKET_RETURN_IF_ERROR(b.Matrix(name("ffn_gate.weight"), ff, d, &l.w_gate));
      POCKET_RETURN_IF_ERROR(b.Matrix(name("ffn_up.weight"), ff, d, &l.w_up));
    }
    POCKET_RETURN_IF_ERROR(b.Matrix(name("ffn_down.weight"), d, ff, &l.w_down));
  }

  if (options.repack && source.kind() == SourceKind::kGguf) {
    Repacker r;
    for (LayerWeights& l : w.layers) {
      if (r.Add({l.wq, l.wk, l.wv}, false, &l.qkv)) l.wq = l.wk = l.wv = Linear();
      if (r.Add({l.w_gate, l.w_up}, true, &l.gate_up)) l.w_gate = l.w_up = Linear();
      r.Add({l.wo}, false, &l.wo);
      r.Add({l.w_down}, false, &l.w_down);
    }
    // A tied embedding is the output matrix: packed once, used for both.
    r.Add({w.output}, false, &w.output, c.tied_output ? &w.token_embd : nullptr);
    POCKET_RETURN_IF_ERROR(r.Execute(&w, options.huge_pages));
  }
  if (options.huge_pages) {
    // Every decode step streams these in full. One range from the first to the last (the norms
    // between them are read too): huge pages need whole aligned 2 MB stretches of one advised
    // mapping, which per-matrix advice would cut at every norm.
    const auto [lo, hi] = w.decode_weight_span();
    if (lo != nullptr) AdviseHugePages(lo, static_cast<size_t>(hi - lo));
  }
  auto dense_bytes = [](const Linear& l) { return l.present() && !l.packed ? l.bytes() : 0; };
  w.mapped_bytes = dense_bytes(w.token_embd) + (c.tied_output ? 0 : dense_bytes(w.output));
  for (const LayerWeights& l : w.layers) {
    for (const Linear* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      w.mapped_bytes += dense_bytes(*m);
    }
  }
  return w;
}

}  // namespace pocket
