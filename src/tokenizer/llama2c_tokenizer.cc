#include "tokenizer/llama2c_tokenizer.h"

#include <cstdio>
#include <cstring>

#include "base/mapped_file.h"
#include "tokenizer/bpe.h"
#include "tokenizer/utf8.h"

namespace pocket {
namespace {

// run.c merges a pair only when its score beats this initial "best".
constexpr float kNoMergeScore = -1e10f;

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The byte of a "<0xXX>" piece, or -1.
int ByteOfPiece(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  const int hi = HexDigit(piece[3]), lo = HexDigit(piece[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

StatusOr<TokenizerSpec> Llama2cTokenizer::ReadSpec(std::string_view file_bytes, int32_t vocab_size,
                                                   std::string_view file_name) {
  if (vocab_size < 3) {
    return InvalidArgumentError(file_name, ": llama2.c vocabulary size ", vocab_size,
                                " is too small (ids 0..2 are <unk>, BOS and EOS)");
  }
  size_t pos = 0;
  auto read = [&](void* out, size_t n) {
    if (file_bytes.size() - pos < n) return false;
    std::memcpy(out, file_bytes.data() + pos, n);
    pos += n;
    return true;
  };
  int32_t max_token_length = 0;
  if (!read(&max_token_length, 4)) {
    return DataLossError(file_name, ": too short for a llama2.c tokenizer header");
  }
  TokenizerSpec spec;
  spec.kind = TokenizerKind::kLlama2c;
  spec.pre_tokenizer.clear();
  spec.normalize_nfc = false;
  spec.unk_id = 0;
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.add_bos = true;
  spec.tokens.resize(static_cast<size_t>(vocab_size));
  spec.scores.resize(static_cast<size_t>(vocab_size));
  spec.types.resize(static_cast<size_t>(vocab_size));
  for (int32_t id = 0; id < vocab_size; ++id) {
    int32_t length = 0;
    if (!read(&spec.scores[id], 4) || !read(&length, 4)) {
      return DataLossError(file_name, ": ends inside the header of token ", id, " of ", vocab_size,
                           " (is the vocabulary size right?)");
    }
    if (length < 0 || length > max_token_length || file_bytes.size() - pos < size_t(length)) {
      return DataLossError(file_name, ": token ", id, " has length ", length,
                           (length < 0 || length > max_token_length)
                               ? StrCat(" (max_token_length is ", max_token_length, ")")
                               : std::string(" past the end of the file"));
    }
    spec.tokens[id].assign(file_bytes.data() + pos, static_cast<size_t>(length));
    pos += static_cast<size_t>(length);
    TokenType type = TokenType::kNormal;
    if (id == 0) type = TokenType::kUnknown;
    if (id == 1 || id == 2) type = TokenType::kControl;
    if (ByteOfPiece(spec.tokens[id]) >= 0) type = TokenType::kByte;
    spec.types[id] = type;
  }
  if (pos != file_bytes.size()) {
    return DataLossError(file_name, ": ", file_bytes.size() - pos, " bytes left after ", vocab_size,
                         " tokens (is the vocabulary size right?)");
  }
  return spec;
}

StatusOr<std::shared_ptr<const Tokenizer>> Tokenizer::FromLlama2cFile(const std::string& path,
                                                                      int32_t vocab_size) {
  POCKET_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  POCKET_ASSIGN_OR_RETURN(TokenizerSpec spec, Llama2cTokenizer::ReadSpec(bytes, vocab_size, path));
  return FromSpec(std::move(spec));
}

StatusOr<std::shared_ptr<const Tokenizer>> Llama2cTokenizer::Create(TokenizerSpec spec) {
  std::shared_ptr<Llama2cTokenizer> tokenizer(new Llama2cTokenizer(std::move(spec)));
  POCKET_RETURN_IF_ERROR(tokenizer->Build());
  return std::shared_ptr<const Tokenizer>(std::move(tokenizer));
}

Status Llama2cTokenizer::Build() {
  const auto n = static_cast<int32_t>(spec_.tokens.size());
  pieces_.ReserveIndex(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    const std::string& piece = spec_.tokens[id];
    pieces_.Add(piece);
    pieces_.Index(id);  // the first of duplicate pieces wins
    const int byte = ByteOfPiece(piece);
    if (id == spec_.bos_id || id == spec_.eos_id) {
      bytes_.Add("");
    } else if (byte >= 0) {
      const char c = static_cast<char>(byte);
      bytes_.Add(std::string_view(&c, 1));
    } else {
      bytes_.Add(piece);
    }
  }
  if (n < 259) {
    return InvalidArgumentError("llama2.c vocabulary has ", n,
                                " tokens; ids 3..258 must be the byte pieces <0x00>..<0xFF>");
  }
  for (int b = 0; b < 256; ++b) {
    if (ByteOfPiece(spec_.tokens[b + 3]) != b) {
      char expected[8];
      std::snprintf(expected, sizeof(expected), "<0x%02X>", b);
      return DataLossError("llama2.c token ", b + 3, " is ", QuoteBytes(spec_.tokens[b + 3]),
                           ", expected the byte piece ", expected);
    }
  }
  space_id_ = pieces_.Find(" ");
  if (space_id_ < 0) {
    return DataLossError("llama2.c vocabulary has no \" \" token (needed for the dummy prefix)");
  }
  return Status::Ok();
}

StatusOr<std::vector<int32_t>> Llama2cTokenizer::Encode(std::string_view text,
                                                        const EncodeOptions& options) const {
  POCKET_RETURN_IF_ERROR(utf8::Validate(text));
  std::vector<int32_t> symbols;
  if (!text.empty()) symbols.push_back(space_id_);
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t length = utf8::LengthFromLead(static_cast<uint8_t>(text[pos]));
    const int32_t id = pieces_.Find(text.substr(pos, length));
    if (id >= 0) {
      symbols.push_back(id);
    } else {
      for (size_t i = 0; i < length; ++i)
        symbols.push_back(static_cast<uint8_t>(text[pos + i]) + 3);
    }
    pos += length;
  }
  std::string joined;
  auto lookup = [&](int32_t left, int32_t right, MergeCandidate<float>* candidate) {
    joined.assign(pieces_.Get(left));
    joined.append(pieces_.Get(right));
    const int32_t id = pieces_.Find(joined);
    if (id < 0 || !(spec_.scores[id] > kNoMergeScore)) return false;
    *candidate = {-spec_.scores[id], id};
    return true;
  };
  BpeScratch<float> scratch;
  MergeSymbols(&symbols, lookup, &scratch);
  if (options.add_bos) symbols.insert(symbols.begin(), spec_.bos_id);
  return symbols;
}

std::string_view Llama2cTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= bytes_.size()) return {};
  return bytes_.Get(id);
}

std::string_view Llama2cTokenizer::DecodePiece(int32_t prev_id, int32_t id) const {
  std::string_view piece = TokenBytes(id);
  // As run.c: the stored piece must start with a space (a <0x20> byte piece keeps its space).
  if (prev_id == spec_.bos_id && prev_id >= 0 && !piece.empty() &&
      StartsWith(spec_.tokens[id], " ")) {
    piece.remove_prefix(1);
  }
  return piece;
}

}  // namespace pocket
