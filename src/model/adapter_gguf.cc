// llama.cpp's GGUF LoRA adapters (general.type = adapter).
#include "model/adapter.h"

#include <cmath>
#include <map>

#include "base/str.h"
#include "format/gguf.h"
#include "model/adapter_detail.h"
#include "quant/quantize.h"

namespace pocket {

using adapter_detail::LayerFits;
using adapter_detail::ParseGgufLoraName;

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

}  // namespace pocket
