#include "model/adapter.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "base/crc32c.h"
#include "base/float16.h"
#include "base/mapped_file.h"
#include "base/output_file.h"
#include "base/rng.h"
#include "base/str.h"
#include "format/gguf.h"
#include "format/hf_directory.h"
#include "format/safetensors.h"
#include "quant/quantize.h"

namespace pocket {
namespace {

constexpr std::array<std::string_view, kLoraAllTargets> kNames = {
    "q", "k", "v", "o", "gate", "up", "down", "embed", "lm_head"};
constexpr std::array<std::string_view, kLoraAllTargets> kModules = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
    "mlp.up_proj",      "mlp.down_proj",    "embed_tokens",     "lm_head"};
// llama.cpp's tensor names of the targets.
constexpr std::array<std::string_view, kLoraAllTargets> kGgufNames = {
    "attn_q", "attn_k",   "attn_v",     "attn_output", "ffn_gate",
    "ffn_up", "ffn_down", "token_embd", "output"};

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

}  // namespace

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

StatusOr<std::shared_ptr<const LoraAdapter>> LoraAdapter::ParsePocket(
    const uint8_t* data, size_t size, const ModelConfig& base, const std::string& fingerprint) {
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<PocketFile> file,
                          PocketFile::Parse(data, size, "adapter.pocket"));
  return FromPocket(std::move(file), "adapter.pocket", base, fingerprint);
}

namespace {

// The metadata of an adapter package (shapes of its base) as (key, value) pairs, in order.
std::vector<std::pair<std::string, int64_t>> AdapterShapeKeys(const ModelConfig& c) {
  return {{"n_layers", c.n_layers},     {"d_model", c.d_model},   {"n_heads", c.n_heads},
          {"n_kv_heads", c.n_kv_heads}, {"head_dim", c.head_dim}, {"d_ff", c.d_ff}};
}

constexpr std::string_view kScalesTensor = "lora.scales";
// The embedding's and the output matrix's scales, f32 [2] (only when the adapter has either).
constexpr std::string_view kGlobalScalesTensor = "lora.global_scales";

// A layer index of the target: 0 to n_layers - 1 for the layers' projections, -1 for the
// embedding and the output matrix.
bool LayerFits(int32_t layer, int target, int32_t n_layers) {
  return target >= kLoraTargets ? layer == -1 : layer >= 0 && layer < n_layers;
}

}  // namespace

// pocket's adapter package: checked against the base (kind, architecture, shapes, RoPE row
// layout, fingerprint), every section's checksum verified, factors used in place from the mapping.
StatusOr<std::shared_ptr<const LoraAdapter>> LoraAdapter::FromPocket(
    std::unique_ptr<PocketFile> file, const std::string& path, const ModelConfig& c,
    const std::string& fingerprint) {
  auto field_error = [&](std::string_view key, const auto&... what) {
    return InvalidArgumentError(path, ": field ", key, " ", what...);
  };
  const ConfigValue* kind = file->Find("kind");
  if (kind == nullptr || kind->kind != ConfigValue::Kind::kString ||
      kind->s != kAdapterPackageKind) {
    return field_error("kind", "is ", kind ? kind->json : "missing",
                       ": not an adapter package (a model package?)");
  }
  POCKET_RETURN_IF_ERROR(file->Verify());
  const ConfigValue* arch = file->Find("architecture");
  if (arch == nullptr || arch->s != ArchitectureName(c.arch)) {
    return field_error("architecture", "is ", arch ? arch->json : "missing", " but the base is ",
                       ArchitectureName(c.arch));
  }
  for (const auto& [key, value] : AdapterShapeKeys(c)) {
    const ConfigValue* v = file->Find(key);
    if (v == nullptr || v->kind != ConfigValue::Kind::kInt || v->i != value) {
      return field_error(key, "is ", v ? v->json : "missing", " but the base has ", value,
                         ": the adapter was made for another model");
    }
  }
  const std::string rope = c.rope_style == RopeStyle::kNeox ? "neox" : "interleaved";
  if (const ConfigValue* v = file->Find("rope_style"); v == nullptr || v->s != rope) {
    return field_error("rope_style", "is ", v ? v->json : "missing", " but the base stores ", rope,
                       " q/k rows (the same model in another format: convert the adapter again)");
  }
  if (const ConfigValue* v = file->Find("base_fingerprint");
      v == nullptr || v->kind != ConfigValue::Kind::kString || v->s != fingerprint) {
    return field_error("base_fingerprint", "is ", v ? v->json : "missing", " but the base's is \"",
                       fingerprint,
                       "\": the adapter was made for another model or fine-tune of this shape");
  }
  std::shared_ptr<LoraAdapter> a(new LoraAdapter());
  a->path_ = path;
  a->format_ = "pocket";
  a->layers_.resize(static_cast<size_t>(c.n_layers));
  const TensorInfo* scales = nullptr;
  const TensorInfo* global_scales = nullptr;
  std::map<std::pair<int32_t, int>, const TensorInfo*> as, bts;
  const TensorInfo* head = nullptr;
  for (const TensorInfo& t : file->tensors()) {
    if (t.name == kScalesTensor) {
      scales = &t;
      continue;
    }
    if (t.name == kGlobalScalesTensor) {
      global_scales = &t;
      continue;
    }
    if (t.name == kClassifierTensor) {
      head = &t;
      continue;
    }
    std::string name = t.name;
    const bool is_bt = EndsWith(name, ".lora_bt");
    if (is_bt) name.pop_back();  // ".lora_b": the GGUF spelling
    int32_t layer = -1;
    int target = -1;
    bool is_a = false;
    if (!ParseGgufLoraName(name, &layer, &target, &is_a) || (!is_a && !is_bt)) {
      return InvalidArgumentError(path, ": tensor ", t.name,
                                  " is not a factor of an adapter package (blk.N.<name>.weight."
                                  "lora_a / lora_bt, token_embd or output.weight.lora_a / "
                                  "lora_bt)");
    }
    if (!LayerFits(layer, target, c.n_layers)) {
      return InvalidArgumentError(path, ": tensor ", t.name, " is for layer ", layer,
                                  " but the base model has ", c.n_layers, " layers");
    }
    if (!t.type_supported || (t.type != DType::kF32 && t.type != DType::kF16 &&
                              t.type != DType::kBF16 && t.type != DType::kQ8_0)) {
      return InvalidArgumentError(path, ": tensor ", t.name, " has type ",
                                  t.type_supported ? DTypeName(t.type) : t.type_name,
                                  "; adapter factors are f32, f16, bf16 or q8_0");
    }
    if (t.shape.size() != 2 || t.shape[0] <= 0 || t.shape[1] <= 0 ||
        t.shape[1] % Traits(t.type).block_elems != 0 ||
        t.n_bytes != static_cast<size_t>(t.shape[0]) * RowBytes(t.type, t.shape[1])) {
      return InvalidArgumentError(path, ": tensor ", t.name, " has shape ", ShapeString(t.shape),
                                  " and ", t.n_bytes, " bytes of ", DTypeName(t.type));
    }
    (is_a ? as : bts)[{layer, target}] = &t;
  }
  if (scales == nullptr || scales->type != DType::kF32 || scales->shape.size() != 2 ||
      scales->shape[0] != c.n_layers || scales->shape[1] != kLoraTargets ||
      scales->n_bytes != static_cast<size_t>(c.n_layers) * kLoraTargets * 4) {
    return InvalidArgumentError(path, ": tensor ", kScalesTensor, " is ",
                                scales ? "not f32 [n_layers, 7]" : "missing");
  }
  if (global_scales != nullptr &&
      (global_scales->type != DType::kF32 || global_scales->shape.size() != 1 ||
       global_scales->shape[0] != kLoraAllTargets - kLoraTargets || global_scales->n_bytes != 8)) {
    return InvalidArgumentError(path, ": tensor ", kGlobalScalesTensor, " is not f32 [2]");
  }
  if (as.empty()) return InvalidArgumentError(path, ": no LoRA factors");
  for (const auto& [key, tb] : bts) {
    if (!as.count(key)) {
      return InvalidArgumentError(path, ": tensor ", tb->name, " has no matching lora_a tensor");
    }
  }
  for (const auto& [key, ta] : as) {
    auto it = bts.find(key);
    if (it == bts.end()) {
      return InvalidArgumentError(path, ": tensor ", ta->name, " has no matching lora_bt tensor");
    }
    const TensorInfo* tb = it->second;
    const auto [layer, ti] = key;
    const LoraTarget target = static_cast<LoraTarget>(ti);
    const auto [out, in] = TargetShape(c, target);
    const int64_t rank = ta->shape[0];
    if (ta->shape[1] != in) {
      return InvalidArgumentError(path, ": tensor ", ta->name, " has shape ",
                                  ShapeString(ta->shape), "; the base's ", LoraTargetModule(target),
                                  " takes ", in, " inputs");
    }
    if (tb->shape[0] != rank || tb->shape[1] != out) {
      return InvalidArgumentError(path, ": tensor ", tb->name, " has shape ",
                                  ShapeString(tb->shape), "; with lora_a of rank ", rank,
                                  " and the base's ", out, " outputs it must be [", rank, ", ", out,
                                  "]");
    }
    float scale;
    if (!IsLayerTarget(target)) {
      if (global_scales == nullptr) {
        return InvalidArgumentError(path, ": tensor ", ta->name, " has no scale (no tensor ",
                                    kGlobalScalesTensor, ")");
      }
      std::memcpy(&scale, global_scales->data + static_cast<size_t>(ti - kLoraTargets) * 4, 4);
    } else {
      std::memcpy(&scale, scales->data + (static_cast<size_t>(layer) * kLoraTargets + ti) * 4, 4);
    }
    if (!std::isfinite(scale)) {
      return InvalidArgumentError(path, ": tensor ",
                                  IsLayerTarget(target) ? kScalesTensor : kGlobalScalesTensor,
                                  " holds ", scale, " for ", ta->name);
    }
    LoraPair& p = a->mutable_pair(layer, target);
    p.a = MatrixView(*ta);
    p.bt = MatrixView(*tb);
    p.rank = static_cast<int32_t>(rank);
    p.scale = scale;
    a->max_rank_ = std::max(a->max_rank_, p.rank);
    ++a->n_pairs_;
    a->bytes_ += ta->n_bytes + tb->n_bytes;
  }
  // The task's classification head, with its labels.
  const ConfigValue* labels = file->Find(kPocketClassifierLabelsKey);
  if (head != nullptr || labels != nullptr) {
    const std::string field = StrCat(path, " (meta): ", kPocketClassifierLabelsKey);
    const std::string tensor = StrCat(path, ": tensor ", kClassifierTensor);
    if (head == nullptr) {
      return InvalidArgumentError(field, " is set but the file has no tensor ", kClassifierTensor);
    }
    if (labels == nullptr || labels->kind != ConfigValue::Kind::kArray ||
        labels->strings.size() != labels->array_size) {
      return InvalidArgumentError(field, " is ", labels ? labels->json : "missing",
                                  ", expected an array of strings naming the head's rows");
    }
    POCKET_RETURN_IF_ERROR(
        CheckClassifierHead(labels->strings, head->shape, c.d_model, tensor, field));
    if (head->type != DType::kF32 ||
        head->n_bytes != labels->strings.size() * static_cast<size_t>(c.d_model) * 4) {
      return InvalidArgumentError(tensor, " must be f32 [", labels->strings.size(), ", ", c.d_model,
                                  "]");
    }
    a->head_.labels = labels->strings;
    a->head_.d_model = c.d_model;
    a->head_.weight.resize(head->n_bytes / 4);
    std::memcpy(a->head_.weight.data(), head->data, head->n_bytes);
    for (float v : a->head_.weight) {
      if (!std::isfinite(v)) return InvalidArgumentError(tensor, " holds a NaN or infinity");
    }
  }
  a->storage_ = std::shared_ptr<const PocketFile>(std::move(file));
  POCKET_RETURN_IF_ERROR(a->GatherFactors());
  return std::shared_ptr<const LoraAdapter>(std::move(a));
}

std::string BaseFingerprint(const Model& base) {
  const ModelConfig& c = base.config();
  std::string shape = StrCat(ArchitectureName(c.arch));
  for (const auto& [key, value] : AdapterShapeKeys(c)) shape += StrCat(" ", key, "=", value);
  shape += StrCat(" vocab=", c.vocab_size);
  uint32_t norms = 0;
  auto add = [&norms](const float* v, int64_t n) {
    if (v != nullptr) norms = Crc32c(v, static_cast<size_t>(n) * sizeof(float), norms);
  };
  const ModelWeights& w = base.weights();
  for (const LayerWeights& l : w.layers) {
    add(l.attn_norm, c.d_model);
    add(l.ffn_norm, c.d_model);
    add(l.q_norm, c.head_dim);
    add(l.k_norm, c.head_dim);
    add(l.bq, c.q_dim());
    add(l.bk, c.kv_dim());
    add(l.bv, c.kv_dim());
  }
  add(w.output_norm, c.d_model);
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%08x%08x", Crc32c(shape.data(), shape.size()), norms);
  return hex;
}

StatusOr<AdapterPackageReport> WriteAdapterPackage(const LoraAdapter& adapter, const Model& base,
                                                   const AdapterPackageOptions& o,
                                                   const std::string& out) {
  DType type;
  if (o.factors == "int8") {
    type = DType::kQ8_0;
  } else if (o.factors == "f16") {
    type = DType::kF16;
  } else if (o.factors == "bf16") {
    type = DType::kBF16;
  } else if (o.factors == "f32") {
    type = DType::kF32;
  } else {
    return InvalidArgumentError("--lora-factors ", QuoteBytes(o.factors),
                                ": expected int8, f16, bf16 or f32");
  }
  const ModelConfig& c = base.config();
  nlohmann::json j;
  j["format"] = "pocket";
  j["kind"] = std::string(kAdapterPackageKind);
  j["architecture"] = std::string(ArchitectureName(c.arch));
  for (const auto& [key, value] : AdapterShapeKeys(c)) j[key] = value;
  j["rope_style"] = c.rope_style == RopeStyle::kNeox ? "neox" : "interleaved";
  j["base_fingerprint"] = BaseFingerprint(base);
  j["factors"] = o.factors;
  j["targets"] = adapter.targets();
  j["max_rank"] = adapter.max_rank();
  j["source"] = {{"path", o.source_path}, {"format", std::string(adapter.format())}};
  if (o.head.present()) {
    POCKET_RETURN_IF_ERROR(CheckClassifierHead(
        o.head.labels, {o.head.n_labels(), static_cast<int64_t>(o.head.d_model)}, c.d_model,
        "the classification head", "its labels"));
    j[kPocketClassifierLabelsKey] = o.head.labels;
  }
  PocketWriter w;
  w.SetMetadataJson(j.dump(2));
  AdapterPackageReport report;
  if (o.head.present()) {
    POCKET_RETURN_IF_ERROR(w.AddDenseTensor(kClassifierTensor, DType::kF32,
                                            {o.head.n_labels(), c.d_model},
                                            [&o](uint8_t* dst, size_t n) {
                                              std::memcpy(dst, o.head.weight.data(), n);
                                              return Status::Ok();
                                            }));
  }
  auto matrix = [&](const std::string& name, const WeightMatrix& m) -> Status {
    const DType t = m.cols % Traits(type).block_elems == 0 ? type : DType::kF16;
    if (t != type) ++report.f16_fallbacks;
    return w.AddDenseTensor(name, t, {m.rows, m.cols}, [m, t](uint8_t* dst, size_t) {
      std::vector<float> row(static_cast<size_t>(m.cols));
      const size_t row_bytes = RowBytes(t, m.cols);
      for (int64_t r = 0; r < m.rows; ++r) {
        DequantizeFactorRow(m, r, row.data());
        QuantizeRow(t, row.data(), dst + static_cast<size_t>(r) * row_bytes, m.cols);
      }
      return Status::Ok();
    });
  };
  std::vector<float> scales(static_cast<size_t>(c.n_layers) * kLoraTargets, 0.0f);
  for (int32_t l = 0; l < adapter.n_layers(); ++l) {
    for (int t = 0; t < kLoraTargets; ++t) {
      const LoraPair& p = adapter.pair(l, static_cast<LoraTarget>(t));
      if (!p.present()) continue;
      const std::string prefix =
          StrCat("blk.", l, ".", kGgufNames[static_cast<size_t>(t)], ".weight.");
      POCKET_RETURN_IF_ERROR(matrix(prefix + "lora_a", p.a));
      POCKET_RETURN_IF_ERROR(matrix(prefix + "lora_bt", p.bt));
      scales[static_cast<size_t>(l) * kLoraTargets + static_cast<size_t>(t)] = p.scale;
      ++report.n_pairs;
    }
  }
  POCKET_RETURN_IF_ERROR(w.AddDenseTensor(std::string(kScalesTensor), DType::kF32,
                                          {c.n_layers, kLoraTargets},
                                          [&scales](uint8_t* dst, size_t n) {
                                            std::memcpy(dst, scales.data(), n);
                                            return Status::Ok();
                                          }));
  std::array<float, kLoraAllTargets - kLoraTargets> global_scales{};
  bool any_global = false;
  for (int t = kLoraTargets; t < kLoraAllTargets; ++t) {
    const LoraPair& p = adapter.pair(0, static_cast<LoraTarget>(t));
    if (!p.present()) continue;
    const std::string prefix = StrCat(kGgufNames[static_cast<size_t>(t)], ".weight.");
    POCKET_RETURN_IF_ERROR(matrix(prefix + "lora_a", p.a));
    POCKET_RETURN_IF_ERROR(matrix(prefix + "lora_bt", p.bt));
    global_scales[static_cast<size_t>(t - kLoraTargets)] = p.scale;
    any_global = true;
    ++report.n_pairs;
  }
  if (any_global) {
    POCKET_RETURN_IF_ERROR(w.AddDenseTensor(std::string(kGlobalScalesTensor), DType::kF32,
                                            {kLoraAllTargets - kLoraTargets},
                                            [&global_scales](uint8_t* dst, size_t n) {
                                              std::memcpy(dst, global_scales.data(), n);
                                              return Status::Ok();
                                            }));
  }
  POCKET_RETURN_IF_ERROR(w.Write(out, o.inputs));
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> written, MappedFile::Open(out));
  report.file_bytes = written->size();
  return report;
}

StatusOr<std::shared_ptr<const LoraAdapter>> LoraAdapter::ParseGguf(const uint8_t* data,
                                                                    size_t size,
                                                                    const ModelConfig& base) {
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf,
                          GgufFile::Parse(data, size, "adapter.gguf"));
  return FromGguf(std::move(gguf), "adapter.gguf", base, /*owns_mapping=*/false);
}

// llama.cpp's LoRA GGUF (convert_lora_to_gguf.py): general.type "adapter", adapter.type "lora",
// adapter.lora.alpha, tensors blk.N.<name>.weight.lora_a [rank, in] and .lora_b [out, rank].
StatusOr<std::shared_ptr<const LoraAdapter>> LoraAdapter::FromGguf(std::unique_ptr<GgufFile> gguf,
                                                                   const std::string& path,
                                                                   const ModelConfig& c,
                                                                   bool owns_mapping) {
  auto field_error = [&](std::string_view key, const auto&... what) {
    return InvalidArgumentError(path, ": field ", key, " ", what...);
  };
  auto type = gguf->GetString("general.type");
  if (!type.ok() || *type != "adapter") {
    return field_error("general.type", "is ", type.ok() ? QuoteBytes(*type) : "missing",
                       ": not an adapter (a model file?)");
  }
  auto adapter_type = gguf->GetString("adapter.type");
  if (!adapter_type.ok() || *adapter_type != "lora") {
    return field_error("adapter.type", "is ",
                       adapter_type.ok() ? QuoteBytes(*adapter_type) : "missing",
                       "; only LoRA adapters are supported");
  }
  if (auto arch = gguf->GetString("general.architecture");
      arch.ok() && *arch != ArchitectureName(c.arch)) {
    return field_error("general.architecture", "is ", QuoteBytes(*arch), " but the base is ",
                       ArchitectureName(c.arch));
  }
  double alpha = 0.0;
  if (gguf->Find("adapter.lora.alpha") != nullptr) {
    POCKET_ASSIGN_OR_RETURN(alpha, gguf->GetFloat("adapter.lora.alpha"));
    if (!std::isfinite(alpha) || alpha < 0) return field_error("adapter.lora.alpha", "is ", alpha);
  }
  std::shared_ptr<LoraAdapter> a(new LoraAdapter());
  a->path_ = path;
  a->format_ = "gguf";
  a->layers_.resize(static_cast<size_t>(c.n_layers));
  std::map<std::pair<int32_t, int>, const TensorInfo*> as, bs;
  for (const TensorInfo& t : gguf->tensors()) {
    bool is_a = false;
    int32_t layer = -1;
    int target = -1;
    if (!ParseGgufLoraName(t.name, &layer, &target, &is_a)) {
      return InvalidArgumentError(
          path, ": tensor ", t.name,
          " is not a LoRA factor of a layer's attn_q/k/v/output or ffn_gate/up/down, of "
          "token_embd or of output (blk.N.<name>.weight.lora_a / lora_b)");
    }
    if (!LayerFits(layer, target, c.n_layers)) {
      return InvalidArgumentError(path, ": tensor ", t.name, " is for layer ", layer,
                                  " but the base model has ", c.n_layers, " layers");
    }
    if (!t.type_supported ||
        (t.type != DType::kF32 && t.type != DType::kF16 && t.type != DType::kBF16)) {
      return InvalidArgumentError(path, ": tensor ", t.name, " has type ",
                                  t.type_supported ? DTypeName(t.type) : t.type_name,
                                  "; LoRA factors must be F32, F16 or BF16 (convert with "
                                  "--outtype f16)");
    }
    if (t.shape.size() != 2 || t.shape[0] <= 0 || t.shape[1] <= 0) {
      return InvalidArgumentError(path, ": tensor ", t.name, " has shape ", ShapeString(t.shape),
                                  "; a LoRA factor is a matrix");
    }
    (is_a ? as : bs)[{layer, target}] = &t;
  }
  if (as.empty() && bs.empty()) {
    return InvalidArgumentError(path, ": no LoRA factors (blk.N.*.weight.lora_a / lora_b)");
  }
  POCKET_RETURN_IF_ERROR(
      BindPairs(a.get(), as, bs, c, path, owns_mapping, /*hf_order=*/false,
                [&](int32_t, LoraTarget, int64_t rank, const TensorInfo*) -> StatusOr<float> {
                  // As llama.cpp: alpha / rank, or 1 when the file gives no alpha.
                  return static_cast<float>(alpha > 0 ? alpha / static_cast<double>(rank) : 1.0);
                }));
  a->storage_ = std::shared_ptr<const GgufFile>(std::move(gguf));
  return std::shared_ptr<const LoraAdapter>(std::move(a));
}

StatusOr<std::shared_ptr<const LoraAdapter>> LoraAdapter::ParsePeft(const std::string& config_json,
                                                                    const uint8_t* safetensors,
                                                                    size_t size,
                                                                    const ModelConfig& base) {
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                          SafetensorsFile::Parse(safetensors, size, "adapter_model.safetensors"));
  return FromPeft(config_json, "adapter_config.json", std::move(file), "adapter_model.safetensors",
                  "adapter", base, /*owns_mapping=*/false);
}

StatusOr<std::shared_ptr<const LoraAdapter>> LoraAdapter::FromPeft(
    const std::string& config_text, const std::string& config_path,
    std::unique_ptr<SafetensorsFile> file, const std::string& weights_path, const std::string& path,
    const ModelConfig& c, bool owns_mapping) {
  POCKET_ASSIGN_OR_RETURN(auto config, ParseConfigJson(config_text, config_path));
  auto find = [&](const char* key) -> const ConfigValue* {
    auto it = config.find(key);
    return it == config.end() || it->second.kind == ConfigValue::Kind::kNull ? nullptr
                                                                             : &it->second;
  };
  auto field_error = [&](const char* key, const auto&... what) {
    return InvalidArgumentError(config_path, ": field \"", key, "\" ", what...);
  };
  if (const ConfigValue* v = find("peft_type");
      v != nullptr && (v->kind != ConfigValue::Kind::kString || v->s != "LORA")) {
    return field_error("peft_type", "is ", v->json, "; only LORA adapters are supported");
  }
  const ConfigValue* r = find("r");
  if (r == nullptr || r->kind != ConfigValue::Kind::kInt || r->i <= 0) {
    return field_error("r", "must be a positive integer, got ", r ? r->json : "nothing");
  }
  const ConfigValue* alpha = find("lora_alpha");
  if (alpha != nullptr && alpha->kind != ConfigValue::Kind::kInt &&
      alpha->kind != ConfigValue::Kind::kFloat) {
    return field_error("lora_alpha", "must be a number, got ", alpha->json);
  }
  bool rslora = false;
  if (const ConfigValue* v = find("use_rslora")) {
    if (v->kind != ConfigValue::Kind::kBool) return field_error("use_rslora", "must be a boolean");
    rslora = v->b;
  }
  if (const ConfigValue* v = find("use_dora");
      v != nullptr && v->kind == ConfigValue::Kind::kBool && v->b) {
    return field_error("use_dora", "is true: DoRA adapters (magnitude vectors) are not supported");
  }
  if (const ConfigValue* v = find("fan_in_fan_out"); v != nullptr && v->b) {
    return field_error("fan_in_fan_out", "is true: that is for Conv1D bases (GPT-2); ",
                       ArchitectureName(c.arch), " uses Linear layers");
  }
  if (const ConfigValue* v = find("bias");
      v != nullptr && !(v->kind == ConfigValue::Kind::kString && v->s == "none")) {
    return field_error("bias", "is ", v->json,
                       ": trained biases are not supported (only \"none\")");
  }
  if (const ConfigValue* v = find("modules_to_save");
      v != nullptr && (v->array_size > 0 || v->kind == ConfigValue::Kind::kString)) {
    return field_error("modules_to_save", "is ", v->json,
                       ": fully trained modules beside the adapter are not supported");
  }
  const ConfigValue* rank_pattern = find("rank_pattern");
  const ConfigValue* alpha_pattern = find("alpha_pattern");

  std::shared_ptr<LoraAdapter> a(new LoraAdapter());
  a->path_ = path;
  a->format_ = "peft";
  a->layers_.resize(static_cast<size_t>(c.n_layers));
  std::map<std::pair<int32_t, int>, const TensorInfo*> as, bs;
  for (const TensorInfo& t : file->tensors()) {
    int32_t layer = 0;
    LoraTarget target{};
    bool is_a = false;
    if (!ParsePeftName(t.name, &layer, &target, &is_a)) {
      std::string why =
          "is not a LoRA factor of a layer's q/k/v/o/gate/up/down projection, of embed_tokens "
          "(lora_embedding_A / B) or of lm_head";
      if (t.name.find("lora_magnitude_vector") != std::string::npos) {
        why = "is a DoRA magnitude vector: DoRA adapters are not supported";
      } else if (EndsWith(t.name, ".bias")) {
        why = "is a trained bias, which is not supported";
      }
      return InvalidArgumentError(weights_path, ": tensor ", t.name, " ", why);
    }
    if (!LayerFits(layer, static_cast<int>(target), c.n_layers)) {
      return InvalidArgumentError(weights_path, ": tensor ", t.name, " is for layer ", layer,
                                  " but the base model has ", c.n_layers, " layers");
    }
    if (!t.type_supported ||
        (t.type != DType::kF32 && t.type != DType::kF16 && t.type != DType::kBF16)) {
      return InvalidArgumentError(weights_path, ": tensor ", t.name, " has type ",
                                  t.type_supported ? DTypeName(t.type) : t.type_name,
                                  "; LoRA factors must be F32, F16 or BF16");
    }
    if (t.shape.size() != 2) {
      return InvalidArgumentError(weights_path, ": tensor ", t.name, " has shape ",
                                  ShapeString(t.shape), "; a LoRA factor is a matrix");
    }
    if (t.shape[0] <= 0 || t.shape[1] <= 0 ||
        t.n_bytes !=
            static_cast<size_t>(t.shape[0] * t.shape[1]) * (t.type == DType::kF32 ? 4 : 2)) {
      return InvalidArgumentError(weights_path, ": tensor ", t.name, " has ", t.n_bytes,
                                  " bytes for shape ", ShapeString(t.shape));
    }
    auto& slot = (is_a ? as : bs)[{layer, static_cast<int>(target)}];
    slot = &t;
  }
  if (as.empty() && bs.empty()) {
    return InvalidArgumentError(weights_path, ": no LoRA factors (lora_A / lora_B tensors)");
  }
  POCKET_RETURN_IF_ERROR(BindPairs(
      a.get(), as, bs, c, weights_path, owns_mapping, /*hf_order=*/true,
      [&](int32_t layer, LoraTarget target, int64_t rank, const TensorInfo* ta) -> StatusOr<float> {
        const std::string module = LoraModulePath(layer, target);
        double module_rank = static_cast<double>(r->i);
        PatternValue(rank_pattern, module, &module_rank);
        if (static_cast<double>(rank) != module_rank) {
          return InvalidArgumentError(weights_path, ": tensor ", ta->name, " has rank ", rank,
                                      " but adapter_config.json gives ", module_rank, " for ",
                                      module);
        }
        double module_alpha = alpha != nullptr ? alpha->f : 8.0;  // PEFT's default lora_alpha
        PatternValue(alpha_pattern, module, &module_alpha);
        return static_cast<float>(module_alpha / (rslora ? std::sqrt(static_cast<double>(rank))
                                                         : static_cast<double>(rank)));
      }));
  a->storage_ = std::shared_ptr<const SafetensorsFile>(std::move(file));
  return std::shared_ptr<const LoraAdapter>(std::move(a));
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

Status WriteSyntheticAdapter(const SyntheticAdapterOptions& o, const std::string& dir) {
  if (o.rank <= 0) return InvalidArgumentError("rank must be positive, got ", o.rank);
  if (o.targets.empty()) return InvalidArgumentError("no targets");
  if (o.type != DType::kF32 && o.type != DType::kF16 && o.type != DType::kBF16) {
    return InvalidArgumentError("adapter factors are f32, f16 or bf16, not ", DTypeName(o.type));
  }
  const ModelConfig& c = o.base;
  auto rank_of = [&](int32_t layer) {
    for (const auto& [l, r] : o.layer_ranks) {
      if (l == layer) return r;
    }
    return o.rank;
  };
  SafetensorsWriter w;
  const size_t esize = o.type == DType::kF32 ? 4 : 2;
  // Each tensor's stream is seeded from (seed, layer, target, A or B): independent of order.
  auto write_pair = [&](int32_t layer, LoraTarget t, int32_t rank) -> Status {
    const auto [out, in] = TargetShape(c, t);
    std::string a_name, b_name;
    if (t == LoraTarget::kEmbed) {  // nn.Embedding: PEFT's names, without ".weight"
      a_name = "base_model.model.model.embed_tokens.lora_embedding_A";
      b_name = "base_model.model.model.embed_tokens.lora_embedding_B";
    } else {
      const std::string base = "base_model.model." + LoraModulePath(layer, t);
      a_name = base + ".lora_A.weight";
      b_name = base + ".lora_B.weight";
    }
    for (const bool is_a : {true, false}) {
      const int64_t rows = is_a ? rank : out, cols = is_a ? in : rank;
      // The embedding's A multiplies a one-hot row: a bound of 1 keeps its term comparable.
      const float a_bound =
          t == LoraTarget::kEmbed ? 1.0f : 1.0f / std::sqrt(static_cast<float>(in));
      const float bound = is_a ? a_bound : o.init / std::sqrt(float(rank));
      const int64_t seed_layer = IsLayerTarget(t) ? layer : c.n_layers;
      const uint64_t seed = o.seed * 1000003ull + static_cast<uint64_t>(seed_layer) * 64 +
                            static_cast<uint64_t>(t) * 2 + (is_a ? 0 : 1);
      auto fill = [rows, cols, bound, seed, esize, type = o.type](uint8_t* dst, size_t n) {
        if (n != static_cast<size_t>(rows * cols) * esize) return InternalError("size");
        Rng rng(seed);
        for (int64_t i = 0; i < rows * cols; ++i) {
          const float v = (2.0f * rng.NextFloat() - 1.0f) * bound;
          if (type == DType::kF32) {
            std::memcpy(dst + i * 4, &v, 4);
          } else {
            const uint16_t h = type == DType::kF16 ? FloatToFp16(v) : FloatToBf16(v);
            std::memcpy(dst + i * 2, &h, 2);
          }
        }
        return Status::Ok();
      };
      POCKET_RETURN_IF_ERROR(w.AddTensor(is_a ? a_name : b_name, o.type, {rows, cols}, fill));
    }
    return Status::Ok();
  };
  for (int32_t layer = 0; layer < c.n_layers; ++layer) {
    for (LoraTarget t : o.targets) {
      if (IsLayerTarget(t)) POCKET_RETURN_IF_ERROR(write_pair(layer, t, rank_of(layer)));
    }
  }
  for (LoraTarget t : o.targets) {
    if (!IsLayerTarget(t)) POCKET_RETURN_IF_ERROR(write_pair(-1, t, o.rank));
  }
  w.SetMetadata("format", "pt");
  std::string targets;
  for (LoraTarget t : o.targets) {
    const std::string_view module = LoraTargetModule(t);
    targets += std::string(targets.empty() ? "" : ", ") + "\"" +
               std::string(module.substr(module.find('.') + 1)) + "\"";
  }
  std::string rank_pattern;
  for (const auto& [layer, rank] : o.layer_ranks) {
    for (LoraTarget t : o.targets) {
      if (!IsLayerTarget(t)) continue;
      rank_pattern += std::string(rank_pattern.empty() ? "" : ", ") + "\"model.layers." +
                      std::to_string(layer) + "." + std::string(LoraTargetModule(t)) +
                      "\": " + std::to_string(rank);
    }
  }
  char alpha[64];
  std::snprintf(alpha, sizeof alpha, "%.17g", o.alpha);
  const std::string config =
      "{\n  \"peft_type\": \"LORA\",\n  \"task_type\": \"CAUSAL_LM\",\n  \"r\": " +
      std::to_string(o.rank) + ",\n  \"lora_alpha\": " + alpha +
      ",\n  \"use_rslora\": " + (o.rslora ? "true" : "false") +
      ",\n  \"use_dora\": false,\n  \"lora_dropout\": 0.0,\n  \"bias\": \"none\",\n"
      "  \"fan_in_fan_out\": false,\n  \"target_modules\": [" +
      targets + "],\n  \"rank_pattern\": {" + rank_pattern +
      "},\n  \"alpha_pattern\": {},\n  \"modules_to_save\": null,\n"
      "  \"base_model_name_or_path\": \"pocket synthetic " +
      std::string(ArchitectureName(c.arch)) + "\"\n}\n";
  POCKET_RETURN_IF_ERROR(w.Write(dir + "/adapter_model.safetensors", o.input_paths));
  POCKET_ASSIGN_OR_RETURN(OutputFile f,
                          OutputFile::Create(dir + "/adapter_config.json", o.input_paths));
  POCKET_RETURN_IF_ERROR(f.Write(config.data(), config.size()));
  return f.Commit();
}

namespace {

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

}  // namespace

bool LooksLikeAdapter(const std::string& path) {
  std::string config, weights;
  if (PeftPaths(path, &config, &weights)) return true;
  if (EndsWith(path, ".pocket") && !IsDirectory(path)) {
    auto file = PocketFile::Open(path);
    if (!file.ok()) return false;
    const ConfigValue* kind = (*file)->Find("kind");
    return kind != nullptr && kind->s == kAdapterPackageKind;
  }
  if (!EndsWith(path, ".gguf") || IsDirectory(path)) return false;
  auto gguf = GgufFile::Open(path);
  if (!gguf.ok()) return false;
  auto type = (*gguf)->GetString("general.type");
  return type.ok() && *type == "adapter";
}

StatusOr<AdapterFileInfo> DescribeAdapterFile(const std::string& path) {
  AdapterFileInfo info;
  info.path = path;
  std::set<std::pair<int32_t, int>> pairs;
  std::array<bool, kLoraAllTargets> present{};
  auto add_factor = [&](const TensorInfo& t, int32_t layer, int target, bool is_a) {
    info.n_layers = std::max(info.n_layers, layer + 1);
    present[static_cast<size_t>(target)] = true;
    if (is_a && t.shape.size() == 2) {
      pairs.insert({layer, target});
      // llama.cpp's token_embd A is [vocab, rank].
      const bool transposed =
          info.format == "gguf" && target == static_cast<int>(LoraTarget::kEmbed);
      const int32_t rank = static_cast<int32_t>(t.shape[transposed ? 1 : 0]);
      info.min_rank = info.min_rank == 0 ? rank : std::min(info.min_rank, rank);
      info.max_rank = std::max(info.max_rank, rank);
    }
    info.factor_bytes += t.n_bytes;
  };
  auto count = [&](const TensorInfo& t) {
    ++info.n_tensors;
    ++info.tensors_by_type[t.type_supported ? std::string(DTypeName(t.type)) : t.type_name];
  };
  std::string config_path, weights_path;
  if (PeftPaths(path, &config_path, &weights_path)) {
    info.format = "peft";
    POCKET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(config_path));
    POCKET_ASSIGN_OR_RETURN(auto config, ParseConfigJson(text, config_path));
    if (auto it = config.find("lora_alpha");
        it != config.end() && (it->second.kind == ConfigValue::Kind::kInt ||
                               it->second.kind == ConfigValue::Kind::kFloat)) {
      info.alpha = it->second.kind == ConfigValue::Kind::kInt ? static_cast<double>(it->second.i)
                                                              : it->second.f;
    }
    if (auto it = config.find("use_rslora");
        it != config.end() && it->second.kind == ConfigValue::Kind::kBool) {
      info.rslora = it->second.b;
    }
    if (auto it = config.find("base_model_name_or_path");
        it != config.end() && it->second.kind == ConfigValue::Kind::kString) {
      info.architecture = it->second.s;
    }
    POCKET_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file,
                            SafetensorsFile::Open(weights_path));
    info.file_bytes = file->file_bytes();
    for (const TensorInfo& t : file->tensors()) {
      count(t);
      int32_t layer = 0;
      LoraTarget target{};
      bool is_a = false;
      if (ParsePeftName(t.name, &layer, &target, &is_a)) {
        add_factor(t, layer, static_cast<int>(target), is_a);
      }
    }
  } else if (EndsWith(path, ".pocket") && !IsDirectory(path)) {
    info.format = "pocket";
    POCKET_ASSIGN_OR_RETURN(std::unique_ptr<PocketFile> file, PocketFile::Open(path));
    const ConfigValue* kind = file->Find("kind");
    if (kind == nullptr || kind->s != kAdapterPackageKind) {
      return InvalidArgumentError(path, ": field kind is ", kind ? kind->json : "missing",
                                  ": not an adapter package (a model package?)");
    }
    if (const ConfigValue* v = file->Find("architecture")) info.architecture = v->s;
    if (const ConfigValue* v = file->Find("base_fingerprint")) {
      info.architecture += StrCat(info.architecture.empty() ? "" : ", ", "fingerprint ", v->s);
    }
    info.file_bytes = file->file_bytes();
    for (const TensorInfo& t : file->tensors()) {
      count(t);
      std::string name = t.name;
      if (EndsWith(name, ".lora_bt")) name.pop_back();
      int32_t layer = -1;
      int target = -1;
      bool is_a = false;
      if (ParseGgufLoraName(name, &layer, &target, &is_a)) add_factor(t, layer, target, is_a);
    }
  } else if (EndsWith(path, ".gguf") && !IsDirectory(path)) {
    info.format = "gguf";
    POCKET_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::Open(path));
    auto type = gguf->GetString("general.type");
    if (!type.ok() || *type != "adapter") {
      return InvalidArgumentError(path, ": field general.type is ",
                                  type.ok() ? QuoteBytes(*type) : "missing",
                                  ": not an adapter (a model file?)");
    }
    if (auto arch = gguf->GetString("general.architecture"); arch.ok()) info.architecture = *arch;
    if (gguf->Find("adapter.lora.alpha") != nullptr) {
      POCKET_ASSIGN_OR_RETURN(info.alpha, gguf->GetFloat("adapter.lora.alpha"));
    }
    info.file_bytes = gguf->file_bytes();
    for (const TensorInfo& t : gguf->tensors()) {
      count(t);
      int32_t layer = -1;
      int target = -1;
      bool is_a = false;
      if (ParseGgufLoraName(t.name, &layer, &target, &is_a)) add_factor(t, layer, target, is_a);
    }
  } else {
    return InvalidArgumentError(
        path,
        ": not an adapter (expected a PEFT directory with adapter_config.json and "
        "adapter_model.safetensors, or a llama.cpp LoRA .gguf)");
  }
  info.n_pairs = static_cast<int32_t>(pairs.size());
  for (int t = 0; t < kLoraAllTargets; ++t) {
    if (!present[static_cast<size_t>(t)]) continue;
    if (!info.targets.empty()) info.targets += ",";
    info.targets += LoraTargetName(static_cast<LoraTarget>(t));
  }
  return info;
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
