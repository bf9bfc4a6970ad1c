// pocket run: one prompt in, generated text out (stdout only; logs and stats on stderr).
// pocket chat: an interactive multi-turn conversation that keeps the KV cache between turns.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/memory.h"
#include "common.h"
#include "runtime/session.h"
#include "tokenizer/chat_template.h"

namespace pocket::cli {
namespace {

struct GenerationFlags {
  std::string model;
  EngineFlags engine;
  int32_t n_predict = 256;
  float temp = 0.8f;
  int32_t top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int64_t seed = -1;
  std::vector<std::string> stop;
  std::string system;
  bool no_think = false;

  void Register(CLI::App* app) {
    app->add_option("-m,--model", model, "GGUF file, Hugging Face directory or llama2.c .bin")
        ->required();
    engine.Register(app);
    app->add_option("-n,--n-predict", n_predict, "tokens to generate at most")
        ->capture_default_str();
    app->add_option("--temp", temp, "temperature; 0 is greedy")->capture_default_str();
    app->add_option("--top-k", top_k, "top-k; 0 is off")->capture_default_str();
    app->add_option("--top-p", top_p, "top-p; 1 is off")->capture_default_str();
    app->add_option("--min-p", min_p, "min-p; 0 is off")->capture_default_str();
    app->add_option("--repeat-penalty", repeat_penalty, "repetition penalty; 1 is off")
        ->capture_default_str();
    app->add_option("--presence-penalty", presence_penalty)->capture_default_str();
    app->add_option("--frequency-penalty", frequency_penalty)->capture_default_str();
    app->add_option("-s,--seed", seed, "random seed; -1 picks one")->capture_default_str();
    app->add_option("--stop", stop, "stop when this string appears (repeatable)");
    app->add_option("--system", system, "system message (with --chat / in chat)");
    app->add_flag("--no-think", no_think, "Qwen3: disable thinking (enable_thinking=false)");
  }

  GenerateOptions Options() const {
    GenerateOptions o;
    o.max_tokens = n_predict;
    o.sampling.temperature = temp;
    o.sampling.top_k = top_k;
    o.sampling.top_p = top_p;
    o.sampling.min_p = min_p;
    o.sampling.repetition_penalty = repeat_penalty;
    o.sampling.presence_penalty = presence_penalty;
    o.sampling.frequency_penalty = frequency_penalty;
    o.sampling.seed = seed < 0 ? static_cast<uint64_t>(NowSeed()) : static_cast<uint64_t>(seed);
    o.stop_strings = stop;
    return o;
  }

  static int64_t NowSeed() { return std::chrono::steady_clock::now().time_since_epoch().count(); }
};

void PrintStats(const GenerateResult& r) {
  const double prefill_s = static_cast<double>(r.prefill_us) * 1e-6;
  const double decode_s = static_cast<double>(r.decode_us) * 1e-6;
  std::fprintf(stderr,
               "\npocket: prompt %d tokens (%d reused) in %.2f s (%.1f tokens/s); generated %zu "
               "tokens in %.2f s (%.1f tokens/s); stop: %s\n",
               r.n_prompt_tokens, r.n_reused_tokens, prefill_s,
               prefill_s > 0 ? r.n_prompt_tokens / prefill_s : 0.0, r.tokens.size(), decode_s,
               decode_s > 0 ? static_cast<double>(r.tokens.size()) / decode_s : 0.0,
               std::string(StopReasonName(r.stop_reason)).c_str());
  if (r.n_masks > 0) {
    std::fprintf(stderr,
                 "pocket: constraint: %d masks, %.1f us per token (%.1f ms in all), %d tokens "
                 "forced (no sampling)\n",
                 r.n_masks, static_cast<double>(r.constraint_us) / r.n_masks,
                 static_cast<double>(r.constraint_us) / 1000.0, r.n_forced_tokens);
  }
}

bool PrintPiece(std::string_view piece) {
  std::fwrite(piece.data(), 1, piece.size(), stdout);
  std::fflush(stdout);
  return true;
}

StatusOr<ChatTemplate> ModelTemplate(const Model& model) {
  const Tokenizer* tok = model.tokenizer();
  if (tok == nullptr) return FailedPreconditionError("the model has no tokenizer");
  if (tok->spec().chat_template.empty()) {
    return FailedPreconditionError(
        "the model has no chat template; use `pocket run` without --chat for plain completion");
  }
  return ChatTemplate::Detect(tok->spec().chat_template);
}

}  // namespace

Command AddRunCommand(CLI::App& root) {
  auto* app = root.add_subcommand("run", "generate text from a prompt");
  auto flags = std::make_shared<GenerationFlags>();
  flags->Register(app);
  auto prompt = std::make_shared<std::string>();
  auto prompt_file = std::make_shared<std::string>();
  auto chat = std::make_shared<bool>(false);
  auto json = std::make_shared<bool>(false);
  auto choice = std::make_shared<std::string>();
  auto regex = std::make_shared<std::string>();
  auto schema_file = std::make_shared<std::string>();
  auto grammar_file = std::make_shared<std::string>();
  auto span_file = std::make_shared<std::string>();
  auto span_fields = std::make_shared<std::vector<std::string>>();
  auto span_rule = std::make_shared<std::string>("span");
  app->add_option("-p,--prompt", *prompt, "the prompt");
  app->add_option("--choice", *choice,
                  "constrain the output to exactly one of these comma-separated strings");
  app->add_option("--regex", *regex, "constrain the output to match this regular expression");
  app->add_option("--json-schema", *schema_file,
                  "constrain the output to JSON valid against this JSON Schema file "
                  "(draft 2020-12 subset; see docs/architecture.md)");
  app->add_option("--grammar", *grammar_file,
                  "constrain the output to this GBNF grammar file (llama.cpp syntax)");
  app->add_option("--span-source", *span_file,
                  "span fields (\"x-pocket-span\": true, --span-field, the GBNF rule --span-rule) "
                  "must be substrings of this file's text");
  app->add_option("--span-field", *span_fields,
                  "with --json-schema: a string property name whose value is a span (repeatable)");
  app->add_option("--span-rule", *span_rule,
                  "with --grammar: the rule name that matches a span of --span-source")
      ->capture_default_str();
  app->add_flag("--json", *json,
                "print one JSON object at the end (text, token ids, timings) instead of streaming");
  app->add_option("-f,--file", *prompt_file, "read the prompt from a file");
  app->add_flag("--chat", *chat, "wrap the prompt as a user turn with the model's chat template");
  return {app, [=]() -> int {
            std::string text = *prompt;
            if (!prompt_file->empty()) {
              auto contents = ReadFileToString(*prompt_file);
              if (!contents.ok()) return ReportError(contents.status());
              text = *contents;
            }
            if (text.empty())
              return ReportError(InvalidArgumentError("give a prompt with -p or -f"));
            auto model = LoadModel(flags->model, flags->engine);
            if (!model.ok()) return ReportError(model.status());
            if ((*model)->tokenizer() == nullptr) {
              return ReportError(FailedPreconditionError(
                  flags->model, " has no tokenizer; pass one with --tokenizer"));
            }
            if (*chat) {
              auto tmpl = ModelTemplate(**model);
              if (!tmpl.ok()) return ReportError(tmpl.status());
              std::vector<ChatMessage> messages;
              if (!flags->system.empty()) messages.push_back({"system", flags->system});
              messages.push_back({"user", text});
              ChatOptions co;
              co.enable_thinking = !flags->no_think;
              auto formatted = tmpl->Apply(messages, co);
              if (!formatted.ok()) return ReportError(formatted.status());
              text = *formatted;
            }
            auto so = flags->engine.Session();
            if (!so.ok()) return ReportError(so.status());
            auto session = Session::Create(*model, *so);
            if (!session.ok()) return ReportError(session.status());
            GenerateOptions options = flags->Options();
            ConstraintSpec spec;
            if (!choice->empty()) spec.choices = SplitString(*choice, ',');
            spec.regex = *regex;
            if (!schema_file->empty()) {
              auto contents = ReadFileToString(*schema_file);
              if (!contents.ok()) return ReportError(contents.status());
              if (contents->empty())
                return ReportError(InvalidArgumentError(*schema_file, ": empty schema file"));
              spec.json_schema = std::move(*contents);
            }
            if (!grammar_file->empty()) {
              auto contents = ReadFileToString(*grammar_file);
              if (!contents.ok()) return ReportError(contents.status());
              if (contents->empty())
                return ReportError(InvalidArgumentError(*grammar_file, ": empty grammar file"));
              spec.grammar = std::move(*contents);
            }
            if (!span_file->empty()) {
              auto contents = ReadFileToString(*span_file);
              if (!contents.ok()) return ReportError(contents.status());
              spec.span_source = std::move(*contents);
              spec.has_span_source = true;
            }
            spec.span_fields = *span_fields;
            spec.span_rule = *span_rule;
            auto made = MakeConstraint(*(*model)->tokenizer(), spec);
            if (!made.ok()) {
              const std::string what = !schema_file->empty()    ? *schema_file + ": "
                                       : !grammar_file->empty() ? *grammar_file + ": "
                                                                : std::string();
              return ReportError(Status(made.status().code(), what + made.status().message()));
            }
            std::unique_ptr<Constraint> constraint = std::move(*made);
            options.constraint = constraint.get();
            auto result =
                (*session)->Generate(std::string_view(text), options,
                                     *json ? StreamCallback() : StreamCallback(PrintPiece));
            if (!result.ok()) return ReportError(result.status());
            if (*json) {
              const GenerateResult& r = *result;
              const double prefill_s = static_cast<double>(r.prefill_us) * 1e-6;
              const double decode_s = static_cast<double>(r.decode_us) * 1e-6;
              nlohmann::json j = {
                  {"text", r.text},
                  {"tokens", r.tokens},
                  {"n_prompt_tokens", r.n_prompt_tokens + r.n_reused_tokens},
                  {"n_prompt_tokens_evaluated", r.n_prompt_tokens},
                  {"stop_reason", StopReasonName(r.stop_reason)},
                  {"prefill_s", prefill_s},
                  {"decode_s", decode_s},
                  {"prefill_tokens_per_s", prefill_s > 0 ? r.n_prompt_tokens / prefill_s : 0.0},
                  {"decode_tokens_per_s",
                   decode_s > 0 ? static_cast<double>(r.tokens.size()) / decode_s : 0.0},
                  {"constraint_ms", static_cast<double>(r.constraint_us) / 1000.0},
                  {"constraint_us_per_token",
                   r.n_masks > 0 ? static_cast<double>(r.constraint_us) / r.n_masks : 0.0},
                  {"forced_tokens", r.n_forced_tokens},
                  {"load_ms", static_cast<double>((*model)->load_us()) / 1000.0},
                  {"file_bytes", (*model)->source().file_bytes()},
                  {"peak_rss_bytes", ReadProcessMemory().peak_rss_bytes}};
              std::printf("%s\n",
                          j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
              return 0;
            }
            std::fputc('\n', stdout);
            PrintStats(*result);
            return 0;
          }};
}

Command AddChatCommand(CLI::App& root) {
  auto* app = root.add_subcommand(
      "chat", "interactive multi-turn chat (/reset clears the conversation, /exit or EOF ends)");
  auto flags = std::make_shared<GenerationFlags>();
  flags->Register(app);
  return {app, [=]() -> int {
            auto model = LoadModel(flags->model, flags->engine);
            if (!model.ok()) return ReportError(model.status());
            auto tmpl = ModelTemplate(**model);
            if (!tmpl.ok()) return ReportError(tmpl.status());
            auto so = flags->engine.Session();
            if (!so.ok()) return ReportError(so.status());
            auto session = Session::Create(*model, *so);
            if (!session.ok()) return ReportError(session.status());
            std::vector<ChatMessage> messages;
            if (!flags->system.empty()) messages.push_back({"system", flags->system});
            const size_t n_fixed = messages.size();
            ChatOptions co;
            co.enable_thinking = !flags->no_think;
            GenerateOptions options = flags->Options();
            std::string line;
            while (true) {
              std::fprintf(stderr, "> ");
              if (!std::getline(std::cin, line) || line == "/exit") break;
              if (line == "/reset") {
                messages.resize(n_fixed);
                (*session)->Reset();
                continue;
              }
              if (line.empty()) continue;
              messages.push_back({"user", line});
              auto formatted = tmpl->Apply(messages, co);
              if (!formatted.ok()) return ReportError(formatted.status());
              auto result = (*session)->Generate(std::string_view(*formatted), options, PrintPiece);
              if (!result.ok()) return ReportError(result.status());
              std::fputc('\n', stdout);
              if (flags->engine.verbose) PrintStats(*result);
              messages.push_back({"assistant", result->text});
            }
            return 0;
          }};
}

}  // namespace pocket::cli
