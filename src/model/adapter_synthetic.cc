// Synthetic adapters in PEFT's layout (pocket make-adapter).
#include "model/adapter.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/float16.h"
#include "base/output_file.h"
#include "base/rng.h"
#include "base/str.h"
#include "format/safetensors.h"
#include "model/adapter_detail.h"
#include "quant/quantize.h"

namespace pocket {

using adapter_detail::TargetShape;

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

}  // namespace pocket
