// pocket's adapter package (.pocket, kind "adapter"): read (FromPocket), written
// (WriteAdapterPackage).
#include "model/adapter.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "base/crc32c.h"
#include "base/mapped_file.h"
#include "base/output_file.h"
#include "base/str.h"
#include "format/hf_directory.h"
#include "model/adapter_detail.h"
#include "quant/quantize.h"

namespace pocket {

namespace {

constexpr std::string_view kScalesTensor = "lora.scales";
// The embedding's and the output matrix's scales, f32 [2] (only when the adapter has either).
constexpr std::string_view kGlobalScalesTensor = "lora.global_scales";

}  // namespace

using adapter_detail::AdapterShapeKeys;
using adapter_detail::kGgufNames;
using adapter_detail::LayerFits;
using adapter_detail::MatrixView;
using adapter_detail::ParseGgufLoraName;
using adapter_detail::TargetShape;

StatusOr<std::shared_ptr<const LoraAdapter>> LoraAdapter::ParsePocket(
    const uint8_t* data, size_t size, const ModelConfig& base, const std::string& fingerprint) {
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<PocketFile> file,
                          PocketFile::Parse(data, size, "adapter.pocket"));
  return FromPocket(std::move(file), "adapter.pocket", base, fingerprint);
}

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

}  // namespace pocket
