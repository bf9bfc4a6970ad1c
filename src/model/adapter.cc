#include "model/adapter.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <new>
#include <regex>

#include "base/mapped_file.h"
#include "base/str.h"
#include "format/gguf.h"
#include "format/hf_directory.h"
#include "format/safetensors.h"
#include "model/adapter_detail.h"
#include "quant/quantize.h"

namespace pocket {
namespace {

constexpr std::array<std::string_view, kLoraAllTargets> kNames = {
    "q", "k", "v", "o", "gate", "up", "down", "embed", "lm_head"};
constexpr std::array<std::string_view, kLoraAllTargets> kModules = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
    "mlp.up_proj",      "mlp.down_proj",    "embed_tokens",     "lm_head"};

}  // namespace

namespace adapter_detail {

// [out, in] of a target's base matrix.
std::pair<int64_t, int64_t> TargetShape(const ModelConfig& c, LoraTarget t) {
  switch (t) {
    case LoraTarget::kQ:
      return {c.q_dim(), c.d_model};
    case LoraTarget::kK:
    case LoraTarget::kV:
      return {c.kv_dim(), c.d_model};
    case LoraTarget::kO:
      return {c.d_model, c.q_dim()};
    case LoraTarget::kGate:
    case LoraTarget::kUp:
      return {c.d_ff, c.d_model};
    case LoraTarget::kDown:
      return {c.d_model, c.d_ff};
    case LoraTarget::kEmbed:  // B·A[:, token]: A takes a one-hot of the vocabulary
      return {c.d_model, c.vocab_size};
    case LoraTarget::kOutput:
      return {c.vocab_size, c.d_model};
  }
  return {0, 0};
}

// The value of a pattern dict (rank_pattern, alpha_pattern) for a module: PEFT matches a key
// against the module's full name as a regular expression anchored at the end, after a dot.
bool PatternValue(const ConfigValue* pattern, const std::string& module, double* out) {
  if (pattern == nullptr || pattern->kind != ConfigValue::Kind::kObject) return false;
  for (const auto& [key, value] : pattern->numbers) {
    bool match = module == key || EndsWith(module, "." + key);
    if (!match) {
      try {
        match = std::regex_match(module, std::regex("(.*\\.)?(" + key + ")"));
      } catch (const std::regex_error&) {
        match = false;
      }
    }
    if (match) {
      *out = value;
      return true;
    }
  }
  return false;
}

// Parses "base_model.model.model.layers.N.<module>.lora_{A,B}.weight": layer, target, which.
// Returns false for names of another shape.
// The embedding's "model.embed_tokens.lora_embedding_{A,B}" (PEFT saves them without
// ".weight") and the output matrix's "lm_head.lora_{A,B}.weight" give layer -1.
bool ParsePeftName(std::string_view name, int32_t* layer, LoraTarget* target, bool* is_a) {
  for (std::string_view prefix : {"base_model.model.", "base_model."}) {
    if (StartsWith(name, prefix)) {
      name.remove_prefix(prefix.size());
      break;
    }
  }
  for (std::string_view embed :
       {"model.embed_tokens.lora_embedding_", "embed_tokens.lora_embedding_"}) {
    if (!StartsWith(name, embed)) continue;
    std::string_view rest = name.substr(embed.size());
    if (EndsWith(rest, ".weight")) rest.remove_suffix(7);
    if (rest != "A" && rest != "B") return false;
    *layer = -1;
    *target = LoraTarget::kEmbed;
    *is_a = rest == "A";
    return true;
  }
  if (name == "lm_head.lora_A.weight" || name == "lm_head.lora_B.weight") {
    *layer = -1;
    *target = LoraTarget::kOutput;
    *is_a = name == "lm_head.lora_A.weight";
    return true;
  }
  constexpr std::string_view kLayers = "model.layers.";
  if (!StartsWith(name, kLayers)) return false;
  name.remove_prefix(kLayers.size());
  const size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0) return false;
  int32_t n = 0;
  const auto [p, ec] = std::from_chars(name.data(), name.data() + dot, n);
  if (ec != std::errc() || p != name.data() + dot) return false;
  name.remove_prefix(dot + 1);
  for (int t = 0; t < kLoraTargets; ++t) {
    if (!StartsWith(name, kModules[static_cast<size_t>(t)])) continue;
    std::string_view rest = name.substr(kModules[static_cast<size_t>(t)].size());
    if (rest == ".lora_A.weight" || rest == ".lora_B.weight") {
      *layer = n;
      *target = static_cast<LoraTarget>(t);
      *is_a = rest == ".lora_A.weight";
      return true;
    }
  }
  return false;
}

// Parses llama.cpp's "blk.N.<name>.weight.lora_a" / ".lora_b": layer, target, which; and
// "token_embd.weight.lora_a" / "output.weight.lora_a" (layer -1).
bool ParseGgufLoraName(std::string_view name, int32_t* layer, int* target, bool* is_a) {
  for (int k = kLoraTargets; k < kLoraAllTargets; ++k) {
    const std::string prefix = std::string(kGgufNames[static_cast<size_t>(k)]) + ".weight.";
    if (name == prefix + "lora_a" || name == prefix + "lora_b") {
      *layer = -1;
      *target = k;
      *is_a = EndsWith(name, "lora_a");
      return true;
    }
  }
  if (!StartsWith(name, "blk.")) return false;
  name.remove_prefix(4);
  const size_t dot = name.find('.');
  int32_t n = -1;
  const auto [p, ec] = std::from_chars(name.data(), name.data() + std::min(dot, name.size()), n);
  if (dot == std::string_view::npos || ec != std::errc() || p != name.data() + dot) return false;
  name.remove_prefix(dot + 1);
  for (int k = 0; k < kLoraTargets; ++k) {
    const std::string prefix = std::string(kGgufNames[static_cast<size_t>(k)]) + ".weight.";
    if (name == prefix + "lora_a" || name == prefix + "lora_b") {
      *layer = n;
      *target = k;
      *is_a = EndsWith(name, "lora_a");
      return true;
    }
  }
  return false;
}

WeightMatrix MatrixView(const TensorInfo& t) {
  WeightMatrix w;
  w.type = t.type;
  w.rows = t.shape[0];
  w.cols = t.shape[1];
  w.data = t.data;
  w.row_bytes = static_cast<size_t>(w.cols / Traits(t.type).block_elems) *
                static_cast<size_t>(Traits(t.type).block_bytes);
  return w;
}

// The metadata of an adapter package (shapes of its base) as (key, value) pairs, in order.
std::vector<std::pair<std::string, int64_t>> AdapterShapeKeys(const ModelConfig& c) {
  return {{"n_layers", c.n_layers},     {"d_model", c.d_model},   {"n_heads", c.n_heads},
          {"n_kv_heads", c.n_kv_heads}, {"head_dim", c.head_dim}, {"d_ff", c.d_ff}};
}

// A layer index of the target: 0 to n_layers - 1 for the layers' projections, -1 for the
// embedding and the output matrix.
bool LayerFits(int32_t layer, int target, int32_t n_layers) {
  return target >= kLoraTargets ? layer == -1 : layer >= 0 && layer < n_layers;
}

// The PEFT directory and weights file of `path` (a directory or its .safetensors).
bool PeftPaths(const std::string& path, std::string* config, std::string* weights) {
  std::string dir = path;
  if (IsDirectory(path)) {
    *weights = path + "/adapter_model.safetensors";
  } else if (EndsWith(path, ".safetensors")) {
    *weights = path;
    const size_t slash = path.rfind('/');
    dir = slash == std::string::npos ? "." : path.substr(0, slash);
  } else {
    return false;
  }
  *config = dir + "/adapter_config.json";
  return FileExists(*config);
}

}  // namespace adapter_detail

using adapter_detail::MatrixView;
using adapter_detail::TargetShape;

std::string_view LoraTargetName(LoraTarget t) {
  return kNames[static_cast<size_t>(t)];
}
std::string_view LoraTargetModule(LoraTarget t) {
  return kModules[static_cast<size_t>(t)];
}
std::string LoraModulePath(int32_t layer, LoraTarget t) {
  if (t == LoraTarget::kEmbed) return "model.embed_tokens";
  if (t == LoraTarget::kOutput) return "lm_head";
  return StrCat("model.layers.", layer, ".", LoraTargetModule(t));
}
bool ParseLoraTarget(std::string_view name, LoraTarget* out) {
  for (int t = 0; t < kLoraAllTargets; ++t) {
    const std::string_view module = kModules[static_cast<size_t>(t)];
    const size_t dot = module.find('.');
    if (name == kNames[static_cast<size_t>(t)] || name == module ||
        (dot != std::string_view::npos && name == module.substr(dot + 1))) {
      *out = static_cast<LoraTarget>(t);
      return true;
    }
  }
  return false;
}

std::string LoraAdapter::targets() const {
  std::string out;
  for (int t = 0; t < kLoraAllTargets; ++t) {
    bool any = !IsLayerTarget(static_cast<LoraTarget>(t)) &&
               globals_[static_cast<size_t>(t) - kLoraTargets].present();
    for (const auto& layer : layers_)
      any |= IsLayerTarget(static_cast<LoraTarget>(t)) && layer[static_cast<size_t>(t)].present();
    if (!any) continue;
    if (!out.empty()) out += ",";
    out += kNames[static_cast<size_t>(t)];
  }
  return out;
}

Status LoraAdapter::BindPairs(
    LoraAdapter* a, const std::map<std::pair<int32_t, int>, const TensorInfo*>& as,
    const std::map<std::pair<int32_t, int>, const TensorInfo*>& bs, const ModelConfig& c,
    const std::string& weights_path, bool owns_mapping, bool hf_order,
    const std::function<StatusOr<float>(int32_t, LoraTarget, int64_t, const TensorInfo*)>&
        scale_of) {
  const uint8_t* mapped_begin = reinterpret_cast<const uint8_t*>(UINTPTR_MAX);
  const uint8_t* mapped_end = nullptr;
  for (const auto& [key, ta] : as) {
    if (!bs.count(key)) {
      return InvalidArgumentError(weights_path, ": tensor ", ta->name,
                                  " has no matching lora_B tensor");
    }
  }
  for (const auto& [key, tb] : bs) {
    auto it = as.find(key);
    if (it == as.end()) {
      return InvalidArgumentError(weights_path, ": tensor ", tb->name,
                                  " has no matching lora_A tensor");
    }
    const TensorInfo* ta = it->second;
    const auto [layer, ti] = key;
    const LoraTarget target = static_cast<LoraTarget>(ti);
    const auto [out, in] = TargetShape(c, target);
    // llama.cpp stores the embedding's A transposed, [vocab, rank] (rows looked up by token).
    const bool a_transposed = !hf_order && target == LoraTarget::kEmbed;
    const int64_t rank = ta->shape[a_transposed ? 1 : 0];
    if (ta->shape[a_transposed ? 0 : 1] != in || rank <= 0) {
      return InvalidArgumentError(weights_path, ": tensor ", ta->name, " has shape ",
                                  ShapeString(ta->shape), "; the base's ", LoraTargetModule(target),
                                  " takes ", in, " inputs, so lora_A must be [",
                                  a_transposed ? StrCat(in, ", rank") : StrCat("rank, ", in), "]");
    }
    if (tb->shape[0] != out || tb->shape[1] != rank) {
      return InvalidArgumentError(weights_path, ": tensor ", tb->name, " has shape ",
                                  ShapeString(tb->shape), "; with lora_A of rank ", rank,
                                  " and the base's ", out, " outputs it must be [", out, ", ", rank,
                                  "]");
    }
    // Q/K rows: Hugging Face order (PEFT) or the order llama.cpp's converter stores for its
    // base (GGUF adapters: permuted for interleaved RoPE in llama files, as the base).
    const bool interleaved = c.rope_style == RopeStyle::kInterleaved;
    const bool permuted_adapter = !hf_order && c.arch == Architecture::kLlama;
    if ((target == LoraTarget::kQ || target == LoraTarget::kK) && interleaved != permuted_adapter) {
      return InvalidArgumentError(
          weights_path, ": tensor ", ta->name, " adapts ", LoraTargetName(target), " in ",
          hf_order ? "Hugging Face" : "GGUF",
          " row order, but the base stores its q/k "
          "rows for ",
          interleaved ? "interleaved" : "half-split (neox)",
          " RoPE; load the base in the adapter's format, or adapt other projections");
    }
    POCKET_ASSIGN_OR_RETURN(const float scale, scale_of(layer, target, rank, ta));
    LoraPair& p = a->mutable_pair(layer, target);
    p.a = MatrixView(*ta);
    if (a_transposed) {  // back to [rank, vocab], in the stored type (f32, f16 or bf16)
      const size_t esize = p.a.row_bytes / static_cast<size_t>(p.a.cols);
      std::unique_ptr<uint8_t[]> at(new (std::nothrow)
                                        uint8_t[static_cast<size_t>(in * rank) * esize]);
      if (at == nullptr) {
        return ResourceExhaustedError("cannot allocate ", in * rank * esize, " bytes for ",
                                      ta->name);
      }
      for (int64_t t = 0; t < in; ++t) {
        for (int64_t k = 0; k < rank; ++k) {
          std::memcpy(at.get() + static_cast<size_t>(k * in + t) * esize,
                      p.a.data + static_cast<size_t>(t * rank + k) * esize, esize);
        }
      }
      if (owns_mapping) ReleaseMappedPages(ta->data, ta->n_bytes);
      p.a.rows = rank;
      p.a.cols = in;
      p.a.row_bytes = static_cast<size_t>(in) * esize;
      p.a.data = at.get();
      a->owned_.push_back(std::move(at));
    } else if (owns_mapping) {
      // A copied out of the mapping as well (as stored), so that no page of the file stays
      // resident once bound: the pages around each tensor would otherwise come back with the
      // kernel's fault-around whenever a neighbouring A is read.
      const size_t a_bytes = p.a.row_bytes * static_cast<size_t>(p.a.rows);
      std::unique_ptr<uint8_t[]> a_copy(new (std::nothrow) uint8_t[a_bytes]);
      if (a_copy == nullptr) {
        return ResourceExhaustedError("cannot allocate ", a_bytes, " bytes for ", ta->name);
      }
      std::memcpy(a_copy.get(), p.a.data, a_bytes);
      ReleaseMappedPages(ta->data, ta->n_bytes);
      p.a.data = a_copy.get();
      a->owned_.push_back(std::move(a_copy));
      mapped_begin = std::min(mapped_begin, ta->data);
      mapped_end = std::max(mapped_end, ta->data + ta->n_bytes);
      mapped_begin = std::min(mapped_begin, tb->data);
      mapped_end = std::max(mapped_end, tb->data + tb->n_bytes);
    }
    // B transposed, in bf16 when stored so, else in f32; the mapped pages of B are released.
    const WeightMatrix b = MatrixView(*tb);
    const DType bt_type = b.type == DType::kBF16 ? DType::kBF16 : DType::kF32;
    const size_t esize = bt_type == DType::kBF16 ? 2 : 4;
    std::unique_ptr<uint8_t[]> bt(new (std::nothrow)
                                      uint8_t[static_cast<size_t>(out * rank) * esize]);
    if (bt == nullptr)
      return ResourceExhaustedError("cannot allocate ", out * rank * esize, " bytes for ",
                                    tb->name);
    std::vector<float> row(static_cast<size_t>(rank));
    for (int64_t o = 0; o < out; ++o) {
      if (bt_type == DType::kBF16) {
        const uint8_t* src = b.row(o);
        for (int64_t k = 0; k < rank; ++k)
          std::memcpy(bt.get() + (k * out + o) * 2, src + k * 2, 2);
      } else {
        DequantizeRow(b.type, b.row(o), row.data(), rank);
        for (int64_t k = 0; k < rank; ++k)
          std::memcpy(bt.get() + (k * out + o) * 4, &row[static_cast<size_t>(k)], 4);
      }
    }
    if (owns_mapping) ReleaseMappedPages(tb->data, tb->n_bytes);
    p.bt.type = bt_type;
    p.bt.rows = rank;
    p.bt.cols = out;
    p.bt.data = bt.get();
    p.bt.row_bytes = static_cast<size_t>(out) * esize;
    a->owned_.push_back(std::move(bt));
    p.rank = static_cast<int32_t>(rank);
    p.scale = scale;
    a->max_rank_ = std::max(a->max_rank_, p.rank);
    ++a->n_pairs_;
    a->bytes_ += ta->n_bytes + tb->n_bytes;
  }
  // Every factor now lives in the adapter's own memory: the file's data pages can all go.
  if (owns_mapping && mapped_begin < mapped_end) {
    ReleaseMappedPages(mapped_begin, static_cast<size_t>(mapped_end - mapped_begin));
  }
  return Status::Ok();
}

void DequantizeFactorRow(const WeightMatrix& m, int64_t r, float* out) {
  if (m.block_stride == 0) {
    DequantizeRow(m.type, m.row(r), out, m.cols);
    return;
  }
  for (int64_t j = 0; j < m.cols / 32; ++j)
    DequantizeRow(m.type, m.row(r) + static_cast<size_t>(j) * m.block_stride, out + j * 32, 32);
}

Status LoraAdapter::GatherFactors() {
  // The forward pass's order: per layer the terms q|k|v, o, gate|up, down, each its A factors
  // and then its B^T factors; then the embedding's and the output matrix's pairs.
  std::vector<std::pair<WeightMatrix*, bool>> order;  // (factor, is B^T)
  auto add_term = [&](std::array<LoraPair, kLoraTargets>& layer, std::initializer_list<int> ts) {
    for (int t : ts) {
      if (layer[static_cast<size_t>(t)].present())
        order.emplace_back(&layer[static_cast<size_t>(t)].a, false);
    }
    for (int t : ts) {
      if (layer[static_cast<size_t>(t)].present())
        order.emplace_back(&layer[static_cast<size_t>(t)].bt, true);
    }
  };
  for (auto& layer : layers_) {
    add_term(layer, {0, 1, 2});
    add_term(layer, {3});
    add_term(layer, {4, 5});
    add_term(layer, {6});
  }
  for (LoraPair& p : globals_) {
    if (!p.present()) continue;
    order.emplace_back(&p.a, false);
    order.emplace_back(&p.bt, true);
  }
  auto size_of = [](const WeightMatrix& m) {
    return (m.row_bytes * static_cast<size_t>(m.rows) + 63) / 64 * 64;
  };
  size_t total = 0;
  for (const auto& [m, is_bt] : order) total += size_of(*m);
  if (total == 0) return Status::Ok();
  // Room to start on a huge page; the slack before the start is never touched.
  std::unique_ptr<uint8_t[]> buffer(new (std::nothrow) uint8_t[total + kHugePageBytes]);
  if (buffer == nullptr) {
    return ResourceExhaustedError("cannot allocate ", total, " bytes for the adapter's factors");
  }
  const uintptr_t raw = reinterpret_cast<uintptr_t>(buffer.get());
  uint8_t* at = buffer.get() + ((raw + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes - raw);
  // Only the whole huge pages: a partly used one at the end would add its unused rest to RSS.
  AdviseHugePages(at, total / kHugePageBytes * kHugePageBytes);
  for (const auto& [m, is_bt] : order) {
    const size_t n = m->row_bytes * static_cast<size_t>(m->rows);
    // B^T in Q8_0 (rank rows of whole blocks) goes blocked: a thread's outputs are then one
    // stream instead of one short stream per rank row (WeightMatrix::block_stride).
    const bool blocked = is_bt && m->type == DType::kQ8_0 && m->block_stride == 0 &&
                         m->cols % 32 == 0 && m->row_bytes == RowBytes(DType::kQ8_0, m->cols);
    if (blocked) {
      const int64_t n_blocks = m->cols / 32;
      for (int64_t j = 0; j < n_blocks; ++j) {
        for (int64_t r = 0; r < m->rows; ++r) {
          std::memcpy(at + static_cast<size_t>(j * m->rows + r) * 34, m->row(r) + j * 34, 34);
        }
      }
      m->row_bytes = 34;
      m->block_stride = static_cast<size_t>(m->rows) * 34;
    } else {
      std::memcpy(at, m->data, n);
    }
    m->data = at;
    at += (n + 63) / 64 * 64;
  }
  owned_.clear();
  owned_.push_back(std::move(buffer));
  storage_.reset();  // every factor is copied, the head too: the file can go
  return Status::Ok();
}

StatusOr<std::shared_ptr<const LoraAdapter>> LoraAdapter::Load(const std::string& path,
                                                               const Model& base) {
  std::string dir = path, weights_path;
  if (EndsWith(path, ".gguf") && !IsDirectory(path)) {
    POCKET_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::Open(path));
    return FromGguf(std::move(gguf), path, base.config(), /*owns_mapping=*/true);
  }
  if (EndsWith(path, ".pocket") && !IsDirectory(path)) {
    POCKET_ASSIGN_OR_RETURN(std::unique_ptr<PocketFile> file, PocketFile::Open(path));
    return FromPocket(std::move(file), path, base.config(), BaseFingerprint(base));
  }
  if (IsDirectory(path)) {
    weights_path = path + "/adapter_model.safetensors";
  } else if (EndsWith(path, ".safetensors")) {
    weights_path = path;
    const size_t slash = path.rfind('/');
    dir = slash == std::string::npos ? "." : path.substr(0, slash);
  } else {
    return InvalidArgumentError(
        path, ": not an adapter (expected a PEFT directory with ",
        "adapter_config.json and adapter_model.safetensors, a llama.cpp LoRA .gguf, or a "
        "pocket adapter package)");
  }
  const std::string config_path = dir + "/adapter_config.json";
  if (!FileExists(config_path)) {
    return NotFoundError(path, ": no adapter_config.json (a PEFT adapter directory holds ",
                         "adapter_config.json and adapter_model.safetensors)");
  }
  if (!FileExists(weights_path)) {
    if (FileExists(dir + "/adapter_model.bin")) {
      return UnimplementedError(dir, "/adapter_model.bin: PyTorch pickle adapters are not ",
                                "supported; save the adapter with safe_serialization=True");
    }
    return NotFoundError(weights_path, ": no such file");
  }
  POCKET_ASSIGN_OR_RETURN(std::string config_text, ReadFileToString(config_path));
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                          SafetensorsFile::Open(weights_path));
  return FromPeft(config_text, config_path, std::move(file), weights_path, path, base.config(),
                  /*owns_mapping=*/true);
}

bool SameAdapters(const AdapterSet& a, const AdapterSet& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].adapter != b[i].adapter || a[i].scale != b[i].scale) return false;
  }
  return true;
}

int64_t AdapterMidFloats(const AdapterSet& set) {
  int64_t best = 0;
  if (set.empty()) return 0;
  const int32_t n_layers = set.front().adapter->n_layers();
  // Parts sharing one matrix: q|k|v, o, gate|up, down.
  static constexpr std::array<std::pair<int, int>, 4> kGroups = {{{0, 3}, {3, 4}, {4, 6}, {6, 7}}};
  for (int32_t l = 0; l < n_layers; ++l) {
    for (const auto& [begin, end] : kGroups) {
      int64_t sum = 0;
      for (const AdapterUse& u : set) {
        for (int t = begin; t < end; ++t)
          sum += u.adapter->pair(l, static_cast<LoraTarget>(t)).rank;
      }
      best = std::max(best, sum);
    }
  }
  for (const LoraTarget t : {LoraTarget::kEmbed, LoraTarget::kOutput}) {
    int64_t sum = 0;
    for (const AdapterUse& u : set) sum += u.adapter->pair(0, t).rank;
    best = std::max(best, sum);
  }
  return best;
}

std::string AdapterSetName(const AdapterSet& set) {
  std::string out;
  for (const AdapterUse& u : set) {
    if (!out.empty()) out += ",";
    out += u.adapter->path();
    if (u.scale != 1.0f) {
      char buf[32];
      std::snprintf(buf, sizeof buf, ":%g", static_cast<double>(u.scale));
      out += buf;
    }
  }
  return out;
}

Status ParseAdapterArg(std::string_view arg, std::string* path, float* scale) {
  *scale = 1.0f;
  *path = std::string(arg);
  const size_t colon = arg.rfind(':');
  if (colon == std::string_view::npos) return Status::Ok();
  const std::string tail(arg.substr(colon + 1));
  char* end = nullptr;
  const float v = std::strtof(tail.c_str(), &end);
  if (tail.empty() || end != tail.c_str() + tail.size()) return Status::Ok();  // part of the path
  if (!std::isfinite(v)) {
    return InvalidArgumentError("--lora ", QuoteBytes(arg), ": the scale must be a finite number");
  }
  *path = std::string(arg.substr(0, colon));
  *scale = v;
  return Status::Ok();
}

}  // namespace pocket
