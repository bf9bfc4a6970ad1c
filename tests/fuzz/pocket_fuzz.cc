// libFuzzer: the .pocket reader must turn any bytes into a package or a clear error.
#include <cstddef>
#include <cstdint>

#include "format/pocket_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = pocket::PocketFile::Parse(data, size, "fuzz.pocket");
  if (f.ok()) {
    uint8_t sink = 0;
    for (const auto& t : (*f)->tensors()) {
      if (t.n_bytes > 0) sink ^= t.data[0] ^ t.data[t.n_bytes - 1];
    }
    (void)(*f)->Verify();
    asm volatile("" : : "r"(sink));
  }
  return 0;
}
