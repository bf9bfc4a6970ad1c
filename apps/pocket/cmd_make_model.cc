// pocket make-model: a model with random weights (deterministic for a seed) at the real shapes of
// the models we target, as GGUF or as a Hugging Face directory.
#include <sys/stat.h>

#include "base/mapped_file.h"
#include "common.h"
#include "model/synthetic.h"

namespace pocket::cli {

Command AddMakeModelCommand(CLI::App& root) {
  auto* app =
      root.add_subcommand("make-model", "write a synthetic model (random weights, real shapes)");
  struct Flags {
    std::string preset = "tiny", arch, type = "f32", tokenizer, out, format, template_from, labels;
    uint64_t seed = 1;
    bool untied = false, tied = false;
    int32_t layers = 0, q4_1_grid = 32;
  };
  auto f = std::make_shared<Flags>();
  app->add_option("--preset", f->preset, "pocket-0.3b | qwen3-0.6b | tiny")->capture_default_str();
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
  app->add_option("-o,--output", f->out, "output .gguf file or directory")->required();
  return {
      app, [=]() -> int {
        Architecture arch = Architecture::kQwen3;
        if (!f->arch.empty() && !ParseArchitecture(f->arch, &arch)) {
          return ReportError(InvalidArgumentError("--arch ", QuoteBytes(f->arch),
                                                  " (expected qwen3, qwen2 or llama)"));
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
          return ReportError(InvalidArgumentError(
              "--q4-1-grid ", f->q4_1_grid,
              " needs --type q4_1 and a multiple of 32 that divides the model's widths"));
        }
        o.q4_1_grid = f->q4_1_grid;
        if (!f->labels.empty()) o.classifier_labels = SplitString(f->labels, ',');
        if (!ParseDType(f->type, &o.weight_type)) {
          return ReportError(InvalidArgumentError("--type ", QuoteBytes(f->type), " is unknown"));
        }
        if (!f->tokenizer.empty()) {
          auto tok = Tokenizer::FromHfJsonFile(f->tokenizer);
          if (!tok.ok()) return ReportError(tok.status());
          o.tokenizer = *tok;
          o.input_paths.push_back(f->tokenizer);
        }
        std::string format = f->format;
        if (format.empty()) format = EndsWith(f->out, ".gguf") ? "gguf" : "hf";
        Status s;
        if (format == "gguf") {
          s = WriteSyntheticGguf(o, f->out);
        } else if (format == "hf") {
          if (!o.classifier_labels.empty()) {
            return ReportError(InvalidArgumentError("--classifier-labels needs a GGUF output"));
          }
          if (!IsDirectory(f->out) && ::mkdir(f->out.c_str(), 0755) != 0) {
            return ReportError(IoError("cannot create directory ", f->out));
          }
          s = WriteSyntheticHf(o, f->out);
        } else {
          return ReportError(InvalidArgumentError("--format must be gguf or hf"));
        }
        if (!s.ok()) return ReportError(s);
        std::fprintf(stderr, "pocket: wrote %s (%s, %s weights, seed %llu)\n", f->out.c_str(),
                     o.config.ToString().c_str(), f->type.c_str(),
                     static_cast<unsigned long long>(o.seed));
        return 0;
      }};
}

}  // namespace pocket::cli
