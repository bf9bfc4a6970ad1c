// pocket: run small language models on phone-class CPUs. See `pocket --help`.
#include <CLI/CLI.hpp>
#include <vector>

#include "common.h"

namespace pocket::cli {

int ReportError(const Status& status) {
  std::fprintf(stderr, "pocket: error: %s\n", status.message().c_str());
  return 1;
}

Logger CliLogger(bool verbose) {
  return Logger::Stderr(verbose ? LogLevel::kInfo : LogLevel::kWarning);
}

void EngineFlags::Register(CLI::App* app) {
  app->add_option("--tokenizer", tokenizer,
                  "tokenizer.json, or a llama2.c tokenizer.bin (llama2.c models need one)");
  app->add_option("-t,--threads", n_threads, "threads (0: one per hardware thread)")
      ->capture_default_str();
  app->add_option("-c,--ctx-size", n_ctx, "context size in tokens")->capture_default_str();
  app->add_option("-b,--batch", n_batch, "prefill chunk in tokens")->capture_default_str();
  app->add_option("--kv-type", kv_type, "KV cache type: f16, f32 or q8")->capture_default_str();
  app->add_option("--kernels", kernels,
                  "force a kernel table (reference, avx2, avx512, amx, neon, dotprod, i8mm)");
  app->add_flag("--no-amx", no_amx, "do not use AMX tiles (the best table without them)");
  app->add_flag("--no-repack", no_repack,
                "keep GGUF Q4_0/Q4_1/Q8_0 matrices dense (float kernels, the oracle path)");
  app->add_flag("-v,--verbose", verbose, "log loading details to stderr");
}

StatusOr<SessionOptions> EngineFlags::Session() const {
  SessionOptions o;
  o.n_threads = n_threads;
  o.n_ctx = n_ctx;
  o.n_batch = n_batch;
  if (!ParseKvType(kv_type, &o.kv_type)) {
    return InvalidArgumentError("--kv-type ", QuoteBytes(kv_type), " (expected f16, f32 or q8)");
  }
  return o;
}

StatusOr<std::shared_ptr<const Model>> LoadModel(const std::string& path,
                                                 const EngineFlags& flags) {
  LoadOptions options;
  options.tokenizer_path = flags.tokenizer;
  options.logger = CliLogger(flags.verbose);
  options.repack = !flags.no_repack;
  KernelOptions ko;
  ko.force = flags.kernels;
  ko.allow_amx = !flags.no_amx;
  POCKET_ASSIGN_OR_RETURN(options.kernels, SelectKernels(ko));
  return Model::Load(path, options);
}

}  // namespace pocket::cli

int main(int argc, char** argv) {
  using namespace pocket::cli;
  CLI::App app{
      "pocket: a small-language-model runtime for phone-class CPUs.\n"
      "Models: GGUF files, Hugging Face directories (safetensors), llama2.c checkpoints."};
  app.set_version_flag("--version", "pocket 0.1.0");
  app.require_subcommand(1);
  app.fallthrough();
  std::vector<Command> commands = {
      AddRunCommand(app),        AddChatCommand(app),    AddTokenizeCommand(app),
      AddLogitsCommand(app),     AddInfoCommand(app),    AddMakeModelCommand(app),
      AddBenchCommand(app),      AddConvertCommand(app), AddVerifyCommand(app),
      AddPruneVocabCommand(app), AddScoreCommand(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (const Command& c : commands) {
    if (c.app->parsed()) return c.run();
  }
  return 2;
}
