// pocket tokenize: JSON Lines {"text": ...} on stdin -> {"ids": [...]} on stdout, one per line.
// No special tokens are added; special-token strings in the text are recognised (as Hugging Face
// does by default).
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "common.h"

namespace pocket::cli {

Command AddTokenizeCommand(CLI::App& root) {
  auto* app = root.add_subcommand(
      "tokenize", "tokenize JSON Lines {\"text\": ...} from stdin into {\"ids\": [...]}");
  auto model_path = std::make_shared<std::string>();
  auto tokenizer_path = std::make_shared<std::string>();
  auto no_special = std::make_shared<bool>(false);
  app->add_option("-m,--model", *model_path, "a model, or a tokenizer.json")->required();
  app->add_option("--tokenizer", *tokenizer_path, "tokenizer to use instead of the model's");
  app->add_flag("--no-parse-special", *no_special,
                "treat special-token strings in the text as plain text");
  return {
      app, [=]() -> int {
        std::shared_ptr<const Tokenizer> owned;
        std::shared_ptr<const Model> model;
        const Tokenizer* tok = nullptr;
        if (EndsWith(*model_path, ".json") && !IsDirectory(*model_path)) {
          auto t = Tokenizer::FromHfJsonFile(*model_path);
          if (!t.ok()) return ReportError(t.status());
          owned = *t;
          tok = owned.get();
        } else {
          auto m = LoadModel(*model_path, TokenizerOnly(*tokenizer_path));
          if (!m.ok()) return ReportError(m.status());
          model = *m;
          tok = model->tokenizer();
          if (tok == nullptr) {
            return ReportError(FailedPreconditionError(*model_path, " has no tokenizer"));
          }
        }
        EncodeOptions options;
        options.parse_special = !*no_special;
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
