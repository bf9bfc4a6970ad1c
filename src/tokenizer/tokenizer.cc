#include "tokenizer/tokenizer.h"

#include "tokenizer/byte_level_bpe_tokenizer.h"
#include "tokenizer/llama2c_tokenizer.h"

namespace pocket {
namespace {

Status CheckSpecialId(const char* name, int32_t id, size_t vocab_size) {
  if (id < -1 || id >= static_cast<int64_t>(vocab_size)) {
    return InvalidArgumentError("tokenizer ", name, " id ", id, " is outside the vocabulary (",
                                vocab_size, " tokens)");
  }
  return Status::Ok();
}

}  // namespace

Tokenizer::~Tokenizer() = default;

StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::FromSpec(TokenizerSpec spec) {
  const size_t n = spec.tokens.size();
  if (n == 0) return InvalidArgumentError("tokenizer has an empty vocabulary");
  if (n > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgumentError("tokenizer vocabulary of ", n, " tokens is too large");
  }
  if (!spec.types.empty() && spec.types.size() != n) {
    return InvalidArgumentError("tokenizer has ", n, " tokens but ", spec.types.size(),
                                " token types");
  }
  POCKET_RETURN_IF_ERROR(CheckSpecialId("bos", spec.bos_id, n));
  POCKET_RETURN_IF_ERROR(CheckSpecialId("eos", spec.eos_id, n));
  POCKET_RETURN_IF_ERROR(CheckSpecialId("pad", spec.pad_id, n));
  POCKET_RETURN_IF_ERROR(CheckSpecialId("unk", spec.unk_id, n));
  switch (spec.kind) {
    case TokenizerKind::kByteLevelBpe:
      return ByteLevelBpeTokenizer::Create(std::move(spec));
    case TokenizerKind::kLlama2c:
      if (spec.scores.size() != n) {
        return InvalidArgumentError("llama2.c tokenizer has ", n, " tokens but ",
                                    spec.scores.size(), " scores");
      }
      return Llama2cTokenizer::Create(std::move(spec));
  }
  return InvalidArgumentError("unknown tokenizer kind ", static_cast<int>(spec.kind));
}

bool Tokenizer::IsSpecial(int32_t id) const {
  if (id < 0 || id >= vocab_size() || spec_.types.empty()) return false;
  return spec_.types[id] == TokenType::kControl;
}

StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids) const {
  std::string text;
  int32_t prev_id = -1;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size()) {
      return InvalidArgumentError("token id ", id, " at position ", i,
                                  " is outside the vocabulary (", vocab_size(), " tokens)");
    }
    text.append(DecodePiece(prev_id, id));
    prev_id = id;
  }
  return text;
}

}  // namespace pocket
