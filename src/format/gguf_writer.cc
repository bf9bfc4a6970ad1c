#include "format/gguf_writer.h"

#include <cstring>

#include "base/output_file.h"

namespace pocket {
namespace {

template <typename T>
void Append(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

void AppendString(std::string& out, const std::string& s) {
  Append<uint64_t>(out, s.size());
  out += s;
}

// Encodes a parsed value of `type` (without its type tag), for copying metadata through.
void AppendValue(std::string& out, GgufType type, const GgufValue& v) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kBool:
      Append<uint8_t>(out, static_cast<uint8_t>(v.u));
      return;
    case GgufType::kInt8:
      Append<int8_t>(out, static_cast<int8_t>(v.i));
      return;
    case GgufType::kUint16:
      Append<uint16_t>(out, static_cast<uint16_t>(v.u));
      return;
    case GgufType::kInt16:
      Append<int16_t>(out, static_cast<int16_t>(v.i));
      return;
    case GgufType::kUint32:
      Append<uint32_t>(out, static_cast<uint32_t>(v.u));
      return;
    case GgufType::kInt32:
      Append<int32_t>(out, static_cast<int32_t>(v.i));
      return;
    case GgufType::kUint64:
      Append<uint64_t>(out, v.u);
      return;
    case GgufType::kInt64:
      Append<int64_t>(out, v.i);
      return;
    case GgufType::kFloat32:
      Append<float>(out, static_cast<float>(v.f));
      return;
    case GgufType::kFloat64:
      Append<double>(out, v.f);
      return;
    case GgufType::kString:
      AppendString(out, std::string(v.s));
      return;
    case GgufType::kArray:
      Append<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
      Append<uint64_t>(out, v.count);
      if (v.elem_type == GgufType::kString) {
        for (std::string_view e : v.strings) AppendString(out, std::string(e));
      } else if (v.elem_type == GgufType::kArray) {
        for (const GgufValue& child : v.children) AppendValue(out, GgufType::kArray, child);
      } else {
        const size_t bytes =
            v.elem_type == GgufType::kBool || v.elem_type == GgufType::kUint8 ||
                    v.elem_type == GgufType::kInt8
                ? 1
            : v.elem_type == GgufType::kUint16 || v.elem_type == GgufType::kInt16 ? 2
            : v.elem_type == GgufType::kUint32 || v.elem_type == GgufType::kInt32 ||
                    v.elem_type == GgufType::kFloat32
                ? 4
                : 8;
        out.append(reinterpret_cast<const char*>(v.elems), static_cast<size_t>(v.count) * bytes);
      }
      return;
  }
}

}  // namespace

void GgufWriter::SetValue(const std::string& key, const GgufValue& v) {
  std::string p;
  AppendValue(p, v.type, v);
  Put(key, v.type, std::move(p));
}

void GgufWriter::Put(const std::string& key, GgufType type, std::string payload) {
  for (Kv& kv : kv_) {
    if (kv.key == key) {
      kv.type = type;
      kv.payload = std::move(payload);
      return;
    }
  }
  kv_.push_back({key, type, std::move(payload)});
}

void GgufWriter::SetUint32(const std::string& key, uint32_t v) {
  std::string p;
  Append(p, v);
  Put(key, GgufType::kUint32, std::move(p));
}
void GgufWriter::SetInt32(const std::string& key, int32_t v) {
  std::string p;
  Append(p, v);
  Put(key, GgufType::kInt32, std::move(p));
}
void GgufWriter::SetUint64(const std::string& key, uint64_t v) {
  std::string p;
  Append(p, v);
  Put(key, GgufType::kUint64, std::move(p));
}
void GgufWriter::SetFloat32(const std::string& key, float v) {
  std::string p;
  Append(p, v);
  Put(key, GgufType::kFloat32, std::move(p));
}
void GgufWriter::SetBool(const std::string& key, bool v) {
  std::string p;
  Append<uint8_t>(p, v ? 1 : 0);
  Put(key, GgufType::kBool, std::move(p));
}
void GgufWriter::SetString(const std::string& key, const std::string& v) {
  std::string p;
  AppendString(p, v);
  Put(key, GgufType::kString, std::move(p));
}
void GgufWriter::SetStringArray(const std::string& key, const std::vector<std::string>& v) {
  std::string p;
  Append(p, static_cast<uint32_t>(GgufType::kString));
  Append<uint64_t>(p, v.size());
  for (const std::string& s : v) AppendString(p, s);
  Put(key, GgufType::kArray, std::move(p));
}
void GgufWriter::SetInt32Array(const std::string& key, const std::vector<int32_t>& v) {
  std::string p;
  Append(p, static_cast<uint32_t>(GgufType::kInt32));
  Append<uint64_t>(p, v.size());
  for (int32_t x : v) Append(p, x);
  Put(key, GgufType::kArray, std::move(p));
}
void GgufWriter::SetFloat32Array(const std::string& key, const std::vector<float>& v) {
  std::string p;
  Append(p, static_cast<uint32_t>(GgufType::kFloat32));
  Append<uint64_t>(p, v.size());
  for (float x : v) Append(p, x);
  Put(key, GgufType::kArray, std::move(p));
}
void GgufWriter::SetRaw(const std::string& key, GgufType type, std::string payload) {
  Put(key, type, std::move(payload));
}

Status GgufWriter::AddTensor(const std::string& name, DType type, std::vector<int64_t> shape,
                             TensorFiller fill) {
  if (shape.empty() || shape.size() > 4) {
    return InvalidArgumentError("tensor ", name, ": ", shape.size(), " dimensions (1 to 4)");
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) return InvalidArgumentError("tensor ", name, ": shape ", ShapeString(shape));
    n *= d;
  }
  if (!IsBlockAligned(type, shape.back())) {
    return InvalidArgumentError("tensor ", name, ": rows of ", shape.back(),
                                " are not a whole number of ", DTypeName(type), " blocks");
  }
  for (const Tensor& t : tensors_) {
    if (t.name == name) return InvalidArgumentError("tensor ", name, " added twice");
  }
  const size_t n_bytes = RowBytes(type, shape.back()) * static_cast<size_t>(n / shape.back());
  tensors_.push_back({name, type, std::move(shape), n_bytes, std::move(fill)});
  return Status::Ok();
}

std::string GgufWriter::EncodeHeader(std::vector<uint64_t>* offsets) const {
  std::string h;
  Append<uint32_t>(h, 0x46554747);
  Append<uint32_t>(h, 3);
  Append<uint64_t>(h, tensors_.size());
  const bool has_alignment_key = alignment_ != 32;
  Append<uint64_t>(h, kv_.size() + (has_alignment_key ? 1 : 0));
  if (has_alignment_key) {
    AppendString(h, "general.alignment");
    Append(h, static_cast<uint32_t>(GgufType::kUint32));
    Append<uint32_t>(h, alignment_);
  }
  for (const Kv& kv : kv_) {
    AppendString(h, kv.key);
    Append(h, static_cast<uint32_t>(kv.type));
    h += kv.payload;
  }
  uint64_t offset = 0;
  offsets->clear();
  for (const Tensor& t : tensors_) {
    AppendString(h, t.name);
    Append<uint32_t>(h, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) {
      Append<uint64_t>(h, static_cast<uint64_t>(*it));
    }
    Append<uint32_t>(h, GgmlTypeOf(t.type));
    Append<uint64_t>(h, offset);
    offsets->push_back(offset);
    offset += (t.n_bytes + alignment_ - 1) / alignment_ * alignment_;
  }
  const size_t padded = (h.size() + alignment_ - 1) / alignment_ * alignment_;
  h.resize(padded, '\0');
  return h;
}

Status GgufWriter::Write(const std::string& path, const std::vector<std::string>& inputs) const {
  std::vector<uint64_t> offsets;
  const std::string header = EncodeHeader(&offsets);
  POCKET_ASSIGN_OR_RETURN(OutputFile out, OutputFile::Create(path, inputs));
  POCKET_RETURN_IF_ERROR(out.Write(header.data(), header.size()));
  std::vector<uint8_t> buf;
  for (const Tensor& t : tensors_) {
    buf.assign(t.n_bytes, 0);
    POCKET_RETURN_IF_ERROR(t.fill(buf.data(), buf.size()).WithContext(StrCat("tensor ", t.name)));
    POCKET_RETURN_IF_ERROR(out.Write(buf.data(), buf.size()));
    const size_t pad = (alignment_ - t.n_bytes % alignment_) % alignment_;
    POCKET_RETURN_IF_ERROR(out.WriteZeros(pad));
  }
  return out.Commit();
}

StatusOr<std::string> GgufWriter::WriteToString() const {
  std::vector<uint64_t> offsets;
  std::string file = EncodeHeader(&offsets);
  for (const Tensor& t : tensors_) {
    std::string bytes(t.n_bytes, '\0');
    POCKET_RETURN_IF_ERROR(t.fill(reinterpret_cast<uint8_t*>(bytes.data()), bytes.size()));
    file += bytes;
    file.append((alignment_ - t.n_bytes % alignment_) % alignment_, '\0');
  }
  return file;
}

}  // namespace pocket
