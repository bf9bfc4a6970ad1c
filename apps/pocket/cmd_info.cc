// pocket info: what a model file holds: format, architecture and shapes, tensor types and bytes,
// tokenizer and chat template; or what a LoRA adapter, a saved session or a tokenizer.json holds.
#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "common.h"
#include "format/pocket_file.h"
#include "model/adapter.h"
#include "model/dflash.h"
#include "tokenizer/chat_template.h"

namespace pocket::cli {
namespace {

// The tensor group a tensor belongs to, by its GGUF or Hugging Face name.
std::string TensorGroup(const TensorInfo& t, bool tied) {
  const std::string& n = t.name;
  auto has = [&n](const char* s) { return n.find(s) != std::string::npos; };
  if (n.starts_with(kPocketDrafterTensorPrefix)) return "drafter";
  if (t.shape.size() == 1) return "norms+biases";
  if (has("token_embd") || has("embed_tokens") || n == "tok_embeddings.weight") {
    return tied ? "embedding=output" : "embedding";
  }
  if (n == "output.weight" || n == "lm_head.weight") return "output";
  if (n == kClassifierTensor) return "classifier";
  if (has("attn") || has("wq") || has("wk") || has("wv") || has("wo")) return "attention";
  if (has("ffn") || has("mlp") || has("w1") || has("w2") || has("w3")) return "ffn";
  return "other";
}

// pocket info on a LoRA adapter (PEFT directory or llama.cpp GGUF): what it holds, and with
// --base, whether it fits that model (the checks of --lora).
int AdapterInfo(const std::string& path, const std::string& base_path, const EngineFlags& flags,
                bool json) {
  auto info = DescribeAdapterFile(path);
  if (!info.ok()) return ReportError(info.status());
  const AdapterFileInfo& a = *info;
  std::string check;  // "" without --base
  Status fits = Status::Ok();
  if (!base_path.empty()) {
    auto base = LoadModel(base_path, flags);
    if (!base.ok()) return ReportError(base.status());
    auto loaded = LoraAdapter::Load(path, **base);
    fits = loaded.status();
    check = fits.ok() ? "fits " + base_path : fits.message();
  }
  if (json) {
    nlohmann::json j;
    j["path"] = a.path;
    j["kind"] = "lora_adapter";
    j["format"] = a.format;
    j["architecture"] = a.architecture;
    j["n_tensors"] = a.n_tensors;
    j["n_pairs"] = a.n_pairs;
    j["n_layers"] = a.n_layers;
    j["targets"] = a.targets;
    j["min_rank"] = a.min_rank;
    j["max_rank"] = a.max_rank;
    j["alpha"] = a.alpha >= 0 ? nlohmann::json(a.alpha) : nlohmann::json();
    j["rslora"] = a.rslora;
    j["tensor_types"] = a.tensors_by_type;
    j["factor_bytes"] = a.factor_bytes;
    j["file_bytes"] = a.file_bytes;
    if (!base_path.empty()) {
      j["base"] = {{"path", base_path}, {"fits", fits.ok()}};
      if (!fits.ok()) j["base"]["error"] = fits.message();
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::string types;
    for (const auto& [type, n] : a.tensors_by_type) {
      types += StrCat(types.empty() ? "" : ", ", n, " ", type);
    }
    std::printf("adapter:      %s (LoRA, %s)\n", a.path.c_str(),
                a.format == "peft"     ? "PEFT"
                : a.format == "pocket" ? "pocket adapter package"
                                       : "llama.cpp GGUF");
    if (!a.architecture.empty()) std::printf("base:         %s\n", a.architecture.c_str());
    std::printf("factors:      %d pairs over %d layers, targets %s, rank %s%s\n", a.n_pairs,
                a.n_layers, a.targets.c_str(),
                a.min_rank == a.max_rank ? StrCat(a.max_rank).c_str()
                                         : StrCat(a.min_rank, "-", a.max_rank).c_str(),
                a.rslora ? " (rsLoRA)" : "");
    if (a.format != "pocket") {
      std::printf("alpha:        %s\n", a.alpha >= 0 ? StrCat(a.alpha).c_str() : "none given");
    }
    std::printf("tensors:      %lld (%s), %s of factors, file %s\n",
                static_cast<long long>(a.n_tensors), types.c_str(),
                HumanBytes(a.factor_bytes).c_str(), HumanBytes(a.file_bytes).c_str());
    if (!base_path.empty()) std::printf("check:        %s\n", check.c_str());
  }
  return fits.ok() ? 0 : 1;
}

// pocket info on a saved session (pocket chat --session, Session::Save): the model it was saved
// with, its context and adapters, and with pocket chat's user data, the conversation's messages.
int SessionInfo(const std::string& path, bool json) {
  auto info = DescribeSessionFile(path);
  if (!info.ok()) return ReportError(info.status());
  const SessionFileInfo& s = *info;
  // pocket chat's user data: {"pocket_chat": 1, "messages": [{"role", "content"}...]}.
  std::vector<std::string> roles;
  bool chat = false;
  const nlohmann::json user =
      nlohmann::json::parse(s.user_data, nullptr, /*allow_exceptions=*/false);
  if (user.is_object() && user.contains("pocket_chat") && user.contains("messages") &&
      user["messages"].is_array()) {
    chat = true;
    for (const nlohmann::json& m : user["messages"]) {
      roles.push_back(m.is_object() && m.contains("role") && m["role"].is_string()
                          ? m["role"].get<std::string>()
                          : "?");
    }
  }
  if (json) {
    nlohmann::json j;
    j["path"] = s.path;
    j["kind"] = "session";
    j["version"] = s.version;
    j["architecture"] = s.architecture;
    j["base_fingerprint"] = s.base_fingerprint;
    j["weights_digest"] = s.weights_digest;
    j["n_layers"] = s.n_layers;
    j["n_kv_heads"] = s.n_kv_heads;
    j["head_dim"] = s.head_dim;
    j["vocab_size"] = s.vocab_size;
    j["kv_type"] = s.kv_type;
    j["n_tokens"] = s.n_tokens;
    j["has_logits"] = s.has_logits;
    j["adapters"] = s.adapters;
    j["kv_bytes"] = s.kv_bytes;
    j["user_data_bytes"] = s.user_data_bytes;
    j["file_bytes"] = s.file_bytes;
    j["chat_messages"] = chat ? nlohmann::json(roles) : nlohmann::json();
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("session:      %s (pocket session, version %u)\n", s.path.c_str(), s.version);
  std::printf(
      "model:        %s, %lld layers, %lld KV heads of %lld, vocabulary %lld; fingerprint "
      "%s, weights %s\n",
      s.architecture.c_str(), static_cast<long long>(s.n_layers),
      static_cast<long long>(s.n_kv_heads), static_cast<long long>(s.head_dim),
      static_cast<long long>(s.vocab_size), s.base_fingerprint.c_str(), s.weights_digest.c_str());
  std::printf("context:      %lld tokens%s, KV cache %s (%s of keys and values)\n",
              static_cast<long long>(s.n_tokens), s.has_logits ? " and the logits after them" : "",
              s.kv_type.c_str(), HumanBytes(s.kv_bytes).c_str());
  std::printf("adapters:     %s\n", s.adapters.empty() ? "none" : s.adapters.c_str());
  if (chat) {
    // Messages by role, in the order the roles first come.
    std::vector<std::pair<std::string, int>> by_role;
    for (const std::string& r : roles) {
      auto it = std::find_if(by_role.begin(), by_role.end(),
                             [&r](const auto& entry) { return entry.first == r; });
      if (it == by_role.end()) {
        by_role.emplace_back(r, 1);
      } else {
        ++it->second;
      }
    }
    std::string counts;
    for (const auto& [role, n] : by_role)
      counts += StrCat(counts.empty() ? "" : ", ", n, " ", role);
    std::printf("conversation: pocket chat, %zu messages (%s)\n", roles.size(),
                roles.empty() ? "none" : counts.c_str());
  } else {
    std::printf("user data:    %s\n", HumanBytes(s.user_data_bytes).c_str());
  }
  std::printf("file:         %s, checksum good\n", HumanBytes(s.file_bytes).c_str());
  return 0;
}

// True when `path` is a file whose first non-blank byte opens a JSON object (tokenizer.json).
bool LooksLikeJsonObject(const std::string& path) {
  if (IsDirectory(path)) return false;
  auto file = MappedFile::Open(path);
  if (!file.ok()) return false;
  const std::string_view bytes = (*file)->bytes();
  const size_t at = bytes.find_first_not_of(" \t\r\n");
  return at != std::string_view::npos && bytes[at] == '{';
}

// pocket info on a Hugging Face tokenizer.json (with the tokenizer_config.json beside it): its
// kind, vocabulary, special tokens and chat template.
int TokenizerInfo(const std::string& path, bool json) {
  auto tok = Tokenizer::FromHfJsonFile(path);
  if (!tok.ok()) {
    // "PATH: not a tokenizer.json (what the loader found)".
    std::string why = tok.status().message();
    if (why.starts_with(path + ": ")) why.erase(0, path.size() + 2);
    return ReportError(
        Status(tok.status().code(), StrCat(path, ": not a tokenizer.json (", why, ")")));
  }
  const Tokenizer& t = **tok;
  const TokenizerSpec spec = t.FullSpec();
  std::vector<int32_t> special, added;  // kControl; kControl and kUserDefined
  for (size_t id = 0; id < spec.types.size(); ++id) {
    if (spec.types[id] == TokenType::kControl) special.push_back(static_cast<int32_t>(id));
    if (spec.types[id] == TokenType::kControl || spec.types[id] == TokenType::kUserDefined)
      added.push_back(static_cast<int32_t>(id));
  }
  std::string tmpl_family = "none";
  if (!spec.chat_template.empty()) {
    auto tmpl = ChatTemplate::Detect(spec.chat_template);
    tmpl_family = tmpl.ok() ? std::string(tmpl->name()) : "unrecognised";
  }
  const char* kind = spec.kind == TokenizerKind::kByteLevelBpe ? "byte-level BPE" : "llama2.c";
  auto token_json = [&t](int32_t id) -> nlohmann::json {
    if (id < 0) return nlohmann::json();
    return {{"id", id}, {"text", std::string(t.TokenBytes(id))}};
  };
  if (json) {
    nlohmann::json j;
    j["path"] = path;
    j["kind"] = "tokenizer";
    j["type"] = kind;
    j["pre_tokenizer"] = spec.pre_tokenizer;
    j["vocab_size"] = t.vocab_size();
    j["n_merges"] = spec.merges.size() + spec.merge_ids.size();
    j["n_added_tokens"] = added.size();
    j["bos"] = token_json(spec.bos_id);
    j["eos"] = token_json(spec.eos_id);
    j["pad"] = token_json(spec.pad_id);
    j["unk"] = token_json(spec.unk_id);
    j["add_bos"] = spec.add_bos;
    j["chat_template"] = tmpl_family;
    j["special_tokens"] = nlohmann::json::array();
    for (int32_t id : special) j["special_tokens"].push_back(token_json(id));
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  auto token_text = [&t](int32_t id) {
    return id < 0 ? std::string("none") : StrCat(id, " ", QuoteBytes(t.TokenBytes(id)));
  };
  std::printf("tokenizer:    %s (Hugging Face tokenizer.json, %s, pre-tokenizer %s)\n",
              path.c_str(), kind, spec.pre_tokenizer.c_str());
  std::printf("vocabulary:   %d tokens, %zu merges, %zu added tokens (%zu special)\n",
              t.vocab_size(), spec.merges.size() + spec.merge_ids.size(), added.size(),
              special.size());
  std::printf("ids:          bos %s, eos %s, pad %s, unk %s; BOS %s\n",
              token_text(spec.bos_id).c_str(), token_text(spec.eos_id).c_str(),
              token_text(spec.pad_id).c_str(), token_text(spec.unk_id).c_str(),
              spec.add_bos ? "prepended" : "not prepended");
  // The special tokens, the first 32 (--json lists them all).
  constexpr size_t kShown = 32;
  std::string list;
  for (size_t i = 0; i < special.size() && i < kShown; ++i)
    list += StrCat(list.empty() ? "" : ", ", t.TokenBytes(special[i]), " ", special[i]);
  if (special.size() > kShown) list += StrCat(", ... (", special.size() - kShown, " more)");
  std::printf("special:      %s\n", special.empty() ? "none" : list.c_str());
  std::printf("chat template: %s\n", tmpl_family.c_str());
  return 0;
}

}  // namespace

Command AddInfoCommand(CLI::App& root) {
  auto* app =
      root.add_subcommand("info",
                          "show a model's architecture, shapes, tensor types, bytes (or what an "
                          "adapter, a saved session or a tokenizer.json holds)");
  auto path = std::make_shared<std::string>();
  auto tokenizer = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto tensors = std::make_shared<bool>(false);
  auto base = std::make_shared<std::string>();
  app->add_option("model", *path,
                  "GGUF file, Hugging Face directory, llama2.c .bin or .pocket; or a LoRA "
                  "adapter (PEFT directory or its adapter_config.json, llama.cpp GGUF, adapter "
                  "package), a saved session (pocket chat --session) or a tokenizer.json")
      ->required();
  app->add_option("-m,--base", *base,
                  "with an adapter: the base model to check it against (as --lora would)");
  app->add_option("--tokenizer", *tokenizer,
                  "tokenizer to attach (tokenizer.json or llama2.c .bin), instead of the model's");
  app->add_flag("--json", *json, "print one JSON object instead of the text report");
  app->add_flag("--tensors", *tensors, "also list every tensor: name, type, shape, bytes");
  SetExamples(app, {"pocket info model.gguf", "pocket info model.pocket --json --tensors",
                    "pocket info ./my-task-lora -m model.pocket"});
  return {
      app, [=]() -> int {
        if (path->empty()) return ReportUsageError("the model path is empty");
        // A PEFT adapter's adapter_config.json stands for its directory.
        const std::filesystem::path as_path(*path);
        if (as_path.filename() == "adapter_config.json" && !IsDirectory(*path)) {
          const std::string dir =
              as_path.has_parent_path() ? as_path.parent_path().string() : std::string(".");
          if (LooksLikeAdapter(dir))
            return AdapterInfo(dir, *base, TokenizerOnly(*tokenizer), *json);
        }
        if (LooksLikeAdapter(*path))
          return AdapterInfo(*path, *base, TokenizerOnly(*tokenizer), *json);
        if (!base->empty())
          return ReportUsageError(StrCat("--base is for adapters; ", *path, " is not one"));
        const bool session = LooksLikeSessionFile(*path);
        const bool tokenizer_json = !session && LooksLikeJsonObject(*path);
        if ((session || tokenizer_json) && (!tokenizer->empty() || *tensors)) {
          return ReportUsageError(StrCat("--tokenizer and --tensors are for models; ", *path,
                                         " is ", session ? "a session file" : "a tokenizer.json"));
        }
        if (session) return SessionInfo(*path, *json);
        if (tokenizer_json) return TokenizerInfo(*path, *json);
        auto model = LoadModel(*path, TokenizerOnly(*tokenizer));
        if (!model.ok()) return ReportError(model.status());
        const Model& m = **model;
        const ModelConfig& c = m.config();
        struct TypeStats {
          int64_t count = 0, elements = 0;
          uint64_t bytes = 0;
        };
        std::map<std::string, TypeStats> by_type, by_group;
        uint64_t total_bytes = 0;
        int64_t total_elements = 0;
        for (const TensorInfo& t : m.source().tensors()) {
          for (TypeStats* s : {&by_type[t.type_name], &by_group[TensorGroup(t, c.tied_output)]}) {
            ++s->count;
            s->elements += t.n_elements();
            s->bytes += t.n_bytes;
          }
          total_bytes += t.n_bytes;
          total_elements += t.n_elements();
        }
        // The block drafter a package carries: shown, or the error that loading it gives.
        std::shared_ptr<const DFlashDrafter> drafter;
        std::string drafter_error;
        if (HasPackagedDrafter(m)) {
          auto d = DFlashDrafter::LoadFromModel(*model);
          if (d.ok()) {
            drafter = *d;
          } else {
            drafter_error = d.status().message();
          }
        }
        std::string drafter_layers;
        if (drafter) {
          for (int32_t id : drafter->target_layer_ids())
            drafter_layers += StrCat(drafter_layers.empty() ? "" : ",", id);
        }
        // Adapters baked in by convert --merge-lora (the package's metadata, as JSON text).
        std::string merged;
        if (const PocketFile* pf = m.source().pocket()) {
          if (const ConfigValue* v = pf->Find("merged_lora")) merged = v->json;
        }
        std::string tmpl_family = "none";
        if (m.tokenizer() && !m.tokenizer()->spec().chat_template.empty()) {
          auto tmpl = ChatTemplate::Detect(m.tokenizer()->spec().chat_template);
          tmpl_family = tmpl.ok() ? std::string(tmpl->name()) : "unrecognised";
        }
        if (*json) {
          nlohmann::json j;
          j["path"] = *path;
          j["format"] = SourceKindName(m.source().kind());
          j["architecture"] = ArchitectureName(c.arch);
          j["n_layers"] = c.n_layers;
          j["d_model"] = c.d_model;
          j["n_heads"] = c.n_heads;
          j["n_kv_heads"] = c.n_kv_heads;
          j["head_dim"] = c.head_dim;
          j["d_ff"] = c.d_ff;
          j["vocab_size"] = c.vocab_size;
          j["n_ctx_train"] = c.n_ctx_train;
          j["rope_base"] = c.rope_base;
          j["rope_style"] = c.rope_style == RopeStyle::kNeox ? "neox" : "interleaved";
          j["rms_eps"] = c.rms_eps;
          j["tied_output"] = c.tied_output;
          j["n_parameters"] = total_elements;
          j["tensor_bytes"] = total_bytes;
          j["file_bytes"] = m.source().file_bytes();
          for (const auto& [type, s] : by_type) {
            j["tensor_types"][type] = {
                {"count", s.count}, {"elements", s.elements}, {"bytes", s.bytes}};
          }
          for (const auto& [group, s] : by_group) {
            j["tensor_groups"][group] = {
                {"count", s.count},
                {"elements", s.elements},
                {"bytes", s.bytes},
                {"bits_per_weight",
                 s.elements ? 8.0 * static_cast<double>(s.bytes) / static_cast<double>(s.elements)
                            : 0.0}};
          }
          if (const PocketFile* pf = m.source().pocket()) {
            for (const PocketSection& sec : pf->sections()) {
              j["sections"].push_back({{"name", sec.name}, {"bytes", sec.size}});
            }
          }
          j["tokenizer_vocab"] = m.tokenizer() ? m.tokenizer()->vocab_size() : 0;
          j["chat_template"] = tmpl_family;
          j["classifier_labels"] = m.classifier().labels;
          if (!merged.empty()) j["merged_lora"] = nlohmann::json::parse(merged);
          if (drafter) {
            j["drafter"] = {{"type", "dflash"},
                            {"n_layers", drafter->config().layers.n_layers},
                            {"block_size", drafter->block_size()},
                            {"mask_token_id", drafter->mask_token_id()},
                            {"target_layer_ids", drafter->config().target_layer_ids},
                            {"weights", std::string(DFlashWeightsName(drafter->weights_kind()))},
                            {"weight_bytes", drafter->weight_bytes()}};
          } else if (!drafter_error.empty()) {
            j["drafter"] = {{"error", drafter_error}};
          }
          if (*tensors) {
            for (const TensorInfo& t : m.source().tensors()) {
              j["tensors"].push_back({{"name", t.name},
                                      {"type", t.type_name},
                                      {"shape", t.shape},
                                      {"bytes", t.n_bytes}});
            }
          }
          std::printf("%s\n", j.dump().c_str());
          return 0;
        }
        std::printf("model:        %s (%s)\n", path->c_str(),
                    std::string(SourceKindName(m.source().kind())).c_str());
        std::printf("config:       %s\n", c.ToString().c_str());
        std::printf("parameters:   %.1f M in %zu tensors, %s; by type:\n", total_elements / 1e6,
                    m.source().tensors().size(), HumanBytes(total_bytes).c_str());
        for (const auto& [type, s] : by_type) {
          std::printf(
              "  %-8s %5lld tensors %9.1f M weights %10s  %.2f bits/weight\n", type.c_str(),
              static_cast<long long>(s.count), s.elements / 1e6, HumanBytes(s.bytes).c_str(),
              s.elements > 0 ? 8.0 * static_cast<double>(s.bytes) / static_cast<double>(s.elements)
                             : 0.0);
        }
        std::printf("by tensor group:\n");
        for (const auto& [group, s] : by_group) {
          std::printf(
              "  %-16s %5lld tensors %9.1f M weights %10s  %.3f bits/weight\n", group.c_str(),
              static_cast<long long>(s.count), s.elements / 1e6, HumanBytes(s.bytes).c_str(),
              s.elements > 0 ? 8.0 * static_cast<double>(s.bytes) / static_cast<double>(s.elements)
                             : 0.0);
        }
        if (const PocketFile* pf = m.source().pocket()) {
          std::printf("package:      format %u.%u, file %s, sections:", pf->version_major(),
                      pf->version_minor(), HumanBytes(pf->file_bytes()).c_str());
          for (const PocketSection& sec : pf->sections()) {
            std::printf(" %s (%s)", sec.name.c_str(), HumanBytes(sec.size).c_str());
          }
          std::printf("\n");
        }
        if (m.tokenizer()) {
          const TokenizerSpec spec = m.tokenizer()->FullSpec();
          std::printf("tokenizer:    %d tokens, %zu merges, bos %d, eos %d, pad %d\n",
                      m.tokenizer()->vocab_size(), spec.merges.size(), spec.bos_id, spec.eos_id,
                      spec.pad_id);
        } else {
          std::printf("tokenizer:    none (pass --tokenizer)\n");
        }
        std::printf("chat template: %s\n", tmpl_family.c_str());
        if (!merged.empty()) std::printf("merged LoRA:  %s\n", merged.c_str());
        if (m.classifier().present()) {
          std::string labels;
          for (const std::string& l : m.classifier().labels)
            labels += (labels.empty() ? "" : ", ") + l;
          std::printf("classifier:   %d labels (%s): pocket score --head\n",
                      m.classifier().n_labels(), labels.c_str());
        }
        if (drafter) {
          std::printf(
              "drafter:      DFlash block drafter: %d layers, block %d, mask token %d, target "
              "layers %s, %s, %s of matrices: pocket run --spec dflash\n",
              drafter->config().layers.n_layers, drafter->block_size(), drafter->mask_token_id(),
              drafter_layers.c_str(),
              std::string(DFlashWeightsName(drafter->weights_kind())).c_str(),
              HumanBytes(drafter->weight_bytes()).c_str());
        } else if (!drafter_error.empty()) {
          std::printf("drafter:      unusable: %s\n", drafter_error.c_str());
        }
        if (*tensors) {
          for (const TensorInfo& t : m.source().tensors()) {
            std::printf("  %-40s %-6s %-16s %zu\n", t.name.c_str(), t.type_name.c_str(),
                        ShapeString(t.shape).c_str(), t.n_bytes);
          }
        }
        return 0;
      }};
}

}  // namespace pocket::cli
