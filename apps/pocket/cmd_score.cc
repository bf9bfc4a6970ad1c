// pocket score: log-probabilities of candidate continuations of a prompt, all candidates in one
// forward pass (tree attention), ranked; --compare also times one pass per candidate. --head (the
// default for a model with a classification head and no candidates): the head's labels scored
// from one forward pass of the prompt alone. Candidates are tokenized by the one candidate rule
// (runtime/candidates.h): a candidate's tokens are those of Encode(prompt + candidate) after the
// prompt's own tokens, as in `pocket run --choice` and the C API's pocket_score.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "base/timer.h"
#include "common.h"
#include "runtime/candidates.h"
#include "tokenizer/chat_template.h"

namespace pocket::cli {
namespace {

std::vector<std::string> SplitCandidates(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = list.find(',', start);
    const size_t end = comma == std::string::npos ? list.size() : comma;
    out.push_back(list.substr(start, end - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// --ids as token ids; a part that is not a non-negative integer is a usage error (its message in
// *usage), one outside the model's vocabulary a runtime error (OutOfRange).
std::vector<int32_t> ParseIds(const std::string& list, std::string* usage) {
  std::vector<int32_t> ids;
  for (const std::string& part : SplitString(list, ',')) {
    char* end = nullptr;
    const long v = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v < 0 || v > INT32_MAX) {
      *usage = StrCat("--ids: ", QuoteBytes(part), " is not a token id");
      return {};
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

// The head form's output: labels ranked, as JSON or a table.
int PrintLabels(const std::vector<LabelScore>& labels, size_t n_prompt, bool json) {
  if (json) {
    nlohmann::json j;
    j["form"] = "head";
    j["prompt_tokens"] = n_prompt;
    j["labels"] = nlohmann::json::array();
    for (const LabelScore& l : labels) {
      j["labels"].push_back({{"label", l.label},
                             {"index", l.index},
                             {"logit", l.logit},
                             {"logprob", l.logprob},
                             {"probability", l.probability}});
    }
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("| rank | label | logit | log-prob | probability |\n|---|---|---|---|---|\n");
  int rank = 0;
  for (const LabelScore& l : labels) {
    std::printf("| %d | %s | %.4f | %.4f | %.4f |\n", ++rank, l.label.c_str(), l.logit, l.logprob,
                l.probability);
  }
  return 0;
}

}  // namespace

Command AddScoreCommand(CLI::App& root) {
  auto* app = root.add_subcommand(
      "score", "rank candidate continuations of a prompt by log-probability (one forward pass)");
  struct Flags {
    std::string model, prompt, ids, candidates, candidates_file, system;
    EngineFlags engine;
    bool chat = false, json = false, compare = false, no_think = false, head = false;
    int32_t repetitions = 5;
  };
  auto f = std::make_shared<Flags>();
  app->add_option("-m,--model", f->model, "model file or directory")->required();
  f->engine.Register(app);
  f->engine.RegisterLora(app);
  app->add_option("-p,--prompt", f->prompt, "the prompt");
  app->add_option("--ids", f->ids, "the prompt as comma-separated token ids (instead of -p)");
  app->add_option("--candidates", f->candidates,
                  "comma-separated candidate continuations, spaces kept: a candidate's tokens are "
                  "those of the prompt text + candidate after the prompt's own tokens (\" time\" "
                  "as in running text; with --ids, each candidate encoded alone)");
  app->add_option("--candidates-file", f->candidates_file,
                  "candidates, one per line (empty lines skipped), tokenized as --candidates");
  app->add_flag("--head", f->head,
                "score the labels of the model's classification head from one forward pass of "
                "the prompt (the default when the model has a head and no candidates are given)");
  app->add_flag("--chat", f->chat,
                "wrap the prompt as a user turn (candidates are the assistant's reply)");
  app->add_option("--system", f->system, "system message (with --chat)");
  app->add_flag("--no-think", f->no_think, "with --chat: disable thinking (Qwen3)");
  app->add_flag("--json", f->json,
                "one JSON object: candidates ranked, with token ids and log-probabilities (head "
                "form: labels ranked, with logits, log-probabilities and probabilities)");
  app->add_flag("--compare", f->compare,
                "also score one candidate per forward pass and report both times (medians)");
  app->add_option("-r,--repetitions", f->repetitions, "timed runs for --compare")
      ->capture_default_str();
  SetExamples(app, {"pocket score -m model.gguf -p \"The capital of France is\" --candidates "
                    "\" Paris, Rome, Berlin\"",
                    "pocket score -m model.pocket --chat -p \"Is this review positive? Great "
                    "phone.\" --candidates \"yes,no\" --json",
                    "pocket score -m classifier.pocket -p \"Great phone.\" --head"});
  return {app, [=]() -> int {
            if (f->prompt.empty() == f->ids.empty()) {
              return ReportUsageError("give the prompt as -p TEXT or --ids 1,2,3 (one of them)");
            }
            if (!f->ids.empty() && f->chat) {
              return ReportUsageError("--chat needs a text prompt (-p), not --ids");
            }
            if (!f->system.empty() && !f->chat) return ReportUsageError("--system needs --chat");
            if (f->no_think && !f->chat) return ReportUsageError("--no-think needs --chat");
            if (f->compare && f->repetitions < 1) {
              return ReportUsageError("--repetitions must be at least 1");
            }
            std::string usage;
            const std::vector<int32_t> prompt_ids =
                f->ids.empty() ? std::vector<int32_t>() : ParseIds(f->ids, &usage);
            if (!usage.empty()) return ReportUsageError(usage);
            std::vector<std::string> texts;
            if (!f->candidates.empty()) {
              texts = SplitCandidates(f->candidates);
              for (size_t i = 0; i < texts.size(); ++i) {
                if (texts[i].empty()) {
                  return ReportUsageError(StrCat("--candidates: candidate ", i + 1, " of ",
                                                 texts.size(),
                                                 " is empty (two commas, or one at an end)"));
                }
              }
            }
            if (!f->candidates_file.empty()) {
              auto contents = ReadFileToString(f->candidates_file);
              if (!contents.ok()) return ReportError(contents.status());
              for (const std::string& line : SplitString(*contents, '\n')) {
                if (!line.empty()) texts.push_back(line);
              }
            }
            if (f->head && !texts.empty()) {
              return ReportUsageError(
                  "--head scores the model's own labels; drop --candidates / --candidates-file");
            }
            if (f->head && f->compare) {
              return ReportUsageError("--compare applies to --candidates, not --head");
            }
            auto model = LoadModel(f->model, f->engine);
            if (!model.ok()) return ReportError(model.status());
            // No candidates: the head form when the model has a head (or --head asks for it,
            // which Classify refuses with a clear error on a model without one).
            // A head rides in the model or in an adapter package (a task = adapter + head).
            bool has_head = (*model)->classifier().present();
            if (texts.empty() && !f->engine.lora.empty()) {
              auto set = LoadAdapters(**model, f->engine);
              if (!set.ok()) return ReportError(set.status());
              for (const AdapterUse& u : *set) has_head |= u.adapter->classifier().present();
            }
            const bool head_form = f->head || (texts.empty() && has_head);
            if (!head_form && texts.empty()) {
              return ReportUsageError(StrCat("give --candidates or --candidates-file (", f->model,
                                             " has no classification head for --head)"));
            }
            if (head_form && f->compare) {
              return ReportUsageError(StrCat("--compare applies to --candidates (", f->model,
                                             " has a classification head: without candidates, "
                                             "its labels are scored)"));
            }
            const Tokenizer* tok = (*model)->tokenizer();
            // Text needs the tokenizer: a -p prompt, or candidates.
            const bool needs_tokenizer = f->ids.empty() || !head_form;
            if (tok == nullptr && needs_tokenizer) {
              return ReportError(FailedPreconditionError(
                  f->model, " has no tokenizer; pass one with --tokenizer"));
            }
            std::string prompt_text = f->prompt;
            if (f->chat) {
              if (tok->spec().chat_template.empty()) {
                return ReportError(FailedPreconditionError(f->model, " has no chat template"));
              }
              auto tmpl = ChatTemplate::Detect(tok->spec().chat_template);
              if (!tmpl.ok()) return ReportError(tmpl.status());
              std::vector<ChatMessage> messages;
              if (!f->system.empty()) messages.push_back({"system", f->system});
              messages.push_back({"user", prompt_text});
              ChatOptions co;
              co.enable_thinking = !f->no_think;
              auto formatted = tmpl->Apply(messages, co);
              if (!formatted.ok()) return ReportError(formatted.status());
              prompt_text = *formatted;
            }
            const int32_t vocab = (*model)->config().vocab_size;
            for (int32_t id : prompt_ids) {
              if (id >= vocab) {
                return ReportError(
                    OutOfRangeError("--ids: id ", id, " is outside the vocabulary of ", vocab));
              }
            }
            // The prompt as run encodes it (BOS first when the tokenizer adds one); the same
            // options for the joint prompt + candidate encodings.
            EncodeOptions eo;
            if (tok != nullptr) eo.add_bos = tok->spec().add_bos;
            StatusOr<std::vector<int32_t>> prompt = prompt_ids;
            if (f->ids.empty() && head_form) prompt = tok->Encode(prompt_text, eo);
            if (!prompt.ok()) return ReportError(prompt.status());
            if (head_form) {
              auto so = f->engine.Session();
              if (!so.ok()) return ReportUsageError(so.status().message());
              auto session = Session::Create(*model, *so);
              if (!session.ok()) return ReportError(session.status());
              if (Status a = ApplyAdapters(**session, **model, f->engine); !a.ok())
                return ReportError(a);
              auto labels = (*session)->Classify(*prompt);
              if (!labels.ok()) return ReportError(labels.status());
              return PrintLabels(*labels, prompt->size(), f->json);
            }
            std::vector<std::vector<int32_t>> candidates;
            if (f->ids.empty()) {
              auto tokens = TokenizeCandidates(*tok, prompt_text, texts, eo);
              if (!tokens.ok()) return ReportError(tokens.status());
              prompt = std::move(tokens->prompt);
              candidates = std::move(tokens->candidates);
            } else {
              auto tokens = TokenizeCandidatesAlone(*tok, texts, eo);
              if (!tokens.ok()) return ReportError(tokens.status());
              candidates = std::move(*tokens);
            }
            auto so = f->engine.Session();
            if (!so.ok()) return ReportUsageError(so.status().message());
            auto session = Session::Create(*model, *so);
            if (!session.ok()) return ReportError(session.status());
            Session& s = **session;
            if (Status a = ApplyAdapters(s, **model, f->engine); !a.ok()) return ReportError(a);
            auto scores = s.Score(*prompt, candidates);
            if (!scores.ok()) return ReportError(scores.status());

            // --compare: medians of both forms, the prompt's KV rows reused in each (only the
            // candidates are timed).
            double one_ms = 0, sep_ms = 0;
            if (f->compare) {
              std::vector<double> one, sep;
              for (int32_t r = 0; r <= f->repetitions; ++r) {
                Stopwatch w;
                auto a = s.Score(*prompt, candidates);
                const double ta = w.elapsed_s() * 1e3;
                if (!a.ok()) return ReportError(a.status());
                w.Reset();
                auto b = s.ScoreSeparately(*prompt, candidates);
                const double tb = w.elapsed_s() * 1e3;
                if (!b.ok()) return ReportError(b.status());
                if (r == 0) continue;  // warm-up
                one.push_back(ta);
                sep.push_back(tb);
              }
              std::sort(one.begin(), one.end());
              std::sort(sep.begin(), sep.end());
              one_ms = one[one.size() / 2];
              sep_ms = sep[sep.size() / 2];
            }
            if (f->json) {
              nlohmann::json j;
              j["form"] = "candidates";
              j["prompt_tokens"] = prompt->size();
              for (const CandidateScore& c : *scores) {
                j["candidates"].push_back({{"text", texts[static_cast<size_t>(c.index)]},
                                           {"index", c.index},
                                           {"tokens", c.tokens},
                                           {"token_logprobs", c.token_logprobs},
                                           {"logprob", c.logprob},
                                           {"probability", c.probability}});
              }
              if (f->compare) {
                j["one_pass_ms"] = one_ms;
                j["separate_ms"] = sep_ms;
                j["speedup"] = sep_ms / one_ms;
              }
              std::printf("%s\n",
                          j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
              return 0;
            }
            std::printf(
                "| rank | candidate | tokens | log-prob | probability |\n|---|---|---|---|---|\n");
            int rank = 0;
            for (const CandidateScore& c : *scores) {
              std::printf("| %d | %s | %zu | %.4f | %.4f |\n", ++rank,
                          texts[static_cast<size_t>(c.index)].c_str(), c.tokens.size(), c.logprob,
                          c.probability);
            }
            if (f->compare) {
              std::printf(
                  "\none pass: %.2f ms, one pass per candidate: %.2f ms (%.1fx), medians of %d\n",
                  one_ms, sep_ms, sep_ms / one_ms, f->repetitions);
            }
            return 0;
          }};
}

}  // namespace pocket::cli
