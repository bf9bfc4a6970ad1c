// pocket bench: prefill (pp) and decode (tg) speed, load time, memory and CPU time, next to this
// machine's ceilings measured in the same run. Markdown by default; --json prints one object per
// line, one per (model, threads), and with --spec one per (model, threads, mode).
#include "bench/bench.h"
#include "common.h"
#include "progress.h"

namespace pocket::cli {

Command AddBenchCommand(CLI::App& root) {
  auto* app =
      root.add_subcommand("bench", "benchmark prefill and decode against measured ceilings");
  struct Flags {
    std::vector<std::string> models, lora;
    int32_t n_prompt = 512, n_gen = 128, repetitions = 5, n_batch = 512;
    std::string threads = "1,2";
    std::string kv_type = "f16";
    std::string kernels;
    bool no_amx = false, no_repack = false, no_huge_pages = false, json = false,
         no_ceilings = false;
    std::string schema_file, grammar_file, schema_text, grammar_text, regex, span_file;
    std::vector<std::string> spec;
    int32_t draft_max = 8;
    bool verify_cost = false;
    std::string sessions;
    int32_t n_prefix = 0;
    int32_t memory = 0;
    std::string kv_budget, swap_dir;
  };
  auto f = std::make_shared<Flags>();
  app->add_option("-m,--model", f->models, "model(s) to benchmark (repeatable)")->required();
  app->add_option("-p,--n-prompt", f->n_prompt, "prompt tokens (prefill); 0: measure decode alone")
      ->capture_default_str();
  app->add_option("-n,--n-gen", f->n_gen, "generated tokens (decode)")->capture_default_str();
  app->add_option("-t,--threads", f->threads,
                  "thread counts, comma-separated (0: one per hardware thread)")
      ->capture_default_str();
  app->add_option("-r,--repetitions", f->repetitions, "timed runs after one warm-up")
      ->capture_default_str();
  app->add_option("-b,--batch", f->n_batch, "prefill chunk in tokens")->capture_default_str();
  app->add_option("--kv-type", f->kv_type, "KV cache type: f16, f32 or q8")->capture_default_str();
  app->add_option(
      "--kernels", f->kernels,
      "force a kernel table (reference, avx2, avx512, amx, neon, dotprod, i8mm; default: "
      "$POCKET_KERNELS, else the best: see `pocket kernels`)");
  app->add_flag("--no-amx", f->no_amx, "do not use AMX tiles (AVX-512 VNNI only)");
  app->add_flag("--no-repack", f->no_repack, "keep GGUF block types dense (float kernels)");
  app->add_flag("--no-huge-pages", f->no_huge_pages,
                "do not ask for huge pages under the weights (4 KB pages: more TLB misses)");
  app->add_flag("--no-ceilings", f->no_ceilings,
                "skip the bandwidth and int8 peak measurements (their columns show -, null in "
                "--json)");
  app->add_flag("--json", f->json, "one JSON object per line per (model, threads)");
  app->add_option("--json-schema", f->schema_text,
                  "also decode under this JSON Schema text (constrained tg, mask time per token)");
  app->add_option("--json-schema-file", f->schema_file,
                  "as --json-schema, with the schema read from this file");
  app->add_option("--grammar", f->grammar_text, "also decode under this GBNF grammar text");
  app->add_option("--grammar-file", f->grammar_file,
                  "as --grammar, with the grammar read from this file");
  app->add_option("--regex", f->regex, "also decode under this regular expression");
  app->add_option("--span-source", f->span_file, "source text for span fields of the constraint");
  app->add_option(
         "--spec", f->spec,
         "speculative decoding modes, each measured against plain greedy decoding in the same run "
         "(repeatable or comma-separated): lookup (prompt lookup, n-grams of 1-3 tokens), "
         "oracle:P (benchmark-only: the model's own greedy continuation, each drafted token kept "
         "with probability P in [0, 1], otherwise replaced), draft:FILE (a draft model, as "
         "`pocket run --spec draft:FILE`), auto:lookup, auto:oracle:P or auto:draft:FILE (the "
         "same with --spec auto's policy: speculate only where it pays); also measures the "
         "verification cost curve")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app->add_option("--draft-max", f->draft_max,
                  "--spec: tokens drafted per verification pass at most")
      ->capture_default_str();
  app->add_flag("--verify-cost", f->verify_cost,
                "measure the verification cost curve c(k) = forward of k tokens after the prompt / "
                "one decode step, k = 1..16 (also with --spec)");
  app->add_option("--lora", f->lora,
                  "also run each repetition with this LoRA adapter (PEFT directory, .gguf or "
                  "adapter package[:SCALE], repeatable: all at once) back to back with the bare "
                  "run, in alternating order, and compare (ratios: median of the pairs)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app->add_option("--sessions", f->sessions,
                  "instead: N sessions generating together on the batched engine, for each N of "
                  "this comma-separated list (aggregate and per-session decode, time to first "
                  "token, KV bytes per session; stop tokens kept so each decodes -n tokens)");
  app->add_option("--prefix-tokens", f->n_prefix,
                  "--sessions: the shared prefix of the prefix-cache measurement (time to first "
                  "token without and with the cache; 0: --n-prompt tokens; at least 32)")
      ->capture_default_str();
  app->add_option("--memory", f->memory,
                  "instead: the KV memory of N sessions on one engine whose prompts (-p) share "
                  "their first --prefix-tokens tokens (evaluated once, in the prefix cache), each "
                  "generating -n tokens: KV bytes held against the distinct tokens', swaps, peak "
                  "RSS");
  app->add_option("--kv-budget", f->kv_budget,
                  "--memory: cap the sessions' KV memory at this many bytes (suffix K, M or G: "
                  "KiB, MiB, GiB); beyond it sessions are saved to disk and restored");
  app->add_option("--swap-dir", f->swap_dir,
                  "--memory: where sessions are saved under the budget (default: the system's "
                  "temporary directory)");
  SetExamples(app, {"pocket bench -m model.pocket",
                    "pocket bench -m model.pocket -t 2 -p 128 -n 128 -r 3 --sessions 1,2,4,8",
                    "pocket bench -m model.pocket -t 2 -p 1536 -n 512 --prefix-tokens 1000 "
                    "--memory 8 --kv-budget 64M --json"});
  return {
      app, [=]() -> int {
        // Usage errors first, before any file is read.
        if (f->n_prompt < 0) {
          return ReportUsageError(
              StrCat("--n-prompt must be 0 (decode alone) or more, got ", f->n_prompt));
        }
        if (f->n_gen < 1) {
          return ReportUsageError(StrCat("--n-gen must be at least 1, got ", f->n_gen));
        }
        if (f->repetitions < 1) {
          return ReportUsageError(StrCat("--repetitions must be at least 1, got ", f->repetitions));
        }
        if (f->n_batch < 1) {
          return ReportUsageError(StrCat("--batch must be at least 1, got ", f->n_batch));
        }
        if (f->draft_max < 1 || f->draft_max > 256) {
          return ReportUsageError(StrCat("--draft-max must be 1 to 256, got ", f->draft_max));
        }
        uint64_t kv_budget = 0;
        if (!f->kv_budget.empty()) {
          StatusOr<uint64_t> bytes = ParseByteCount(f->kv_budget);
          if (!bytes.ok())
            return ReportUsageError(StrCat("--kv-budget: ", bytes.status().message()));
          kv_budget = *bytes;
        }
        if ((kv_budget > 0 || !f->swap_dir.empty()) && f->memory == 0) {
          return ReportUsageError("--kv-budget and --swap-dir go with --memory");
        }
        if (f->memory != 0) {
          if (f->memory < 1 || f->memory > 256) {
            return ReportUsageError(
                StrCat("--memory: the session count must be 1 to 256, got ", f->memory));
          }
          if (!f->sessions.empty() || !f->spec.empty() || f->verify_cost || !f->lora.empty() ||
              !f->schema_text.empty() || !f->schema_file.empty() || !f->grammar_text.empty() ||
              !f->grammar_file.empty() || !f->regex.empty()) {
            return ReportUsageError(
                "--memory does not combine with --sessions, --spec, --verify-cost, --lora or a "
                "constraint");
          }
          if (f->n_prefix < 32 || f->n_prefix >= f->n_prompt) {
            return ReportUsageError(
                StrCat("--memory needs --prefix-tokens of 32 or more, less than --n-prompt (",
                       f->n_prompt, "), got ", f->n_prefix));
          }
          if (f->models.size() != 1 || f->threads.find(',') != std::string::npos) {
            return ReportUsageError("--memory measures one model (-m) at one thread count (-t)");
          }
        }
        std::vector<int32_t> sessions;
        if (!f->sessions.empty()) {
          for (const std::string& part : SplitString(f->sessions, ',')) {
            char* end = nullptr;
            const long n = std::strtol(part.c_str(), &end, 10);
            if (part.empty() || *end != '\0' || n < 1 || n > 256) {
              return ReportUsageError(
                  StrCat("--sessions: ", QuoteBytes(part), " is not a session count (1 to 256)"));
            }
            sessions.push_back(static_cast<int32_t>(n));
          }
          if (!f->spec.empty() || f->verify_cost || !f->lora.empty() || !f->schema_text.empty() ||
              !f->schema_file.empty() || !f->grammar_text.empty() || !f->grammar_file.empty() ||
              !f->regex.empty()) {
            return ReportUsageError(
                "--sessions measures plain batched decoding: it does not combine with --spec, "
                "--verify-cost, --lora or a constraint");
          }
          if (f->n_prompt < 1) return ReportUsageError("--sessions needs a prompt (-p 1 or more)");
          if (f->n_gen < 2) return ReportUsageError("--sessions needs -n 2 or more");
          if (f->n_prefix < 0 || (f->n_prefix > 0 && f->n_prefix < 32)) {
            return ReportUsageError(
                StrCat("--prefix-tokens must be 0 (the prompt's length) or at least 32, got ",
                       f->n_prefix));
          }
        }
        std::vector<std::string> spec_modes;
        for (const std::string& value : f->spec) {
          for (const std::string& mode : SplitString(value, ',')) {
            auto parsed = ParseBenchSpec(mode);
            if (!parsed.ok()) return ReportUsageError(parsed.status().message());
            spec_modes.push_back(mode);
          }
        }
        const std::pair<const char*, const std::string*> constraints[] = {
            {"--regex", &f->regex},
            {"--json-schema", &f->schema_text},
            {"--json-schema-file", &f->schema_file},
            {"--grammar", &f->grammar_text},
            {"--grammar-file", &f->grammar_file}};
        for (const auto& [option, value] : constraints) {
          if (app->count(option) > 0 && value->find_first_not_of(" \t\r\n") == std::string::npos) {
            return ReportUsageError(StrCat(option,
                                           " is empty: an empty constraint would "
                                           "constrain nothing (leave the option out)"));
          }
        }
        if (!f->span_file.empty() && f->schema_file.empty() && f->grammar_file.empty() &&
            f->schema_text.empty() && f->grammar_text.empty() && f->regex.empty()) {
          return ReportUsageError(
              "--span-source needs a constraint (--json-schema, --grammar or --regex)");
        }
        BenchConfig config;
        config.models = f->models;
        config.n_prompt = f->n_prompt;
        config.n_gen = f->n_gen;
        config.repetitions = f->repetitions;
        config.n_batch = f->n_batch;
        config.repack = !f->no_repack;
        config.huge_pages = !f->no_huge_pages;
        config.measure_ceilings = !f->no_ceilings;
        config.spec = spec_modes;
        config.draft_max = f->draft_max;
        config.verify_cost = f->verify_cost;
        config.lora = f->lora;
        config.n_prefix = f->n_prefix;
        config.threads.clear();
        for (const std::string& part : SplitString(f->threads, ',')) {
          char* end = nullptr;
          const long t = std::strtol(part.c_str(), &end, 10);
          if (part.empty() || *end != '\0' || t < 0 || t > 256) {
            return ReportUsageError(StrCat("--threads: ", QuoteBytes(part),
                                           " is not a thread count (0 for one per hardware ",
                                           "thread, or 1 to 256)"));
          }
          config.threads.push_back(static_cast<int32_t>(t));
        }
        if (!ParseKvType(f->kv_type, &config.kv_type)) {
          return ReportUsageError(
              StrCat("--kv-type ", QuoteBytes(f->kv_type), " (expected f16, f32 or q8)"));
        }
        config.constraint.json_schema = f->schema_text;
        config.constraint.grammar = f->grammar_text;
        if (!f->schema_file.empty()) {
          auto contents = ReadFileToString(f->schema_file);
          if (!contents.ok()) return ReportError(contents.status());
          if (contents->find_first_not_of(" \t\r\n") == std::string::npos) {
            return ReportUsageError(
                StrCat(f->schema_file, ": the file is empty (--json-schema-file)"));
          }
          config.constraint.json_schema = std::move(*contents);
        }
        if (!f->grammar_file.empty()) {
          auto contents = ReadFileToString(f->grammar_file);
          if (!contents.ok()) return ReportError(contents.status());
          if (contents->find_first_not_of(" \t\r\n") == std::string::npos) {
            return ReportUsageError(
                StrCat(f->grammar_file, ": the file is empty (--grammar-file)"));
          }
          config.constraint.grammar = std::move(*contents);
        }
        config.constraint.regex = f->regex;
        if (!f->span_file.empty()) {
          auto contents = ReadFileToString(f->span_file);
          if (!contents.ok()) return ReportError(contents.status());
          config.constraint.span_source = std::move(*contents);
          config.constraint.has_span_source = true;
        }
        KernelOptions ko;
        ko.force = f->kernels;
        ko.allow_amx = !f->no_amx;
        auto kernels = SelectKernels(ko);
        if (!kernels.ok()) return ReportError(kernels.status());
        config.kernels = *kernels;
        auto progress =
            std::make_shared<ProgressPrinter>(ProgressPrinter::Stderr("pocket bench", "steps"));
        config.progress = [progress](int64_t done, int64_t total, const std::string& step) {
          progress->Update(done, total, step);
        };
        if (f->memory > 0) {
          auto row = RunMemoryBench(config, f->memory, kv_budget, f->swap_dir);
          progress->Finish();
          if (!row.ok()) return ReportError(row.status());
          if (f->json) {
            std::printf("%s\n", MemoryBenchJson(*row).c_str());
          } else {
            std::printf("\n%s", MemoryBenchText(*row).c_str());
          }
          return row->completed == row->sessions ? 0 : 1;
        }
        if (!sessions.empty()) {
          auto rows = RunSessionsBench(config, sessions);
          progress->Finish();
          if (!rows.ok()) return ReportError(rows.status());
          if (f->json) {
            for (const SessionsBenchRow& r : *rows)
              std::printf("%s\n", SessionsBenchJson(r).c_str());
          } else {
            std::printf(
                "\nSessions batched on one engine (each step one forward pass over every "
                "session's rows)\n\n%s",
                SessionsMarkdownHeader().c_str());
            for (const SessionsBenchRow& r : *rows)
              std::printf("%s", SessionsMarkdownRow(r).c_str());
          }
          return 0;
        }
        auto results = RunBench(config);
        progress->Finish();
        if (!results.ok()) return ReportError(results.status());
        if (f->json) {
          for (const BenchResult& r : *results) {
            for (const std::string& line : BenchJsonLines(r)) std::printf("%s\n", line.c_str());
          }
        } else {
          std::printf("\n%s", BenchMarkdownHeader().c_str());
          for (const BenchResult& r : *results) std::printf("%s", BenchMarkdownRow(r).c_str());
          if (!results->empty() && results->front().constrained) {
            std::printf("\n%s", ConstrainedMarkdownHeader().c_str());
            for (const BenchResult& r : *results)
              std::printf("%s", ConstrainedMarkdownRow(r).c_str());
          }
          if (!results->empty() && !results->front().adapters.empty()) {
            std::printf(
                "\nLoRA adapters (each repetition a pair, bare and with the adapters back to back "
                "in "
                "alternating order; ratios: the median of the pairs' own)\n\n%s",
                LoraMarkdownHeader().c_str());
            for (const BenchResult& r : *results) std::printf("%s", LoraMarkdownRow(r).c_str());
          }
          if (!results->empty() && !results->front().verify_cost.empty()) {
            std::printf(
                "\nVerification cost c(k): a forward of k tokens (logits for every row) "
                "after the prompt / one decode step there\n\n%s",
                VerifyCostMarkdownHeader().c_str());
            for (const BenchResult& r : *results)
              std::printf("%s", VerifyCostMarkdownRow(r).c_str());
          }
          if (!results->empty() && !results->front().spec.empty()) {
            std::printf("\nSpeculative decoding (greedy; the same tokens as plain decoding)\n\n%s",
                        SpecMarkdownHeader().c_str());
            for (const BenchResult& r : *results) {
              for (const SpecBenchResult& s : r.spec)
                std::printf("%s", SpecMarkdownRow(r, s).c_str());
            }
          }
        }
        return 0;
      }};
}

}  // namespace pocket::cli
