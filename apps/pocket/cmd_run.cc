// pocket run: one prompt in, generated text out (stdout only; logs and stats on stderr).
// Ctrl-C stops generation through Session::Cancel: what was generated, the stats and the --json
// object are still printed, and the exit status is 130.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/memory.h"
#include "common.h"
#include "generation.h"
#include "interrupt.h"
#include "model/dflash.h"

namespace pocket::cli {
namespace {

struct RunFlags {
  std::string prompt;
  std::string prompt_file;
  bool chat = false;
  bool json = false;
  std::string choice;
  std::string choice_mode = "best";
  std::string regex;
  std::string json_schema;
  std::string json_schema_file;
  std::string grammar;
  std::string grammar_file;
  std::string span_file;
  std::vector<std::string> span_fields;
  std::string span_rule = "span";
  CLI::App* app = nullptr;
  bool given(const char* option) const { return app->count(option) > 0; }
};

bool Blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// Reads -f FILE, or standard input for "-f -".
StatusOr<std::string> ReadPromptFile(const std::string& path) {
  if (path != "-") return ReadFileToString(path);
  std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  if (std::cin.bad()) return IoError("reading the prompt from standard input failed");
  return text;
}

// Usage errors of `run` (exit 2); an empty string when the options are consistent.
std::string CheckUsage(const RunFlags& f, const GenerationFlags& g) {
  if (f.given("--prompt") && f.given("--file")) return "give the prompt with -p or -f, not both";
  if (!f.given("--prompt") && !f.given("--file")) {
    return "give a prompt with -p TEXT or -f FILE (-f - reads standard input; -p \"\" starts "
           "from the beginning-of-text token)";
  }
  if (!g.system.empty() && !f.chat) return "--system needs --chat (it is a chat message)";
  const struct {
    const char* option;
    const std::string& value;
  } constraints[] = {{"--choice", f.choice},           {"--regex", f.regex},
                     {"--json-schema", f.json_schema}, {"--json-schema-file", f.json_schema_file},
                     {"--grammar", f.grammar},         {"--grammar-file", f.grammar_file}};
  int n_given = 0;
  for (const auto& c : constraints) {
    if (!f.given(c.option)) continue;
    ++n_given;
    if (Blank(c.value)) {
      return StrCat(c.option,
                    " is empty: an empty constraint would constrain nothing (leave "
                    "the option out to generate freely)");
    }
  }
  if (f.given("--choice")) {
    const std::vector<std::string> candidates = SplitString(f.choice, ',');
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (Blank(candidates[i])) {
        return StrCat("--choice: candidate ", i, " (of ", candidates.size(),
                      ") is empty; separate the candidates with single commas");
      }
    }
  }
  if (n_given > 1) {
    return "give one constraint: --choice, --regex, --json-schema(-file) or --grammar(-file)";
  }
  if (f.given("--choice-mode") && !f.given("--choice")) return "--choice-mode applies to --choice";
  // The llama.cpp forms: --json-schema and --grammar take text, the -file forms take paths.
  if (f.given("--json-schema") && f.json_schema.find_first_of("{") == std::string::npos &&
      FileExists(f.json_schema)) {
    return StrCat("--json-schema takes the schema's JSON text; ", f.json_schema,
                  " is a file: use --json-schema-file ", f.json_schema);
  }
  if (f.given("--grammar") && f.grammar.find_first_of(":=") == std::string::npos &&
      FileExists(f.grammar)) {
    return StrCat("--grammar takes the grammar's text; ", f.grammar,
                  " is a file: use --grammar-file ", f.grammar);
  }
  return {};
}

nlohmann::json SpecStepsJson(const GenerateResult& r) {
  nlohmann::json steps = nlohmann::json::array();
  for (const SpecStep& step : r.spec_steps) {
    steps.push_back({{"drafted", step.drafted}, {"accepted", step.accepted}});
  }
  return steps;
}

nlohmann::json ResultJson(const GenerateResult& r, const Model& model) {
  const double prefill_s = static_cast<double>(r.prefill_us) * 1e-6;
  const double decode_s = static_cast<double>(r.decode_us) * 1e-6;
  return {
      {"text", r.text},
      {"tokens", r.tokens},
      {"n_prompt_tokens", r.n_prompt_tokens + r.n_reused_tokens},
      {"n_prompt_tokens_evaluated", r.n_prompt_tokens},
      {"stop_reason", StopReasonName(r.stop_reason)},
      {"seed", r.seed},
      {"prefill_s", prefill_s},
      {"decode_s", decode_s},
      {"prefill_tokens_per_s", prefill_s > 0 ? r.n_prompt_tokens / prefill_s : 0.0},
      {"decode_tokens_per_s", decode_s > 0 ? static_cast<double>(r.tokens.size()) / decode_s : 0.0},
      {"constraint_ms", static_cast<double>(r.constraint_us) / 1000.0},
      {"constraint_us_per_token",
       r.n_masks > 0 ? static_cast<double>(r.constraint_us) / r.n_masks : 0.0},
      {"forced_tokens", r.n_forced_tokens},
      {"verify_passes", r.n_verify_passes},
      {"tree_passes", r.n_tree_passes},
      {"drafted_tokens", r.n_drafted},
      {"accepted_draft_tokens", r.n_draft_accepted},
      {"plain_decode_steps", r.n_plain_steps},
      {"paused_draft_steps", r.n_guarded_steps},
      {"draft_ms", static_cast<double>(r.draft_us) / 1000.0},
      {"spec_steps", SpecStepsJson(r)},
      {"load_ms", static_cast<double>(model.load_us()) / 1000.0},
      {"file_bytes", model.source().file_bytes()},
      {"peak_rss_bytes", ReadProcessMemory().peak_rss_bytes}};
}

void PrintJson(const nlohmann::json& j) {
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

}  // namespace

Command AddRunCommand(CLI::App& root) {
  auto* app = root.add_subcommand("run", "generate text from a prompt");
  auto flags = std::make_shared<GenerationFlags>();
  auto f = std::make_shared<RunFlags>();
  f->app = app;
  flags->Register(app);
  app->add_option("-p,--prompt", f->prompt,
                  "the prompt; -p \"\" starts from the beginning-of-text token alone");
  app->add_option("-f,--file", f->prompt_file, "read the prompt from a file (- : standard input)");
  app->add_flag("--chat", f->chat, "wrap the prompt as a user turn with the model's chat template");
  app->add_option("--choice", f->choice,
                  "the output is one of these comma-separated candidates; a candidate's tokens "
                  "are those of prompt + candidate after the prompt's own tokens");
  app->add_option("--choice-mode", f->choice_mode,
                  "best: score the whole candidates in one pass (temperature 0 takes the most "
                  "probable, > 0 samples from their distribution); stream: token by token")
      ->check(CLI::IsMember({"best", "stream"}))
      ->capture_default_str();
  app->add_option("--regex", f->regex, "constrain the output to match this regular expression");
  app->add_option("--json-schema", f->json_schema,
                  "constrain the output to JSON valid against this JSON Schema text (draft "
                  "2020-12 subset; see docs/architecture.md)");
  app->add_option("--json-schema-file", f->json_schema_file,
                  "as --json-schema, with the schema read from this file");
  app->add_option("--grammar", f->grammar,
                  "constrain the output to this GBNF grammar text (llama.cpp syntax)");
  app->add_option("--grammar-file", f->grammar_file,
                  "as --grammar, with the grammar read from this file");
  app->add_option("--span-source", f->span_file,
                  "span fields (\"x-pocket-span\": true, --span-field, the GBNF rule --span-rule) "
                  "must be substrings of this file's text");
  app->add_option("--span-field", f->span_fields,
                  "with a JSON Schema: a string property name whose value is a span (repeatable)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app->add_option("--span-rule", f->span_rule,
                  "with a grammar: the rule name that matches a span of --span-source")
      ->capture_default_str();
  app->add_flag("--json", f->json,
                "print one JSON object at the end (text, token ids, timings, seed) instead of "
                "streaming");
  SetExamples(app, {"pocket run -m model.pocket -p \"Once upon a time\" -n 64",
                    "pocket run -m model.pocket --chat -p \"Name three colours.\" --json-schema "
                    "'{\"type\":\"array\",\"items\":{\"type\":\"string\"}}'",
                    "pocket run -m model.pocket -p \"Sentiment:\" --choice \" positive, negative\" "
                    "--temp 0 --json"});
  return {app, [=]() -> int {
            const std::string usage = CheckUsage(*f, *flags);
            if (!usage.empty()) return ReportUsageError(usage);
            auto request = flags->Request();
            if (!request.ok()) return ReportUsageError(request.status().message());
            auto so = flags->engine.Session();
            if (!so.ok()) return ReportUsageError(so.status().message());
            // Ctrl-C while loading ends the command; while generating it cancels; while the
            // results are printed it is ignored, so they come out whole.
            InterruptWatcher watcher;
            std::string text = f->prompt;
            if (f->given("--file")) {
              auto contents = ReadPromptFile(f->prompt_file);
              if (!contents.ok()) return ReportError(contents.status());
              text = std::move(*contents);
            }
            ConstraintSpec& spec = request->constraint;
            spec.regex = f->regex;
            spec.json_schema = f->json_schema;
            spec.grammar = f->grammar;
            for (const auto& [option, path, out] :
                 {std::tuple{"--json-schema-file", &f->json_schema_file, &spec.json_schema},
                  std::tuple{"--grammar-file", &f->grammar_file, &spec.grammar}}) {
              if (!f->given(option)) continue;
              auto contents = ReadFileToString(*path);
              if (!contents.ok()) return ReportError(contents.status());
              if (Blank(*contents)) {
                return ReportUsageError(StrCat(*path, ": the file is empty (", option, ")"));
              }
              *out = std::move(*contents);
              request->constraint_origin = *path;  // named in the constraint's errors
            }
            if (f->given("--span-source")) {
              auto contents = ReadFileToString(f->span_file);
              if (!contents.ok()) return ReportError(contents.status());
              spec.span_source = std::move(*contents);
              spec.has_span_source = true;
            }
            spec.span_fields = f->span_fields;
            spec.span_rule = f->span_rule;
            if (f->given("--choice")) spec.choices = SplitString(f->choice, ',');
            const bool best_mode = f->choice_mode == "best";
            request->choice_mode = best_mode ? ChoiceMode::kBest : ChoiceMode::kStream;
            const bool choose_best = !spec.choices.empty() && best_mode;

            auto model = LoadModel(flags->model, flags->engine);
            if (!model.ok()) return ReportError(model.status());
            const Tokenizer* tok = (*model)->tokenizer();
            if (tok == nullptr) {
              return ReportError(FailedPreconditionError(request->wording.no_tokenizer));
            }
            if (f->chat) {
              // A user turn (after the system message) in the model's chat template.
              std::vector<ChatMessage> messages;
              if (!flags->system.empty()) messages.push_back({"system", flags->system});
              messages.push_back({"user", text});
              request->messages = std::move(messages);
            } else if (text.empty()) {
              // -p "": the beginning-of-text token alone, as llama.cpp and llama2.c start.
              const int32_t bos = BeginningOfTextToken(*tok);
              if (bos < 0) {
                return ReportUsageError(StrCat(
                    "the prompt is empty and ", flags->model,
                    "'s tokenizer has no beginning-of-text token to start from; give a prompt"));
              }
              if (choose_best) {
                return ReportUsageError("--choice needs a prompt to score the candidates after");
              }
              request->prompt_tokens = std::vector<int32_t>{bos};
            } else {
              request->prompt = std::move(text);
            }
            // One pool for the session and a draft model's session (they run in turn).
            auto pool = MakeThreadPool(so->n_threads);
            if (!pool.ok()) return ReportUsageError(pool.status().message());
            so->pool = *pool;
            request->record_spec_steps = f->json;
            // No --spec: auto when the package holds a block drafter (it pays or is left idle).
            if (request->spec.empty() && HasPackagedDrafter(**model)) request->spec = "auto";
            auto prepared = PrepareRequest(**model, *request, *so);
            if (!prepared.ok()) return ReportError(prepared.status());
            auto session = Session::Create(*model, *so);
            if (!session.ok()) return ReportError(session.status());
            Session& s = **session;
            if (Status a = ApplyAdapters(s, **model, flags->engine); !a.ok()) return ReportError(a);
            watcher.Cancel(&s);

            StatusOr<GenerateResult> result = GenerateResult();
            CandidateChoice choice;
            if (prepared->choose_best()) {
              auto chosen = ChooseCandidate(s, *prepared);
              watcher.Ignore();
              if (!chosen.ok()) return ReportError(chosen.status());
              choice = std::move(*chosen);
              result = choice.result;
              if (!f->json) PrintPiece(result->text);
            } else {
              const StreamCallback stream = f->json ? StreamCallback() : StreamCallback(PrintPiece);
              const std::span<const int32_t> prompt(prepared->prompt.ids);
              result = s.Generate(prompt, prepared->options, stream);
              watcher.Ignore();
            }
            if (!result.ok()) return ReportError(result.status());
            const bool cancelled = result->stop_reason == StopReason::kCancelled;
            const int exit_code = cancelled ? kInterruptedExitCode : 0;
            if (f->json) {
              nlohmann::json j = ResultJson(*result, **model);
              if (!s.adapters().empty()) j["adapters"] = AdaptersJson(s.adapters());
              if (prepared->choose_best() && choice.chosen >= 0) {
                j["choice"] = {{"index", choice.chosen}};
                nlohmann::json ranked = nlohmann::json::array();
                for (const CandidateScore& c : choice.scores) {
                  ranked.push_back({{"index", c.index},
                                    {"text", prepared->choices[static_cast<size_t>(c.index)]},
                                    {"tokens", c.tokens},
                                    {"logprob", c.logprob},
                                    {"probability", c.probability}});
                }
                j["candidates"] = std::move(ranked);
              }
              PrintJson(j);
              return exit_code;
            }
            std::fputc('\n', stdout);
            std::fflush(stdout);
            if (prepared->choose_best() && choice.chosen >= 0) {
              std::fprintf(stderr, "\npocket: chose candidate %d of %zu (p = %.4f among them)",
                           choice.chosen, prepared->choices.size(), choice.probability);
            }
            PrintStats(*result);
            return exit_code;
          }};
}

}  // namespace pocket::cli
