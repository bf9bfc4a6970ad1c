#include "tokenizer/test_fixtures.h"

#include "base/mapped_file.h"

namespace pocket::testing {
namespace {

struct Loaded {
  std::shared_ptr<const Tokenizer> tokenizer;
  std::string error;
};

const Loaded& LoadQwen3Once() {
  static const Loaded loaded = [] {
    Loaded result;
    const std::string path = Qwen3TokenizerJsonPath();
    if (!FileExists(path)) {
      result.error = StrCat("missing fixture ", path, "; run scripts/fetch_fixtures.sh");
      return result;
    }
    auto tokenizer = Tokenizer::FromHfJsonFile(path);
    if (!tokenizer.ok()) {
      result.error = tokenizer.status().ToString();
    } else {
      result.tokenizer = *tokenizer;
    }
    return result;
  }();
  return loaded;
}

}  // namespace

std::string Qwen3TokenizerJsonPath() {
  return std::string(POCKET_CACHE_DIR) + "/tokenizer-qwen3/package/models/tokenizer.json";
}

std::string SharedTestdataPath(std::string_view relative) {
  return StrCat(POCKET_SHARED_DIR, "/testdata/", relative);
}

std::string ReadFileOrEmpty(const std::string& path) {
  auto text = ReadFileToString(path);
  return text.ok() ? *text : std::string();
}

std::shared_ptr<const Tokenizer> Qwen3() {
  return LoadQwen3Once().tokenizer;
}
std::string Qwen3LoadError() {
  return LoadQwen3Once().error;
}

std::vector<std::string> CorpusFiles() {
  return {SharedTestdataPath("corpus/en/pride_and_prejudice_pg1342.txt"),
          SharedTestdataPath("corpus/en/tinyshakespeare.txt"),
          SharedTestdataPath("corpus/en/amazon_cells_labelled.txt"),
          SharedTestdataPath("corpus/en/yelp_labelled.txt"),
          SharedTestdataPath("corpus/en/imdb_labelled.txt"),
          SharedTestdataPath("corpus/zh/waimai_10k.csv"),
          SharedTestdataPath("corpus/zh/online_shopping_10_cats.every5th.csv")};
}

}  // namespace pocket::testing
