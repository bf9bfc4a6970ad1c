// Writes JSON-Schema-constrained generations for test_constraint_validity.py, which checks each
// one with an independent validator (Python's jsonschema) and checks the span fields.
//   schema_generations OUT.jsonl N SCHEMA.json...
// For each schema, N generations with stories260K and N with a random-weight model on the Qwen3
// vocabulary, with varied sampling. One JSON line per generation: {"schema", "model", "text",
// "error"} (error: the message when generation failed, e.g. a token budget that ran out).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/mapped_file.h"
#include "generate/constraint.h"
#include "model/synthetic.h"
#include "runtime/session.h"

namespace pocket {
namespace {

constexpr const char* kSpanSource =
    "The battery lasts two days, but the screen is dim. Delivery was fast; 价格便宜，屏幕清晰。";

StatusOr<std::shared_ptr<const Model>> Stories() {
  LoadOptions o;
  o.tokenizer_path = std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/tok512.bin";
  return Model::Load(std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/stories260K.bin", o);
}

StatusOr<std::shared_ptr<const Model>> RandomQwen(const std::string& dir) {
  POCKET_ASSIGN_OR_RETURN(
      auto tok, Tokenizer::FromHfJsonFile(std::string(POCKET_CACHE_DIR) +
                                          "/tokenizer-qwen3/package/models/tokenizer.json"));
  SyntheticOptions o;
  POCKET_ASSIGN_OR_RETURN(o.config, PresetConfig("tiny", Architecture::kQwen3));
  o.seed = 23;
  o.weight_type = DType::kQ8_0;
  o.tokenizer = tok;
  const std::string path = dir + "/schema-generations-qwen3-tok.gguf";
  POCKET_RETURN_IF_ERROR(WriteSyntheticGguf(o, path));
  return Model::Load(path);
}

int Run(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: schema_generations OUT.jsonl N SCHEMA.json...\n");
    return 2;
  }
  const std::string out_path = argv[1];
  const int n = std::atoi(argv[2]);
  const std::string dir = std::filesystem::path(out_path).parent_path().string();
  std::ofstream out(out_path);
  std::vector<std::pair<std::string, std::shared_ptr<const Model>>> models;
  auto stories = Stories();
  auto qwen = RandomQwen(dir.empty() ? "." : dir);
  if (!stories.ok() || !qwen.ok()) {
    std::fprintf(stderr, "schema_generations: %s\n",
                 (!stories.ok() ? stories.status() : qwen.status()).ToString().c_str());
    return 1;
  }
  models.emplace_back("stories260K", *stories);
  models.emplace_back("random-qwen3-vocab", *qwen);
  for (int a = 3; a < argc; ++a) {
    auto schema = ReadFileToString(argv[a]);
    if (!schema.ok()) {
      std::fprintf(stderr, "schema_generations: %s\n", schema.status().ToString().c_str());
      return 1;
    }
    for (const auto& [model_name, model] : models) {
      ConstraintSpec spec;
      spec.json_schema = *schema;
      spec.span_source = kSpanSource;
      spec.has_span_source = true;
      auto constraint = MakeConstraint(*model->tokenizer(), spec);
      if (!constraint.ok()) {
        std::fprintf(stderr, "schema_generations: %s: %s\n", argv[a],
                     constraint.status().ToString().c_str());
        return 1;
      }
      auto session =
          Session::Create(model, SessionOptions{.n_ctx = 512, .n_batch = 64, .n_threads = 1});
      if (!session.ok()) return 1;
      for (int i = 0; i < n; ++i) {
        GenerateOptions g;
        g.constraint = constraint->get();
        g.max_tokens = 320;
        g.sampling.temperature = i % 4 == 0 ? 0.0f : 0.6f + 0.4f * static_cast<float>(i % 3);
        g.sampling.top_k = i % 2 ? 0 : 40;
        g.sampling.top_p = 1.0f;
        g.sampling.min_p = 0.0f;
        g.sampling.seed = static_cast<uint64_t>(i) + 7;
        const std::string prompt = std::string("Review: ") + kSpanSource + "\nJSON:";
        auto r = (*session)->Generate(std::string_view(prompt), g);
        nlohmann::json line = {{"schema", std::filesystem::path(argv[a]).filename().string()},
                               {"model", model_name},
                               {"source", kSpanSource}};
        if (r.ok()) {
          line["text"] = r->text;
          line["error"] = nullptr;
          line["code"] = "ok";
        } else {
          line["text"] = nullptr;
          line["error"] = r.status().message();
          line["code"] = std::string(StatusCodeName(r.status().code()));
        }
        out << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      }
    }
  }
  return out.good() ? 0 : 1;
}

}  // namespace
}  // namespace pocket

int main(int argc, char** argv) {
  return pocket::Run(argc, argv);
}
