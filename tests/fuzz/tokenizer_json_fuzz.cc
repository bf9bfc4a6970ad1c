// libFuzzer: tokenizer.json parsing must turn any bytes into a tokenizer or a clear error; a
// tokenizer that loads must encode and decode its own vocabulary without crashing.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view json(reinterpret_cast<const char*>(data), size);
  auto tok = pocket::Tokenizer::FromHfJson(json, "fuzz.json");
  if (tok.ok()) {
    const pocket::Tokenizer& t = **tok;
    for (std::string_view text : {"ab ab", "a<|im_end|>b", " \n\t", "\xe4\xb8\xad"}) {
      auto ids = t.Encode(text);
      if (ids.ok()) (void)t.Decode(*ids);
    }
    for (int32_t id = 0; id < t.vocab_size() && id < 64; ++id) (void)t.TokenBytes(id);
  }
  return 0;
}
