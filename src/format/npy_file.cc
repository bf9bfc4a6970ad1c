#include "format/npy_file.h"

#include <cstring>

#include "base/float16.h"
#include "base/mapped_file.h"

namespace pocket {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;

// The value text after 'key': in the header dict (a Python literal), or empty.
std::string_view DictValue(std::string_view dict, std::string_view key) {
  for (const char quote : {'\'', '"'}) {
    std::string k(1, quote);
    k.append(key);
    k.push_back(quote);
    size_t at = dict.find(k);
    if (at == std::string_view::npos) continue;
    at = dict.find(':', at + k.size());
    if (at == std::string_view::npos) return {};
    at = dict.find_first_not_of(' ', at + 1);
    if (at == std::string_view::npos) return {};
    return dict.substr(at);
  }
  return {};
}

}  // namespace

bool LooksLikeNpy(std::string_view bytes) {
  return bytes.size() >= kMagicBytes && std::memcmp(bytes.data(), kMagic, kMagicBytes) == 0;
}

StatusOr<NpyArray> ParseNpy(std::string_view bytes, const std::string& name) {
  if (!LooksLikeNpy(bytes)) return InvalidArgumentError(name, ": not a .npy file (wrong magic)");
  if (bytes.size() < 10) return DataLossError(name, ": truncated .npy header");
  const int major = static_cast<uint8_t>(bytes[6]);
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len =
        static_cast<uint8_t>(bytes[8]) | (static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return DataLossError(name, ": truncated .npy header");
    uint32_t len = 0;
    std::memcpy(&len, bytes.data() + 8, 4);
    header_len = len;
    offset = 12;
  } else {
    return UnimplementedError(name, ": .npy format version ", major, " is not supported (1 to 3)");
  }
  if (header_len > bytes.size() - offset) return DataLossError(name, ": truncated .npy header");
  const std::string_view dict = bytes.substr(offset, header_len);
  offset += header_len;

  std::string_view descr = DictValue(dict, "descr");
  if (descr.size() < 2 || (descr[0] != '\'' && descr[0] != '"')) {
    return DataLossError(name, ": .npy header has no 'descr'");
  }
  descr = descr.substr(1, descr.find(descr[0], 1) - 1);
  size_t elem_bytes = 0;
  if (descr == "<f4" || descr == "=f4") elem_bytes = 4;
  if (descr == "<f8" || descr == "=f8") elem_bytes = 8;
  if (descr == "<f2" || descr == "=f2") elem_bytes = 2;
  if (elem_bytes == 0) {
    return UnimplementedError(name, ": dtype ", QuoteBytes(descr),
                              " is not supported (little-endian float16, float32 or float64)");
  }
  const std::string_view order = DictValue(dict, "fortran_order");
  if (order.substr(0, 4) == "True") {
    return UnimplementedError(name, ": the array is in Fortran order; save it in C order ",
                              "(numpy.ascontiguousarray)");
  }
  if (order.substr(0, 5) != "False") {
    return DataLossError(name, ": .npy header has no 'fortran_order'");
  }
  std::string_view shape_text = DictValue(dict, "shape");
  if (shape_text.empty() || shape_text[0] != '(') {
    return DataLossError(name, ": .npy header has no 'shape'");
  }
  shape_text = shape_text.substr(1, shape_text.find(')') - 1);
  NpyArray a;
  uint64_t n = 1;
  for (const std::string& part : SplitString(shape_text, ',')) {
    std::string t;
    for (char ch : part) {
      if (ch != ' ') t += ch;
    }
    if (t.empty()) continue;  // the trailing comma of a 1-tuple
    char* end = nullptr;
    const long long dim = std::strtoll(t.c_str(), &end, 10);
    if (*end != '\0' || dim < 0 || dim > (int64_t{1} << 40) ||
        (dim > 0 && n > (uint64_t{1} << 40) / static_cast<uint64_t>(dim))) {
      return DataLossError(name, ": .npy shape entry ", QuoteBytes(t), " is invalid");
    }
    a.shape.push_back(dim);
    n *= static_cast<uint64_t>(dim);
  }
  const uint64_t data_bytes = n * elem_bytes;
  if (bytes.size() - offset != data_bytes) {
    return DataLossError(name, ": shape ", ShapeString(a.shape), " of ", descr, " needs ",
                         data_bytes, " data bytes, the file has ", bytes.size() - offset);
  }
  a.data.resize(static_cast<size_t>(n));
  const char* src = bytes.data() + offset;
  for (size_t i = 0; i < a.data.size(); ++i) {
    if (elem_bytes == 4) {
      std::memcpy(&a.data[i], src + 4 * i, 4);
    } else if (elem_bytes == 8) {
      double d;
      std::memcpy(&d, src + 8 * i, 8);
      a.data[i] = static_cast<float>(d);
    } else {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      a.data[i] = Fp16ToFloat(h);
    }
  }
  return a;
}

StatusOr<NpyArray> ReadNpy(const std::string& path) {
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> file, MappedFile::Open(path));
  return ParseNpy(file->bytes(), path);
}

}  // namespace pocket
