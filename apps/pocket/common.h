// Shared pieces of the pocket CLI's subcommands.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "base/log.h"
#include "base/status.h"
#include "model/model.h"

namespace pocket::cli {

// Each subcommand registers its options on `app` and sets *run to its body, which returns the
// process exit code.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command AddRunCommand(CLI::App& root);
Command AddChatCommand(CLI::App& root);
Command AddTokenizeCommand(CLI::App& root);
Command AddLogitsCommand(CLI::App& root);
Command AddInfoCommand(CLI::App& root);
Command AddMakeModelCommand(CLI::App& root);

// Prints "pocket: error: <message>" to stderr and returns 1.
int ReportError(const Status& status);
// The CLI's logger: warnings and errors to stderr; info too with --verbose.
Logger CliLogger(bool verbose);

StatusOr<std::shared_ptr<const Model>> LoadModel(const std::string& path,
                                                 const std::string& tokenizer_path, bool verbose);

}  // namespace pocket::cli
