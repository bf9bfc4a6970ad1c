#include "convert/prune_model.h"

#include <cstring>

#include "base/output_file.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "quant/quantize.h"

namespace pocket {

Status PruneGgufVocab(const std::string& input, const std::string& output,
                      const TokenizerSpec& full, const PrunedVocab& pruned,
                      const std::vector<std::string>& other_inputs) {
  std::vector<std::string> inputs = other_inputs;
  inputs.push_back(input);
  POCKET_RETURN_IF_ERROR(CheckNotAnInput(output, inputs));
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> in, GgufFile::Open(input));
  POCKET_ASSIGN_OR_RETURN(const GgufValue* tokens,
                          in->GetArray("tokenizer.ggml.tokens", GgufType::kString));
  if (tokens->count != full.tokens.size()) {
    return FailedPreconditionError(input, ": the model has ", tokens->count,
                                   " tokens, the tokenizer being pruned has ", full.tokens.size());
  }
  for (size_t i = 0; i < full.tokens.size(); ++i) {
    if (tokens->strings[i] != full.tokens[i]) {
      return FailedPreconditionError(input, ": token ", i, " is ", QuoteBytes(tokens->strings[i]),
                                     " in the model but ", QuoteBytes(full.tokens[i]),
                                     " in the tokenizer being pruned");
    }
  }
  const int64_t old_vocab = static_cast<int64_t>(full.tokens.size());
  const int64_t new_vocab = static_cast<int64_t>(pruned.old_id.size());
  const TokenizerSpec& s = pruned.spec;

  GgufWriter w;
  w.set_alignment(static_cast<uint32_t>(in->alignment()));
  for (const auto& [key_view, value] : in->metadata()) {
    const std::string key(key_view);
    if (key == "tokenizer.ggml.tokens" || key == "tokenizer.ggml.token_type" ||
        key == "tokenizer.ggml.merges" || key == "tokenizer.ggml.scores") {
      continue;  // rewritten below
    }
    if (key.starts_with("tokenizer.ggml.") && key.ends_with("_token_id")) {
      if (!value.is_integer() || value.i < 0 || value.i >= old_vocab) {
        return InvalidArgumentError(input, ": metadata ", key, " is not a token id");
      }
      const int32_t id = pruned.new_id[static_cast<size_t>(value.i)];
      if (id < 0) {
        return FailedPreconditionError("pruning drops token ", value.i, " named by ", key);
      }
      w.SetUint32(key, static_cast<uint32_t>(id));
      continue;
    }
    if (key.ends_with(".vocab_size") && value.is_integer()) {
      w.SetUint32(key, static_cast<uint32_t>(new_vocab));
      continue;
    }
    w.SetValue(key, value);
  }
  w.SetStringArray("tokenizer.ggml.tokens", s.tokens);
  std::vector<int32_t> types;
  for (TokenType t : s.types) types.push_back(static_cast<int32_t>(t));
  w.SetInt32Array("tokenizer.ggml.token_type", types);
  std::vector<std::string> merges;
  merges.reserve(s.merges.size());
  for (const auto& [a, b] : s.merges) merges.push_back(a + " " + b);
  w.SetStringArray("tokenizer.ggml.merges", merges);
  if (!s.scores.empty()) w.SetFloat32Array("tokenizer.ggml.scores", s.scores);

  for (const TensorInfo& t : in->tensors()) {
    if (!t.type_supported) {
      return UnimplementedError(input, ": tensor ", t.name, " has type ", t.type_name,
                                ", which pocket cannot copy");
    }
    const bool by_token = (t.name == "token_embd.weight" || t.name == "output.weight");
    if (!by_token) {
      const TensorInfo* src = &t;
      POCKET_RETURN_IF_ERROR(w.AddTensor(t.name, t.type, t.shape, [src](uint8_t* out, size_t n) {
        std::memcpy(out, src->data, n);
        return Status::Ok();
      }));
      continue;
    }
    if (t.shape.size() != 2 || t.shape[0] != old_vocab) {
      return InvalidArgumentError(input, ": tensor ", t.name, " has shape ", ShapeString(t.shape),
                                  ", expected ", old_vocab, " rows");
    }
    const size_t row_bytes = RowBytes(t.type, t.shape[1]);
    const TensorInfo* src = &t;
    const PrunedVocab* p = &pruned;
    POCKET_RETURN_IF_ERROR(w.AddTensor(
        t.name, t.type, {new_vocab, t.shape[1]}, [src, p, row_bytes](uint8_t* out, size_t) {
          for (size_t r = 0; r < p->old_id.size(); ++r) {
            std::memcpy(out + r * row_bytes,
                        src->data + static_cast<size_t>(p->old_id[r]) * row_bytes, row_bytes);
          }
          return Status::Ok();
        }));
  }
  return w.Write(output, inputs);
}

}  // namespace pocket
