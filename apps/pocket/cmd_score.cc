// pocket score: log-probabilities of candidate continuations of a prompt, all candidates in one
// forward pass (tree attention), ranked; --compare also times one pass per candidate.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "base/timer.h"
#include "common.h"
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

}  // namespace

Command AddScoreCommand(CLI::App& root) {
  auto* app = root.add_subcommand(
      "score", "rank candidate continuations of a prompt by log-probability (one forward pass)");
  struct Flags {
    std::string model, prompt, candidates, candidates_file, system;
    EngineFlags engine;
    bool chat = false, json = false, compare = false, no_think = false;
    int32_t repetitions = 5;
  };
  auto f = std::make_shared<Flags>();
  app->add_option("-m,--model", f->model, "model file or directory")->required();
  f->engine.Register(app);
  app->add_option("-p,--prompt", f->prompt, "the prompt")->required();
  app->add_option("--candidates", f->candidates, "comma-separated candidate continuations");
  app->add_option("--candidates-file", f->candidates_file, "candidates, one per line");
  app->add_flag("--chat", f->chat,
                "wrap the prompt as a user turn (candidates are the assistant's reply)");
  app->add_option("--system", f->system, "system message (with --chat)");
  app->add_flag("--no-think", f->no_think, "with --chat: disable thinking (Qwen3)");
  app->add_flag("--json", f->json,
                "one JSON object: candidates ranked, with token ids and log-probabilities");
  app->add_flag("--compare", f->compare,
                "also score one candidate per forward pass and report both times (medians)");
  app->add_option("-r,--repetitions", f->repetitions, "timed runs for --compare")
      ->capture_default_str();
  return {app, [=]() -> int {
            std::vector<std::string> texts;
            if (!f->candidates.empty()) texts = SplitCandidates(f->candidates);
            if (!f->candidates_file.empty()) {
              auto contents = ReadFileToString(f->candidates_file);
              if (!contents.ok()) return ReportError(contents.status());
              for (const std::string& line : SplitString(*contents, '\n')) {
                if (!line.empty()) texts.push_back(line);
              }
            }
            if (texts.empty()) {
              return ReportError(InvalidArgumentError("give --candidates or --candidates-file"));
            }
            auto model = LoadModel(f->model, f->engine);
            if (!model.ok()) return ReportError(model.status());
            const Tokenizer* tok = (*model)->tokenizer();
            if (tok == nullptr) {
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
            EncodeOptions eo;
            eo.add_bos = tok->spec().add_bos;
            auto prompt = tok->Encode(prompt_text, eo);
            if (!prompt.ok()) return ReportError(prompt.status());
            std::vector<std::vector<int32_t>> candidates;
            EncodeOptions plain;
            plain.parse_special = false;
            for (const std::string& t : texts) {
              auto ids = tok->Encode(t, plain);
              if (!ids.ok()) return ReportError(ids.status());
              if (ids->empty()) {
                return ReportError(InvalidArgumentError("candidate ", QuoteBytes(t), " is empty"));
              }
              candidates.push_back(std::move(*ids));
            }
            auto so = f->engine.Session();
            if (!so.ok()) return ReportError(so.status());
            auto session = Session::Create(*model, *so);
            if (!session.ok()) return ReportError(session.status());
            Session& s = **session;
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
