// A Hugging Face model directory: config.json, weights in model.safetensors or in shards listed
// by model.safetensors.index.json, tokenizer.json and tokenizer_config.json.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"
#include "format/safetensors.h"

namespace pocket {

// A top-level config.json value, flattened so that layers above need no JSON library.
struct ConfigValue {
  enum class Kind { kNull, kBool, kInt, kFloat, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool b = false;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  std::vector<int64_t> ints;         // integer arrays (eos_token_id: [1, 2])
  std::vector<std::string> strings;  // the string elements of arrays (classifier_labels)
  size_t array_size = 0;             // elements of an array, of any type
  // The numeric members of an object (rank_pattern: {"q_proj": 8}), in the file's order;
  // object_size counts members of any type.
  std::vector<std::pair<std::string, double>> numbers;
  size_t object_size = 0;
  std::string json;  // compact JSON text of the value (for messages)
};

class HfDirectory {
 public:
  static StatusOr<std::unique_ptr<HfDirectory>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, ConfigValue>& config() const { return config_; }
  const ConfigValue* Find(const std::string& key) const;
  // "" when the directory has no tokenizer.json.
  const std::string& tokenizer_json_path() const { return tokenizer_json_path_; }

 private:
  HfDirectory() = default;
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, ConfigValue> config_;
  std::string tokenizer_json_path_;
};

// Parses a JSON object's top level into ConfigValues (exposed for tests and generation_config).
StatusOr<std::map<std::string, ConfigValue>> ParseConfigJson(const std::string& text,
                                                             const std::string& name);

}  // namespace pocket
