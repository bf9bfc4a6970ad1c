// CRC-32C (Castagnoli), the checksum of the .pocket package's sections. Portable table-driven
// code (slicing by 8); about 1-2 GB/s, only `pocket verify` runs it over tensor data.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pocket {

// Continues a CRC: crc = Crc32c(data2, n2, Crc32c(data1, n1)) equals the CRC of both. Start at 0.
uint32_t Crc32c(const void* data, size_t n_bytes, uint32_t crc = 0);

}  // namespace pocket
