// pocket tokenize: token ids of text. `-p TEXT` prints one {"ids": [...]} line for TEXT encoded as
// `pocket run -p TEXT` encodes its prompt (BOS first when the tokenizer adds one; --no-bos leaves
// it out). Without -p: JSON Lines {"text": ...} on stdin -> {"ids": [...]} on stdout, one per
// line, with no BOS or other added token: each line is a piece of text, as Hugging Face's
// encode(text, add_special_tokens=False), so pieces can be joined and compared with other
// tokenizers. Either form recognises special-token strings in the text (as Hugging Face does by
// default) unless --no-parse-special.
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "common.h"
#include "generation.h"

namespace pocket::cli {

Command AddTokenizeCommand(CLI::App& root) {
  auto* app = root.add_subcommand(
      "tokenize",
      "token ids of -p TEXT (as run encodes its prompt), or of JSON Lines {\"text\": ...} from "
      "stdin");
  struct Flags {
    std::string model, tokenizer, prompt;
    bool no_special = false, no_bos = false;
  };
  auto f = std::make_shared<Flags>();
  app->add_option("-m,--model", f->model, "a model, or a tokenizer.json")->required();
  app->add_option("--tokenizer", f->tokenizer,
                  "tokenizer to use instead of the model's (tokenizer.json or llama2.c .bin)");
  auto* prompt = app->add_option(
      "-p,--prompt", f->prompt,
      "tokenize TEXT as run does its prompt (BOS first when the tokenizer adds one) and print "
      "{\"ids\": [...]}; without -p, stdin is read (no BOS)");
  app->add_flag("--no-bos", f->no_bos, "with -p: leave out the BOS token run would add");
  app->add_flag("--no-parse-special", f->no_special,
                "treat special-token strings in the text as plain text");
  SetExamples(app, {"pocket tokenize -m model.gguf -p \"Once upon a time\"",
                    "pocket tokenize -m stories260K.bin --tokenizer tok512.bin -p Once --no-bos",
                    "echo '{\"text\": \"hello world\"}' | pocket tokenize -m tokenizer.json"});
  return {
      app, [=]() -> int {
        const bool from_prompt = prompt->count() > 0;
        if (f->no_bos && !from_prompt) {
          return ReportUsageError("--no-bos applies to -p (stdin lines never get a BOS)");
        }
        std::shared_ptr<const Tokenizer> owned;
        std::shared_ptr<const Model> model;
        const Tokenizer* tok = nullptr;
        if (EndsWith(f->model, ".json") && !IsDirectory(f->model)) {
          if (!f->tokenizer.empty()) {
            return ReportUsageError(
                StrCat("-m ", f->model, " is a tokenizer already; drop --tokenizer"));
          }
          auto t = Tokenizer::FromHfJsonFile(f->model);
          if (!t.ok()) return ReportError(t.status());
          owned = *t;
          tok = owned.get();
        } else {
          auto m = LoadModel(f->model, TokenizerOnly(f->tokenizer));
          if (!m.ok()) return ReportError(m.status());
          model = *m;
          tok = model->tokenizer();
          if (tok == nullptr) {
            return ReportError(
                FailedPreconditionError(f->model, " has no tokenizer; pass one with --tokenizer"));
          }
        }
        EncodeOptions options;
        options.parse_special = !f->no_special;
        if (from_prompt) {
          // As Session::Generate(text) encodes a prompt.
          options.add_bos = tok->spec().add_bos && !f->no_bos;
          auto ids = tok->Encode(f->prompt, options);
          if (!ids.ok()) return ReportError(ids.status().WithContext("-p"));
          if (f->prompt.empty() && !f->no_bos) {
            // As run -p "": the beginning-of-text token alone.
            const int32_t bos = BeginningOfTextToken(*tok);
            if (bos < 0) {
              return ReportUsageError(
                  "-p is empty and the tokenizer has no beginning-of-text token to start from");
            }
            ids = std::vector<int32_t>{bos};
          }
          std::cout << nlohmann::json({{"ids", *ids}}).dump() << '\n';
          std::cout.flush();
          return 0;
        }
        std::string line;
        int64_t line_no = 0;
        while (std::getline(std::cin, line)) {
          ++line_no;
          if (line.empty()) continue;
          nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
          if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string()) {
            return ReportError(InvalidArgumentError(
                "stdin line ", line_no, ": expected a JSON object with a string \"text\""));
          }
          auto ids = tok->Encode(j["text"].get_ref<const std::string&>(), options);
          if (!ids.ok())
            return ReportError(ids.status().WithContext(StrCat("stdin line ", line_no)));
          nlohmann::json out = {{"ids", *ids}};
          std::cout << out.dump() << '\n';
        }
        std::cout.flush();
        return 0;
      }};
}

}  // namespace pocket::cli
