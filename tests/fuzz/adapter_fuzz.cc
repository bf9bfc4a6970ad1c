// libFuzzer: the LoRA adapter loader (PEFT: adapter_config.json + adapter_model.safetensors) must
// turn any bytes into an adapter bound to the base's shapes or a clear error. Input: a llama.cpp
// LoRA GGUF (starts with "GGUF"), a pocket adapter package (starts with the package magic; the
// base's fingerprint is taken from the input so the binding behind that check is reached), or
// the JSON text, a NUL byte, then the safetensors bytes; the base is the tiny synthetic qwen3.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "format/pocket_file.h"
#include "model/adapter.h"
#include "model/synthetic.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const pocket::ModelConfig kBase = [] {
    auto c = pocket::PresetConfig("tiny", pocket::Architecture::kQwen3);
    return c.ok() ? *c : pocket::ModelConfig();
  }();
  pocket::StatusOr<std::shared_ptr<const pocket::LoraAdapter>> a =
      pocket::InvalidArgumentError("no input");
  if (size >= 4 && std::memcmp(data, "GGUF", 4) == 0) {
    a = pocket::LoraAdapter::ParseGguf(data, size, kBase);
  } else if (pocket::PocketFile::LooksLikePocket(data, size)) {
    std::string fingerprint;
    if (auto file = pocket::PocketFile::Parse(data, size, "fuzz.pocket"); file.ok()) {
      if (const pocket::ConfigValue* v = (*file)->Find("base_fingerprint")) fingerprint = v->s;
    }
    a = pocket::LoraAdapter::ParsePocket(data, size, kBase, fingerprint);
  } else {
    const void* nul = std::memchr(data, 0, size);
    if (nul == nullptr) return 0;
    const size_t json_size = static_cast<size_t>(static_cast<const uint8_t*>(nul) - data);
    const std::string json(reinterpret_cast<const char*>(data), json_size);
    a = pocket::LoraAdapter::ParsePeft(json, data + json_size + 1, size - json_size - 1, kBase);
  }
  if (a.ok()) {
    uint8_t sink = 0;
    for (int32_t l = 0; l < (*a)->n_layers(); ++l) {
      for (int t = 0; t < pocket::kLoraAllTargets; ++t) {  // the embedding and output too
        const pocket::LoraPair& p = (*a)->pair(l, static_cast<pocket::LoraTarget>(t));
        if (!p.present()) continue;
        const pocket::WeightMatrix& w = p.a;
        sink ^= w.row(0)[0] ^ w.row(w.rows - 1)[w.row_bytes - 1];
        sink ^= p.bt.row(0)[0] ^ p.bt.row(p.bt.rows - 1)[p.bt.row_bytes - 1];
      }
    }
    asm volatile("" : : "r"(sink));
  }
  return 0;
}
