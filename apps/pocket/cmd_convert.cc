// pocket convert: a model (GGUF, Hugging Face directory, llama2.c, .pocket) to a .pocket package.
// pocket verify: checks every section checksum of a .pocket package.
#include <signal.h>
#include <unistd.h>

#include <atomic>

#include "common.h"
#include "convert/convert.h"
#include "format/pocket_file.h"

namespace pocket::cli {
namespace {

// Ctrl-C during a conversion stops it between tensors; the temporary output is removed. (The
// flag is the one piece of process state a signal handler may touch.)
std::atomic<bool> g_interrupted{false};
extern "C" void OnInterrupt(int) {
  g_interrupted.store(true);
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
  app->add_option("--weights", f->options.weights, "int4 | int8 | f16 | bf16 | f32")
      ->capture_default_str();
  app->add_option("--group", f->options.group, "columns per scale group: 32, 64 or 128")
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
  app->add_option("-t,--threads", f->options.n_threads, "threads (0: one per hardware thread)");
  return {app, [=]() -> int {
            if (!f->labels.empty()) f->options.classifier_labels = SplitString(f->labels, ',');
            const bool tty = ::isatty(2);
            f->options.progress = [tty](const std::string& line) {
              std::fprintf(stderr, tty ? "\r\033[Kpocket: %s" : "pocket: %s\n", line.c_str());
            };
            f->options.cancelled = [] { return g_interrupted.load(); };
            struct sigaction action = {}, previous = {};
            action.sa_handler = OnInterrupt;
            ::sigaction(SIGINT, &action, &previous);
            auto report = ConvertModel(f->input, f->output, f->options);
            ::sigaction(SIGINT, &previous, nullptr);
            if (tty) std::fprintf(stderr, "\n");
            if (!report.ok()) return ReportError(report.status());
            std::fprintf(stderr, "pocket: wrote %s: %s in %.1f s\n", f->output.c_str(),
                         HumanBytes(report->file_bytes).c_str(), report->seconds);
            std::printf(
                "| tensor group | encoding | weights | bytes | bits/weight | codes kept |\n"
                "|---|---|---|---|---|---|\n");
            for (const ConvertGroupReport& g : report->groups) {
              std::printf("| %s | %s | %.1f M | %s | %.3f | %.0f%% |\n", g.group.c_str(),
                          g.encoding.c_str(), g.n_weights / 1e6, HumanBytes(g.bytes).c_str(),
                          g.bits_per_weight(),
                          g.n_weights ? 100.0 * static_cast<double>(g.kept_weights) /
                                            static_cast<double>(g.n_weights)
                                      : 0.0);
            }
            return 0;
          }};
}

Command AddVerifyCommand(CLI::App& root) {
  auto* app = root.add_subcommand("verify", "check every checksum of a .pocket package");
  auto path = std::make_shared<std::string>();
  app->add_option("file", *path, "the .pocket file")->required();
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
