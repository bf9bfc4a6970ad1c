// pocket: run small language models on phone-class CPUs. See `pocket --help`.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

#include "common.h"

namespace pocket::cli {

// A debug command, hidden from --help (cmd_drafter_logits.cc).
Command AddDrafterLogitsCommand(CLI::App& root);

int ReportError(const Status& status) {
  std::fprintf(stderr, "pocket: error: %s\n", status.message().c_str());
  return 1;
}

int ReportUsageError(std::string_view message) {
  std::fprintf(stderr, "pocket: error: %.*s\n", static_cast<int>(message.size()), message.data());
  return 2;
}

void SetExamples(CLI::App* app, std::initializer_list<std::string_view> examples) {
  std::string text = "\nExamples:\n";
  for (std::string_view e : examples) {
    text += "  ";
    text += e;
    text += '\n';
  }
  app->footer(text);
}

Logger CliLogger(bool verbose) {
  return Logger::Stderr(verbose ? LogLevel::kInfo : LogLevel::kWarning);
}

void EngineFlags::Register(CLI::App* app) {
  app->add_option("--tokenizer", tokenizer,
                  "tokenizer.json, or a llama2.c tokenizer.bin (llama2.c models need one)");
  app->add_option("-t,--threads", n_threads, "threads (0: one per hardware thread)")
      ->capture_default_str();
  ctx_option = app->add_option("-c,--ctx-size", n_ctx,
                               "context size in tokens (at most the model's trained context)")
                   ->capture_default_str();
  app->add_option("-b,--batch", n_batch, "prefill chunk in tokens")->capture_default_str();
  app->add_option("--kv-type", kv_type, "KV cache type: f16, f32 or q8")->capture_default_str();
  app->add_option(
      "--kernels", kernels,
      "force a kernel table (reference, avx2, avx512, amx, neon, dotprod, i8mm; default: "
      "$POCKET_KERNELS, else the best: see `pocket kernels`)");
  app->add_flag("--no-amx", no_amx, "do not use AMX tiles (the best table without them)");
  app->add_flag("--no-repack", no_repack,
                "keep GGUF Q4_0/Q4_1/Q8_0 matrices dense (float kernels, the oracle path)");
  app->add_flag("-v,--verbose", verbose, "log loading details to stderr");
}

Status CheckOutputPath(std::string_view flag, const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return InvalidArgumentError(flag, " ", path, ": is a directory, not a file");
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    return IoError(flag, " ", path, ": the directory ", dir.string(), " does not exist");
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    return IoError(flag, " ", path, ": the directory ", dir.string(), " is not writable");
  }
  return Status::Ok();
}

StatusOr<uint64_t> ParseByteCount(std::string_view text) {
  const std::string t(text);
  char* end = nullptr;
  const double v = std::strtod(t.c_str(), &end);
  const std::string unit = end != nullptr ? std::string(end) : std::string();
  const double scale = unit.empty()                   ? 1.0
                       : unit == "K" || unit == "KiB" ? 1024.0
                       : unit == "M" || unit == "MiB" ? 1024.0 * 1024.0
                       : unit == "G" || unit == "GiB" ? 1024.0 * 1024.0 * 1024.0
                                                      : 0.0;
  if (end == t.c_str() || scale == 0.0 || !(v > 0) || v * scale > 1e15) {
    return InvalidArgumentError(QuoteBytes(t), " is not a byte count (such as 67108864 or 64M)");
  }
  return static_cast<uint64_t>(v * scale);
}

void EngineFlags::RegisterLora(CLI::App* app) {
  app->add_option("--lora", lora,
                  "LoRA adapter: a PEFT directory (adapter_config.json + "
                  "adapter_model.safetensors), a llama.cpp LoRA .gguf or a pocket adapter package "
                  "(convert --lora), optionally :SCALE "
                  "(default 1); repeatable, the adapters' terms add up")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

StatusOr<AdapterSet> LoadAdapters(const Model& model, const EngineFlags& flags) {
  AdapterSet set;
  for (const std::string& arg : flags.lora) {
    std::string path;
    float scale = 1.0f;
    POCKET_RETURN_IF_ERROR(ParseAdapterArg(arg, &path, &scale));
    POCKET_ASSIGN_OR_RETURN(std::shared_ptr<const LoraAdapter> a, LoraAdapter::Load(path, model));
    set.push_back({std::move(a), scale});
  }
  return set;
}

Status ApplyAdapters(Session& session, const Model& model, const EngineFlags& flags) {
  if (flags.lora.empty()) return Status::Ok();
  POCKET_ASSIGN_OR_RETURN(AdapterSet set, LoadAdapters(model, flags));
  return session.SetAdapters(std::move(set));
}

nlohmann::json AdaptersJson(const AdapterSet& set) {
  nlohmann::json out = nlohmann::json::array();
  for (const AdapterUse& u : set) {
    out.push_back({{"path", u.adapter->path()},
                   {"format", u.adapter->format()},
                   {"scale", u.scale},
                   {"max_rank", u.adapter->max_rank()},
                   {"targets", u.adapter->targets()},
                   {"bytes", u.adapter->bytes()}});
  }
  return out;
}

StatusOr<SessionOptions> EngineFlags::Session() const {
  SessionOptions o;
  o.n_threads = n_threads;
  o.n_ctx = n_ctx;
  o.n_batch = n_batch;
  if (!ParseKvType(kv_type, &o.kv_type)) {
    return InvalidArgumentError("--kv-type ", QuoteBytes(kv_type), " (expected f16, f32 or q8)");
  }
  // --lora FILE:SCALE whose SCALE is not a number (the whole is not a file, the part before the
  // colon is): a usage error naming the scale, not "not an adapter" about a missing file.
  for (const std::string& arg : lora) {
    std::string path;
    float scale = 1.0f;
    POCKET_RETURN_IF_ERROR(ParseAdapterArg(arg, &path, &scale));
    const size_t colon = arg.rfind(':');
    std::error_code ec;
    if (colon != std::string::npos && path == arg && !std::filesystem::exists(arg, ec) &&
        std::filesystem::exists(arg.substr(0, colon), ec)) {
      return InvalidArgumentError(
          "--lora ", QuoteBytes(arg), ": the scale ", QuoteBytes(arg.substr(colon + 1)),
          " is not a number (FILE:SCALE, e.g. ", arg.substr(0, colon), ":0.5)");
    }
  }
  if (n_ctx < 1) return InvalidArgumentError("--ctx-size must be at least 1, got ", n_ctx);
  if (n_batch < 1) return InvalidArgumentError("--batch must be at least 1, got ", n_batch);
  if (n_threads < 0 || n_threads > 256) {
    return InvalidArgumentError("--threads must be 0 (one per hardware thread) to 256, got ",
                                n_threads);
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
  POCKET_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, Model::Load(path, options));
  const int32_t n_ctx_train = model->config().n_ctx_train;
  if (flags.ctx_option != nullptr && flags.ctx_option->count() > 0 && flags.n_ctx > n_ctx_train) {
    std::fprintf(stderr,
                 "pocket: warning: --ctx-size %d is above the context %s was trained on (%d "
                 "tokens); using %d\n",
                 flags.n_ctx, path.c_str(), n_ctx_train, n_ctx_train);
  }
  return model;
}

namespace {

// Levenshtein distance, for "did you mean".
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// `unknown command "runn" (did you mean "run"?)`, or the list of commands.
std::string UnknownCommand(std::string_view name, const std::vector<Command>& commands) {
  std::string best;
  size_t best_distance = 3;  // suggest only close names
  std::string all;
  for (const Command& c : commands) {
    const std::string& n = c.app->get_name();
    all += all.empty() ? n : ", " + n;
    const size_t d = EditDistance(name, n);
    if (d < best_distance || (best.empty() && n.rfind(name, 0) == 0 && !name.empty())) {
      best = n;
      best_distance = std::min(d, best_distance);
    }
  }
  std::string message = "unknown command \"" + std::string(name) + "\"";
  if (!best.empty()) return message + " (did you mean \"" + best + "\"?)";
  return message + " (commands: " + all + ")";
}

// For an option a command does not take: `unknown option "--tmp" for pocket run (did you mean
// "--temp"?)`; empty when argv holds none (another parse error).
std::string UnknownOption(const CLI::App& command, int argc, char** argv) {
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 3 || arg.substr(0, 2) != "--") continue;
    const std::string name(arg.substr(
        2, arg.find('=') == std::string_view::npos ? std::string_view::npos : arg.find('=') - 2));
    if (command.get_option_no_throw("--" + name) != nullptr) continue;
    std::string best;
    size_t best_distance = 3;  // suggest only close names
    for (const CLI::Option* o : command.get_options()) {
      for (const std::string& n : o->get_lnames()) {
        const size_t d = EditDistance(name, n);
        if (d < best_distance) {
          best = n;
          best_distance = d;
        }
      }
    }
    std::string message = StrCat("unknown option \"--", name, "\" for pocket ", command.get_name());
    if (!best.empty()) return StrCat(message, " (did you mean \"--", best, "\"?)");
    return StrCat(message, " (pocket ", command.get_name(), " --help lists its options)");
  }
  return "";
}

}  // namespace

}  // namespace pocket::cli

int main(int argc, char** argv) {
  using namespace pocket::cli;
  CLI::App app{
      "pocket: a small-language-model runtime for phone-class CPUs.\n"
      "Models: .pocket packages, GGUF files, Hugging Face directories (safetensors), llama2.c "
      "checkpoints.\nUsage errors exit 2, errors while running 1, Ctrl-C 130."};
  app.set_version_flag("--version", "pocket " POCKET_CLI_VERSION);
  app.require_subcommand(1);
  app.fallthrough();
  // As llama.cpp: an option given twice takes the last value (lists such as --stop take all).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::vector<Command> commands = {
      AddRunCommand(app),        AddChatCommand(app),    AddTokenizeCommand(app),
      AddLogitsCommand(app),     AddInfoCommand(app),    AddMakeModelCommand(app),
      AddBenchCommand(app),      AddConvertCommand(app), AddVerifyCommand(app),
      AddPruneVocabCommand(app), AddScoreCommand(app)};
  commands.push_back(AddDrafterLogitsCommand(app));
  commands.push_back(AddMakeAdapterCommand(app));
  commands.push_back(AddServeCommand(app));
  commands.push_back(AddVoiceCommand(app));
  commands.push_back(AddKernelsCommand(app));
  // After the subcommands: a footer set earlier would be inherited by each of them.
  SetExamples(&app, {"pocket run -m model.pocket -p \"Once upon a time\" -n 64",
                     "pocket chat -m model.pocket",
                     "pocket convert model.gguf -o model.pocket && pocket bench -m model.pocket"});
  if (argc < 2) {
    std::fprintf(stderr, "%s", app.help().c_str());
    return ReportUsageError("give a command (pocket COMMAND --help describes each)");
  }
  if (argv[1][0] != '-') {
    const bool known = std::any_of(commands.begin(), commands.end(),
                                   [&](const Command& c) { return c.app->check_name(argv[1]); });
    if (!known) return ReportUsageError(UnknownCommand(argv[1], commands));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Usage errors read as every other error and exit 2; an option a command does not take
    // gets a suggestion, as a command does.
    for (const Command& c : commands) {
      if (!c.app->parsed()) continue;
      if (std::string unknown = UnknownOption(*c.app, argc, argv); !unknown.empty()) {
        return ReportUsageError(unknown);
      }
    }
    return ReportUsageError(std::string(e.what()) + " (see --help)");
  }
  for (const Command& c : commands) {
    if (c.app->parsed()) return c.run();
  }
  return 2;
}
