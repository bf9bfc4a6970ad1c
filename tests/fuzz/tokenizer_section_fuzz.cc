// libFuzzer: a .pocket tokenizer section (either version) must give a tokenizer or a clear error;
// a tokenizer it gives must encode and decode without leaving its tables or the vocabulary.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tokenizer/spec_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // 8-byte aligned, as a section in a mapped package is (version 2 tables are used in place).
  std::vector<uint64_t> aligned(size / 8 + 1);
  if (size > 0) std::memcpy(aligned.data(), data, size);
  const std::string_view bytes(reinterpret_cast<const char*>(aligned.data()), size);
  auto tok = pocket::LoadTokenizerSection(bytes, "fuzz", "", nullptr);
  if (!tok.ok()) return 0;
  for (const char* text : {"hello world <|im_end|> abc", "中文 123\n\n  x", ""}) {
    auto ids = (*tok)->Encode(text);
    if (!ids.ok()) continue;
    for (int32_t id : *ids) {
      if (id < 0 || id >= (*tok)->vocab_size()) __builtin_trap();
    }
    (void)(*tok)->Decode(*ids);
  }
  for (int32_t id = 0; id < (*tok)->vocab_size() && id < 4096; ++id) {
    (void)(*tok)->TokenBytes(id);
    (void)(*tok)->IsSpecial(id);
  }
  (void)(*tok)->FindToken("<|im_end|>");
  (void)(*tok)->FullSpec();
  return 0;
}
