// What an adapter file is without a base model (pocket info, LooksLikeAdapter).
#include "model/adapter.h"

#include <set>

#include "base/mapped_file.h"
#include "base/str.h"
#include "format/gguf.h"
#include "format/hf_directory.h"
#include "format/safetensors.h"
#include "model/adapter_detail.h"

namespace pocket {

using adapter_detail::ParseGgufLoraName;
using adapter_detail::ParsePeftName;
using adapter_detail::PeftPaths;

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

}  // namespace pocket
