#include "model/synthetic.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "base/float16.h"
#include "base/mapped_file.h"
#include "base/rng.h"
#include "format/gguf_writer.h"
#include "format/safetensors.h"
#include "model/classifier.h"
#include "model/weights.h"
#include "quant/quantize.h"
#include "tokenizer/vocab_fit.h"

namespace pocket {
namespace {

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

bool IsVector(const std::string& name) {
  return name.find("norm") != std::string::npos || EndsWith(name, ".bias");
}

struct TensorSpec {
  std::string name;  // canonical (GGUF) name
  std::vector<int64_t> shape;
};

std::vector<TensorSpec> TensorList(const ModelConfig& c) {
  const int64_t d = c.d_model, q = c.q_dim(), kv = c.kv_dim(), ff = c.d_ff, hd = c.head_dim;
  std::vector<TensorSpec> list = {{"token_embd.weight", {c.vocab_size, d}},
                                  {"output_norm.weight", {d}}};
  if (!c.tied_output) list.push_back({"output.weight", {c.vocab_size, d}});
  for (int i = 0; i < c.n_layers; ++i) {
    auto n = [i](const char* s) { return StrCat("blk.", i, ".", s); };
    list.push_back({n("attn_norm.weight"), {d}});
    list.push_back({n("attn_q.weight"), {q, d}});
    list.push_back({n("attn_k.weight"), {kv, d}});
    list.push_back({n("attn_v.weight"), {kv, d}});
    if (c.qkv_bias) {
      list.push_back({n("attn_q.bias"), {q}});
      list.push_back({n("attn_k.bias"), {kv}});
      list.push_back({n("attn_v.bias"), {kv}});
    }
    if (c.qk_norm) {
      list.push_back({n("attn_q_norm.weight"), {hd}});
      list.push_back({n("attn_k_norm.weight"), {hd}});
    }
    list.push_back({n("attn_output.weight"), {d, q}});
    list.push_back({n("ffn_norm.weight"), {d}});
    list.push_back({n("ffn_gate.weight"), {ff, d}});
    list.push_back({n("ffn_up.weight"), {ff, d}});
    list.push_back({n("ffn_down.weight"), {d, ff}});
  }
  return list;
}

// 1-D tensors are stored f32 in GGUF but in the checkpoint dtype in safetensors; rounding their
// values to that dtype up front makes both copies hold the same numbers. A quantized model is
// made as real ones are, from a BF16 checkpoint: every value is rounded to BF16 first, so it is
// the quantization of the BF16 model of the same seed.
std::vector<float> TensorValues(const TensorSpec& t, const SyntheticOptions& o) {
  std::vector<float> v = SyntheticTensor(t.name, t.shape, o.seed);
  const bool quantized =
      o.weight_type != DType::kF32 && o.weight_type != DType::kF16 && o.weight_type != DType::kBF16;
  if (quantized || (IsVector(t.name) && o.weight_type == DType::kBF16)) {
    for (float& x : v) x = Bf16ToFloat(FloatToBf16(x));
  } else if (IsVector(t.name) && o.weight_type == DType::kF16) {
    for (float& x : v) x = Fp16ToFloat(FloatToFp16(x));
  }
  return v;
}

// llama.cpp's converter reorders each head's Q/K rows from rotate-half pairs (i, i + hd/2) to
// adjacent pairs (2i, 2i + 1).
std::vector<float> PermuteForInterleavedRope(const std::vector<float>& w, int64_t n_heads,
                                             int64_t head_dim, int64_t cols) {
  std::vector<float> out(w.size());
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t dst = h * head_dim + 2 * i + j;
        const int64_t src = h * head_dim + j * half + i;
        std::memcpy(&out[static_cast<size_t>(dst * cols)], &w[static_cast<size_t>(src * cols)],
                    static_cast<size_t>(cols) * sizeof(float));
      }
    }
  }
  return out;
}

std::string FormatFloat(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

StatusOr<std::shared_ptr<const Tokenizer>> FitTokenizer(const SyntheticOptions& o) {
  if (!o.tokenizer || o.tokenizer->vocab_size() <= o.config.vocab_size) return o.tokenizer;
  POCKET_ASSIGN_OR_RETURN(TokenizerSpec spec,
                          TruncateVocab(o.tokenizer->FullSpec(), o.config.vocab_size));
  return Tokenizer::FromSpec(std::move(spec));
}

}  // namespace

std::vector<std::string> PresetNames() {
  return {"pocket-0.3b", "qwen3-0.6b", "tiny"};
}

StatusOr<ModelConfig> PresetConfig(const std::string& preset, Architecture arch) {
  ModelConfig c;
  c.arch = arch;
  c.rope_style = arch == Architecture::kLlama ? RopeStyle::kInterleaved : RopeStyle::kNeox;
  c.qk_norm = arch == Architecture::kQwen3;
  c.qkv_bias = arch == Architecture::kQwen2;
  c.rms_eps = 1e-6f;
  c.rope_base = 1e6f;
  if (preset == "pocket-0.3b") {
    // MNN-Pocket-0.3B (../shared/DESIGN.md). Tied: the 173 MB INT4 package only fits with one
    // shared embedding/output matrix.
    c.n_layers = 28, c.d_model = 896, c.n_heads = 14, c.n_kv_heads = 2, c.head_dim = 64;
    c.d_ff = 2560, c.vocab_size = 65536, c.n_ctx_train = 40960, c.tied_output = true;
  } else if (preset == "qwen3-0.6b") {
    c.n_layers = 28, c.d_model = 1024, c.n_heads = 16, c.n_kv_heads = 8, c.head_dim = 128;
    c.d_ff = 3072, c.vocab_size = 151936, c.n_ctx_train = 40960, c.tied_output = true;
  } else if (preset == "tiny") {
    // Small but with every feature: GQA 2:1, head_dim * n_heads == d_model only by choice, rows a
    // multiple of 256 so every K-quant applies.
    c.n_layers = 2, c.d_model = 256, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 64;
    c.d_ff = 512, c.vocab_size = 1024, c.n_ctx_train = 2048, c.tied_output = false;
  } else {
    std::string names;
    for (const std::string& n : PresetNames()) names += (names.empty() ? "" : ", ") + n;
    return InvalidArgumentError("unknown preset ", QuoteBytes(preset), " (known: ", names, ")");
  }
  if (arch == Architecture::kLlama) c.rope_base = 10000.0f, c.rms_eps = 1e-5f;
  POCKET_RETURN_IF_ERROR(c.Validate());
  return c;
}

std::vector<float> SyntheticTensor(const std::string& name, std::vector<int64_t> shape,
                                   uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  Rng rng(seed ^ Fnv1a(name));
  auto uniform = [&rng](float a) { return (rng.NextFloat() * 2.0f - 1.0f) * a; };
  if (EndsWith(name, ".bias")) {
    for (float& x : v) x = uniform(0.5f);
  } else if (IsVector(name)) {
    for (float& x : v) x = 1.0f + uniform(0.2f);
  } else {
    // Uniform with variance 1 / fan_in: activations keep unit scale through every layer.
    const float a = std::sqrt(3.0f / static_cast<float>(shape.back()));
    for (float& x : v) x = uniform(a);
  }
  return v;
}

Status WriteSyntheticGguf(const SyntheticOptions& o, const std::string& path) {
  const ModelConfig& c = o.config;
  POCKET_RETURN_IF_ERROR(c.Validate());
  const int64_t n_labels = static_cast<int64_t>(o.classifier_labels.size());
  if (n_labels > 0) {
    POCKET_RETURN_IF_ERROR(CheckClassifierHead(o.classifier_labels, {n_labels, c.d_model},
                                               c.d_model, kClassifierTensor, "the labels"));
  }
  GgufWriter w;
  const std::string a(ArchitectureName(c.arch));
  w.SetString("general.architecture", a);
  w.SetString("general.name", StrCat("pocket synthetic ", a, " seed ", o.seed));
  w.SetUint32(a + ".block_count", static_cast<uint32_t>(c.n_layers));
  w.SetUint32(a + ".context_length", static_cast<uint32_t>(c.n_ctx_train));
  w.SetUint32(a + ".embedding_length", static_cast<uint32_t>(c.d_model));
  w.SetUint32(a + ".feed_forward_length", static_cast<uint32_t>(c.d_ff));
  w.SetUint32(a + ".attention.head_count", static_cast<uint32_t>(c.n_heads));
  w.SetUint32(a + ".attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
  w.SetUint32(a + ".attention.key_length", static_cast<uint32_t>(c.head_dim));
  w.SetUint32(a + ".attention.value_length", static_cast<uint32_t>(c.head_dim));
  w.SetUint32(a + ".rope.dimension_count", static_cast<uint32_t>(c.head_dim));
  w.SetFloat32(a + ".rope.freq_base", c.rope_base);
  w.SetFloat32(a + ".attention.layer_norm_rms_epsilon", c.rms_eps);
  w.SetUint32(a + ".vocab_size", static_cast<uint32_t>(c.vocab_size));

  POCKET_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tok, FitTokenizer(o));
  if (tok) {
    const TokenizerSpec spec = tok->FullSpec();
    if (spec.kind != TokenizerKind::kByteLevelBpe) {
      return UnimplementedError("only byte-level BPE tokenizers can be stored in GGUF here");
    }
    w.SetString("tokenizer.ggml.model", "gpt2");
    w.SetString("tokenizer.ggml.pre", spec.pre_tokenizer);
    w.SetStringArray("tokenizer.ggml.tokens", spec.tokens);
    std::vector<int32_t> types(spec.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
    for (size_t i = 0; i < spec.types.size(); ++i) types[i] = static_cast<int32_t>(spec.types[i]);
    w.SetInt32Array("tokenizer.ggml.token_type", types);
    std::vector<std::string> merges;
    merges.reserve(spec.merges.size());
    for (const auto& m : spec.merges) merges.push_back(m.first + " " + m.second);
    w.SetStringArray("tokenizer.ggml.merges", merges);
    if (spec.bos_id >= 0)
      w.SetUint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(spec.bos_id));
    if (spec.eos_id >= 0)
      w.SetUint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(spec.eos_id));
    if (spec.pad_id >= 0)
      w.SetUint32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(spec.pad_id));
    w.SetBool("tokenizer.ggml.add_bos_token", spec.add_bos);
    const std::string& tmpl = o.chat_template.empty() ? spec.chat_template : o.chat_template;
    if (!tmpl.empty()) w.SetString("tokenizer.chat_template", tmpl);
  }

  for (const TensorSpec& t : TensorList(c)) {
    const DType type = IsVector(t.name) ? DType::kF32 : o.weight_type;
    const bool permute_q = c.arch == Architecture::kLlama && EndsWith(t.name, "attn_q.weight");
    const bool permute_k = c.arch == Architecture::kLlama && EndsWith(t.name, "attn_k.weight");
    POCKET_RETURN_IF_ERROR(w.AddTensor(
        t.name, type, t.shape, [t, type, permute_q, permute_k, &o, &c](uint8_t* out, size_t) {
          std::vector<float> v = TensorValues(t, o);
          if (permute_q) v = PermuteForInterleavedRope(v, c.n_heads, c.head_dim, c.d_model);
          if (permute_k) v = PermuteForInterleavedRope(v, c.n_kv_heads, c.head_dim, c.d_model);
          const int64_t cols = t.shape.back();
          const int64_t rows = static_cast<int64_t>(v.size()) / cols;
          const size_t row_bytes = RowBytes(type, cols);
          const bool grid = type == DType::kQ4_1 && o.q4_1_grid != 32;
          for (int64_t r = 0; r < rows; ++r) {
            uint8_t* dst = out + static_cast<size_t>(r) * row_bytes;
            if (grid) {
              QuantizeRowQ4_1OnGrid(&v[static_cast<size_t>(r * cols)], dst, cols, o.q4_1_grid);
            } else {
              QuantizeRow(type, &v[static_cast<size_t>(r * cols)], dst, cols);
            }
          }
          return Status::Ok();
        }));
  }
  if (n_labels > 0) {
    w.SetStringArray(kGgufClassifierLabelsKey, o.classifier_labels);
    POCKET_RETURN_IF_ERROR(w.AddTensor(kClassifierTensor, DType::kF32, {n_labels, c.d_model},
                                       [&o, n_labels, &c](uint8_t* out, size_t) {
                                         const std::vector<float> v = SyntheticTensor(
                                             kClassifierTensor, {n_labels, c.d_model}, o.seed);
                                         std::memcpy(out, v.data(), v.size() * sizeof(float));
                                         return Status::Ok();
                                       }));
  }
  return w.Write(path, o.input_paths);
}

Status WriteSyntheticHf(const SyntheticOptions& o, const std::string& dir) {
  const ModelConfig& c = o.config;
  POCKET_RETURN_IF_ERROR(c.Validate());
  if (o.weight_type != DType::kF32 && o.weight_type != DType::kF16 &&
      o.weight_type != DType::kBF16) {
    return InvalidArgumentError("a Hugging Face directory holds f32, f16 or bf16 weights, not ",
                                DTypeName(o.weight_type));
  }
  if (!IsDirectory(dir)) return NotFoundError("output directory ", dir, " does not exist");
  if (!o.classifier_labels.empty()) {
    return UnimplementedError("a classification head is written to GGUF only (or added by ",
                              "pocket convert --classifier-head)");
  }
  const char* arch_class = c.arch == Architecture::kQwen3   ? "Qwen3ForCausalLM"
                           : c.arch == Architecture::kQwen2 ? "Qwen2ForCausalLM"
                                                            : "LlamaForCausalLM";
  const char* dtype = o.weight_type == DType::kF32   ? "float32"
                      : o.weight_type == DType::kF16 ? "float16"
                                                     : "bfloat16";
  const std::string config = StrCat(
      "{\n  \"architectures\": [\"", arch_class, "\"],\n  \"model_type\": \"",
      ArchitectureName(c.arch), "\",\n  \"hidden_size\": ", c.d_model,
      ",\n  \"intermediate_size\": ", c.d_ff, ",\n  \"num_hidden_layers\": ", c.n_layers,
      ",\n  \"num_attention_heads\": ", c.n_heads, ",\n  \"num_key_value_heads\": ", c.n_kv_heads,
      ",\n  \"head_dim\": ", c.head_dim,
      ",\n  \"hidden_act\": \"silu\",\n  \"rms_norm_eps\": ", FormatFloat(c.rms_eps),
      ",\n  \"rope_theta\": ", FormatFloat(c.rope_base), ",\n  \"vocab_size\": ", c.vocab_size,
      ",\n  \"max_position_embeddings\": ", c.n_ctx_train,
      ",\n  \"tie_word_embeddings\": ", c.tied_output ? "true" : "false",
      ",\n  \"attention_bias\": ", c.qkv_bias ? "true" : "false", ",\n  \"torch_dtype\": \"", dtype,
      "\"\n}\n");
  POCKET_RETURN_IF_ERROR(WriteFileAtomically(dir + "/config.json", config));

  SafetensorsWriter w;
  w.SetMetadata("format", "pt");
  for (const TensorSpec& t : TensorList(c)) {
    const DType type = o.weight_type;
    POCKET_RETURN_IF_ERROR(
        w.AddTensor(HfTensorName(t.name), type, t.shape, [t, type, &o](uint8_t* out, size_t) {
          std::vector<float> v = TensorValues(t, o);
          QuantizeRow(type, v.data(), out, static_cast<int64_t>(v.size()));
          return Status::Ok();
        }));
  }
  return w.Write(dir + "/model.safetensors");
}

}  // namespace pocket
