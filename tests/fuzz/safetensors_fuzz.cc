// libFuzzer: the safetensors parser must turn any bytes into tensors or a clear error.
#include <cstddef>
#include <cstdint>

#include "format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = pocket::SafetensorsFile::Parse(data, size, "fuzz.safetensors");
  if (f.ok()) {
    uint8_t sink = 0;
    for (const auto& t : (*f)->tensors()) {
      if (t.n_bytes > 0) sink ^= t.data[0] ^ t.data[t.n_bytes - 1];
    }
    // Keep the reads: an opaque use the optimizer must honour.
    asm volatile("" : : "r"(sink));
  }
  return 0;
}
