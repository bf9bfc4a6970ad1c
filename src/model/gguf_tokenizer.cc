// Builds a TokenizerSpec from a GGUF file's tokenizer.ggml.* metadata.
#include "format/gguf.h"
#include "model/model.h"

namespace pocket {

StatusOr<std::shared_ptr<const Tokenizer>> TokenizerFromGguf(const GgufFile& gguf) {
  POCKET_ASSIGN_OR_RETURN(std::string model, gguf.GetString("tokenizer.ggml.model"));
  if (model != "gpt2") {
    return UnimplementedError(gguf.name(), ": tokenizer.ggml.model ", QuoteBytes(model),
                              " is not supported (supported: gpt2, the byte-level BPE of ",
                              "Qwen and Llama 3); pass --tokenizer tokenizer.json");
  }
  TokenizerSpec spec;
  spec.kind = TokenizerKind::kByteLevelBpe;
  std::string pre = "default";
  if (gguf.Find("tokenizer.ggml.pre") != nullptr) {
    POCKET_ASSIGN_OR_RETURN(pre, gguf.GetString("tokenizer.ggml.pre"));
  }
  if (pre != "qwen2") {
    return UnimplementedError(gguf.name(), ": tokenizer.ggml.pre ", QuoteBytes(pre),
                              " is not supported (supported: qwen2)");
  }
  spec.pre_tokenizer = pre;
  POCKET_ASSIGN_OR_RETURN(const GgufValue* tokens,
                          gguf.GetArray("tokenizer.ggml.tokens", GgufType::kString));
  spec.tokens.reserve(tokens->strings.size());
  for (std::string_view t : tokens->strings) spec.tokens.emplace_back(t);
  if (const GgufValue* types = gguf.Find("tokenizer.ggml.token_type")) {
    if (types->type != GgufType::kArray || types->count != tokens->count ||
        types->elem_type == GgufType::kString || types->elem_type == GgufType::kArray) {
      return InvalidArgumentError(gguf.name(), ": tokenizer.ggml.token_type must be an integer ",
                                  "array as long as tokenizer.ggml.tokens (", tokens->count, ")");
    }
    spec.types.resize(static_cast<size_t>(types->count));
    for (uint64_t i = 0; i < types->count; ++i) {
      const int64_t t = types->ArrayInt(i);
      if (t < 1 || t > 6) {
        return InvalidArgumentError(gguf.name(), ": tokenizer.ggml.token_type[", i, "] is ", t,
                                    " (expected 1 to 6)");
      }
      spec.types[static_cast<size_t>(i)] = static_cast<TokenType>(t);
    }
  }
  POCKET_ASSIGN_OR_RETURN(const GgufValue* merges,
                          gguf.GetArray("tokenizer.ggml.merges", GgufType::kString));
  spec.merges.reserve(merges->strings.size());
  for (size_t i = 0; i < merges->strings.size(); ++i) {
    std::string_view m = merges->strings[i];
    const size_t space = m.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == m.size() ||
        m.find(' ', space + 1) != std::string_view::npos) {
      return InvalidArgumentError(gguf.name(), ": tokenizer.ggml.merges[", i, "] ", QuoteBytes(m),
                                  " is not two tokens separated by one space");
    }
    spec.merges.emplace_back(std::string(m.substr(0, space)), std::string(m.substr(space + 1)));
  }
  auto id = [&](const char* key, int32_t* out) -> Status {
    if (gguf.Find(key) == nullptr) return Status::Ok();
    POCKET_ASSIGN_OR_RETURN(int64_t v, gguf.GetInt(key));
    if (v < 0 || v >= static_cast<int64_t>(spec.tokens.size())) {
      return InvalidArgumentError(gguf.name(), ": ", key, " is ", v, ", outside the vocabulary of ",
                                  spec.tokens.size());
    }
    *out = static_cast<int32_t>(v);
    return Status::Ok();
  };
  POCKET_RETURN_IF_ERROR(id("tokenizer.ggml.bos_token_id", &spec.bos_id));
  POCKET_RETURN_IF_ERROR(id("tokenizer.ggml.eos_token_id", &spec.eos_id));
  POCKET_RETURN_IF_ERROR(id("tokenizer.ggml.padding_token_id", &spec.pad_id));
  if (gguf.Find("tokenizer.ggml.add_bos_token") != nullptr) {
    POCKET_ASSIGN_OR_RETURN(spec.add_bos, gguf.GetBool("tokenizer.ggml.add_bos_token"));
  }
  if (gguf.Find("tokenizer.chat_template") != nullptr) {
    POCKET_ASSIGN_OR_RETURN(spec.chat_template, gguf.GetString("tokenizer.chat_template"));
  }
  auto tok = Tokenizer::FromSpec(std::move(spec));
  if (!tok.ok()) return tok.status().WithContext(gguf.name());
  return tok;
}

}  // namespace pocket
