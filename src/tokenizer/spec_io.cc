#include "tokenizer/spec_io.h"

#include <cstring>
#include <unordered_map>

#include "base/byte_reader.h"
#include "tokenizer/byte_level_bpe_tokenizer.h"

namespace pocket {
namespace {

constexpr uint32_t kMagic = 0x4b4f5450;  // "PTOK"
constexpr uint32_t kVersion = 1;         // a TokenizerSpec
constexpr uint32_t kTablesVersion = 2;   // byte-level BPE tables, used in place

template <typename T>
void Put(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

// The settings both versions start with: magic, version, kind, flags, special ids, pre-tokenizer.
void PutSettings(const TokenizerSpec& spec, uint32_t version, std::string& out) {
  Put<uint32_t>(out, kMagic);
  Put<uint32_t>(out, version);
  Put<uint8_t>(out, spec.kind == TokenizerKind::kLlama2c ? 1 : 0);
  Put<uint8_t>(out, spec.normalize_nfc ? 1 : 0);
  Put<uint8_t>(out, spec.add_bos ? 1 : 0);
  Put<uint8_t>(out, 0);
  for (int32_t id : {spec.bos_id, spec.eos_id, spec.pad_id, spec.unk_id}) Put<int32_t>(out, id);
  Put<uint32_t>(out, static_cast<uint32_t>(spec.pre_tokenizer.size()));
  out += spec.pre_tokenizer;
}

Status ReadSettings(ByteReader& r, const std::string& what, uint32_t* version,
                    TokenizerSpec* spec) {
  uint32_t magic = 0;
  POCKET_RETURN_IF_ERROR(r.Read(&magic, "magic"));
  POCKET_RETURN_IF_ERROR(r.Read(version, "version"));
  if (magic != kMagic) return DataLossError(what, ": not a tokenizer section");
  if (*version != kVersion && *version != kTablesVersion) {
    return UnimplementedError(what, ": tokenizer section version ", *version,
                              " is not supported (this pocket reads 1 and 2)");
  }
  uint8_t kind = 0, nfc = 0, add_bos = 0, reserved = 0;
  POCKET_RETURN_IF_ERROR(r.Read(&kind, "kind"));
  POCKET_RETURN_IF_ERROR(r.Read(&nfc, "flags"));
  POCKET_RETURN_IF_ERROR(r.Read(&add_bos, "flags"));
  POCKET_RETURN_IF_ERROR(r.Read(&reserved, "flags"));
  if (kind > 1) return DataLossError(what, ": unknown tokenizer kind ", int{kind});
  if (*version == kTablesVersion && kind != 0)
    return DataLossError(what, ": a version 2 section must hold a byte-level BPE tokenizer");
  spec->kind = kind == 1 ? TokenizerKind::kLlama2c : TokenizerKind::kByteLevelBpe;
  spec->normalize_nfc = nfc != 0;
  spec->add_bos = add_bos != 0;
  for (int32_t* id : {&spec->bos_id, &spec->eos_id, &spec->pad_id, &spec->unk_id}) {
    POCKET_RETURN_IF_ERROR(r.Read(id, "special token id"));
  }
  uint32_t pre_len = 0;
  POCKET_RETURN_IF_ERROR(r.Read(&pre_len, "pre-tokenizer"));
  const uint8_t* pre = nullptr;
  POCKET_RETURN_IF_ERROR(r.ReadBytes(pre_len, &pre, "pre-tokenizer"));
  spec->pre_tokenizer.assign(reinterpret_cast<const char*>(pre), pre_len);
  return Status::Ok();
}

// Version 2 after the settings: the image size in bytes, zeros up to a multiple of 8 bytes from
// the section start, then the image. Returns the image's place in `bytes`.
Status FindImage(ByteReader& r, const std::string& what, std::string_view bytes,
                 std::string_view* image) {
  uint32_t image_bytes = 0;
  POCKET_RETURN_IF_ERROR(r.Read(&image_bytes, "table size"));
  const size_t pad = (8 - r.offset() % 8) % 8;
  const uint8_t* skipped = nullptr;
  POCKET_RETURN_IF_ERROR(r.ReadBytes(pad, &skipped, "padding"));
  for (size_t i = 0; i < pad; ++i) {
    if (skipped[i] != 0) return DataLossError(what, ": the padding before the tables is not zero");
  }
  if (image_bytes % 4 != 0 || image_bytes != r.remaining() || image_bytes < 4) {
    return DataLossError(what, ": the tables are said to be ", image_bytes, " bytes, ",
                         r.remaining(), " follow");
  }
  *image = bytes.substr(r.offset());
  return Status::Ok();
}

}  // namespace

StatusOr<std::string> SerializeTokenizer(const Tokenizer& tokenizer) {
  const auto* bpe = dynamic_cast<const ByteLevelBpeTokenizer*>(&tokenizer);
  if (bpe == nullptr) return SerializeTokenizerSpec(tokenizer.FullSpec());
  std::string out;
  PutSettings(tokenizer.spec(), kTablesVersion, out);
  const std::span<const uint32_t> image = bpe->tables_image();
  Put<uint32_t>(out, static_cast<uint32_t>(image.size_bytes()));
  out.append((8 - out.size() % 8) % 8, '\0');
  out.append(reinterpret_cast<const char*>(image.data()), image.size_bytes());
  return out;
}

StatusOr<std::shared_ptr<const Tokenizer>> LoadTokenizerSection(
    std::string_view bytes, const std::string& name, std::string chat_template,
    std::shared_ptr<const void> keep_alive) {
  const std::string what = name + " (tokenizer)";
  ByteReader r(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), what);
  uint32_t version = 0;
  TokenizerSpec settings;
  POCKET_RETURN_IF_ERROR(ReadSettings(r, what, &version, &settings));
  if (version == kVersion) {
    POCKET_ASSIGN_OR_RETURN(TokenizerSpec spec, DeserializeTokenizerSpec(bytes, name));
    spec.chat_template = std::move(chat_template);
    auto tokenizer = Tokenizer::FromSpec(std::move(spec));
    if (!tokenizer.ok()) return tokenizer.status().WithContext(what);
    return tokenizer;
  }
  settings.chat_template = std::move(chat_template);
  std::string_view image;
  POCKET_RETURN_IF_ERROR(FindImage(r, what, bytes, &image));
  if (reinterpret_cast<uintptr_t>(image.data()) % alignof(uint32_t) != 0) {
    // Not in place (a copy in memory): copy the image to aligned storage.
    auto copy = std::make_shared<std::vector<uint32_t>>(image.size() / 4);
    std::memcpy(copy->data(), image.data(), image.size());
    const std::span<const uint32_t> words(*copy);
    return ByteLevelBpeTokenizer::FromTables(std::move(settings), words, std::move(copy), what);
  }
  const std::span<const uint32_t> words(reinterpret_cast<const uint32_t*>(image.data()),
                                        image.size() / 4);
  return ByteLevelBpeTokenizer::FromTables(std::move(settings), words, std::move(keep_alive), what);
}

StatusOr<std::string> SerializeTokenizerSpec(const TokenizerSpec& spec) {
  std::string out;
  PutSettings(spec, kVersion, out);
  const uint32_t n = static_cast<uint32_t>(spec.tokens.size());
  Put<uint32_t>(out, n);
  for (uint32_t i = 0; i < n; ++i) {
    Put<uint8_t>(out,
                 static_cast<uint8_t>(i < spec.types.size() ? spec.types[i] : TokenType::kNormal));
  }
  uint32_t offset = 0;
  Put<uint32_t>(out, 0);
  for (const std::string& t : spec.tokens) {
    offset += static_cast<uint32_t>(t.size());
    Put<uint32_t>(out, offset);
  }
  for (const std::string& t : spec.tokens) out += t;
  Put<uint32_t>(out, spec.scores.empty() ? 0 : 1);
  for (float s : spec.scores) Put<float>(out, s);
  if (spec.merges.empty() && !spec.merge_ids.empty()) {
    Put<uint32_t>(out, static_cast<uint32_t>(spec.merge_ids.size()));
    for (const auto& [a, b] : spec.merge_ids) {
      if (a < 0 || b < 0 || static_cast<uint32_t>(a) >= n || static_cast<uint32_t>(b) >= n) {
        return InvalidArgumentError("a merge names token ",
                                    a < 0 || static_cast<uint32_t>(a) >= n ? a : b,
                                    ", outside the vocabulary");
      }
      Put<uint32_t>(out, static_cast<uint32_t>(a));
      Put<uint32_t>(out, static_cast<uint32_t>(b));
    }
    return out;
  }
  std::unordered_map<std::string_view, uint32_t> ids;
  ids.reserve(spec.tokens.size());
  for (uint32_t i = 0; i < n; ++i) ids.emplace(spec.tokens[i], i);
  Put<uint32_t>(out, static_cast<uint32_t>(spec.merges.size()));
  for (size_t i = 0; i < spec.merges.size(); ++i) {
    auto a = ids.find(spec.merges[i].first), b = ids.find(spec.merges[i].second);
    if (a == ids.end() || b == ids.end()) {
      return InvalidArgumentError("merge ", i, " (", QuoteBytes(spec.merges[i].first), " ",
                                  QuoteBytes(spec.merges[i].second),
                                  ") names a part that is not in the vocabulary");
    }
    Put<uint32_t>(out, a->second);
    Put<uint32_t>(out, b->second);
  }
  return out;
}

StatusOr<TokenizerSpec> DeserializeTokenizerSpec(std::string_view bytes, const std::string& name) {
  const std::string what = name + " (tokenizer)";
  ByteReader r(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), what);
  uint32_t version = 0;
  TokenizerSpec spec;
  POCKET_RETURN_IF_ERROR(ReadSettings(r, what, &version, &spec));
  if (version == kTablesVersion) {
    std::string_view image;
    POCKET_RETURN_IF_ERROR(FindImage(r, what, bytes, &image));
    std::vector<uint32_t> words(image.size() / 4);
    std::memcpy(words.data(), image.data(), image.size());
    POCKET_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tokenizer,
                            ByteLevelBpeTokenizer::FromTables(spec, words, nullptr, what));
    return tokenizer->FullSpec();
  }
  uint32_t n = 0;
  POCKET_RETURN_IF_ERROR(r.Read(&n, "token count"));
  if (n > r.remaining() / 5) return DataLossError(what, ": token count ", n, " does not fit");
  const uint8_t* types = nullptr;
  POCKET_RETURN_IF_ERROR(r.ReadBytes(n, &types, "token types"));
  spec.types.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    if (types[i] < 1 || types[i] > 6) {
      return DataLossError(what, ": token ", i, " has type ", int{types[i]});
    }
    spec.types[i] = static_cast<TokenType>(types[i]);
  }
  const uint8_t* offsets_raw = nullptr;
  POCKET_RETURN_IF_ERROR(r.ReadBytes(size_t{4} * (n + 1), &offsets_raw, "token offsets"));
  uint32_t blob_bytes = 0;
  std::memcpy(&blob_bytes, offsets_raw + size_t{4} * n, 4);
  const uint8_t* blob = nullptr;
  POCKET_RETURN_IF_ERROR(r.ReadBytes(blob_bytes, &blob, "token bytes"));
  spec.tokens.resize(n);
  uint32_t prev = 0;
  std::memcpy(&prev, offsets_raw, 4);
  if (prev != 0) return DataLossError(what, ": token offsets must start at 0");
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t end = 0;
    std::memcpy(&end, offsets_raw + size_t{4} * (i + 1), 4);
    if (end < prev || end > blob_bytes) {
      return DataLossError(what, ": token ", i, " has offsets [", prev, ", ", end, ")");
    }
    spec.tokens[i].assign(reinterpret_cast<const char*>(blob + prev), end - prev);
    prev = end;
  }
  uint32_t has_scores = 0;
  POCKET_RETURN_IF_ERROR(r.Read(&has_scores, "scores flag"));
  if (has_scores) {
    spec.scores.resize(n);
    for (float& s : spec.scores) POCKET_RETURN_IF_ERROR(r.Read(&s, "scores"));
  }
  uint32_t n_merges = 0;
  POCKET_RETURN_IF_ERROR(r.Read(&n_merges, "merge count"));
  if (n_merges > r.remaining() / 8)
    return DataLossError(what, ": merge count ", n_merges, " does not fit");
  // Kept by id: the tokenizer resolves them without building a string per merge.
  spec.merge_ids.reserve(n_merges);
  for (uint32_t i = 0; i < n_merges; ++i) {
    uint32_t a = 0, b = 0;
    POCKET_RETURN_IF_ERROR(r.Read(&a, "merge"));
    POCKET_RETURN_IF_ERROR(r.Read(&b, "merge"));
    if (a >= n || b >= n)
      return DataLossError(what, ": merge ", i, " names token ", a >= n ? a : b);
    spec.merge_ids.emplace_back(static_cast<int32_t>(a), static_cast<int32_t>(b));
  }
  for (int32_t id : {spec.bos_id, spec.eos_id, spec.pad_id, spec.unk_id}) {
    if (id < -1 || id >= static_cast<int32_t>(n)) {
      return DataLossError(what, ": special token id ", id, " is outside the vocabulary");
    }
  }
  return spec;
}

}  // namespace pocket
