#include "format/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/output_file.h"

namespace pocket {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // as the reference implementation limits it

bool DTypeFromSafetensors(const std::string& s, DType* out) {
  if (s == "F32")
    *out = DType::kF32;
  else if (s == "F16")
    *out = DType::kF16;
  else if (s == "BF16")
    *out = DType::kBF16;
  else
    return false;
  return true;
}

const char* SafetensorsName(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    default:
      return nullptr;
  }
}

}  // namespace

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->data_ = file->data();
  f->size_ = file->size();
  f->name_ = path;
  f->file_ = std::move(file);
  POCKET_RETURN_IF_ERROR(f->ParseAll());
  return f;
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Parse(const uint8_t* data, size_t size,
                                                                  std::string name) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->data_ = data;
  f->size_ = size;
  f->name_ = std::move(name);
  POCKET_RETURN_IF_ERROR(f->ParseAll());
  return f;
}

Status SafetensorsFile::ParseAll() {
  if (size_ < 8) {
    return DataLossError(name_, ": truncated: ", size_, " bytes, a safetensors file needs at ",
                         "least the 8-byte header length");
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, data_, 8);
  if (header_len > kMaxHeaderBytes || header_len > size_ - 8) {
    return DataLossError(name_, ": header length ", header_len, " exceeds the file (", size_,
                         " bytes) or the 100 MB limit; not a safetensors file, or truncated");
  }
  const char* header = reinterpret_cast<const char*>(data_ + 8);
  Json j = Json::parse(header, header + header_len, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return DataLossError(name_, ": the JSON header (", header_len, " bytes) does not parse");
  }
  if (!j.is_object()) return DataLossError(name_, ": the JSON header is not an object");
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_bytes = size_ - data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const Json& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) return DataLossError(name_, ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) {
      return DataLossError(name_, ": tensor ", key, ": ", what);
    };
    if (!v.is_object()) return bad("entry is not an object");
    auto dtype_it = v.find("dtype");
    auto shape_it = v.find("shape");
    auto offs_it = v.find("data_offsets");
    if (dtype_it == v.end() || !dtype_it->is_string()) return bad("missing dtype");
    if (shape_it == v.end() || !shape_it->is_array()) return bad("missing shape");
    if (offs_it == v.end() || !offs_it->is_array() || offs_it->size() != 2 ||
        !(*offs_it)[0].is_number_unsigned() || !(*offs_it)[1].is_number_unsigned()) {
      return bad("data_offsets must be [begin, end]");
    }
    TensorInfo info;
    info.name = key;
    info.type_name = dtype_it->get<std::string>();
    info.type_supported = DTypeFromSafetensors(info.type_name, &info.type);
    if (shape_it->size() > 8) return bad("more than 8 dimensions");
    uint64_t n = 1;
    for (const Json& d : *shape_it) {
      if (!d.is_number_unsigned()) return bad("shape entries must be non-negative integers");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > (1ull << 40) || (dim != 0 && n > (1ull << 46) / dim)) return bad("shape too large");
      n *= dim;
      info.shape.push_back(static_cast<int64_t>(dim));
    }
    const uint64_t begin = (*offs_it)[0].get<uint64_t>(), end = (*offs_it)[1].get<uint64_t>();
    if (begin > end || end > data_bytes) {
      return bad(StrCat("data_offsets [", begin, ", ", end, "] outside the ", data_bytes,
                        " data bytes (truncated file?)"));
    }
    if (info.type_supported) {
      const uint64_t want = n * static_cast<uint64_t>(Traits(info.type).block_bytes);
      if (end - begin != want) {
        return bad(StrCat(info.type_name, " ", ShapeString(info.shape), " needs ", want,
                          " bytes, data_offsets span ", end - begin));
      }
    }
    info.data = data_ + data_start + begin;
    info.n_bytes = static_cast<size_t>(end - begin);
    tensors_.push_back(std::move(info));
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.data < b.data; });
  return Status::Ok();
}

Status SafetensorsWriter::AddTensor(const std::string& name, DType type, std::vector<int64_t> shape,
                                    TensorFiller fill) {
  if (SafetensorsName(type) == nullptr) {
    return InvalidArgumentError("tensor ", name, ": safetensors holds f32, f16 or bf16, not ",
                                DTypeName(type));
  }
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  tensors_.push_back({name, type, std::move(shape),
                      static_cast<size_t>(n) * static_cast<size_t>(Traits(type).block_bytes),
                      std::move(fill)});
  return Status::Ok();
}

Status SafetensorsWriter::Write(const std::string& path,
                                const std::vector<std::string>& inputs) const {
  Json header = Json::object();
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    header[t.name] = {{"dtype", SafetensorsName(t.type)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.n_bytes}}};
    offset += t.n_bytes;
  }
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data 8-byte aligned
  POCKET_ASSIGN_OR_RETURN(OutputFile out, OutputFile::Create(path, inputs));
  const uint64_t len = text.size();
  POCKET_RETURN_IF_ERROR(out.Write(&len, 8));
  POCKET_RETURN_IF_ERROR(out.Write(text.data(), text.size()));
  std::vector<uint8_t> buf;
  for (const Tensor& t : tensors_) {
    buf.assign(t.n_bytes, 0);
    POCKET_RETURN_IF_ERROR(t.fill(buf.data(), buf.size()).WithContext(StrCat("tensor ", t.name)));
    POCKET_RETURN_IF_ERROR(out.Write(buf.data(), buf.size()));
  }
  return out.Commit();
}

}  // namespace pocket
