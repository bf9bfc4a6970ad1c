// Tokenizer micro-benchmarks with the real Qwen3 tokenizer (151,669 tokens): loading from
// tokenizer.json, loading from GGUF metadata (the form a model file carries), and encoding the
// English and Chinese corpora of ../shared/testdata/corpus.
//   build/bin/tokenizer_bench [--benchmark_format=json]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace pocket {
namespace {

const std::string kTokenizerJson =
    std::string(POCKET_CACHE_DIR) + "/tokenizer-qwen3/package/models/tokenizer.json";
const std::string kCorpus = std::string(POCKET_SHARED_DIR) + "/testdata/corpus/";

std::shared_ptr<const Tokenizer> Qwen3() {
  auto t = Tokenizer::FromHfJsonFile(kTokenizerJson);
  if (!t.ok()) {
    std::fprintf(stderr, "%s (run scripts/fetch_fixtures.sh)\n", t.status().ToString().c_str());
    std::exit(1);
  }
  return *t;
}

std::string Corpus(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& n : names) {
    auto s = ReadFileToString(kCorpus + n);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.status().ToString().c_str());
      std::exit(1);
    }
    text += *s;
  }
  return text;
}

void BM_LoadTokenizerJson(benchmark::State& state) {
  for (auto _ : state) {
    auto t = Tokenizer::FromHfJsonFile(kTokenizerJson);
    if (!t.ok()) state.SkipWithError(t.status().ToString().c_str());
    benchmark::DoNotOptimize(t);
  }
}
BENCHMARK(BM_LoadTokenizerJson)->Unit(benchmark::kMillisecond)->MinTime(2.0);

// A GGUF holding only the tokenizer metadata, as llama.cpp's converter writes it.
std::string WriteTokenizerGguf(const Tokenizer& tok) {
  const std::string path = "/tmp/pocket_tokenizer_bench.gguf";
  const TokenizerSpec spec = tok.FullSpec();
  GgufWriter w;
  w.SetString("general.architecture", "qwen3");
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", "qwen2");
  w.SetStringArray("tokenizer.ggml.tokens", spec.tokens);
  std::vector<int32_t> types(spec.tokens.size(), 1);
  for (size_t i = 0; i < spec.types.size(); ++i) types[i] = static_cast<int32_t>(spec.types[i]);
  w.SetInt32Array("tokenizer.ggml.token_type", types);
  std::vector<std::string> merges;
  for (const auto& m : spec.merges) merges.push_back(m.first + " " + m.second);
  w.SetStringArray("tokenizer.ggml.merges", merges);
  w.SetUint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(spec.eos_id));
  if (!w.Write(path).ok()) std::exit(1);
  return path;
}

void BM_LoadTokenizerGguf(benchmark::State& state) {
  const std::string path = WriteTokenizerGguf(*Qwen3());
  for (auto _ : state) {
    auto gguf = GgufFile::Open(path);  // parse the metadata (mapping included)
    if (!gguf.ok()) state.SkipWithError(gguf.status().ToString().c_str());
    auto t = TokenizerFromGguf(**gguf);
    if (!t.ok()) state.SkipWithError(t.status().ToString().c_str());
    benchmark::DoNotOptimize(t);
  }
  std::remove(path.c_str());
}
BENCHMARK(BM_LoadTokenizerGguf)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void Encode(benchmark::State& state, const std::vector<std::string>& files) {
  auto tok = Qwen3();
  const std::string text = Corpus(files);
  size_t n_tokens = 0;
  for (auto _ : state) {
    auto ids = tok->Encode(text);
    if (!ids.ok()) state.SkipWithError(ids.status().ToString().c_str());
    n_tokens = ids->size();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["bytes_per_token"] =
      static_cast<double>(text.size()) / static_cast<double>(n_tokens == 0 ? 1 : n_tokens);
}

void BM_EncodeEnglish(benchmark::State& state) {
  Encode(state, {"en/pride_and_prejudice_pg1342.txt", "en/tinyshakespeare.txt",
                 "en/amazon_cells_labelled.txt", "en/yelp_labelled.txt", "en/imdb_labelled.txt"});
}
BENCHMARK(BM_EncodeEnglish)->Unit(benchmark::kMillisecond)->MinTime(2.0);

void BM_EncodeChinese(benchmark::State& state) {
  Encode(state, {"zh/waimai_10k.csv", "zh/online_shopping_10_cats.every5th.csv"});
}
BENCHMARK(BM_EncodeChinese)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace
}  // namespace pocket

BENCHMARK_MAIN();
