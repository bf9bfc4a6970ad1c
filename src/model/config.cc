#include "model/config.h"

#include "format/gguf.h"
#include "format/hf_directory.h"
#include "format/llama2c.h"
#include "format/pocket_file.h"

namespace pocket {
namespace {

// GGUF keys are "{arch}.<suffix>"; HF keys are config.json's top level.
struct KeyNames {
  const char* gguf_suffix;
  const char* hf;
};
constexpr KeyNames kBlockCount{"block_count", "num_hidden_layers"};
constexpr KeyNames kEmbedding{"embedding_length", "hidden_size"};
constexpr KeyNames kFeedForward{"feed_forward_length", "intermediate_size"};
constexpr KeyNames kHeads{"attention.head_count", "num_attention_heads"};
constexpr KeyNames kKvHeads{"attention.head_count_kv", "num_key_value_heads"};
constexpr KeyNames kHeadDim{"attention.key_length", "head_dim"};
constexpr KeyNames kValueDim{"attention.value_length", "head_dim"};
constexpr KeyNames kContext{"context_length", "max_position_embeddings"};
constexpr KeyNames kRopeBase{"rope.freq_base", "rope_theta"};
constexpr KeyNames kRmsEps{"attention.layer_norm_rms_epsilon", "rms_norm_eps"};
constexpr KeyNames kVocab{"vocab_size", "vocab_size"};

void ApplyArchitectureTraits(ModelConfig* c) {
  c->qk_norm = c->arch == Architecture::kQwen3;
  c->qkv_bias = c->arch == Architecture::kQwen2;
}

int32_t ToInt32(int64_t v) {
  return v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : static_cast<int32_t>(v);
}

}  // namespace

std::string_view ArchitectureName(Architecture arch) {
  switch (arch) {
    case Architecture::kLlama:
      return "llama";
    case Architecture::kQwen2:
      return "qwen2";
    case Architecture::kQwen3:
      return "qwen3";
  }
  return "unknown";
}

bool ParseArchitecture(std::string_view name, Architecture* out) {
  if (name == "llama")
    *out = Architecture::kLlama;
  else if (name == "qwen2")
    *out = Architecture::kQwen2;
  else if (name == "qwen3")
    *out = Architecture::kQwen3;
  else
    return false;
  return true;
}

Status ModelConfig::Validate() const {
  auto positive = [](const char* field, int64_t v, int64_t max) -> Status {
    if (v <= 0 || v > max)
      return InvalidArgumentError(field, " is ", v, " (expected 1 to ", max, ")");
    return Status::Ok();
  };
  POCKET_RETURN_IF_ERROR(positive("n_layers", n_layers, 1024));
  POCKET_RETURN_IF_ERROR(positive("d_model", d_model, 65536));
  POCKET_RETURN_IF_ERROR(positive("n_heads", n_heads, 1024));
  POCKET_RETURN_IF_ERROR(positive("n_kv_heads", n_kv_heads, 1024));
  POCKET_RETURN_IF_ERROR(positive("head_dim", head_dim, 1024));
  POCKET_RETURN_IF_ERROR(positive("d_ff", d_ff, 1 << 20));
  POCKET_RETURN_IF_ERROR(positive("vocab_size", vocab_size, 1 << 24));
  POCKET_RETURN_IF_ERROR(positive("n_ctx_train", n_ctx_train, 1 << 24));
  if (n_heads % n_kv_heads != 0) {
    return InvalidArgumentError("n_heads (", n_heads, ") is not a multiple of n_kv_heads (",
                                n_kv_heads, ")");
  }
  if (head_dim % 2 != 0)
    return InvalidArgumentError("head_dim ", head_dim, " is odd; RoPE needs pairs");
  if (!(rope_base > 1.0f) || !(rope_base < 1e12f)) {
    return InvalidArgumentError("rope_base is ", rope_base);
  }
  if (!(rms_eps > 0.0f) || !(rms_eps < 1.0f)) return InvalidArgumentError("rms_eps is ", rms_eps);
  return Status::Ok();
}

std::string ModelConfig::ToString() const {
  return StrCat(ArchitectureName(arch), ": ", n_layers, " layers, d_model ", d_model, ", ", n_heads,
                " heads / ", n_kv_heads, " kv heads of ", head_dim, ", d_ff ", d_ff, ", vocab ",
                vocab_size, ", context ", n_ctx_train, ", rope base ", rope_base,
                rope_style == RopeStyle::kNeox ? " (neox)" : " (interleaved)", ", rms eps ",
                rms_eps, qk_norm ? ", qk-norm" : "", qkv_bias ? ", qkv-bias" : "",
                tied_output ? ", tied output" : "");
}

StatusOr<ModelConfig> ConfigFromGguf(const GgufFile& gguf) {
  ModelConfig c;
  POCKET_ASSIGN_OR_RETURN(std::string arch, gguf.GetString("general.architecture"));
  if (!ParseArchitecture(arch, &c.arch)) {
    return UnimplementedError(gguf.name(), ": architecture ", QuoteBytes(arch),
                              " is not supported (supported: llama, qwen2, qwen3)");
  }
  ApplyArchitectureTraits(&c);
  c.rope_style = c.arch == Architecture::kLlama ? RopeStyle::kInterleaved : RopeStyle::kNeox;
  auto key = [&](const KeyNames& k) { return arch + "." + k.gguf_suffix; };
  auto get_int = [&](const KeyNames& k, int32_t* out) -> Status {
    auto v = gguf.GetInt(key(k));
    if (!v.ok()) return v.status();
    *out = ToInt32(*v);
    return Status::Ok();
  };
  POCKET_RETURN_IF_ERROR(get_int(kBlockCount, &c.n_layers));
  POCKET_RETURN_IF_ERROR(get_int(kEmbedding, &c.d_model));
  POCKET_RETURN_IF_ERROR(get_int(kFeedForward, &c.d_ff));
  POCKET_RETURN_IF_ERROR(get_int(kHeads, &c.n_heads));
  c.n_kv_heads = c.n_heads;
  if (gguf.Find(key(kKvHeads)) != nullptr) POCKET_RETURN_IF_ERROR(get_int(kKvHeads, &c.n_kv_heads));
  c.head_dim = c.n_heads > 0 ? c.d_model / c.n_heads : 0;
  if (gguf.Find(key(kHeadDim)) != nullptr) POCKET_RETURN_IF_ERROR(get_int(kHeadDim, &c.head_dim));
  if (gguf.Find(key(kValueDim)) != nullptr) {
    int32_t value_dim = 0;
    POCKET_RETURN_IF_ERROR(get_int(kValueDim, &value_dim));
    if (value_dim != c.head_dim) {
      return UnimplementedError(gguf.name(), ": ", key(kValueDim), " (", value_dim,
                                ") differs from the key length (", c.head_dim, ")");
    }
  }
  c.n_ctx_train = 4096;
  if (gguf.Find(key(kContext)) != nullptr)
    POCKET_RETURN_IF_ERROR(get_int(kContext, &c.n_ctx_train));
  if (gguf.Find(key(kRopeBase)) != nullptr) {
    POCKET_ASSIGN_OR_RETURN(double base, gguf.GetFloat(key(kRopeBase)));
    c.rope_base = static_cast<float>(base);
  }
  c.rms_eps = c.arch == Architecture::kLlama ? 1e-5f : 1e-6f;
  if (gguf.Find(key(kRmsEps)) != nullptr) {
    POCKET_ASSIGN_OR_RETURN(double eps, gguf.GetFloat(key(kRmsEps)));
    c.rms_eps = static_cast<float>(eps);
  }
  for (const char* unsupported : {"rope.scaling.type", "rope.scaling.factor"}) {
    const GgufValue* v = gguf.Find(arch + "." + unsupported);
    if (v != nullptr && !(v->type == GgufType::kString && v->s == "none") &&
        !(v->is_float() && v->f == 1.0)) {
      return UnimplementedError(gguf.name(), ": ", arch, ".", unsupported,
                                " is set; RoPE scaling is not supported yet");
    }
  }
  // The vocabulary size is the embedding's row count (metadata may omit it).
  for (const TensorInfo& t : gguf.tensors()) {
    if (t.name == "token_embd.weight" && t.shape.size() == 2) c.vocab_size = ToInt32(t.shape[0]);
  }
  bool has_output = false;
  for (const TensorInfo& t : gguf.tensors()) has_output |= t.name == "output.weight";
  c.tied_output = !has_output;
  POCKET_RETURN_IF_ERROR(c.Validate().WithContext(gguf.name()));
  return c;
}

StatusOr<ModelConfig> ConfigFromHf(const HfDirectory& hf) {
  const std::string name = hf.dir() + "/config.json";
  ModelConfig c;
  const ConfigValue* model_type = hf.Find("model_type");
  if (model_type == nullptr || model_type->kind != ConfigValue::Kind::kString) {
    return InvalidArgumentError(name, ": model_type is missing");
  }
  if (!ParseArchitecture(model_type->s, &c.arch)) {
    return UnimplementedError(name, ": model_type ", QuoteBytes(model_type->s),
                              " is not supported (supported: llama, qwen2, qwen3)");
  }
  ApplyArchitectureTraits(&c);
  c.rope_style = RopeStyle::kNeox;
  auto get_int = [&](const KeyNames& k, int32_t* out, bool required) -> Status {
    const ConfigValue* v = hf.Find(k.hf);
    if (v == nullptr || v->kind == ConfigValue::Kind::kNull) {
      if (required) return InvalidArgumentError(name, ": ", k.hf, " is missing");
      return Status::Ok();
    }
    if (v->kind != ConfigValue::Kind::kInt) {
      return InvalidArgumentError(name, ": ", k.hf, " is ", v->json, ", expected an integer");
    }
    *out = ToInt32(v->i);
    return Status::Ok();
  };
  auto get_float = [&](const KeyNames& k, float* out) -> Status {
    const ConfigValue* v = hf.Find(k.hf);
    if (v == nullptr || v->kind == ConfigValue::Kind::kNull) return Status::Ok();
    if (v->kind != ConfigValue::Kind::kInt && v->kind != ConfigValue::Kind::kFloat) {
      return InvalidArgumentError(name, ": ", k.hf, " is ", v->json, ", expected a number");
    }
    *out = static_cast<float>(v->f);
    return Status::Ok();
  };
  POCKET_RETURN_IF_ERROR(get_int(kBlockCount, &c.n_layers, true));
  POCKET_RETURN_IF_ERROR(get_int(kEmbedding, &c.d_model, true));
  POCKET_RETURN_IF_ERROR(get_int(kFeedForward, &c.d_ff, true));
  POCKET_RETURN_IF_ERROR(get_int(kHeads, &c.n_heads, true));
  c.n_kv_heads = c.n_heads;
  POCKET_RETURN_IF_ERROR(get_int(kKvHeads, &c.n_kv_heads, false));
  c.head_dim = c.n_heads > 0 ? c.d_model / c.n_heads : 0;
  POCKET_RETURN_IF_ERROR(get_int(kHeadDim, &c.head_dim, false));
  c.n_ctx_train = 4096;
  POCKET_RETURN_IF_ERROR(get_int(kContext, &c.n_ctx_train, false));
  POCKET_RETURN_IF_ERROR(get_int(kVocab, &c.vocab_size, true));
  POCKET_RETURN_IF_ERROR(get_float(kRopeBase, &c.rope_base));
  c.rms_eps = 1e-6f;
  POCKET_RETURN_IF_ERROR(get_float(kRmsEps, &c.rms_eps));
  if (const ConfigValue* rs = hf.Find("rope_scaling"); rs && rs->kind != ConfigValue::Kind::kNull) {
    return UnimplementedError(name, ": rope_scaling ", rs->json, " is not supported yet");
  }
  if (const ConfigValue* bias = hf.Find("attention_bias");
      bias && bias->kind == ConfigValue::Kind::kBool) {
    if (c.arch == Architecture::kLlama && bias->b) {
      return UnimplementedError(name, ": attention_bias true is not supported for llama");
    }
  }
  const ConfigValue* tie = hf.Find("tie_word_embeddings");
  c.tied_output = tie != nullptr && tie->kind == ConfigValue::Kind::kBool && tie->b;
  POCKET_RETURN_IF_ERROR(c.Validate().WithContext(name));
  return c;
}

StatusOr<ModelConfig> ConfigFromLlama2c(const Llama2cHeader& h) {
  ModelConfig c;
  c.arch = Architecture::kLlama;
  c.n_layers = h.n_layers;
  c.d_model = h.dim;
  c.n_heads = h.n_heads;
  c.n_kv_heads = h.n_kv_heads;
  c.head_dim = h.n_heads > 0 ? h.dim / h.n_heads : 0;
  c.d_ff = h.hidden_dim;
  c.vocab_size = h.vocab_size;
  c.n_ctx_train = h.seq_len;
  c.rope_base = 10000.0f;
  c.rms_eps = 1e-5f;
  c.rope_style = RopeStyle::kInterleaved;
  c.tied_output = h.shared_classifier;
  POCKET_RETURN_IF_ERROR(c.Validate());
  return c;
}

StatusOr<ModelConfig> ConfigFromPocket(const PocketFile& pocket) {
  const std::string name = pocket.name() + " (meta)";
  ModelConfig c;
  if (const ConfigValue* kind = pocket.Find("kind");
      kind != nullptr && kind->kind == ConfigValue::Kind::kString && kind->s != "model") {
    return InvalidArgumentError(pocket.name(), " is a ",
                                kind->s == "lora_adapter" ? "LoRA adapter" : kind->s,
                                " package, not a model: give it with --lora, and the base model "
                                "with -m");
  }
  const ConfigValue* arch = pocket.Find("architecture");
  if (arch == nullptr || arch->kind != ConfigValue::Kind::kString ||
      !ParseArchitecture(arch->s, &c.arch)) {
    return UnimplementedError(name, ": architecture ", arch ? arch->json : "(missing)",
                              " is not supported (supported: llama, qwen2, qwen3)");
  }
  auto get_int = [&](const char* key, int32_t* out) -> Status {
    const ConfigValue* v = pocket.Find(key);
    if (v == nullptr || v->kind != ConfigValue::Kind::kInt) {
      return InvalidArgumentError(name, ": ", key, " is ", v ? v->json : "missing",
                                  ", expected an integer");
    }
    *out = ToInt32(v->i);
    return Status::Ok();
  };
  auto get_float = [&](const char* key, float* out) -> Status {
    const ConfigValue* v = pocket.Find(key);
    if (v == nullptr ||
        (v->kind != ConfigValue::Kind::kInt && v->kind != ConfigValue::Kind::kFloat)) {
      return InvalidArgumentError(name, ": ", key, " is ", v ? v->json : "missing",
                                  ", expected a number");
    }
    *out = static_cast<float>(v->f);
    return Status::Ok();
  };
  auto get_bool = [&](const char* key, bool* out) -> Status {
    const ConfigValue* v = pocket.Find(key);
    if (v == nullptr || v->kind != ConfigValue::Kind::kBool) {
      return InvalidArgumentError(name, ": ", key, " is ", v ? v->json : "missing",
                                  ", expected true or false");
    }
    *out = v->b;
    return Status::Ok();
  };
  POCKET_RETURN_IF_ERROR(get_int("n_layers", &c.n_layers));
  POCKET_RETURN_IF_ERROR(get_int("d_model", &c.d_model));
  POCKET_RETURN_IF_ERROR(get_int("n_heads", &c.n_heads));
  POCKET_RETURN_IF_ERROR(get_int("n_kv_heads", &c.n_kv_heads));
  POCKET_RETURN_IF_ERROR(get_int("head_dim", &c.head_dim));
  POCKET_RETURN_IF_ERROR(get_int("d_ff", &c.d_ff));
  POCKET_RETURN_IF_ERROR(get_int("vocab_size", &c.vocab_size));
  POCKET_RETURN_IF_ERROR(get_int("n_ctx_train", &c.n_ctx_train));
  POCKET_RETURN_IF_ERROR(get_float("rope_base", &c.rope_base));
  POCKET_RETURN_IF_ERROR(get_float("rms_eps", &c.rms_eps));
  POCKET_RETURN_IF_ERROR(get_bool("qk_norm", &c.qk_norm));
  POCKET_RETURN_IF_ERROR(get_bool("qkv_bias", &c.qkv_bias));
  POCKET_RETURN_IF_ERROR(get_bool("tied_output", &c.tied_output));
  const ConfigValue* style = pocket.Find("rope_style");
  if (style == nullptr || style->kind != ConfigValue::Kind::kString ||
      (style->s != "neox" && style->s != "interleaved")) {
    return InvalidArgumentError(name, ": rope_style must be \"neox\" or \"interleaved\"");
  }
  c.rope_style = style->s == "neox" ? RopeStyle::kNeox : RopeStyle::kInterleaved;
  POCKET_RETURN_IF_ERROR(c.Validate().WithContext(name));
  return c;
}

}  // namespace pocket
