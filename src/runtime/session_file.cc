// Session::Save / Session::Load: a conversation's context on disk (docs/format.md, "Session
// files"). The keys and values are written through the KV cache's accessors (KvHeadView), so the
// file's layout does not depend on how the cache places its blocks.
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/crc32c.h"
#include "base/mapped_file.h"
#include "base/output_file.h"
#include "base/str.h"
#include "model/adapter.h"
#include "runtime/session.h"

namespace pocket {
namespace {

constexpr char kMagic[8] = {'P', 'O', 'C', 'K', 'E', 'T', 'S', 'S'};
constexpr uint32_t kVersion = 1;
// The file is checksummed and copied in chunks of this size, each let go of once read.
constexpr size_t kChunk = size_t{4} << 20;

// Bytes of the keys and values of n positions of one KV head in the file: K in whole blocks of
// 16 positions ([head_dim][16] elements each, lanes past n zero), V rows of the n positions, and
// for int8 the n key scales then the n value scales.
uint64_t HeadBytes(const KvHeadView& h, int64_t n) {
  const int64_t blocks = (n + kKvBlockPositions - 1) / kKvBlockPositions;
  uint64_t bytes = static_cast<uint64_t>(blocks * h.BlockBytes()) +
                   static_cast<uint64_t>(n * h.head_dim * h.ElementBytes());
  if (h.type == KvType::kQ8) bytes += static_cast<uint64_t>(2 * n) * sizeof(float);
  return bytes;
}

// 16 hex digits.
std::string Hex64(uint64_t v) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(v));
  return hex;
}

// CRC-32C of the first and last 4 KiB of some bytes (a cheap content check: two encodings of one
// model, or a model and the same model with an adapter merged, differ there).
uint32_t SampleCrc(const uint8_t* data, size_t n, uint32_t crc) {
  if (data == nullptr || n == 0) return crc;
  const size_t k = std::min<size_t>(n, 4096);
  return Crc32c(data + n - k, k, Crc32c(data, k, crc));
}

// The weights the keys and values were computed with: the fingerprint's shapes and norms are not
// enough (re-quantization and merges keep both).
std::string WeightsDigest(const Model& model) {
  const ModelWeights& w = model.weights();
  uint32_t crc = 0;
  auto add = [&crc](const Linear& l) {
    if (l.present()) crc = SampleCrc(l.packed ? l.p.data : l.w.data, l.bytes(), crc);
  };
  add(w.token_embd);
  add(w.output);
  for (const LayerWeights& l : w.layers) {
    for (const Linear* m :
         {&l.qkv, &l.wq, &l.wk, &l.wv, &l.wo, &l.gate_up, &l.w_gate, &l.w_up, &l.w_down}) {
      add(*m);
    }
  }
  return Hex64(crc);
}

// The adapter set as the keys and values depend on it: each adapter's exact scale and a sample
// of its factors, not its path (the same file named "./a" or by an absolute path, or a copy of
// it, computes the same). with_paths: the key older files hold (each path first).
std::string AdaptersKey(const AdapterSet& set, bool with_paths = false) {
  std::string key;
  for (const AdapterUse& u : set) {
    uint32_t crc = 0;
    for (int32_t l = 0; l < u.adapter->n_layers(); ++l) {
      for (int t = 0; t < kLoraAllTargets; ++t) {
        if (l > 0 && t >= kLoraTargets) continue;  // the embedding's and output's pairs once
        const LoraPair& p = u.adapter->pair(l, static_cast<LoraTarget>(t));
        if (!p.present()) continue;
        crc = SampleCrc(p.a.data, FactorBytes(p.a), crc);
        crc = SampleCrc(p.bt.data, FactorBytes(p.bt), crc);
      }
    }
    uint32_t scale_bits;
    std::memcpy(&scale_bits, &u.scale, 4);
    key += StrCat(key.empty() ? "" : ";", with_paths ? u.adapter->path() : std::string(), "@",
                  Hex64(scale_bits), "#", Hex64(crc));
  }
  return key;
}

// A writer that keeps the running checksum of everything written.
struct CheckedWriter {
  OutputFile& f;
  uint32_t crc = 0;
  Status Write(const void* data, size_t n) {
    if (n == 0) return Status::Ok();  // (data may be null then)
    crc = Crc32c(data, n, crc);
    return f.Write(data, n);
  }
};

// The header of a session file, every field read and typed (nothing compared with a model yet),
// and where its parts are.
struct Header {
  SessionFileInfo info;
  KvType kv_type = KvType::kF16;
  std::string adapters_key;
  size_t tokens_at = 0;  // the byte after the header
};

StatusOr<Header> ReadHeader(const std::string& path, const uint8_t* data, size_t size) {
  auto field_error = [&](std::string_view key, const auto&... what) {
    return InvalidArgumentError(path, ": field ", key, " ", what...);
  };
  if (size < sizeof kMagic + 8 + 4 || std::memcmp(data, kMagic, sizeof kMagic) != 0) {
    return InvalidArgumentError(path, ": not a pocket session file (no POCKETSS magic)");
  }
  uint32_t sizes[2];
  std::memcpy(sizes, data + sizeof kMagic, sizeof sizes);
  if (sizes[0] != kVersion) {
    return UnimplementedError(path, ": session file version ", sizes[0], "; this build reads ",
                              kVersion);
  }
  const size_t header_at = sizeof kMagic + sizeof sizes;
  if (sizes[1] > size - header_at - 4) {
    return DataLossError(path, ": truncated: a header of ", sizes[1],
                         " bytes does not fit the file's ", size);
  }
  nlohmann::json j = nlohmann::json::parse(data + header_at, data + header_at + sizes[1], nullptr,
                                           /*allow_exceptions=*/false);
  if (!j.is_object()) return InvalidArgumentError(path, ": the header is not a JSON object");
  auto int_field = [&](const char* key, int64_t* out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) {
      return field_error(key, "is ", it == j.end() ? "missing" : it->dump(),
                         ", expected an integer");
    }
    *out = it->get<int64_t>();
    return Status::Ok();
  };
  auto string_field = [&](const char* key, std::string* out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string()) {
      return field_error(key, "is ", it == j.end() ? "missing" : it->dump(), ", expected a string");
    }
    *out = it->get<std::string>();
    return Status::Ok();
  };
  Header h;
  SessionFileInfo& info = h.info;
  info.path = path;
  info.version = sizes[0];
  info.file_bytes = size;
  h.tokens_at = header_at + sizes[1];
  std::string format, kv_type;
  POCKET_RETURN_IF_ERROR(string_field("format", &format));
  if (format != "pocket session") return field_error("format", "is \"", format, "\"");
  POCKET_RETURN_IF_ERROR(string_field("architecture", &info.architecture));
  POCKET_RETURN_IF_ERROR(string_field("weights_digest", &info.weights_digest));
  POCKET_RETURN_IF_ERROR(string_field("adapters_key", &h.adapters_key));
  POCKET_RETURN_IF_ERROR(string_field("base_fingerprint", &info.base_fingerprint));
  POCKET_RETURN_IF_ERROR(string_field("kv_type", &kv_type));
  POCKET_RETURN_IF_ERROR(string_field("adapters", &info.adapters));
  if (!ParseKvType(kv_type, &h.kv_type)) {
    return field_error("kv_type", "is \"", kv_type, "\" (expected f16, f32 or q8)");
  }
  info.kv_type = std::string(KvTypeName(h.kv_type));
  const std::pair<const char*, int64_t*> shapes[] = {{"n_layers", &info.n_layers},
                                                     {"n_kv_heads", &info.n_kv_heads},
                                                     {"head_dim", &info.head_dim},
                                                     {"vocab_size", &info.vocab_size}};
  for (const auto& [key, out] : shapes) {
    POCKET_RETURN_IF_ERROR(int_field(key, out));
    if (*out < 1 || *out > (int64_t{1} << 24)) return field_error(key, "is ", *out);
  }
  int64_t user_bytes = 0;
  POCKET_RETURN_IF_ERROR(int_field("n_tokens", &info.n_tokens));
  POCKET_RETURN_IF_ERROR(int_field("user_data_bytes", &user_bytes));
  auto logits_it = j.find("has_logits");
  if (logits_it == j.end() || !logits_it->is_boolean()) {
    return field_error("has_logits", "is missing or not a boolean");
  }
  info.has_logits = logits_it->get<bool>();
  if (info.n_tokens < 0 || static_cast<uint64_t>(info.n_tokens) > size / sizeof(int32_t) ||
      (info.has_logits && info.n_tokens == 0)) {
    return field_error("n_tokens", "is ", info.n_tokens, info.has_logits ? " with logits" : "");
  }
  if (user_bytes < 0 || static_cast<uint64_t>(user_bytes) > size) {
    return field_error("user_data_bytes", "is ", user_bytes, ", more than the file's ", size,
                       " bytes");
  }
  info.user_data_bytes = static_cast<uint64_t>(user_bytes);
  KvHeadView head;
  head.type = h.kv_type;
  head.head_dim = static_cast<int32_t>(info.head_dim);
  info.kv_bytes = static_cast<uint64_t>(info.n_layers) * static_cast<uint64_t>(info.n_kv_heads) *
                  HeadBytes(head, info.n_tokens);
  return h;
}

// The size the header implies, then the checksum of everything before the last 4 bytes.
Status CheckSizeAndChecksum(const Header& h, const uint8_t* data, size_t size) {
  const SessionFileInfo& info = h.info;
  const uint64_t expected =
      h.tokens_at + static_cast<uint64_t>(info.n_tokens) * sizeof(int32_t) +
      (info.has_logits ? static_cast<uint64_t>(info.vocab_size) * sizeof(float) : 0) +
      info.user_data_bytes + info.kv_bytes + 4;
  if (expected != size) {
    return DataLossError(info.path, ": truncated or extended: its header describes ", expected,
                         " bytes, the file has ", size);
  }
  uint32_t crc;
  std::memcpy(&crc, data + size - 4, 4);
  // In chunks, each let go once checked: a session of many pages costs no more than a chunk of
  // resident memory for its mapping (the engine restores sessions within a KV budget).
  uint32_t sum = 0;
  for (size_t off = 0; off < size - 4; off += kChunk) {
    const size_t len = std::min(kChunk, size - 4 - off);
    sum = Crc32c(data + off, len, sum);
    ReleaseMappedPages(data + off, len);
  }
  if (sum != crc) {
    return DataLossError(info.path, ": corrupt: the checksum of its ", size - 4,
                         " bytes does not match");
  }
  return Status::Ok();
}

}  // namespace

bool LooksLikeSessionFile(const std::string& path) {
  auto file = MappedFile::Open(path);
  return file.ok() && (*file)->size() >= sizeof kMagic &&
         std::memcmp((*file)->data(), kMagic, sizeof kMagic) == 0;
}

StatusOr<SessionFileInfo> DescribeSessionFile(const std::string& path) {
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  POCKET_ASSIGN_OR_RETURN(Header h, ReadHeader(path, file->data(), file->size()));
  POCKET_RETURN_IF_ERROR(CheckSizeAndChecksum(h, file->data(), file->size()));
  const uint8_t* user_at =
      file->data() + h.tokens_at + h.info.n_tokens * static_cast<int64_t>(sizeof(int32_t)) +
      (h.info.has_logits ? h.info.vocab_size * static_cast<int64_t>(sizeof(float)) : 0);
  h.info.user_data.assign(reinterpret_cast<const char*>(user_at), h.info.user_data_bytes);
  return std::move(h.info);
}

Status Session::Save(const std::string& path, std::string_view user_data) const {
  const ModelConfig& c = model_->config();
  const int64_t n = static_cast<int64_t>(history_.size());
  const bool has_logits = n > 0 && logits_at_ == history_.size();
  nlohmann::json j;
  j["format"] = "pocket session";
  j["architecture"] = std::string(ArchitectureName(c.arch));
  j["base_fingerprint"] = BaseFingerprint(*model_);
  j["n_layers"] = c.n_layers;
  j["n_kv_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["kv_type"] = std::string(KvTypeName(kv_.type()));
  j["n_tokens"] = n;
  j["weights_digest"] = WeightsDigest(*model_);
  j["adapters"] = AdapterSetName(adapters_);
  j["adapters_key"] = AdaptersKey(adapters_);
  j["has_logits"] = has_logits;
  j["user_data_bytes"] = user_data.size();
  // Paths need not be UTF-8: invalid bytes are replaced in the header (the key compares alike).
  const std::string header = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  // A conversation: readable by its owner only, whatever the umask.
  POCKET_ASSIGN_OR_RETURN(OutputFile f, OutputFile::Create(path, {}, kPrivateFileMode));
  CheckedWriter w{f};
  POCKET_RETURN_IF_ERROR(w.Write(kMagic, sizeof kMagic));
  const uint32_t sizes[2] = {kVersion, static_cast<uint32_t>(header.size())};
  POCKET_RETURN_IF_ERROR(w.Write(sizes, sizeof sizes));
  POCKET_RETURN_IF_ERROR(w.Write(header.data(), header.size()));
  POCKET_RETURN_IF_ERROR(w.Write(history_.data(), history_.size() * sizeof(int32_t)));
  if (has_logits) POCKET_RETURN_IF_ERROR(w.Write(logits_.data(), logits_.size() * sizeof(float)));
  POCKET_RETURN_IF_ERROR(w.Write(user_data.data(), user_data.size()));
  // Each head's bytes gathered into one buffer, one write per head.
  std::vector<uint8_t> buf;
  for (int32_t layer = 0; layer < c.n_layers; ++layer) {
    for (int32_t g = 0; g < c.n_kv_heads; ++g) {
      const KvHeadView h = kv_.head(layer, g);
      const int64_t eb = h.ElementBytes(), blocks = (n + kKvBlockPositions - 1) / kKvBlockPositions;
      buf.resize(static_cast<size_t>(HeadBytes(h, n)));
      uint8_t* out = buf.data();
      for (int64_t b = 0; b < blocks; ++b, out += h.BlockBytes()) {
        std::memcpy(out, h.KeyBlock<uint8_t>(b), static_cast<size_t>(h.BlockBytes()));
        const int64_t used = std::min<int64_t>(kKvBlockPositions, n - b * kKvBlockPositions);
        for (int32_t d = 0; d < h.head_dim && used < kKvBlockPositions; ++d) {  // unused lanes
          std::memset(out + (d * kKvBlockPositions + used) * eb, 0,
                      static_cast<size_t>((kKvBlockPositions - used) * eb));
        }
      }
      for (int64_t pos = 0; pos < n; ++pos, out += h.head_dim * eb) {
        std::memcpy(out, h.ValueRow<uint8_t>(pos), static_cast<size_t>(h.head_dim * eb));
      }
      if (h.type == KvType::kQ8) {
        for (int64_t pos = 0; pos < n; ++pos, out += sizeof(float))
          std::memcpy(out, h.KeyScale(pos), sizeof(float));
        for (int64_t pos = 0; pos < n; ++pos, out += sizeof(float))
          std::memcpy(out, h.ValueScale(pos), sizeof(float));
      }
      POCKET_RETURN_IF_ERROR(w.Write(buf.data(), buf.size()));
    }
  }
  const uint32_t crc = w.crc;
  POCKET_RETURN_IF_ERROR(f.Write(&crc, sizeof crc));
  return f.Commit();
}

StatusOr<std::string> Session::Load(const std::string& path, uint64_t max_user_data_bytes,
                                    uint64_t* user_data_bytes) {
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  const uint8_t* data = file->data();
  const size_t size = file->size();
  POCKET_ASSIGN_OR_RETURN(const Header header, ReadHeader(path, data, size));
  const SessionFileInfo& info = header.info;
  auto field_error = [&](std::string_view key, const auto&... what) {
    return InvalidArgumentError(path, ": field ", key, " ", what...);
  };
  const ModelConfig& c = model_->config();
  if (info.architecture != ArchitectureName(c.arch)) {
    return field_error("architecture", "is \"", info.architecture, "\" but the model is ",
                       ArchitectureName(c.arch));
  }
  const std::pair<const char*, int64_t> shapes[] = {{"n_layers", c.n_layers},
                                                    {"n_kv_heads", c.n_kv_heads},
                                                    {"head_dim", c.head_dim},
                                                    {"vocab_size", c.vocab_size}};
  const int64_t saved_shapes[] = {info.n_layers, info.n_kv_heads, info.head_dim, info.vocab_size};
  for (size_t i = 0; i < std::size(shapes); ++i) {
    if (saved_shapes[i] != shapes[i].second) {
      return field_error(shapes[i].first, "is ", saved_shapes[i], " but the model has ",
                         shapes[i].second);
    }
  }
  if (info.base_fingerprint != BaseFingerprint(*model_)) {
    return field_error("base_fingerprint", "is \"", info.base_fingerprint,
                       "\" but the model's is \"", BaseFingerprint(*model_),
                       "\": the session was saved with another model");
  }
  auto state_error = [&](std::string_view key, const auto&... what) {
    return FailedPreconditionError(path, ": field ", key, " ", what...);
  };
  if (info.weights_digest != WeightsDigest(*model_)) {
    return field_error("weights_digest", "is \"", info.weights_digest, "\" but the model's is \"",
                       WeightsDigest(*model_),
                       "\": the session was saved with other weights of this model (another "
                       "encoding, or adapters merged)");
  }
  if (header.kv_type != kv_.type()) {
    return state_error("kv_type", "is ", info.kv_type, " but this session's cache is ",
                       KvTypeName(kv_.type()), " (open it with --kv-type ", info.kv_type, ")");
  }
  if (header.adapters_key != AdaptersKey(adapters_) &&
      header.adapters_key != AdaptersKey(adapters_, true)) {
    return state_error("adapters", "is \"", info.adapters, "\" but this session applies \"",
                       AdapterSetName(adapters_), "\": the keys and values depend on them");
  }
  const int64_t n = info.n_tokens;
  const int64_t user_bytes = static_cast<int64_t>(info.user_data_bytes);
  const bool has_logits = info.has_logits;
  if (n > kv_.n_ctx()) {
    return OutOfRangeError(path, ": the saved context holds ", n,
                           " tokens; this session's context is ", kv_.n_ctx(),
                           " (open it with a larger --ctx-size)");
  }
  POCKET_RETURN_IF_ERROR(CheckSizeAndChecksum(header, data, size));
  const uint8_t* at = data + header.tokens_at;
  for (int64_t i = 0; i < n; ++i) {
    int32_t id;
    std::memcpy(&id, at + i * static_cast<int64_t>(sizeof(int32_t)), sizeof id);
    if (id < 0 || id >= c.vocab_size) {
      return InvalidArgumentError(path, ": token ", i, " is id ", id,
                                  ", outside the vocabulary (0 to ", c.vocab_size - 1, ")");
    }
  }
  if (user_data_bytes != nullptr) *user_data_bytes = static_cast<uint64_t>(user_bytes);
  if (static_cast<uint64_t>(user_bytes) > max_user_data_bytes) {
    return ResourceExhaustedError(path, ": the user data needs ", user_bytes,
                                  " bytes, the buffer holds ", max_user_data_bytes);
  }
  const uint8_t* user_at = at + n * static_cast<int64_t>(sizeof(int32_t)) +
                           (has_logits ? static_cast<int64_t>(c.vocab_size * sizeof(float)) : 0);
  std::string user_data(reinterpret_cast<const char*>(user_at), static_cast<size_t>(user_bytes));
  // The KV pages (allocated while the session is as it was; Truncate keeps them for reuse).
  POCKET_RETURN_IF_ERROR(kv_.Reserve(0, static_cast<int32_t>(n)));
  // Everything checked (and allocated): the session changes from here on.
  Truncate(0);
  logits_at_ = 0;
  POCKET_RETURN_IF_ERROR(kv_.Reserve(0, static_cast<int32_t>(n)));  // the kept pages: cannot fail
  history_.resize(static_cast<size_t>(n));
  if (n > 0) std::memcpy(history_.data(), at, static_cast<size_t>(n) * sizeof(int32_t));
  at += n * static_cast<int64_t>(sizeof(int32_t));
  if (has_logits) {
    std::memcpy(logits_.data(), at, logits_.size() * sizeof(float));
    at += logits_.size() * sizeof(float);
    logits_at_ = history_.size();
  }
  at += user_bytes;
  const uint8_t* released = data;
  for (int32_t layer = 0; layer < c.n_layers; ++layer) {
    for (int32_t g = 0; g < c.n_kv_heads; ++g) {
      if (at - released >= static_cast<std::ptrdiff_t>(kChunk)) {  // copied: let go
        ReleaseMappedPages(released, static_cast<size_t>(at - released));
        released = at;
      }
      const KvHeadView h = kv_.head(layer, g);
      const int64_t eb = h.ElementBytes(), blocks = (n + kKvBlockPositions - 1) / kKvBlockPositions;
      for (int64_t b = 0; b < blocks; ++b) {
        std::memcpy(h.KeyBlock<uint8_t>(b), at, static_cast<size_t>(h.BlockBytes()));
        at += h.BlockBytes();
      }
      for (int64_t pos = 0; pos < n; ++pos) {
        std::memcpy(h.ValueRow<uint8_t>(pos), at, static_cast<size_t>(h.head_dim * eb));
        at += h.head_dim * eb;
      }
      if (h.type == KvType::kQ8) {
        for (int64_t pos = 0; pos < n; ++pos, at += sizeof(float))
          std::memcpy(h.KeyScale(pos), at, sizeof(float));
        for (int64_t pos = 0; pos < n; ++pos, at += sizeof(float))
          std::memcpy(h.ValueScale(pos), at, sizeof(float));
      }
    }
  }
  return user_data;
}

}  // namespace pocket
