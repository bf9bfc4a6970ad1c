#include "npy.h"

#include "base/output_file.h"

namespace pocket::cli {

Status WriteNpyFloat32(const std::string& path, const std::vector<int64_t>& shape,
                       const float* data, const std::vector<std::string>& inputs) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? ", " : "");
    n *= shape[i];
  }
  dict += "), }";
  // magic (6) + version (2) + header length (2) + dict, padded with spaces to 64, ending in \n.
  const size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict += '\n';
  std::string header("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(dict.size());
  header.push_back(static_cast<char>(len & 0xff));
  header.push_back(static_cast<char>(len >> 8));
  header += dict;
  POCKET_ASSIGN_OR_RETURN(OutputFile out, OutputFile::Create(path, inputs));
  POCKET_RETURN_IF_ERROR(out.Write(header.data(), header.size()));
  POCKET_RETURN_IF_ERROR(out.Write(data, static_cast<size_t>(n) * sizeof(float)));
  return out.Commit();
}

}  // namespace pocket::cli
