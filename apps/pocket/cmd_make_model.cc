// pocket make-model: a model with random weights (deterministic for a seed) at the real shapes of
// the models we target, as GGUF or as a Hugging Face directory.
#include <sys/stat.h>

#include <algorithm>
#include <charconv>

#include "base/mapped_file.h"
#include "base/output_file.h"
#include "common.h"
#include "model/adapter.h"
#include "model/dflash.h"
#include "model/synthetic.h"

namespace pocket::cli {

namespace {

// --preset dflash-drafter: a block drafter (random weights, 2 layers by default) in the released
// layout, with the target's layer shapes, target layers spread over its depth and the target's pad
// token (else its last token) as the mask.
template <typename Flags>
int MakeDrafter(const Flags& f) {
  if (f.target.empty()) {
    return ReportUsageError(
        "--preset dflash-drafter needs --target MODEL (the model it drafts for)");
  }
  DFlashSyntheticOptions o;
  if (!ParseDType(f.type, &o.weight_type) ||
      (o.weight_type != DType::kF32 && o.weight_type != DType::kF16 &&
       o.weight_type != DType::kBF16)) {
    return ReportUsageError(
        StrCat("--type ", QuoteBytes(f.type), ": a drafter holds f32, f16 or bf16 weights"));
  }
  if ((!f.format.empty() && f.format != "hf") || EndsWith(f.out, ".gguf")) {
    return ReportUsageError("a DFlash drafter is a Hugging Face directory; give -o DIR");
  }
  if (f.block_size < 2) {
    return ReportUsageError(StrCat("--block-size ", f.block_size, " (expected at least 2)"));
  }
  if (f.layers < 0) return ReportUsageError(StrCat("--layers ", f.layers, " (expected >= 1)"));
  // Only the config and the tokenizer are needed: no repacking.
  LoadOptions lo;
  lo.repack = false;
  lo.huge_pages = false;
  auto target = Model::Load(f.target, lo);
  if (!target.ok()) return ReportError(target.status());
  o.target = (*target)->config();
  o.n_layers = f.layers > 0 ? f.layers : 2;
  o.block_size = f.block_size;
  o.seed = f.seed;
  const Tokenizer* tok = (*target)->tokenizer();
  const int32_t pad = tok != nullptr ? tok->spec().pad_id : -1;
  o.mask_token_id = pad >= 0 && pad < o.target.vocab_size ? pad : o.target.vocab_size - 1;
  o.input_paths = {f.target, f.target + "/config.json", f.target + "/model.safetensors"};
  for (const std::string& written : {f.out + "/config.json", f.out + "/model.safetensors"}) {
    if (Status s = CheckNotAnInput(written, o.input_paths); !s.ok()) return ReportError(s);
  }
  if (!IsDirectory(f.out) && ::mkdir(f.out.c_str(), 0755) != 0) {
    return ReportError(IoError("cannot create directory ", f.out));
  }
  if (Status s = WriteSyntheticDFlashDrafter(o, f.out); !s.ok()) return ReportError(s);
  std::string ids;
  for (int32_t id : DefaultTargetLayerIds(o.target.n_layers)) {
    ids += StrCat(ids.empty() ? "" : ",", id);
  }
  std::fprintf(stderr,
               "pocket: wrote %s (DFlash drafter: %d layers, block %d, mask %d, target layers "
               "%s; %s weights, seed %llu)\n",
               f.out.c_str(), o.n_layers, o.block_size, o.mask_token_id, ids.c_str(),
               f.type.c_str(), static_cast<unsigned long long>(o.seed));
  return 0;
}

}  // namespace

Command AddMakeModelCommand(CLI::App& root) {
  auto* app =
      root.add_subcommand("make-model", "write a synthetic model (random weights, real shapes)");
  struct Flags {
    std::string preset = "tiny", arch, type = "f32", tokenizer, out, format, template_from, labels;
    std::string target;  // dflash-drafter: the model the drafter serves
    uint64_t seed = 1;
    bool untied = false, tied = false;
    int32_t layers = 0, q4_1_grid = 32, block_size = 9;
  };
  auto f = std::make_shared<Flags>();
  app->add_option("--preset", f->preset,
                  "pocket-0.3b | qwen3-0.6b | tiny | dflash-drafter (a DFlash block drafter for "
                  "--target, as a Hugging Face directory)")
      ->capture_default_str();
  app->add_option("--target", f->target,
                  "with --preset dflash-drafter: the target model (its shapes, vocabulary and pad "
                  "token)");
  app->add_option("--block-size", f->block_size, "with --preset dflash-drafter: tokens per block")
      ->capture_default_str();
  app->add_option("--arch", f->arch, "qwen3 | qwen2 | llama (default: qwen3)");
  app->add_option("--type", f->type, "f32 | f16 | bf16 | q8_0 | q4_0 | q4_1 | q4_k | q6_k")
      ->capture_default_str();
  app->add_option("--tokenizer", f->tokenizer,
                  "attach this tokenizer.json (its vocabulary is fitted to the preset's size)");
  app->add_option("--seed", f->seed, "random seed")->capture_default_str();
  app->add_option("--format", f->format,
                  "gguf | hf (default: from -o: a .gguf file or a directory)");
  app->add_flag("--untied", f->untied, "separate output matrix (default: the preset's)");
  app->add_flag("--tied", f->tied, "output shares the token embedding");
  app->add_option("--q4-1-grid", f->q4_1_grid,
                  "with --type q4_1: columns per scale grid (64: as a QAT export, pairs of blocks "
                  "share scale and zero point)")
      ->capture_default_str();
  app->add_option("--layers", f->layers, "override the number of layers (for quick tests)");
  app->add_option("--classifier-labels", f->labels,
                  "add a random classification head scoring these comma-separated labels (GGUF)");
  app->add_option("-o,--output", f->out,
                  "output .gguf file or directory (never the --tokenizer file)")
      ->required();
  SetExamples(app, {"pocket make-model --preset pocket-0.3b --type q4_0 --tokenizer tokenizer.json "
                    "-o pocket-0.3b-q4_0.gguf",
                    "pocket make-model --preset tiny --arch llama --type bf16 -o tiny-hf/",
                    "pocket make-model --preset dflash-drafter --target tiny.gguf -o drafter/"});
  return {app, [=]() -> int {
            if (f->out.empty())
              return ReportUsageError("-o is empty; give a .gguf file or a directory");
            if (f->tied && f->untied) return ReportUsageError("--tied and --untied contradict");
            if (f->preset == "dflash-drafter") return MakeDrafter(*f);
            if (!f->target.empty()) {
              return ReportUsageError("--target is for --preset dflash-drafter");
            }
            Architecture arch = Architecture::kQwen3;
            if (!f->arch.empty() && !ParseArchitecture(f->arch, &arch)) {
              return ReportUsageError(
                  StrCat("--arch ", QuoteBytes(f->arch), " (expected qwen3, qwen2 or llama)"));
            }
            const std::vector<std::string> presets = PresetNames();
            if (std::find(presets.begin(), presets.end(), f->preset) == presets.end()) {
              std::string names;
              for (const std::string& n : presets) names += (names.empty() ? "" : ", ") + n;
              return ReportUsageError(
                  StrCat("unknown preset ", QuoteBytes(f->preset), " (known: ", names, ")"));
            }
            auto config = PresetConfig(f->preset, arch);
            if (!config.ok()) return ReportError(config.status());
            SyntheticOptions o;
            o.config = *config;
            if (f->untied) o.config.tied_output = false;
            if (f->tied) o.config.tied_output = true;
            if (f->layers > 0) o.config.n_layers = f->layers;
            o.seed = f->seed;
            if (f->q4_1_grid != 32 &&
                (f->type != "q4_1" || f->q4_1_grid <= 0 || f->q4_1_grid % 32 != 0 ||
                 o.config.d_model % f->q4_1_grid != 0 || o.config.d_ff % f->q4_1_grid != 0 ||
                 o.config.q_dim() % f->q4_1_grid != 0)) {
              return ReportUsageError(StrCat(
                  "--q4-1-grid ", f->q4_1_grid,
                  " needs --type q4_1 and a multiple of 32 that divides the model's widths"));
            }
            o.q4_1_grid = f->q4_1_grid;
            if (!f->labels.empty()) o.classifier_labels = SplitString(f->labels, ',');
            if (!ParseDType(f->type, &o.weight_type)) {
              return ReportUsageError(StrCat("--type ", QuoteBytes(f->type),
                                             " is unknown (f32, f16, bf16, q8_0, q4_0, q4_1, q4_k, "
                                             "q6_k)"));
            }
            std::string format = f->format;
            if (format.empty()) format = EndsWith(f->out, ".gguf") ? "gguf" : "hf";
            if (format != "gguf" && format != "hf") {
              return ReportUsageError(
                  StrCat("--format ", QuoteBytes(format), " (expected gguf or hf)"));
            }
            if (format == "hf" && !o.classifier_labels.empty()) {
              return ReportUsageError("--classifier-labels needs a GGUF output");
            }
            if (format == "hf" && o.weight_type != DType::kF32 && o.weight_type != DType::kF16 &&
                o.weight_type != DType::kBF16) {
              return ReportUsageError(
                  StrCat("a Hugging Face directory holds f32, f16 or bf16 weights, "
                         "not --type ",
                         f->type, "; write a .gguf file for it"));
            }
            // The files written (a directory holds two) must not be the tokenizer read.
            const std::vector<std::string> inputs =
                f->tokenizer.empty() ? std::vector<std::string>{} : std::vector{f->tokenizer};
            for (const std::string& written :
                 format == "gguf"
                     ? std::vector{f->out}
                     : std::vector{f->out + "/config.json", f->out + "/model.safetensors"}) {
              if (Status s = CheckNotAnInput(written, inputs); !s.ok()) return ReportError(s);
            }
            if (!f->tokenizer.empty()) {
              auto tok = Tokenizer::FromHfJsonFile(f->tokenizer);
              if (!tok.ok()) return ReportError(tok.status());
              o.tokenizer = *tok;
              o.input_paths.push_back(f->tokenizer);
            }
            Status s;
            if (format == "gguf") {
              s = WriteSyntheticGguf(o, f->out);
            } else {
              if (!IsDirectory(f->out) && ::mkdir(f->out.c_str(), 0755) != 0) {
                return ReportError(IoError("cannot create directory ", f->out));
              }
              s = WriteSyntheticHf(o, f->out);
            }
            if (!s.ok()) return ReportError(s);
            std::fprintf(stderr, "pocket: wrote %s (%s, %s weights, seed %llu)\n", f->out.c_str(),
                         o.config.ToString().c_str(), f->type.c_str(),
                         static_cast<unsigned long long>(o.seed));
            return 0;
          }};
}

Command AddMakeAdapterCommand(CLI::App& root) {
  auto* app = root.add_subcommand(
      "make-adapter",
      "write a synthetic LoRA adapter for a model, as a PEFT directory (adapter_config.json + "
      "adapter_model.safetensors)");
  struct Flags {
    std::string model, targets = "q,k,v,o,gate,up,down", type = "f32", out;
    std::vector<std::string> layer_ranks;
    int32_t rank = 16;
    double alpha = 0.0;
    bool rslora = false;
    float init = 0.5f;
    uint64_t seed = 1;
  };
  auto f = std::make_shared<Flags>();
  app->add_option("-m,--model", f->model, "the base model the adapter is for")->required();
  app->add_option("--rank", f->rank, "rank r of every factor pair")->capture_default_str();
  app->add_option("--alpha", f->alpha, "lora_alpha (default: 2 x rank)");
  app->add_flag("--rslora", f->rslora, "rank-stabilized scaling: alpha / sqrt(r) (use_rslora)");
  app->add_option("--targets", f->targets,
                  "matrices to adapt: q,k,v,o,gate,up,down (every layer), embed (the token "
                  "embedding), lm_head (the output matrix)")
      ->capture_default_str();
  app->add_option("--layer-rank", f->layer_ranks,
                  "LAYER:RANK, another rank for one layer (written as rank_pattern; repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app->add_option("--type", f->type, "factor type: f32, f16 or bf16")->capture_default_str();
  app->add_option("--init", f->init, "lora_B values are uniform in +-init/sqrt(rank)")
      ->capture_default_str();
  app->add_option("--seed", f->seed, "random seed")->capture_default_str();
  app->add_option("-o,--output", f->out, "output directory (created)")->required();
  SetExamples(app, {"pocket make-adapter -m model.pocket --rank 16 -o task-lora",
                    "pocket make-adapter -m model.gguf --rank 8 --targets q,v,embed,lm_head "
                    "--rslora --seed 3 -o vocab-lora",
                    "pocket make-adapter -m model.gguf --rank 4 --layer-rank 0:8 --type bf16 -o "
                    "mixed-lora"});
  return {app, [=]() -> int {
            SyntheticAdapterOptions o;
            o.rank = f->rank;
            o.alpha = f->alpha > 0 ? f->alpha : 2.0 * f->rank;
            o.rslora = f->rslora;
            o.init = f->init;
            o.seed = f->seed;
            if (f->rank < 1)
              return ReportUsageError(StrCat("--rank ", f->rank, " (expected >= 1)"));
            if (!ParseDType(f->type, &o.type) ||
                (o.type != DType::kF32 && o.type != DType::kF16 && o.type != DType::kBF16)) {
              return ReportUsageError(
                  StrCat("--type ", QuoteBytes(f->type), " (expected f32, f16 or bf16)"));
            }
            for (const std::string& name : SplitString(f->targets, ',')) {
              LoraTarget t{};
              if (!ParseLoraTarget(name, &t)) {
                return ReportUsageError(
                    StrCat("--targets: unknown projection ", QuoteBytes(name),
                           " (expected q, k, v, o, gate, up, down, embed, lm_head)"));
              }
              o.targets.push_back(t);
            }
            LoadOptions lo;
            lo.repack = false;
            lo.huge_pages = false;
            auto model = Model::Load(f->model, lo);
            if (!model.ok()) return ReportError(model.status());
            o.base = (*model)->config();
            for (const std::string& lr : f->layer_ranks) {
              const size_t colon = lr.find(':');
              int32_t layer = -1, rank = 0;
              auto parse = [](std::string_view text, int32_t* v) {
                const auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), *v);
                return ec == std::errc() && p == text.data() + text.size() && !text.empty();
              };
              if (colon == std::string::npos ||
                  !parse(std::string_view(lr).substr(0, colon), &layer) ||
                  !parse(std::string_view(lr).substr(colon + 1), &rank) || layer < 0 ||
                  layer >= o.base.n_layers || rank < 1) {
                return ReportUsageError(StrCat("--layer-rank ", QuoteBytes(lr),
                                               " (expected LAYER:RANK, a layer below ",
                                               o.base.n_layers, " and a rank >= 1)"));
              }
              o.layer_ranks.emplace_back(layer, rank);
            }
            o.input_paths = {f->model};
            if (!IsDirectory(f->out) && ::mkdir(f->out.c_str(), 0755) != 0) {
              return ReportError(IoError("cannot create directory ", f->out));
            }
            if (Status s = WriteSyntheticAdapter(o, f->out); !s.ok()) return ReportError(s);
            std::printf("wrote %s (rank %d, targets %s, %s)\n", f->out.c_str(), o.rank,
                        f->targets.c_str(), f->type.c_str());
            return 0;
          }};
}

}  // namespace pocket::cli
