// Shared pieces of the pocket CLI's subcommands.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/log.h"
#include "base/status.h"
#include "kernels/select.h"
#include "model/adapter.h"
#include "model/model.h"
#include "runtime/session.h"

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
Command AddBenchCommand(CLI::App& root);
Command AddConvertCommand(CLI::App& root);
Command AddVerifyCommand(CLI::App& root);
Command AddPruneVocabCommand(CLI::App& root);
Command AddScoreCommand(CLI::App& root);
Command AddMakeAdapterCommand(CLI::App& root);
Command AddServeCommand(CLI::App& root);
Command AddVoiceCommand(CLI::App& root);
Command AddKernelsCommand(CLI::App& root);

// Runtime errors (a file that does not load, a generation that fails): prints
// "pocket: error: <message>" to stderr and returns 1.
int ReportError(const Status& status);
// Usage errors (options that contradict each other, a missing or empty argument): prints
// "pocket: error: <message>" to stderr and returns 2, as the option parser's own errors do.
int ReportUsageError(std::string_view message);
// Sets the text printed at the end of a subcommand's --help: "Examples:" and one line each.
void SetExamples(CLI::App* app, std::initializer_list<std::string_view> examples);
// The CLI's logger: warnings and errors to stderr; info too with --verbose.
Logger CliLogger(bool verbose);

// Options of the engine shared by every command that runs a model.
struct EngineFlags {
  std::string tokenizer;
  int32_t n_threads = 0;
  int32_t n_ctx = 4096;
  int32_t n_batch = 512;
  std::string kv_type = "f16";
  std::string kernels;
  bool no_amx = false;
  bool no_repack = false;
  bool verbose = false;
  CLI::Option* ctx_option = nullptr;  // to tell a -c the user gave from the default
  std::vector<std::string> lora;      // --lora FILE|DIR[:SCALE], repeatable

  void Register(CLI::App* app);
  // --lora, for the commands that apply adapters.
  void RegisterLora(CLI::App* app);
  StatusOr<SessionOptions> Session() const;
};

// The adapters --lora names, loaded for `model` (empty when none).
StatusOr<AdapterSet> LoadAdapters(const Model& model, const EngineFlags& flags);
// Loads them and makes them the session's set.
Status ApplyAdapters(Session& session, const Model& model, const EngineFlags& flags);
// The set as --json reports it: [{"path", "format", "scale", "rank", "targets"}].
nlohmann::json AdaptersJson(const AdapterSet& set);

// An output a command writes at the end (a temporary file renamed into place): its directory must
// exist and be writable, checked before the work so that a typo does not cost the whole run.
// `flag` names the option in the message ("-o", "--session").
Status CheckOutputPath(std::string_view flag, const std::string& path);

// A positive byte count: digits with an optional K/KiB, M/MiB or G/GiB (powers of 1024).
StatusOr<uint64_t> ParseByteCount(std::string_view text);
StatusOr<std::shared_ptr<const Model>> LoadModel(const std::string& path, const EngineFlags& flags);
// Engine defaults with only a tokenizer override (for commands that do not run the model).
inline EngineFlags TokenizerOnly(const std::string& tokenizer) {
  EngineFlags f;
  f.tokenizer = tokenizer;
  return f;
}

}  // namespace pocket::cli
