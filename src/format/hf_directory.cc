#include "format/hf_directory.h"

#include <nlohmann/json.hpp>
#include <set>

#include "base/mapped_file.h"

namespace pocket {
namespace {

using Json = nlohmann::json;

ConfigValue ToConfigValue(const Json& v) {
  ConfigValue c;
  c.json = v.dump();
  if (v.is_null()) {
    c.kind = ConfigValue::Kind::kNull;
  } else if (v.is_boolean()) {
    c.kind = ConfigValue::Kind::kBool;
    c.b = v.get<bool>();
  } else if (v.is_number_integer()) {
    c.kind = ConfigValue::Kind::kInt;
    c.i = v.get<int64_t>();
    c.f = static_cast<double>(c.i);
  } else if (v.is_number()) {
    c.kind = ConfigValue::Kind::kFloat;
    c.f = v.get<double>();
  } else if (v.is_string()) {
    c.kind = ConfigValue::Kind::kString;
    c.s = v.get<std::string>();
  } else if (v.is_array()) {
    c.kind = ConfigValue::Kind::kArray;
    c.array_size = v.size();
    for (const Json& e : v) {
      if (e.is_number_integer()) c.ints.push_back(e.get<int64_t>());
      if (e.is_string()) c.strings.push_back(e.get<std::string>());
    }
  } else {
    c.kind = ConfigValue::Kind::kObject;
    for (auto it = v.begin(); it != v.end(); ++it) {
      ++c.object_size;
      if (it.value().is_number()) c.numbers.emplace_back(it.key(), it.value().get<double>());
    }
  }
  return c;
}

}  // namespace

StatusOr<std::map<std::string, ConfigValue>> ParseConfigJson(const std::string& text,
                                                             const std::string& name) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return DataLossError(name, ": not valid JSON");
  if (!j.is_object()) return DataLossError(name, ": expected a JSON object");
  std::map<std::string, ConfigValue> out;
  for (auto it = j.begin(); it != j.end(); ++it) out[it.key()] = ToConfigValue(it.value());
  return out;
}

StatusOr<std::unique_ptr<HfDirectory>> HfDirectory::Open(const std::string& dir) {
  std::unique_ptr<HfDirectory> hf(new HfDirectory());
  hf->dir_ = dir;
  const std::string config_path = dir + "/config.json";
  if (!FileExists(config_path)) {
    return NotFoundError(dir, ": no config.json; a Hugging Face model directory needs config.json ",
                         "and model.safetensors (or shards with model.safetensors.index.json)");
  }
  POCKET_ASSIGN_OR_RETURN(std::string config_text, ReadFileToString(config_path));
  POCKET_ASSIGN_OR_RETURN(hf->config_, ParseConfigJson(config_text, config_path));

  std::vector<std::string> shard_paths;
  const std::string single = dir + "/model.safetensors";
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (FileExists(index_path)) {
    POCKET_ASSIGN_OR_RETURN(std::string index_text, ReadFileToString(index_path));
    Json index = Json::parse(index_text, nullptr, /*allow_exceptions=*/false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
        !index["weight_map"].is_object()) {
      return DataLossError(index_path, ": expected an object with a \"weight_map\" object");
    }
    std::set<std::string> shards;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      if (!it.value().is_string()) {
        return DataLossError(index_path, ": weight_map[", it.key(), "] is not a file name");
      }
      const std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos || shard == "..") {
        return DataLossError(index_path, ": shard name ", QuoteBytes(shard),
                             " is not a plain file name");
      }
      shards.insert(shard);
    }
    for (const std::string& s : shards) shard_paths.push_back(dir + "/" + s);
  } else if (FileExists(single)) {
    shard_paths.push_back(single);
  } else {
    return NotFoundError(dir, ": no model.safetensors and no model.safetensors.index.json");
  }

  std::set<std::string> names;
  for (const std::string& path : shard_paths) {
    POCKET_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(path));
    for (const TensorInfo& t : file->tensors()) {
      if (!names.insert(t.name).second) {
        return DataLossError(path, ": tensor ", t.name, " appears in more than one shard");
      }
      hf->tensors_.push_back(t);
    }
    hf->files_.push_back(std::move(file));
  }
  if (FileExists(dir + "/tokenizer.json")) hf->tokenizer_json_path_ = dir + "/tokenizer.json";
  return hf;
}

const ConfigValue* HfDirectory::Find(const std::string& key) const {
  auto it = config_.find(key);
  return it == config_.end() ? nullptr : &it->second;
}

}  // namespace pocket
