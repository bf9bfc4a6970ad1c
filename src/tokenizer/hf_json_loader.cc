// Tokenizer::FromHfJsonFile: reads a Hugging Face tokenizer.json (and tokenizer_config.json beside
// it). A DOM parse of a 150K-token file takes ~150 ms, so we parse with SAX: model.vocab and
// model.merges stream straight into vectors and only the small rest of the file becomes a DOM.
// We accept exactly the configuration we implement (byte-level BPE with the Qwen2 split) and name
// the field of anything else.
#include <nlohmann/json.hpp>

#include <exception>
#include <optional>

#include "base/mapped_file.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/qwen2_pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace pocket {
namespace {

using Json = nlohmann::json;

// SAX handler: a DOM for everything but model.vocab and model.merges.
class TokenizerJsonHandler final : public nlohmann::json_sax<Json> {
 public:
  Json root;
  std::vector<std::pair<std::string, int64_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  std::string error;  // why the handler stopped the parse

  bool null() override { return AddValue(Json(nullptr)); }
  bool boolean(bool v) override { return AddValue(Json(v)); }
  bool number_integer(number_integer_t v) override { return AddInteger(v); }
  bool number_unsigned(number_unsigned_t v) override {
    if (v > static_cast<number_unsigned_t>(INT64_MAX)) return AddValue(Json(v));
    return AddInteger(static_cast<int64_t>(v));
  }
  bool number_float(number_float_t v, const string_t&) override {
    if (!stack_.empty() && stack_.back().role == Role::kVocab)
      return Fail("an id that is not an integer");
    return AddValue(Json(v));
  }
  bool string(string_t& v) override {
    if (!stack_.empty()) {
      switch (stack_.back().role) {
        case Role::kMergePair:
          pair_.push_back(std::move(v));
          return true;
        case Role::kMerges: {
          // Older files write a merge as one string "left right".
          const size_t space = v.find(' ');
          if (space == std::string::npos || v.find(' ', space + 1) != std::string::npos) {
            return Fail(StrCat("merge ", merges.size(), " ", QuoteBytes(v),
                               " is not two parts separated by one space"));
          }
          merges.emplace_back(v.substr(0, space), v.substr(space + 1));
          return true;
        }
        case Role::kVocab:
          return Fail(StrCat("token ", QuoteBytes(key_), " has a string id"));
        default:
          break;
      }
    }
    return AddValue(Json(std::move(v)));
  }
  bool binary(binary_t&) override { return Fail("binary value"); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool start_object(std::size_t) override {
    if (stack_.empty()) {
      root = Json::object();
      stack_.push_back({Role::kDom, &root});
      return true;
    }
    const Frame top = stack_.back();
    if (top.role != Role::kDom && top.role != Role::kModel) return Fail("unexpected object");
    if (top.role == Role::kModel && key_ == "vocab") {
      stack_.push_back({Role::kVocab, nullptr});
      return true;
    }
    const Role role = (stack_.size() == 1 && key_ == "model") ? Role::kModel : Role::kDom;
    stack_.push_back({role, AddChild(Json::object())});
    return true;
  }
  bool end_object() override {
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (stack_.empty()) {
      root = Json::array();
      stack_.push_back({Role::kDom, &root});
      return true;
    }
    const Frame top = stack_.back();
    if (top.role == Role::kModel && key_ == "merges") {
      stack_.push_back({Role::kMerges, nullptr});
      return true;
    }
    if (top.role == Role::kMerges) {
      pair_.clear();
      stack_.push_back({Role::kMergePair, nullptr});
      return true;
    }
    if (top.role != Role::kDom && top.role != Role::kModel) return Fail("unexpected array");
    stack_.push_back({Role::kDom, AddChild(Json::array())});
    return true;
  }
  bool end_array() override {
    if (stack_.back().role == Role::kMergePair) {
      if (pair_.size() != 2) {
        return Fail(StrCat("merge ", merges.size(), " has ", pair_.size(), " parts, expected 2"));
      }
      merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
    }
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    error = StrCat("JSON syntax error at byte ", position, ": ", ex.what());
    return false;
  }

 private:
  enum class Role { kDom, kModel, kVocab, kMerges, kMergePair };
  struct Frame {
    Role role;
    Json* node;  // the DOM container (kDom, kModel)
  };

  bool Fail(const std::string& what) {
    const char* where = "";
    if (!stack_.empty() && stack_.back().role == Role::kVocab) where = "model.vocab: ";
    if (!stack_.empty() &&
        (stack_.back().role == Role::kMerges || stack_.back().role == Role::kMergePair)) {
      where = "model.merges: ";
    }
    error = StrCat(where, what);
    return false;
  }
  bool AddInteger(int64_t v) {
    if (!stack_.empty() && stack_.back().role == Role::kVocab) {
      vocab.emplace_back(std::move(key_), v);
      return true;
    }
    return AddValue(Json(v));
  }
  Json* AddChild(Json value) {
    Json* node = stack_.back().node;
    if (node->is_object()) return &((*node)[key_] = std::move(value));
    node->push_back(std::move(value));
    return &node->back();
  }
  bool AddValue(Json value) {
    if (stack_.empty()) {
      root = std::move(value);
      return true;
    }
    switch (stack_.back().role) {
      case Role::kDom:
      case Role::kModel:
        AddChild(std::move(value));
        return true;
      case Role::kVocab:
        return Fail(StrCat("token ", QuoteBytes(key_), " has an id that is not an integer"));
      default:
        return Fail("a merge part that is not a string");
    }
  }

  std::vector<Frame> stack_;
  std::string key_;
  std::vector<std::string> pair_;
};

const Json* Field(const Json& object, const char* name) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(name);
  return it == object.end() ? nullptr : &*it;
}

std::string FieldString(const Json& object, const char* name) {
  const Json* v = Field(object, name);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

bool FieldTrue(const Json& object, const char* name) {
  const Json* v = Field(object, name);
  return v != nullptr && v->is_boolean() && v->get<bool>();
}

Status CheckModel(const Json& model) {
  const std::string type = FieldString(model, "type");
  if (type != "BPE") {
    return UnimplementedError("model.type is \"", type,
                              "\"; only byte-level BPE is implemented (model.type = \"BPE\")");
  }
  if (FieldTrue(model, "byte_fallback")) {
    return UnimplementedError(
        "model.byte_fallback = true (SentencePiece-style BPE) is not implemented; only byte-level "
        "BPE is");
  }
  if (FieldTrue(model, "ignore_merges")) {
    return UnimplementedError("model.ignore_merges = true is not implemented");
  }
  const Json* dropout = Field(model, "dropout");
  if (dropout != nullptr && !dropout->is_null() && !(dropout->is_number() && *dropout == 0)) {
    return UnimplementedError("model.dropout (BPE dropout) is not implemented");
  }
  for (const char* name : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!FieldString(model, name).empty()) {
      return UnimplementedError("model.", name, " is not implemented");
    }
  }
  return Status::Ok();
}

Status CheckPreTokenizer(const Json& root) {
  const Json* pre = Field(root, "pre_tokenizer");
  if (pre == nullptr || pre->is_null()) {
    return UnimplementedError(
        "pre_tokenizer is missing; only the Qwen2 Split + ByteLevel is implemented");
  }
  const std::string type = FieldString(*pre, "type");
  const Json* list = Field(*pre, "pretokenizers");
  if (type != "Sequence" || list == nullptr || !list->is_array() || list->size() != 2) {
    return UnimplementedError(
        "pre_tokenizer.type is \"", type,
        "\"; only a Sequence of the Qwen2 Split and ByteLevel is implemented");
  }
  const Json& split = (*list)[0];
  const Json& byte_level = (*list)[1];
  if (FieldString(split, "type") != "Split") {
    return UnimplementedError("pre_tokenizer.pretokenizers[0].type is \"",
                              FieldString(split, "type"), "\"; expected \"Split\"");
  }
  const Json* pattern = Field(split, "pattern");
  const std::string regex = pattern != nullptr ? FieldString(*pattern, "Regex") : std::string();
  if (regex != kQwen2SplitRegex) {
    return UnimplementedError("pre_tokenizer.pretokenizers[0].pattern.Regex ",
                              QuoteBytes(regex, 200),
                              " is not implemented; only the Qwen2 regex is");
  }
  if (FieldString(split, "behavior") != "Isolated" || FieldTrue(split, "invert")) {
    return UnimplementedError("pre_tokenizer.pretokenizers[0].behavior \"",
                              FieldString(split, "behavior"),
                              "\" is not implemented; only \"Isolated\" without invert is");
  }
  if (FieldString(byte_level, "type") != "ByteLevel" || FieldTrue(byte_level, "add_prefix_space") ||
      FieldTrue(byte_level, "use_regex")) {
    return UnimplementedError(
        "pre_tokenizer.pretokenizers[1] is not implemented; only ByteLevel with add_prefix_space = "
        "false and use_regex = false is");
  }
  const Json* decoder = Field(root, "decoder");
  if (decoder != nullptr && !decoder->is_null() && FieldString(*decoder, "type") != "ByteLevel") {
    return UnimplementedError("decoder.type \"", FieldString(*decoder, "type"),
                              "\" is not implemented; only ByteLevel is");
  }
  return Status::Ok();
}

// Text of a special-token entry in tokenizer_config.json: "<|im_end|>" or {"content": ...}.
std::optional<std::string> ConfigTokenText(const Json& config, const char* name) {
  const Json* v = Field(config, name);
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object() && Field(*v, "content") != nullptr) return FieldString(*v, "content");
  return std::nullopt;
}

Status ReadTokenizerConfig(const std::string& path, TokenizerSpec* spec) {
  POCKET_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  Json config;
  try {
    config = Json::parse(text);
  } catch (const Json::parse_error& e) {
    return DataLossError(path, ": JSON syntax error at byte ", e.byte, ": ", e.what());
  }
  if (!config.is_object()) return DataLossError(path, ": expected a JSON object");
  if (const Json* tmpl = Field(config, "chat_template"); tmpl != nullptr) {
    if (tmpl->is_string()) {
      spec->chat_template = tmpl->get<std::string>();
    } else if (tmpl->is_array()) {
      // Newer files: [{"name": "default", "template": ...}, {"name": "tool_use", ...}].
      for (const Json& entry : *tmpl) {
        if (FieldString(entry, "name") == "default" || spec->chat_template.empty()) {
          spec->chat_template = FieldString(entry, "template");
        }
      }
    }
  }
  spec->add_bos = FieldTrue(config, "add_bos_token");
  struct Special {
    const char* name;
    int32_t* id;
  };
  for (const Special& special :
       {Special{"bos_token", &spec->bos_id}, Special{"eos_token", &spec->eos_id},
        Special{"pad_token", &spec->pad_id}, Special{"unk_token", &spec->unk_id}}) {
    const std::optional<std::string> token = ConfigTokenText(config, special.name);
    if (!token.has_value()) continue;
    int32_t id = -1;
    for (size_t i = 0; i < spec->tokens.size() && id < 0; ++i) {
      const bool added =
          spec->types[i] == TokenType::kControl || spec->types[i] == TokenType::kUserDefined;
      if (added && spec->tokens[i] == *token) id = static_cast<int32_t>(i);
    }
    const std::string stored = byte_level::EncodeBytes(*token);
    for (size_t i = 0; i < spec->tokens.size() && id < 0; ++i) {
      if (spec->tokens[i] == stored) id = static_cast<int32_t>(i);
    }
    if (id < 0) {
      return DataLossError(path, ": ", special.name, " ", QuoteBytes(*token),
                           " is not in the vocabulary");
    }
    *special.id = id;
  }
  return Status::Ok();
}

StatusOr<TokenizerSpec> SpecFromJson(TokenizerJsonHandler& parsed) {
  const Json& root = parsed.root;
  const Json* model = Field(root, "model");
  if (model == nullptr) return DataLossError("no \"model\" object");
  POCKET_RETURN_IF_ERROR(CheckModel(*model));
  POCKET_RETURN_IF_ERROR(CheckPreTokenizer(root));
  TokenizerSpec spec;
  spec.kind = TokenizerKind::kByteLevelBpe;
  spec.pre_tokenizer = "qwen2";
  const Json* normalizer = Field(root, "normalizer");
  if (normalizer == nullptr || normalizer->is_null()) {
    spec.normalize_nfc = false;
  } else if (FieldString(*normalizer, "type") == "NFC") {
    spec.normalize_nfc = true;
  } else {
    return UnimplementedError("normalizer.type \"", FieldString(*normalizer, "type"),
                              "\" is not implemented (supported: NFC or none)");
  }
  // Ids must cover 0..n-1 exactly once (added tokens may repeat a vocabulary entry).
  int64_t n = 0;
  for (const auto& [token, id] : parsed.vocab) n = std::max(n, id + 1);
  const Json* added = Field(root, "added_tokens");
  if (added != nullptr && !added->is_array()) return DataLossError("added_tokens is not an array");
  if (added != nullptr) {
    for (const Json& entry : *added) {
      const Json* id = Field(entry, "id");
      if (id == nullptr || !id->is_number_integer()) return DataLossError("added token without id");
      n = std::max(n, id->get<int64_t>() + 1);
    }
  }
  // Dense ids cannot exceed the number of entries (this also bounds the allocations below).
  const size_t n_entries = parsed.vocab.size() + (added != nullptr ? added->size() : 0);
  if (n > static_cast<int64_t>(n_entries) || n > INT32_MAX) {
    return DataLossError("token id ", n - 1, " is larger than the ", n_entries,
                         " tokens defined (ids must be dense)");
  }
  spec.tokens.resize(static_cast<size_t>(n));
  spec.types.assign(static_cast<size_t>(n), TokenType::kNormal);
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (auto& [token, id] : parsed.vocab) {
    if (id < 0) return DataLossError("model.vocab: token ", QuoteBytes(token), " has id ", id);
    if (seen[id]) return DataLossError("model.vocab: id ", id, " is used twice");
    seen[id] = true;
    spec.tokens[id] = std::move(token);
  }
  if (added != nullptr) {
    for (size_t i = 0; i < added->size(); ++i) {
      const Json& entry = (*added)[i];
      const int64_t id = (*Field(entry, "id")).get<int64_t>();
      const std::string content = FieldString(entry, "content");
      if (id < 0) return DataLossError("added_tokens[", i, "].id is ", id);
      for (const char* flag : {"lstrip", "rstrip", "single_word", "normalized"}) {
        if (FieldTrue(entry, flag)) {
          return UnimplementedError("added_tokens[", i, "] (", QuoteBytes(content), "): ", flag,
                                    " = true is not implemented");
        }
      }
      if (seen[id] && spec.tokens[id] != content) {
        return DataLossError("added_tokens[", i, "] ", QuoteBytes(content), " has id ", id,
                             ", which the vocabulary gives to ", QuoteBytes(spec.tokens[id]));
      }
      seen[id] = true;
      spec.tokens[id] = content;
      spec.types[id] = FieldTrue(entry, "special") ? TokenType::kControl : TokenType::kUserDefined;
    }
  }
  for (int64_t id = 0; id < n; ++id) {
    if (!seen[id]) return DataLossError("no token has id ", id, " (ids must be dense)");
  }
  spec.merges = std::move(parsed.merges);
  return spec;
}

StatusOr<TokenizerSpec> ParseHfTokenizerJson(std::string_view json, const std::string& name) {
  try {
    TokenizerJsonHandler handler;
    const bool ok = Json::sax_parse(json.data(), json.data() + json.size(), &handler);
    if (!ok || !handler.error.empty()) {
      return DataLossError(name, ": ", handler.error.empty() ? "not valid JSON" : handler.error);
    }
    StatusOr<TokenizerSpec> parsed = SpecFromJson(handler);
    if (!parsed.ok()) return parsed.status().WithContext(name);
    return parsed;
  } catch (const std::exception& e) {
    return DataLossError(name, ": ", e.what());
  }
}

}  // namespace

StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::FromHfJson(std::string_view json,
                                                                 const std::string& name) {
  POCKET_ASSIGN_OR_RETURN(TokenizerSpec spec, ParseHfTokenizerJson(json, name));
  return FromSpec(std::move(spec));
}

StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::FromHfJsonFile(const std::string& path) {
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  POCKET_ASSIGN_OR_RETURN(TokenizerSpec spec, ParseHfTokenizerJson(file->bytes(), path));
  const size_t slash = path.find_last_of('/');
  const std::string config_path =
      (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) +
      "tokenizer_config.json";
  if (FileExists(config_path)) {
    try {
      POCKET_RETURN_IF_ERROR(ReadTokenizerConfig(config_path, &spec));
    } catch (const std::exception& e) {
      return DataLossError(config_path, ": ", e.what());
    }
  }
  return FromSpec(std::move(spec));
}

}  // namespace pocket
