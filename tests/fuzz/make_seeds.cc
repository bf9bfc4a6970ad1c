// Writes small valid inputs for the fuzzers to start from: a GGUF with every metadata type and a
// few tensor types, a safetensors file, a small tokenizer.json, .pocket tokenizer sections of
// both versions, a .pocket file.
#include <sys/stat.h>
#include <cstdio>
#include <cstring>
#include <string>

#include "base/mapped_file.h"
#include "format/gguf_writer.h"
#include "format/pocket_file.h"
#include "format/safetensors.h"
#include "model/adapter.h"
#include "model/synthetic.h"
#include "quant/quantize.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/spec_io.h"

using namespace pocket;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  auto fill = [](DType type) {
    return [type](uint8_t* out, size_t n) {
      const int64_t elems =
          static_cast<int64_t>(n / Traits(type).block_bytes) * Traits(type).block_elems;
      std::string f(static_cast<size_t>(elems) * 4, '\0');
      float* x = reinterpret_cast<float*>(f.data());
      for (int64_t i = 0; i < elems; ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
      QuantizeRow(type, x, out, elems);
      return Status::Ok();
    };
  };
  GgufWriter w;
  w.SetString("general.architecture", "qwen3");
  w.SetUint32("qwen3.block_count", 1);
  w.SetFloat32("qwen3.rope.freq_base", 1e6f);
  w.SetBool("flag", true);
  w.SetInt32("i", -1);
  w.SetUint64("u", 7);
  w.SetStringArray("tokenizer.ggml.tokens", {"a", "b", "ab"});
  w.SetInt32Array("tokenizer.ggml.token_type", {1, 1, 1});
  w.SetFloat32Array("scores", {0.0f, 1.0f});
  int k = 0;
  for (DType t : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_K}) {
    if (!w.AddTensor("t" + std::to_string(k++), t, {2, 256}, fill(t)).ok()) return 1;
  }
  if (!w.Write(dir + "/seed.gguf").ok()) return 1;

  SafetensorsWriter s;
  s.SetMetadata("format", "pt");
  if (!s.AddTensor("model.embed_tokens.weight", DType::kBF16, {4, 8}, fill(DType::kBF16)).ok())
    return 1;
  if (!s.AddTensor("model.norm.weight", DType::kF32, {8}, fill(DType::kF32)).ok()) return 1;
  if (!s.Write(dir + "/seed.safetensors").ok()) return 1;

  const char* tokenizer = R"({"version":"1.0","added_tokens":[{"id":5,"content":"<|im_end|>",
"single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],
"normalizer":{"type":"NFC"},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split",
"pattern":{"Regex":"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,
"trim_offsets":false,"use_regex":false}]},"post_processor":null,"decoder":{"type":"ByteLevel"},
"model":{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":"",
"end_of_word_suffix":"","fuse_unk":false,"byte_fallback":false,"ignore_merges":false,
"vocab":{"a":0,"b":1,"ab":2,"Ġ":3,"Ġab":4},"merges":[["a","b"],["Ġ","ab"]]}})";
  if (!WriteFileAtomically(dir + "/seed.json", tokenizer).ok()) return 1;

  TokenizerSpec spec;
  for (int b = 0; b < 256; ++b)
    spec.tokens.push_back(byte_level::EncodeBytes(std::string(1, static_cast<char>(b))));
  for (const char* t : {"ab", "abc", " a", " ab"})
    spec.tokens.push_back(byte_level::EncodeBytes(t));
  spec.tokens.push_back("<|im_end|>");
  spec.types.assign(spec.tokens.size(), TokenType::kNormal);
  spec.types.back() = TokenType::kControl;
  spec.merges = {{"a", "b"}, {"ab", "c"}, {"Ġ", "a"}, {"Ġa", "b"}};
  spec.eos_id = static_cast<int32_t>(spec.tokens.size() - 1);
  auto tok = Tokenizer::FromSpec(spec);
  if (!tok.ok()) return 1;
  auto v1 = SerializeTokenizerSpec(spec);
  auto v2 = SerializeTokenizer(**tok);
  if (!v1.ok() || !v2.ok()) return 1;
  if (!WriteFileAtomically(dir + "/seed-v1.ptok", *v1).ok()) return 1;
  if (!WriteFileAtomically(dir + "/seed-v2.ptok", *v2).ok()) return 1;

  PocketWriter p;
  p.SetMetadataJson(R"({"format": "pocket", "architecture": "qwen3"})");
  p.AddSection("chat_template", "{{ x }}");
  if (!p.AddDenseTensor("norm", DType::kF32, {8}, fill(DType::kF32)).ok()) return 1;
  if (!p.AddPackedTensor("m", PackedLayout{PackedCodes::kU4, 32, 16, 64, true},
                         [](uint8_t* out, size_t n) {
                           for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(i);
                           return Status::Ok();
                         })
           .ok()) {
    return 1;
  }
  if (!p.Write(dir + "/seed.pocket").ok()) return 1;
  // The adapter loader's input: adapter_config.json, NUL, adapter_model.safetensors (a rank-2
  // adapter on q and down of the tiny qwen3, one layer with another rank).
  {
    auto c = PresetConfig("tiny", Architecture::kQwen3);
    if (!c.ok()) return 1;
    SyntheticAdapterOptions o;
    o.base = *c;
    o.rank = 2;
    o.targets = {LoraTarget::kQ, LoraTarget::kDown};
    o.layer_ranks = {{1, 3}};
    o.type = DType::kBF16;
    const std::string adir = dir + "/adapter";
    if (!IsDirectory(adir) && ::mkdir(adir.c_str(), 0755) != 0) return 1;
    if (!WriteSyntheticAdapter(o, adir).ok()) return 1;
    auto config = ReadFileToString(adir + "/adapter_config.json");
    auto weights = ReadFileToString(adir + "/adapter_model.safetensors");
    if (!config.ok() || !weights.ok()) return 1;
    if (!WriteFileAtomically(dir + "/seed.adapter", *config + std::string(1, '\0') + *weights).ok())
      return 1;
    // The same adapter as a pocket adapter package (int8 factors) for the tiny qwen3.
    SyntheticOptions so;
    so.config = *c;
    so.weight_type = DType::kF32;
    const std::string base_path = dir + "/adapter-base.gguf";
    if (!WriteSyntheticGguf(so, base_path).ok()) return 1;
    auto base = Model::Load(base_path);
    if (!base.ok()) return 1;
    auto adapter = LoraAdapter::Load(adir, **base);
    if (!adapter.ok()) return 1;
    AdapterPackageOptions po;
    if (!WriteAdapterPackage(**adapter, **base, po, dir + "/seed-adapter.pocket").ok()) return 1;
  }
  return 0;
}
