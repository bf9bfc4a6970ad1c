// libFuzzer: the GGUF parser must turn any bytes into a model directory or a clear error.
#include <cstddef>
#include <cstdint>

#include "format/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto g = pocket::GgufFile::Parse(data, size, "fuzz.gguf");
  if (g.ok()) {
    // Touch what a loader reads: every tensor's bytes and every metadata value.
    uint8_t sink = 0;
    for (const auto& t : (*g)->tensors()) {
      if (t.data != nullptr && t.n_bytes > 0) sink ^= t.data[0] ^ t.data[t.n_bytes - 1];
    }
    for (const auto& [key, value] : (*g)->metadata()) {
      for (uint64_t i = 0; i < value.count && value.elems != nullptr; ++i) {
        sink ^= static_cast<uint8_t>(value.ArrayInt(i));
      }
      for (auto s : value.strings) sink ^= static_cast<uint8_t>(s.size());
      sink ^= static_cast<uint8_t>(key.size());
    }
    // Keep the reads: an opaque use the optimizer must honour.
    asm volatile("" : : "r"(sink));
  }
  return 0;
}
