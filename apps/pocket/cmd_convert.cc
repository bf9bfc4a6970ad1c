// pocket convert: a model (GGUF, Hugging Face directory, llama2.c, .pocket) to a .pocket package.
// pocket verify: checks every section checksum of a .pocket package.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <filesystem>
#include <map>
#include <vector>

#include "common.h"
#include "convert/convert.h"
#include "format/pocket_file.h"
#include "interrupt.h"
#include "progress.h"

namespace pocket::cli {
namespace {

// Ctrl-C or SIGTERM during a conversion stops it between tensors; the temporary output is
// removed. (The flag is the one piece of process state a signal handler may touch.)
std::atomic<bool> g_interrupted{false};
extern "C" void OnInterrupt(int) {
  g_interrupted.store(true);
}

// The fallback column of a tensor group: each distinct (stored encoding, reason) once, with how
// many tensors and which names (without the layer prefix): "5 x ffn_down.weight as f16 (172
// columns are not a multiple of 32, the smallest group)".
std::string FallbackSummary(const ConvertReport& report, const std::string& group) {
  struct Entry {
    int n = 0;
    std::vector<std::string> names;
  };
  std::map<std::pair<std::string, std::string>, Entry> entries;  // (stored, reason)
  for (const ConvertFallback& f : report.fallbacks) {
    if (f.group != group) continue;
    Entry& e = entries[{f.stored, f.reason}];
    ++e.n;
    std::string name = f.tensor;
    int layer = 0, consumed = 0;
    if (std::sscanf(name.c_str(), "blk.%d.%n", &layer, &consumed) == 1 && consumed > 0)
      name = name.substr(static_cast<size_t>(consumed));
    if (std::find(e.names.begin(), e.names.end(), name) == e.names.end()) e.names.push_back(name);
  }
  std::string out;
  for (const auto& [key, e] : entries) {
    if (!out.empty()) out += "; ";
    std::string names;
    for (const std::string& n : e.names) names += (names.empty() ? "" : ", ") + n;
    out += StrCat(e.n, " x ", names, " as ", key.first, " (", key.second, ")");
  }
  return out.empty() ? "-" : out;
}

}  // namespace

Command AddConvertCommand(CLI::App& root) {
  auto* app = root.add_subcommand("convert", "convert a model into a .pocket package");
  struct Flags {
    std::string input, output, tokenizer, labels;
    ConvertOptions options;
  };
  auto f = std::make_shared<Flags>();
  app->add_option("input", f->input, "GGUF file, Hugging Face directory, llama2.c .bin or .pocket")
      ->required();
  app->add_option("-o,--output", f->output, "the .pocket file to write")->required();
  app->add_option("--weights", f->options.weights,
                  "encoding of the matrices: int4, int8, f16, bf16 or f32")
      ->capture_default_str();
  app->add_option("--group", f->options.group,
                  "columns per scale group of int4 / int8: 32, 64 or 128 (a matrix whose width it "
                  "does not divide: a smaller group that does, else f16)")
      ->capture_default_str();
  app->add_option("--embedding", f->options.embedding,
                  "encoding of the embedding (default: --weights)");
  app->add_option("--output-weights", f->options.output,
                  "encoding of the output matrix (default: --weights)");
  app->add_option("--tokenizer", f->options.tokenizer_path,
                  "tokenizer to store instead of the model's (tokenizer.json or llama2.c .bin)");
  app->add_option("--classifier-head", f->options.classifier_head_path,
                  "classification head to store: .npy or safetensors matrix [n_labels, hidden] "
                  "(pocket score --head)");
  app->add_option("--classifier-labels", f->labels,
                  "comma-separated names of the head's rows, in order (with --classifier-head)");
  app->add_option("--drafter", f->options.drafter_dir,
                  "a DFlash block drafter to store in the package (its Hugging Face directory: "
                  "config.json + safetensors), checked against the model: one file deploys both "
                  "(pocket run --spec dflash)");
  app->add_option("--drafter-weights,--drafter-type", f->options.drafter_weights,
                  "encoding of the drafter's matrices: int8, int4 or f32 (as stored)")
      ->capture_default_str();
  app->add_option("--merge-lora", f->options.merge_lora,
                  "LoRA adapter to bake into the weights, DIR|FILE[:SCALE] (PEFT directory or "
                  "llama.cpp GGUF adapter; repeatable): the fastest single-task package")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app->add_option("--lora", f->options.lora,
                  "write an adapter package instead of a model: this LoRA adapter (PEFT "
                  "directory or llama.cpp GGUF), checked against the input model and stamped with "
                  "its fingerprint (pocket run -m MODEL --lora task.pocket)");
  app->add_option("--lora-factors", f->options.lora_factors,
                  "encoding of the adapter package's factors: int8, f16, bf16 or f32")
      ->capture_default_str();
  app->add_option("-t,--threads", f->options.n_threads, "threads (0: one per hardware thread)")
      ->capture_default_str();
  SetExamples(app,
              {"pocket convert model.gguf -o model.pocket",
               "pocket convert ./Qwen3-4B -o qwen3-4b.pocket --group 128 --output-weights int8 "
               "--drafter ./Qwen3-4B-DFlash-b16",
               "pocket convert model.pocket --lora ./review-lora -o review.pocket   # adapter "
               "package"});
  return {app, [=]() -> int {
            // The output is a .pocket package: a name that says another format would mislead
            // whoever opens it later (a .gguf that is not one).
            std::string ext = std::filesystem::path(f->output).extension().string();
            for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            if (!ext.empty() && ext != ".pocket") {
              return ReportUsageError(StrCat("-o ", f->output, ": pocket convert writes a .pocket ",
                                             "package, not ", ext, " (name it .pocket)"));
            }
            if (!f->labels.empty()) f->options.classifier_labels = SplitString(f->labels, ',');
            if (Status s = CheckConvertOptions(f->options); !s.ok()) {
              return ReportUsageError(s.message());
            }
            auto progress = std::make_shared<ProgressPrinter>(
                ProgressPrinter::Stderr("pocket: converting", "tensors"));
            f->options.progress = [progress](int64_t done, int64_t total,
                                             const std::string& tensor) {
              progress->Update(done, total, tensor);
            };
            f->options.cancelled = [] { return g_interrupted.load(); };
            struct sigaction action = {}, previous = {}, previous_term = {};
            action.sa_handler = OnInterrupt;
            ::sigaction(SIGINT, &action, &previous);
            ::sigaction(SIGTERM, &action, &previous_term);
            auto report = f->options.lora.empty() ? ConvertModel(f->input, f->output, f->options)
                                                  : ConvertAdapter(f->input, f->output, f->options);
            ::sigaction(SIGINT, &previous, nullptr);
            ::sigaction(SIGTERM, &previous_term, nullptr);
            progress->Finish();
            if (report.status().code() == StatusCode::kCancelled) {
              ReportError(report.status());  // "conversion cancelled"; no output was left
              return kInterruptedExitCode;
            }
            if (!report.ok()) return ReportError(report.status());
            std::fprintf(stderr, "pocket: wrote %s: %s in %.1f s\n", f->output.c_str(),
                         HumanBytes(report->file_bytes).c_str(), report->seconds);
            std::printf(
                "| tensor group | encoding | weights | bytes | bits/weight | codes kept | fallback "
                "|\n|---|---|---|---|---|---|---|\n");
            for (const ConvertGroupReport& g : report->groups) {
              std::printf("| %s | %s | %.1f M | %s | %.3f | %.0f%% | %s |\n", g.group.c_str(),
                          g.encoding.c_str(), g.n_weights / 1e6, HumanBytes(g.bytes).c_str(),
                          g.bits_per_weight(),
                          g.n_weights ? 100.0 * static_cast<double>(g.kept_weights) /
                                            static_cast<double>(g.n_weights)
                                      : 0.0,
                          FallbackSummary(*report, g.group).c_str());
            }
            return 0;
          }};
}

Command AddVerifyCommand(CLI::App& root) {
  auto* app = root.add_subcommand("verify", "check every checksum of a .pocket package");
  auto path = std::make_shared<std::string>();
  app->add_option("file", *path, "the .pocket file")->required();
  SetExamples(app, {"pocket verify model.pocket",
                    "pocket verify model.pocket && pocket run -m model.pocket -p \"Hello\""});
  return {app, [=]() -> int {
            auto file = PocketFile::Open(*path);
            if (!file.ok()) return ReportError(file.status());
            Status s = (*file)->Verify();
            if (!s.ok()) return ReportError(s);
            std::printf("%s: OK (%zu sections, %zu tensors, %s, format %u.%u)\n", path->c_str(),
                        (*file)->sections().size(), (*file)->tensors().size(),
                        HumanBytes((*file)->file_bytes()).c_str(), (*file)->version_major(),
                        (*file)->version_minor());
            return 0;
          }};
}

}  // namespace pocket::cli
