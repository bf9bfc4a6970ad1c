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

StatusOr<std::shared_ptr<const Model>> LoadModel(const std::string& path,
                                                 const std::string& tokenizer_path, bool verbose) {
  LoadOptions options;
  options.tokenizer_path = tokenizer_path;
  options.logger = CliLogger(verbose);
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
  std::vector<Command> commands = {AddRunCommand(app),      AddChatCommand(app),
                                   AddTokenizeCommand(app), AddLogitsCommand(app),
                                   AddInfoCommand(app),     AddMakeModelCommand(app)};
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
