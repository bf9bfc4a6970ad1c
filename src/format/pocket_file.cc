#include "format/pocket_file.h"

#include <cstring>
#include <set>

#include "base/byte_reader.h"
#include "base/crc32c.h"
#include "base/output_file.h"

namespace pocket {
namespace {

constexpr size_t kHeaderBytes = 64;
constexpr size_t kEntryBytes = 64;
constexpr size_t kAlign = 64;
constexpr uint32_t kMaxSections = 1024;
constexpr uint32_t kSectionRequired = 1;
constexpr uint8_t kEncodingDense = 0, kEncodingPacked = 1;

uint64_t AlignUp(uint64_t v) {
  return (v + kAlign - 1) / kAlign * kAlign;
}

template <typename T>
void Put(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

template <typename T>
T Get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

std::string EncodeHeader(uint64_t file_bytes, uint32_t n_sections) {
  std::string h;
  h.append(kPocketMagic, 8);
  Put<uint16_t>(h, kPocketVersionMajor);
  Put<uint16_t>(h, kPocketVersionMinor);
  Put<uint32_t>(h, kHeaderBytes);
  Put<uint64_t>(h, file_bytes);
  Put<uint64_t>(h, kHeaderBytes);  // the section table follows the header
  Put<uint32_t>(h, n_sections);
  Put<uint32_t>(h, 0);  // flags
  h.append(20, '\0');
  Put<uint32_t>(h, Crc32c(h.data(), h.size()));
  return h;
}

std::string EncodeEntry(const PocketSection& s) {
  std::string e(16, '\0');
  std::memcpy(e.data(), s.name.data(), s.name.size() < 16 ? s.name.size() : 16);
  Put<uint64_t>(e, s.offset);
  Put<uint64_t>(e, s.size);
  Put<uint32_t>(e, s.crc32c);
  Put<uint32_t>(e, s.required ? kSectionRequired : 0);
  e.append(24, '\0');
  return e;
}

}  // namespace

bool PocketFile::LooksLikePocket(const uint8_t* data, size_t size) {
  return size >= 8 && std::memcmp(data, kPocketMagic, 8) == 0;
}

StatusOr<std::unique_ptr<PocketFile>> PocketFile::Open(const std::string& path) {
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  std::unique_ptr<PocketFile> f(new PocketFile());
  f->data_ = file->data();
  f->size_ = file->size();
  f->name_ = path;
  f->file_ = std::move(file);
  POCKET_RETURN_IF_ERROR(f->ParseAll());
  return f;
}

StatusOr<std::unique_ptr<PocketFile>> PocketFile::Parse(const uint8_t* data, size_t size,
                                                        std::string name) {
  std::unique_ptr<PocketFile> f(new PocketFile());
  f->data_ = data;
  f->size_ = size;
  f->name_ = std::move(name);
  POCKET_RETURN_IF_ERROR(f->ParseAll());
  return f;
}

Status PocketFile::ParseAll() {
  if (!LooksLikePocket(data_, size_)) {
    return InvalidArgumentError(name_, ": not a .pocket file (wrong magic)");
  }
  if (size_ < kHeaderBytes) {
    return DataLossError(name_, ": truncated: ", size_, " bytes, the header needs ", kHeaderBytes);
  }
  version_major_ = Get<uint16_t>(data_ + 8);
  version_minor_ = Get<uint16_t>(data_ + 10);
  if (version_major_ != kPocketVersionMajor) {
    return UnimplementedError(name_, ": package format version ", version_major_, ".",
                              version_minor_, " is not supported; this pocket reads version ",
                              kPocketVersionMajor, ".x (convert the model again with this pocket)");
  }
  if (Get<uint32_t>(data_ + 60) != Crc32c(data_, 60)) {
    return DataLossError(name_, ": corrupt: the header checksum does not match");
  }
  const uint64_t file_bytes = Get<uint64_t>(data_ + 16);
  if (file_bytes != size_) {
    return DataLossError(name_, ": truncated or extended: the header says ", file_bytes,
                         " bytes, the file has ", size_);
  }
  const uint64_t table = Get<uint64_t>(data_ + 24);
  const uint32_t n_sections = Get<uint32_t>(data_ + 32);
  if (n_sections > kMaxSections || table < kHeaderBytes || table > size_ ||
      n_sections * kEntryBytes > size_ - table) {
    return DataLossError(name_, ": corrupt: section table (", n_sections, " entries at ", table,
                         ") does not fit the file");
  }
  std::set<std::string> names;
  for (uint32_t i = 0; i < n_sections; ++i) {
    const uint8_t* e = data_ + table + i * kEntryBytes;
    PocketSection s;
    const char* name = reinterpret_cast<const char*>(e);
    s.name.assign(name, strnlen(name, 16));
    s.offset = Get<uint64_t>(e + 16);
    s.size = Get<uint64_t>(e + 24);
    s.crc32c = Get<uint32_t>(e + 32);
    s.required = (Get<uint32_t>(e + 36) & kSectionRequired) != 0;
    if (s.offset % kAlign != 0 || s.offset < table + n_sections * kEntryBytes || s.offset > size_ ||
        s.size > size_ - s.offset) {
      return DataLossError(name_, ": corrupt: section ", QuoteBytes(s.name), " (", s.size,
                           " bytes at ", s.offset, ") lies outside the file or is misaligned");
    }
    if (!names.insert(s.name).second) {
      return DataLossError(name_, ": section ", QuoteBytes(s.name), " appears twice");
    }
    static const char* const kKnown[] = {"meta", "tokenizer", "chat_template", "tensors", "data"};
    bool known = false;
    for (const char* k : kKnown) known |= s.name == k;
    if (!known && s.required) {
      return UnimplementedError(name_, ": required section ", QuoteBytes(s.name),
                                " is unknown to this pocket; update pocket to read this file");
    }
    sections_.push_back(s);
  }
  for (size_t i = 0; i < sections_.size(); ++i) {
    for (size_t j = i + 1; j < sections_.size(); ++j) {
      const PocketSection &a = sections_[i], &b = sections_[j];
      if (a.offset < b.offset + b.size && b.offset < a.offset + a.size && a.size && b.size) {
        return DataLossError(name_, ": corrupt: sections ", a.name, " and ", b.name, " overlap");
      }
    }
  }
  // The small sections are checked on every load; tensor data only by Verify().
  for (const char* name : {"meta", "tokenizer", "chat_template", "tensors"}) {
    for (const PocketSection& s : sections_) {
      if (s.name == name && Crc32c(data_ + s.offset, s.size) != s.crc32c) {
        return DataLossError(name_, ": corrupt: section ", name, " fails its checksum");
      }
    }
  }
  const PocketSection* meta = nullptr;
  const PocketSection* dir = nullptr;
  const PocketSection* data = nullptr;
  for (const PocketSection& s : sections_) {
    if (s.name == "meta") meta = &s;
    if (s.name == "tensors") dir = &s;
    if (s.name == "data") data = &s;
  }
  if (meta == nullptr || dir == nullptr || data == nullptr) {
    return DataLossError(name_, ": missing a required section (meta, tensors and data are needed)");
  }
  POCKET_ASSIGN_OR_RETURN(
      metadata_,
      ParseConfigJson(std::string(reinterpret_cast<const char*>(data_ + meta->offset), meta->size),
                      name_ + " (meta)"));
  return ParseDirectory(
      std::string_view(reinterpret_cast<const char*>(data_ + dir->offset), dir->size), data->offset,
      data->size);
}

Status PocketFile::ParseDirectory(std::string_view dir, uint64_t data_offset, uint64_t data_size) {
  const std::string what = name_ + " (tensors)";
  ByteReader r(reinterpret_cast<const uint8_t*>(dir.data()), dir.size(), what);
  uint32_t n = 0;
  POCKET_RETURN_IF_ERROR(r.Read(&n, "tensor count"));
  if (n > dir.size() / 24) return DataLossError(what, ": tensor count ", n, " does not fit");
  std::set<std::string> names;
  tensors_.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    uint16_t name_len = 0;
    POCKET_RETURN_IF_ERROR(r.Read(&name_len, "tensor name length"));
    const uint8_t* name_bytes = nullptr;
    POCKET_RETURN_IF_ERROR(r.ReadBytes(name_len, &name_bytes, "tensor name"));
    TensorInfo t;
    t.name.assign(reinterpret_cast<const char*>(name_bytes), name_len);
    uint8_t encoding = 0, code = 0, explicit_min = 0, n_dims = 0;
    uint32_t group = 0;
    POCKET_RETURN_IF_ERROR(r.Read(&encoding, t.name));
    POCKET_RETURN_IF_ERROR(r.Read(&code, t.name));
    POCKET_RETURN_IF_ERROR(r.Read(&explicit_min, t.name));
    POCKET_RETURN_IF_ERROR(r.Read(&n_dims, t.name));
    POCKET_RETURN_IF_ERROR(r.Read(&group, t.name));
    if (n_dims < 1 || n_dims > 4) {
      return DataLossError(what, ": tensor ", t.name, ": ", int{n_dims}, " dimensions");
    }
    uint64_t n_elems = 1;
    for (uint8_t d = 0; d < n_dims; ++d) {
      int64_t dim = 0;
      POCKET_RETURN_IF_ERROR(r.Read(&dim, t.name));
      if (dim <= 0 || dim > (int64_t{1} << 40) ||
          n_elems > (uint64_t{1} << 46) / static_cast<uint64_t>(dim)) {
        return DataLossError(what, ": tensor ", t.name, ": dimension ", int{d}, " is ", dim);
      }
      n_elems *= static_cast<uint64_t>(dim);
      t.shape.push_back(dim);
    }
    uint64_t offset = 0, n_bytes = 0;
    POCKET_RETURN_IF_ERROR(r.Read(&offset, t.name));
    POCKET_RETURN_IF_ERROR(r.Read(&n_bytes, t.name));
    uint64_t expected = 0;
    if (encoding == kEncodingDense) {
      if (code >= static_cast<uint8_t>(DType::kCount)) {
        return UnimplementedError(what, ": tensor ", t.name, " has unknown element type ",
                                  int{code});
      }
      t.type = static_cast<DType>(code);
      t.type_name = std::string(DTypeName(t.type));
      if (!IsBlockAligned(t.type, t.shape.back())) {
        return DataLossError(what, ": tensor ", t.name, ": rows of ", t.shape.back(),
                             " elements are not whole ", t.type_name, " blocks");
      }
      expected =
          RowBytes(t.type, t.shape.back()) * (n_elems / static_cast<uint64_t>(t.shape.back()));
    } else if (encoding == kEncodingPacked) {
      if (n_dims != 2 || (code != 4 && code != 8) || explicit_min > 1) {
        return DataLossError(what, ": tensor ", t.name, ": invalid packed encoding (", int{code},
                             "-bit codes, ", int{n_dims}, " dimensions)");
      }
      t.packed = true;
      t.layout =
          PackedLayout{code == 4 ? PackedCodes::kU4 : PackedCodes::kU8, static_cast<int32_t>(group),
                       t.shape[0], t.shape[1], explicit_min != 0};
      Status valid = t.layout.Validate();
      if (!valid.ok()) return DataLossError(what, ": tensor ", t.name, ": ", valid.message());
      t.type_name = StrCat(code == 4 ? "u4" : "u8", "g", group, explicit_min ? "" : "s");
      expected = t.layout.total_bytes();
    } else {
      return UnimplementedError(what, ": tensor ", t.name, " has unknown encoding ", int{encoding});
    }
    if (n_bytes != expected) {
      return DataLossError(what, ": tensor ", t.name, " ", ShapeString(t.shape), " needs ",
                           expected, " bytes, the directory says ", n_bytes);
    }
    if (offset % kAlign != 0 || offset > data_size || n_bytes > data_size - offset) {
      return DataLossError(what, ": tensor ", t.name, " (", n_bytes, " bytes at ", offset,
                           ") lies outside the data section (", data_size, " bytes)");
    }
    if (!names.insert(t.name).second) {
      return DataLossError(what, ": tensor ", t.name, " appears twice");
    }
    t.data = data_ + data_offset + offset;
    t.n_bytes = n_bytes;
    tensors_.push_back(std::move(t));
  }
  return Status::Ok();
}

std::string_view PocketFile::Section(std::string_view name) const {
  for (const PocketSection& s : sections_) {
    if (s.name == name) return {reinterpret_cast<const char*>(data_ + s.offset), s.size};
  }
  return {};
}

const ConfigValue* PocketFile::Find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

Status PocketFile::Verify() const {
  for (const PocketSection& s : sections_) {
    if (Crc32c(data_ + s.offset, s.size) != s.crc32c) {
      return DataLossError(name_, ": corrupt: section ", s.name, " (", s.size, " bytes at ",
                           s.offset, ") fails its checksum");
    }
  }
  return Status::Ok();
}

void PocketWriter::AddSection(const std::string& name, std::string bytes, bool required) {
  PocketSection s;
  s.name = name;
  s.required = required;
  extra_.emplace_back(s, std::move(bytes));
}

Status PocketWriter::AddDenseTensor(const std::string& name, DType type, std::vector<int64_t> shape,
                                    TensorFiller fill) {
  if (shape.empty() || shape.size() > 4 || !IsBlockAligned(type, shape.back())) {
    return InvalidArgumentError("tensor ", name, ": shape ", ShapeString(shape), " cannot be ",
                                DTypeName(type));
  }
  TensorInfo t;
  t.name = name;
  t.type = type;
  t.shape = std::move(shape);
  t.n_bytes = RowBytes(type, t.shape.back()) * static_cast<size_t>(t.n_elements() / t.shape.back());
  tensors_.push_back({std::move(t), std::move(fill)});
  return Status::Ok();
}

Status PocketWriter::AddPackedTensor(const std::string& name, const PackedLayout& layout,
                                     TensorFiller fill) {
  POCKET_RETURN_IF_ERROR(layout.Validate().WithContext(StrCat("tensor ", name)));
  TensorInfo t;
  t.name = name;
  t.packed = true;
  t.layout = layout;
  t.shape = {layout.rows, layout.cols};
  t.n_bytes = layout.total_bytes();
  tensors_.push_back({std::move(t), std::move(fill)});
  return Status::Ok();
}

std::string PocketWriter::EncodeDirectory(std::vector<uint64_t>* offsets,
                                          uint64_t* data_size) const {
  std::string d;
  Put<uint32_t>(d, static_cast<uint32_t>(tensors_.size()));
  uint64_t offset = 0;
  for (const Tensor& tensor : tensors_) {
    const TensorInfo& t = tensor.info;
    Put<uint16_t>(d, static_cast<uint16_t>(t.name.size()));
    d += t.name;
    Put<uint8_t>(d, t.packed ? kEncodingPacked : kEncodingDense);
    Put<uint8_t>(d, t.packed ? static_cast<uint8_t>(t.layout.codes) : static_cast<uint8_t>(t.type));
    Put<uint8_t>(d, t.packed && t.layout.explicit_min ? 1 : 0);
    Put<uint8_t>(d, static_cast<uint8_t>(t.shape.size()));
    Put<uint32_t>(d, t.packed ? static_cast<uint32_t>(t.layout.group) : 0);
    for (int64_t dim : t.shape) Put<int64_t>(d, dim);
    Put<uint64_t>(d, offset);
    Put<uint64_t>(d, t.n_bytes);
    offsets->push_back(offset);
    offset = AlignUp(offset + t.n_bytes);
  }
  *data_size = offset;
  return d;
}

Status PocketWriter::Write(const std::string& path, const std::vector<std::string>& inputs) const {
  std::vector<uint64_t> tensor_offsets;
  uint64_t data_size = 0;
  std::vector<std::pair<PocketSection, std::string>> small;
  PocketSection meta;
  meta.name = "meta";
  meta.required = true;
  small.emplace_back(meta, meta_json_);
  for (const auto& e : extra_) small.push_back(e);
  PocketSection dir;
  dir.name = "tensors";
  dir.required = true;
  small.emplace_back(dir, EncodeDirectory(&tensor_offsets, &data_size));
  const uint32_t n_sections = static_cast<uint32_t>(small.size() + 1);

  // Layout: header, table, the small sections, then the tensor data.
  uint64_t offset = AlignUp(kHeaderBytes + n_sections * kEntryBytes);
  for (auto& [section, bytes] : small) {
    section.offset = offset;
    section.size = bytes.size();
    section.crc32c = Crc32c(bytes.data(), bytes.size());
    offset = AlignUp(offset + bytes.size());
  }
  PocketSection data;
  data.name = "data";
  data.required = true;
  data.offset = offset;
  data.size = data_size;
  const uint64_t file_bytes = data.offset + data.size;

  POCKET_ASSIGN_OR_RETURN(OutputFile out, OutputFile::Create(path, inputs));
  std::string head = EncodeHeader(file_bytes, n_sections);
  for (const auto& [section, bytes] : small) head += EncodeEntry(section);
  head += EncodeEntry(data);  // its checksum is filled in at the end
  head.resize(AlignUp(head.size()), '\0');
  POCKET_RETURN_IF_ERROR(out.Write(head.data(), head.size()));
  for (const auto& [section, bytes] : small) {
    POCKET_RETURN_IF_ERROR(out.Write(bytes.data(), bytes.size()));
    POCKET_RETURN_IF_ERROR(out.WriteZeros(AlignUp(bytes.size()) - bytes.size()));
  }
  uint32_t crc = 0;
  std::vector<uint8_t> buf;
  static const uint8_t kZeros[kAlign] = {};
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const TensorInfo& t = tensors_[i].info;
    buf.assign(t.n_bytes, 0);
    POCKET_RETURN_IF_ERROR(
        tensors_[i].fill(buf.data(), buf.size()).WithContext(StrCat("tensor ", t.name)));
    POCKET_RETURN_IF_ERROR(out.Write(buf.data(), buf.size()));
    crc = Crc32c(buf.data(), buf.size(), crc);
    const size_t pad = AlignUp(t.n_bytes) - t.n_bytes;
    if (i + 1 < tensors_.size() || pad > 0) {
      POCKET_RETURN_IF_ERROR(out.Write(kZeros, pad));
      crc = Crc32c(kZeros, pad, crc);
    }
    if (progress_) progress_(i + 1, tensors_.size(), t.name);
  }
  data.crc32c = crc;
  const std::string entry = EncodeEntry(data);
  POCKET_RETURN_IF_ERROR(
      out.WriteAt(kHeaderBytes + (n_sections - 1) * kEntryBytes, entry.data(), entry.size()));
  // A package is written once and then mapped by every run: leave it to be read back fresh, so
  // that its weights can come back in huge pages (see Model::Load).
  return out.Commit(/*drop_from_page_cache=*/true);
}

}  // namespace pocket
