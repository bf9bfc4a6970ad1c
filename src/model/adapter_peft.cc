// PEFT adapters: adapter_config.json and adapter_model.safetensors.
#include "model/adapter.h"

#include <cmath>
#include <map>

#include "base/str.h"
#include "format/hf_directory.h"
#include "format/safetensors.h"
#include "model/adapter_detail.h"
#include "quant/quantize.h"

namespace pocket {

using adapter_detail::LayerFits;
using adapter_detail::ParsePeftName;
using adapter_detail::PatternValue;

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

}  // namespace pocket
