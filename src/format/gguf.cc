#include "format/gguf.h"

#include <cstring>

#include "base/byte_reader.h"

namespace pocket {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 8;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

size_t ScalarBytes(GgufType t) {
  switch (t) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

bool KnownType(uint32_t t) {
  return t <= static_cast<uint32_t>(GgufType::kFloat64);
}

template <typename T>
T LoadUnaligned(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

Status ReadString(ByteReader& r, std::string_view* out, std::string_view field) {
  uint64_t len = 0;
  POCKET_RETURN_IF_ERROR(r.Read(&len, field));
  if (len > r.remaining()) {
    return DataLossError(r.what(), ": truncated or corrupt: ", field, " at offset ", r.offset() - 8,
                         " claims ", len, " bytes, only ", r.remaining(), " remain");
  }
  const uint8_t* p = nullptr;
  POCKET_RETURN_IF_ERROR(r.ReadBytes(static_cast<size_t>(len), &p, field));
  *out = std::string_view(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
  return Status::Ok();
}

}  // namespace

std::string_view GgufTypeName(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
      return "uint8";
    case GgufType::kInt8:
      return "int8";
    case GgufType::kUint16:
      return "uint16";
    case GgufType::kInt16:
      return "int16";
    case GgufType::kUint32:
      return "uint32";
    case GgufType::kInt32:
      return "int32";
    case GgufType::kFloat32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kUint64:
      return "uint64";
    case GgufType::kInt64:
      return "int64";
    case GgufType::kFloat64:
      return "float64";
  }
  return "unknown";
}

bool DTypeFromGgml(uint32_t ggml_type, DType* out) {
  switch (ggml_type) {
    case kGgmlF32:
      *out = DType::kF32;
      return true;
    case kGgmlF16:
      *out = DType::kF16;
      return true;
    case kGgmlBF16:
      *out = DType::kBF16;
      return true;
    case kGgmlQ8_0:
      *out = DType::kQ8_0;
      return true;
    case kGgmlQ4_0:
      *out = DType::kQ4_0;
      return true;
    case kGgmlQ4_1:
      *out = DType::kQ4_1;
      return true;
    case kGgmlQ4_K:
      *out = DType::kQ4_K;
      return true;
    case kGgmlQ6_K:
      *out = DType::kQ6_K;
      return true;
    default:
      return false;
  }
}

uint32_t GgmlTypeOf(DType type) {
  switch (type) {
    case DType::kF32:
      return kGgmlF32;
    case DType::kF16:
      return kGgmlF16;
    case DType::kBF16:
      return kGgmlBF16;
    case DType::kQ8_0:
      return kGgmlQ8_0;
    case DType::kQ4_0:
      return kGgmlQ4_0;
    case DType::kQ4_1:
      return kGgmlQ4_1;
    case DType::kQ4_K:
      return kGgmlQ4_K;
    case DType::kQ6_K:
      return kGgmlQ6_K;
    case DType::kCount:
      break;
  }
  return 0xffffffffu;
}

std::string GgmlTypeName(uint32_t ggml_type) {
  static const char* kNames[] = {"f32",
                                 "f16",
                                 "q4_0",
                                 "q4_1",
                                 "q4_2 (removed)",
                                 "q4_3 (removed)",
                                 "q5_0",
                                 "q5_1",
                                 "q8_0",
                                 "q8_1",
                                 "q2_K",
                                 "q3_K",
                                 "q4_K",
                                 "q5_K",
                                 "q6_K",
                                 "q8_K",
                                 "iq2_xxs",
                                 "iq2_xs",
                                 "iq3_xxs",
                                 "iq1_s",
                                 "iq4_nl",
                                 "iq3_s",
                                 "iq2_s",
                                 "iq4_xs",
                                 "i8",
                                 "i16",
                                 "i32",
                                 "i64",
                                 "f64",
                                 "iq1_m",
                                 "bf16",
                                 "type 31",
                                 "type 32",
                                 "type 33",
                                 "tq1_0",
                                 "tq2_0"};
  if (ggml_type < sizeof(kNames) / sizeof(kNames[0])) return kNames[ggml_type];
  return StrCat("type ", ggml_type);
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kUint16:
    case GgufType::kInt16:
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kUint64:
    case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}

double GgufValue::ArrayFloat(uint64_t index) const {
  const uint8_t* p = elems + index * ScalarBytes(elem_type);
  switch (elem_type) {
    case GgufType::kFloat32:
      return LoadUnaligned<float>(p);
    case GgufType::kFloat64:
      return LoadUnaligned<double>(p);
    default:
      return static_cast<double>(ArrayInt(index));
  }
}

int64_t GgufValue::ArrayInt(uint64_t index) const {
  const uint8_t* p = elems + index * ScalarBytes(elem_type);
  switch (elem_type) {
    case GgufType::kUint8:
      return *p;
    case GgufType::kInt8:
      return static_cast<int8_t>(*p);
    case GgufType::kBool:
      return *p != 0;
    case GgufType::kUint16:
      return LoadUnaligned<uint16_t>(p);
    case GgufType::kInt16:
      return LoadUnaligned<int16_t>(p);
    case GgufType::kUint32:
      return LoadUnaligned<uint32_t>(p);
    case GgufType::kInt32:
      return LoadUnaligned<int32_t>(p);
    case GgufType::kUint64:
      return static_cast<int64_t>(LoadUnaligned<uint64_t>(p));
    case GgufType::kInt64:
      return LoadUnaligned<int64_t>(p);
    case GgufType::kFloat32:
      return static_cast<int64_t>(LoadUnaligned<float>(p));
    case GgufType::kFloat64:
      return static_cast<int64_t>(LoadUnaligned<double>(p));
    default:
      return 0;
  }
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->data_ = file->data();
  g->size_ = file->size();
  g->name_ = path;
  g->file_ = std::move(file);
  POCKET_RETURN_IF_ERROR(g->ParseAll());
  return g;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(const uint8_t* data, size_t size,
                                                    std::string name) {
  std::unique_ptr<GgufFile> g(new GgufFile());
  g->data_ = data;
  g->size_ = size;
  g->name_ = std::move(name);
  POCKET_RETURN_IF_ERROR(g->ParseAll());
  return g;
}

Status GgufFile::ParseValue(ByteReader& r, GgufType type, GgufValue* out, int depth,
                            std::string_view key) {
  out->type = type;
  const size_t at = r.offset();
  // Integers land in both i and u (the caller picks the signedness it needs).
  auto read_int = [&](auto zero) -> Status {
    decltype(zero) v = zero;
    POCKET_RETURN_IF_ERROR(r.Read(&v, key));
    out->i = static_cast<int64_t>(v);
    out->u = static_cast<uint64_t>(v);
    return Status::Ok();
  };
  switch (type) {
    case GgufType::kUint8:
      return read_int(uint8_t{0});
    case GgufType::kInt8:
      return read_int(int8_t{0});
    case GgufType::kUint16:
      return read_int(uint16_t{0});
    case GgufType::kInt16:
      return read_int(int16_t{0});
    case GgufType::kUint32:
      return read_int(uint32_t{0});
    case GgufType::kInt32:
      return read_int(int32_t{0});
    case GgufType::kUint64:
      return read_int(uint64_t{0});
    case GgufType::kInt64:
      return read_int(int64_t{0});
    case GgufType::kFloat32: {
      float v = 0.0f;
      POCKET_RETURN_IF_ERROR(r.Read(&v, key));
      out->f = v;
      return Status::Ok();
    }
    case GgufType::kFloat64:
      return r.Read(&out->f, key);
    case GgufType::kBool: {
      uint8_t v = 0;
      POCKET_RETURN_IF_ERROR(r.Read(&v, key));
      if (v > 1) {
        return DataLossError(name_, ": metadata ", key, ": bool at offset ", at, " has value ",
                             static_cast<int>(v));
      }
      out->b = v != 0;
      out->i = v;
      out->u = v;
      return Status::Ok();
    }
    case GgufType::kString:
      return ReadString(r, &out->s, key);
    case GgufType::kArray: {
      if (depth >= kMaxArrayDepth) {
        return DataLossError(name_, ": metadata ", key, ": arrays nested deeper than ",
                             kMaxArrayDepth);
      }
      uint32_t elem_type = 0;
      POCKET_RETURN_IF_ERROR(r.Read(&elem_type, key));
      if (!KnownType(elem_type)) {
        return DataLossError(name_, ": metadata ", key, ": array element type ", elem_type,
                             " at offset ", at, " is not a GGUF type");
      }
      out->elem_type = static_cast<GgufType>(elem_type);
      POCKET_RETURN_IF_ERROR(r.Read(&out->count, key));
      const size_t elem_bytes = ScalarBytes(out->elem_type);
      // Every element takes at least one byte (strings: 8), so a count larger than the rest of
      // the file is corrupt; this also bounds the allocations below.
      const uint64_t min_bytes = elem_bytes != 0 ? elem_bytes : (elem_type == 8 ? 8 : 12);
      if (out->count > r.remaining() / min_bytes) {
        return DataLossError(name_, ": truncated or corrupt: metadata ", key, ": array of ",
                             out->count, " ", GgufTypeName(out->elem_type), " at offset ", at,
                             " does not fit in the file");
      }
      if (elem_bytes != 0) {
        POCKET_RETURN_IF_ERROR(
            r.ReadBytes(static_cast<size_t>(out->count) * elem_bytes, &out->elems, key));
        if (out->elem_type == GgufType::kBool) {
          for (uint64_t k = 0; k < out->count; ++k) {
            if (out->elems[k] > 1) {
              return DataLossError(name_, ": metadata ", key, ": bool element ", k, " is ",
                                   static_cast<int>(out->elems[k]));
            }
          }
        }
      } else if (out->elem_type == GgufType::kString) {
        out->strings.resize(static_cast<size_t>(out->count));
        for (auto& s : out->strings) POCKET_RETURN_IF_ERROR(ReadString(r, &s, key));
      } else {
        out->children.resize(static_cast<size_t>(out->count));
        for (auto& child : out->children) {
          POCKET_RETURN_IF_ERROR(ParseValue(r, GgufType::kArray, &child, depth + 1, key));
        }
      }
      return Status::Ok();
    }
  }
  return InternalError("unreachable GGUF type");
}

Status GgufFile::ParseAll() {
  ByteReader r(data_, size_, name_);
  uint32_t magic = 0;
  if (size_ < 4 || !r.Read(&magic, "magic").ok() || magic != kGgufMagic) {
    return InvalidArgumentError(
        name_, ": not a GGUF file (wrong magic ",
        QuoteBytes(std::string_view(reinterpret_cast<const char*>(data_), size_ < 4 ? size_ : 4)),
        ", expected \"GGUF\")");
  }
  POCKET_RETURN_IF_ERROR(r.Read(&version_, "version"));
  if (version_ == 1) {
    return UnimplementedError(name_, ": GGUF version 1 is not supported (only 2 and 3); ",
                              "re-convert the model with a current llama.cpp");
  }
  if (version_ != 2 && version_ != 3) {
    if ((version_ & 0xffff) == 0 && version_ != 0) {
      return UnimplementedError(name_, ": GGUF version ", version_,
                                " looks big-endian; only little-endian files are supported");
    }
    return UnimplementedError(name_, ": GGUF version ", version_,
                              " is not supported (only 2 and 3)");
  }
  uint64_t n_tensors = 0, n_kv = 0;
  POCKET_RETURN_IF_ERROR(r.Read(&n_tensors, "tensor count"));
  POCKET_RETURN_IF_ERROR(r.Read(&n_kv, "metadata count"));
  // A key/value takes at least 12 bytes and a tensor info at least 28: bound before reserving.
  if (n_kv > r.remaining() / 12) {
    return DataLossError(name_, ": truncated or corrupt: metadata count ", n_kv,
                         " does not fit in the file (", size_, " bytes)");
  }
  if (n_tensors > r.remaining() / 28) {
    return DataLossError(name_, ": truncated or corrupt: tensor count ", n_tensors,
                         " does not fit in the file (", size_, " bytes)");
  }

  kv_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string_view key;
    POCKET_RETURN_IF_ERROR(ReadString(r, &key, StrCat("metadata key #", k)));
    uint32_t type = 0;
    POCKET_RETURN_IF_ERROR(r.Read(&type, key));
    if (!KnownType(type)) {
      return DataLossError(name_, ": metadata ", QuoteBytes(key), ": value type ", type,
                           " at offset ", r.offset() - 4, " is not a GGUF type");
    }
    GgufValue value;
    POCKET_RETURN_IF_ERROR(ParseValue(r, static_cast<GgufType>(type), &value, 0, key));
    if (!kv_index_.emplace(key, kv_.size()).second) {
      return DataLossError(name_, ": metadata key ", QuoteBytes(key), " appears twice");
    }
    kv_.emplace_back(key, std::move(value));
  }

  if (const GgufValue* a = Find("general.alignment")) {
    if (!a->is_integer() || a->u == 0 || (a->u & (a->u - 1)) != 0 || a->u > (1u << 20)) {
      return DataLossError(name_, ": general.alignment must be a power of two, got ",
                           a->is_integer() ? StrCat(a->u) : std::string(GgufTypeName(a->type)));
    }
    alignment_ = a->u;
  }

  struct RawTensor {
    uint32_t ggml_type;
    uint64_t offset;
  };
  std::vector<RawTensor> raw;
  tensors_.reserve(static_cast<size_t>(n_tensors));
  raw.reserve(static_cast<size_t>(n_tensors));
  std::unordered_map<std::string_view, size_t> seen;
  for (uint64_t t = 0; t < n_tensors; ++t) {
    std::string_view name;
    POCKET_RETURN_IF_ERROR(ReadString(r, &name, StrCat("tensor #", t, " name")));
    TensorInfo info;
    info.name = name.empty() ? StrCat("#", t, " (empty name)") : std::string(name);
    if (!seen.emplace(name, t).second) {
      return DataLossError(name_, ": tensor ", QuoteBytes(name), " appears twice");
    }
    uint32_t n_dims = 0;
    POCKET_RETURN_IF_ERROR(r.Read(&n_dims, info.name));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return DataLossError(name_, ": tensor ", info.name, ": ", n_dims,
                           " dimensions (expected 1 to ", kMaxDims, ")");
    }
    std::vector<int64_t> ne(n_dims);
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      POCKET_RETURN_IF_ERROR(r.Read(&dim, info.name));
      if (dim == 0 || dim > (1ull << 40) || n_elems > (1ull << 46) / dim) {
        return DataLossError(name_, ": tensor ", info.name, ": dimension ", d, " is ", dim);
      }
      n_elems *= dim;
      ne[d] = static_cast<int64_t>(dim);
    }
    info.shape.assign(ne.rbegin(), ne.rend());  // GGUF lists the innermost first
    RawTensor rt{};
    POCKET_RETURN_IF_ERROR(r.Read(&rt.ggml_type, info.name));
    POCKET_RETURN_IF_ERROR(r.Read(&rt.offset, info.name));
    info.type_name = GgmlTypeName(rt.ggml_type);
    info.type_supported = DTypeFromGgml(rt.ggml_type, &info.type);
    if (info.type_supported && !IsBlockAligned(info.type, ne[0])) {
      return DataLossError(name_, ": tensor ", info.name, ": rows of ", ne[0], " elements are not",
                           " a whole number of ", info.type_name, " blocks (",
                           Traits(info.type).block_elems, ")");
    }
    if (info.type_supported) {
      info.n_bytes = RowBytes(info.type, ne[0]) * static_cast<size_t>(n_elems / ne[0]);
    }
    tensors_.push_back(std::move(info));
    raw.push_back(rt);
  }

  data_offset_ = (r.offset() + alignment_ - 1) / alignment_ * alignment_;
  if (n_tensors > 0 && data_offset_ > size_) {
    return DataLossError(name_, ": truncated: the tensor data section would start at offset ",
                         data_offset_, " but the file has ", size_, " bytes");
  }
  for (size_t t = 0; t < tensors_.size(); ++t) {
    TensorInfo& info = tensors_[t];
    if (raw[t].offset % alignment_ != 0) {
      return DataLossError(name_, ": tensor ", info.name, ": data offset ", raw[t].offset,
                           " is not a multiple of the alignment ", alignment_);
    }
    if (!info.type_supported) continue;  // size unknown; refused when a model uses it
    const uint64_t begin = data_offset_ + raw[t].offset;
    if (raw[t].offset > size_ || begin > size_ || info.n_bytes > size_ - begin) {
      return DataLossError(name_, ": truncated or corrupt: tensor ", info.name, " (",
                           info.type_name, " ", ShapeString(info.shape), ", ", info.n_bytes,
                           " bytes at offset ", begin, ") ends past the end of the file (", size_,
                           " bytes)");
    }
    info.data = data_ + begin;
  }
  return Status::Ok();
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundError(name_, ": metadata key ", key, " is missing");
  if (!v->is_integer()) {
    return InvalidArgumentError(name_, ": metadata ", key, " is ", GgufTypeName(v->type),
                                ", expected an integer");
  }
  return v->i;
}

StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundError(name_, ": metadata key ", key, " is missing");
  if (v->is_float()) return v->f;
  if (v->is_integer()) return static_cast<double>(v->i);
  return InvalidArgumentError(name_, ": metadata ", key, " is ", GgufTypeName(v->type),
                              ", expected a number");
}

StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundError(name_, ": metadata key ", key, " is missing");
  if (v->type != GgufType::kBool) {
    return InvalidArgumentError(name_, ": metadata ", key, " is ", GgufTypeName(v->type),
                                ", expected bool");
  }
  return v->b;
}

StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundError(name_, ": metadata key ", key, " is missing");
  if (v->type != GgufType::kString) {
    return InvalidArgumentError(name_, ": metadata ", key, " is ", GgufTypeName(v->type),
                                ", expected string");
  }
  return std::string(v->s);
}

StatusOr<const GgufValue*> GgufFile::GetArray(std::string_view key, GgufType elem_type) const {
  const GgufValue* v = Find(key);
  if (v == nullptr) return NotFoundError(name_, ": metadata key ", key, " is missing");
  if (v->type != GgufType::kArray || v->elem_type != elem_type) {
    return InvalidArgumentError(name_, ": metadata ", key, " is ",
                                v->type == GgufType::kArray
                                    ? StrCat("an array of ", GgufTypeName(v->elem_type))
                                    : std::string(GgufTypeName(v->type)),
                                ", expected an array of ", GgufTypeName(elem_type));
  }
  return v;
}

}  // namespace pocket
