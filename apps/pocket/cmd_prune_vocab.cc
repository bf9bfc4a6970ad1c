// pocket prune-vocab: cut a byte-level BPE vocabulary to the tokens a corpus uses (merge-closed),
// write it as a Hugging Face tokenizer.json, optionally rewrite a GGUF model for it, and report
// tokens per character on held-out text for the full and the pruned vocabulary.
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "base/output_file.h"
#include "common.h"
#include "convert/prune_model.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab_prune.h"

namespace pocket::cli {
namespace {

struct TextPart {
  std::string category;  // Chinese, English, code
  std::string file;
  std::string text;
};

bool IsCodeFile(const std::string& path) {
  for (const char* ext : {".c", ".cc", ".cpp", ".h", ".hpp", ".py", ".js", ".ts", ".rs", ".go",
                          ".java", ".sh", ".json", ".cmake", ".txt.code"}) {
    if (EndsWith(path, ext)) return true;
  }
  return false;
}

// Code points in text (valid UTF-8 assumed; checked by the tokenizer).
int64_t CountChars(std::string_view text) {
  int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xc0) != 0x80;
  return n;
}

std::string Category(const std::string& path, std::string_view text) {
  if (IsCodeFile(path)) return "code";
  int64_t han = 0, letters = 0;
  for (size_t i = 0; i < text.size() && i < (1u << 20);) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      letters += std::isalpha(c) ? 1 : 0;
      ++i;
    } else if ((c & 0xf0) == 0xe0 && i + 2 < text.size()) {
      const uint32_t cp = ((c & 0x0fu) << 12) |
                          ((static_cast<unsigned char>(text[i + 1]) & 0x3fu) << 6) |
                          (static_cast<unsigned char>(text[i + 2]) & 0x3fu);
      han += (cp >= 0x4e00 && cp <= 0x9fff) ? 1 : 0;
      i += 3;
    } else {
      ++i;
    }
  }
  return han > letters / 4 ? "Chinese" : "English";
}

// Splits text by lines: the first (1 - held_out) of them for counting, the rest held out.
void SplitLines(const std::string& text, double held_out, std::string* train, std::string* held) {
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  const size_t n_train = static_cast<size_t>(static_cast<double>(lines) * (1.0 - held_out));
  size_t pos = 0;
  for (size_t i = 0; i < n_train && pos != std::string::npos; ++i) {
    pos = text.find('\n', pos);
    if (pos != std::string::npos) ++pos;
  }
  if (pos == std::string::npos) pos = text.size();
  *train = text.substr(0, pos);
  *held = text.substr(pos);
}

}  // namespace

Command AddPruneVocabCommand(CLI::App& root) {
  auto* app = root.add_subcommand(
      "prune-vocab", "cut a tokenizer's vocabulary to the tokens a corpus uses (merge-closed)");
  struct Flags {
    std::string tokenizer, out, model, model_out, id_map;
    std::vector<std::string> corpus, eval;
    int32_t size = 65536;
    double held_out = 0.1;
    bool json = false;
  };
  auto f = std::make_shared<Flags>();
  app->add_option("--tokenizer", f->tokenizer,
                  "tokenizer.json (its other fields are kept), or a model file holding one")
      ->required();
  app->add_option("--corpus", f->corpus, "UTF-8 text files whose token use ranks the vocabulary")
      ->required();
  app->add_option("--size", f->size, "tokens to keep, added tokens and bytes included")
      ->capture_default_str();
  app->add_option("-o,--output", f->out, "the pruned tokenizer.json to write")->required();
  app->add_option("--model", f->model,
                  "a GGUF model using the tokenizer, to rewrite as well (with --model-out)");
  app->add_option("--model-out", f->model_out,
                  "where to write the pruned GGUF model (with --model)");
  app->add_option("--held-out", f->held_out,
                  "fraction of each corpus file's lines (its end) not counted but measured")
      ->capture_default_str();
  app->add_option("--id-map", f->id_map,
                  "also write the old id of every new id as a JSON array (to remap other data)");
  app->add_option("--eval", f->eval, "more held-out files to measure (not counted)");
  app->add_flag("--json", f->json, "print the report as one JSON object");
  SetExamples(
      app,
      {"pocket prune-vocab --tokenizer tokenizer.json --corpus zh.txt en.txt --size 65536 -o "
       "pruned.json",
       "pocket prune-vocab --tokenizer model.gguf --corpus corpus.txt --size 32768 -o pruned.json "
       "--model model.gguf --model-out pruned.gguf",
       "pocket prune-vocab --tokenizer tokenizer.json --corpus a.txt --eval code.cc -o p.json "
       "--id-map ids.json --json"});
  return {
      app, [=]() -> int {
        if (f->model.empty() != f->model_out.empty()) {
          return ReportUsageError("--model and --model-out go together");
        }
        if (f->held_out < 0.0 || f->held_out >= 1.0) {
          return ReportUsageError("--held-out must be in [0, 1)");
        }
        if (f->size <= 0) return ReportUsageError("--size must be positive");
        if (f->out.empty())
          return ReportUsageError("-o is empty; give the tokenizer.json to write");
        // Every file read, and every file written: no output may be an input, nor another output.
        std::vector<std::string> inputs = f->corpus;
        inputs.insert(inputs.end(), f->eval.begin(), f->eval.end());
        inputs.push_back(f->tokenizer);
        if (!f->model.empty()) inputs.push_back(f->model);
        std::vector<std::pair<std::string, std::string>> outputs = {{"-o", f->out}};
        if (!f->id_map.empty()) outputs.push_back({"--id-map", f->id_map});
        if (!f->model_out.empty()) outputs.push_back({"--model-out", f->model_out});
        for (size_t i = 0; i < outputs.size(); ++i) {
          for (size_t j = 0; j < i; ++j) {
            if (outputs[i].second == outputs[j].second ||
                SameFile(outputs[i].second, outputs[j].second)) {
              return ReportUsageError(StrCat(outputs[j].first, " and ", outputs[i].first,
                                             " name the same file, ", outputs[i].second));
            }
          }
          if (Status s = CheckNotAnInput(outputs[i].second, inputs); !s.ok()) {
            return ReportError(s);
          }
        }
        // The full tokenizer, and the tokenizer.json it came from (to keep its other fields).
        std::shared_ptr<const Tokenizer> full;
        std::string base_json;
        std::shared_ptr<const Model> model_holder;
        if (EndsWith(f->tokenizer, ".json")) {
          auto text = ReadFileToString(f->tokenizer);
          if (!text.ok()) return ReportError(text.status());
          base_json = std::move(*text);
          auto t = Tokenizer::FromHfJsonFile(f->tokenizer);
          if (!t.ok()) return ReportError(t.status());
          full = *t;
        } else {
          auto m = LoadModel(f->tokenizer, TokenizerOnly(""));
          if (!m.ok()) return ReportError(m.status());
          if ((*m)->tokenizer() == nullptr) {
            return ReportError(NotFoundError(f->tokenizer, " holds no tokenizer"));
          }
          model_holder = *m;
          full = std::shared_ptr<const Tokenizer>(model_holder, model_holder->tokenizer());
        }
        const TokenizerSpec full_spec = full->FullSpec();

        // Count token use on the training part of the corpus.
        std::vector<int64_t> counts(full_spec.tokens.size(), 0);
        std::vector<TextPart> held;
        int64_t train_chars = 0;
        for (size_t i = 0; i < f->corpus.size(); ++i) {
          const std::string& path = f->corpus[i];
          std::fprintf(stderr, "pocket: counting tokens: %zu/%zu %s\n", i + 1, f->corpus.size(),
                       path.c_str());
          auto text = ReadFileToString(path);
          if (!text.ok()) return ReportError(text.status());
          TextPart part{Category(path, *text), path, ""};
          std::string train;
          SplitLines(*text, f->held_out, &train, &part.text);
          auto ids = full->Encode(train);
          if (!ids.ok())
            return ReportError(Status(ids.status().code(), path + ": " + ids.status().message()));
          for (int32_t id : *ids) ++counts[static_cast<size_t>(id)];
          train_chars += CountChars(train);
          if (!part.text.empty()) held.push_back(std::move(part));
        }
        for (const std::string& path : f->eval) {
          auto text = ReadFileToString(path);
          if (!text.ok()) return ReportError(text.status());
          held.push_back({Category(path, *text), path, std::move(*text)});
        }

        auto pruned = PruneVocab(full_spec, counts, f->size);
        if (!pruned.ok()) return ReportError(pruned.status());
        auto json_text = HfTokenizerJson(pruned->spec, base_json);
        if (!json_text.ok()) return ReportError(json_text.status());
        {
          auto out = OutputFile::Create(f->out, inputs);
          if (!out.ok()) return ReportError(out.status());
          Status s = out->Write(json_text->data(), json_text->size());
          if (s.ok()) s = out->Commit();
          if (!s.ok()) return ReportError(s);
        }
        if (!f->id_map.empty()) {
          const std::string text = nlohmann::json(pruned->old_id).dump() + "\n";
          auto out = OutputFile::Create(f->id_map, inputs);
          if (!out.ok()) return ReportError(out.status());
          Status s = out->Write(text.data(), text.size());
          if (s.ok()) s = out->Commit();
          if (!s.ok()) return ReportError(s);
        }
        // Measure with the tokenizer as written (read back, as any tool would).
        auto small = Tokenizer::FromHfJson(*json_text, f->out);
        if (!small.ok()) return ReportError(small.status());
        if (!f->model.empty()) {
          std::fprintf(stderr, "pocket: rewriting %s for the pruned vocabulary\n",
                       f->model.c_str());
          Status s = PruneGgufVocab(f->model, f->model_out, full_spec, *pruned, inputs);
          if (!s.ok()) return ReportError(s);
        }

        struct Row {
          int64_t chars = 0, full_tokens = 0, pruned_tokens = 0;
          bool lossless = true;
        };
        std::map<std::string, Row> rows;
        for (const TextPart& part : held) {
          std::fprintf(stderr, "pocket: measuring %s (%s)\n", part.file.c_str(),
                       part.category.c_str());
          auto a = full->Encode(part.text);
          auto b = (*small)->Encode(part.text);
          if (!a.ok()) return ReportError(a.status());
          if (!b.ok()) return ReportError(b.status());
          Row& r = rows[part.category];
          r.chars += CountChars(part.text);
          r.full_tokens += static_cast<int64_t>(a->size());
          r.pruned_tokens += static_cast<int64_t>(b->size());
          auto da = full->Decode(*a);
          auto db = (*small)->Decode(*b);
          r.lossless = r.lossless && da.ok() && db.ok() && *da == *db;
        }
        if (f->json) {
          nlohmann::json j;
          j["tokenizer"] = f->tokenizer;
          j["output"] = f->out;
          j["full_vocab"] = full_spec.tokens.size();
          j["pruned_vocab"] = pruned->spec.tokens.size();
          j["full_merges"] = full_spec.merges.size();
          j["pruned_merges"] = pruned->spec.merges.size();
          j["train_chars"] = train_chars;
          for (const auto& [cat, r] : rows) {
            const double tf = static_cast<double>(r.full_tokens) / static_cast<double>(r.chars);
            const double tp = static_cast<double>(r.pruned_tokens) / static_cast<double>(r.chars);
            j["held_out"][cat] = {{"chars", r.chars},
                                  {"full_tokens", r.full_tokens},
                                  {"pruned_tokens", r.pruned_tokens},
                                  {"full_tokens_per_char", tf},
                                  {"pruned_tokens_per_char", tp},
                                  {"growth", tp / tf - 1.0},
                                  {"round_trip_equal", r.lossless}};
          }
          std::printf("%s\n", j.dump().c_str());
          return 0;
        }
        std::printf("pruned %zu -> %zu tokens, %zu -> %zu merges; wrote %s\n",
                    full_spec.tokens.size(), pruned->spec.tokens.size(), full_spec.merges.size(),
                    pruned->spec.merges.size(), f->out.c_str());
        std::printf(
            "\n| held-out text | chars | tokens/char (full) | tokens/char (pruned) | growth | "
            "round trip |\n|---|---|---|---|---|---|\n");
        for (const auto& [cat, r] : rows) {
          const double tf = static_cast<double>(r.full_tokens) / static_cast<double>(r.chars);
          const double tp = static_cast<double>(r.pruned_tokens) / static_cast<double>(r.chars);
          std::printf("| %s | %lld | %.4f | %.4f | %+.2f%% | %s |\n", cat.c_str(),
                      static_cast<long long>(r.chars), tf, tp, 100.0 * (tp / tf - 1.0),
                      r.lossless ? "equal" : "DIFFERS");
        }
        return 0;
      }};
}

}  // namespace pocket::cli
