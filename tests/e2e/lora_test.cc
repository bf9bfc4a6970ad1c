// LoRA adapters in the runtime (issue 14): a batch that mixes rows with and without adapters
// computes for each row exactly what it computes alone; Session::SetAdapters keeps the KV cache
// for an unchanged set, forgets it for a changed one, and switches fast; adapters are shared.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <vector>

#include "base/memory.h"
#include "model/adapter.h"
#include "model/forward.h"
#include "model/synthetic.h"
#include "runtime/session.h"

namespace pocket {
namespace {

std::string Dir() {
  const std::string dir = std::string(POCKET_BINARY_DIR) + "/lora-test";
  std::filesystem::create_directories(dir);
  return dir;
}

std::shared_ptr<const Model> Tiny(DType type) {
  const std::string path = Dir() + "/tiny-" + std::string(DTypeName(type)) + ".gguf";
  auto c = PresetConfig("tiny", Architecture::kQwen3);
  EXPECT_TRUE(c.ok());
  SyntheticOptions o;
  o.config = *c;
  o.seed = 9;
  o.weight_type = type;
  if (!std::filesystem::exists(path)) {
    EXPECT_TRUE(WriteSyntheticGguf(o, path).ok());
  }
  auto m = Model::Load(path);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

std::shared_ptr<const LoraAdapter> Adapter(const Model& m, const std::string& name, int32_t rank,
                                           uint64_t seed) {
  const std::string dir = Dir() + "/" + name;
  std::filesystem::create_directories(dir);
  SyntheticAdapterOptions o;
  o.base = m.config();
  o.rank = rank;
  o.alpha = 2.0 * rank;
  // Every target: the layers' projections, the token embedding and the output matrix.
  o.targets = {LoraTarget::kQ,    LoraTarget::kK,     LoraTarget::kV,
               LoraTarget::kO,    LoraTarget::kGate,  LoraTarget::kUp,
               LoraTarget::kDown, LoraTarget::kEmbed, LoraTarget::kOutput};
  o.seed = seed;
  o.type = DType::kBF16;
  EXPECT_TRUE(WriteSyntheticAdapter(o, dir).ok());
  auto a = LoraAdapter::Load(dir, m);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return a.ok() ? *a : nullptr;
}

std::vector<int32_t> Ids(int n, int seed, int32_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = (seed * 131 + i * 37) % vocab;
  return ids;
}

// Segments of 1, 5 and 40 rows (one-row, exact and prefill forms; 80 rows together cross the
// 64-row chunks of the term, with rows of both kinds in one chunk and a chunk without adapters),
// each in its own cache, with and without adapters, alone and together: the logits of each
// segment are the same bits.
TEST(LoraTest, MixedBatchRowsComputeWhatTheyComputeAlone) {
  for (DType type : {DType::kQ8_0, DType::kF32}) {
    auto model = Tiny(type);
    ASSERT_NE(model, nullptr);
    const ModelConfig& c = model->config();
    AdapterSet set{{Adapter(*model, "mixed", 8, 3), 0.8f}};
    ThreadPool pool(2);
    auto scratch = ForwardScratch::Create(*model, 96, 2);
    ASSERT_TRUE(scratch.ok());
    ASSERT_TRUE(scratch->ReserveAdapters(*model, AdapterMidFloats(set)).ok());
    for (int32_t n_rows : {1, 5, 40}) {
      const std::vector<int32_t> a = Ids(n_rows, 1, c.vocab_size), b = Ids(n_rows, 2, c.vocab_size);
      // The logits of the last row of one segment run alone.
      auto alone = [&](const std::vector<int32_t>& ids, const AdapterSet* adapters) {
        auto kv = KvCache::Create(c, 64);
        EXPECT_TRUE(kv.ok());
        BatchSegment seg{&*kv, 0, n_rows, 0};
        seg.adapters = adapters;
        const int32_t last = n_rows - 1;
        std::vector<float> logits(static_cast<size_t>(c.vocab_size));
        ForwardBatch batch;
        batch.tokens = ids;
        batch.segments = std::span<const BatchSegment>(&seg, 1);
        batch.output_rows = std::span<const int32_t>(&last, 1);
        batch.logits = logits.data();
        EXPECT_TRUE(Forward(*model, *scratch, pool, batch).ok());
        return logits;
      };
      const std::vector<float> a_alone = alone(a, &set), b_alone = alone(b, nullptr);
      auto kv_a = KvCache::Create(c, 64), kv_b = KvCache::Create(c, 64);
      ASSERT_TRUE(kv_a.ok() && kv_b.ok());
      std::vector<int32_t> ids = a;
      ids.insert(ids.end(), b.begin(), b.end());
      BatchSegment segs[2] = {{&*kv_a, 0, n_rows, 0}, {&*kv_b, n_rows, 2 * n_rows, 0}};
      segs[0].adapters = &set;
      const int32_t rows[2] = {n_rows - 1, 2 * n_rows - 1};
      std::vector<float> logits(2 * static_cast<size_t>(c.vocab_size));
      ForwardBatch batch;
      batch.tokens = ids;
      batch.segments = segs;
      batch.output_rows = rows;
      batch.logits = logits.data();
      ASSERT_TRUE(Forward(*model, *scratch, pool, batch).ok());
      const std::vector<float> a_batched(logits.begin(), logits.begin() + c.vocab_size);
      const std::vector<float> b_batched(logits.begin() + c.vocab_size, logits.end());
      // Same table; each segment's form follows its own row count, and the term adds an exact +0
      // to rows without adapters: bit-identical by design.
      EXPECT_EQ(a_batched, a_alone) << DTypeName(type) << " rows " << n_rows;
      EXPECT_EQ(b_batched, b_alone) << DTypeName(type) << " rows " << n_rows;
      // And the adapter does change the row (else the comparison would prove nothing).
      EXPECT_NE(alone(a, nullptr), a_alone);
    }
  }
}

TEST(LoraTest, SetAdaptersKeepsOrForgetsTheCacheAndIsFast) {
  auto model = Tiny(DType::kQ8_0);
  ASSERT_NE(model, nullptr);
  auto x = Adapter(*model, "x", 8, 4), y = Adapter(*model, "y", 4, 5);
  SessionOptions so;
  so.n_threads = 2;
  so.n_ctx = 128;
  auto s1 = Session::Create(model, so), s2 = Session::Create(model, so);
  ASSERT_TRUE(s1.ok() && s2.ok());
  Session& s = **s1;
  const std::vector<int32_t> prompt = Ids(20, 7, model->config().vocab_size);
  ASSERT_TRUE(s.SetAdapters({{x, 1.0f}}).ok());
  ASSERT_TRUE(s.SetContext(prompt).ok());
  const std::vector<float> with_x(s.last_logits().begin(), s.last_logits().end());
  // The same set (same adapters, order, scales): the history and its KV rows stay.
  ASSERT_TRUE(s.SetAdapters({{x, 1.0f}}).ok());
  EXPECT_EQ(s.history().size(), prompt.size());
  // Another scale is another set: the context is forgotten, and re-evaluated on demand.
  ASSERT_TRUE(s.SetAdapters({{x, 0.5f}}).ok());
  EXPECT_EQ(s.history().size(), 0u);
  // Switching back and forth between calls: each switch well under a millisecond, and the
  // results are those of a fresh session with that set (a second session shares the adapters).
  std::vector<double> us;
  for (int i = 0; i < 20; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(
        s.SetAdapters(i % 2 ? AdapterSet{{x, 1.0f}} : AdapterSet{{y, 1.0f}, {x, 0.3f}}).ok());
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  std::printf("SetAdapters: median %.1f us, max %.1f us\n", us[us.size() / 2], us.back());
  EXPECT_LT(us[us.size() / 2], 1000.0);
  // The same prompt, set and table, here and in a second session: the same computation repeated.
  ASSERT_TRUE(s.SetContext(prompt).ok());  // the last set: {x, 1}
  EXPECT_EQ(std::vector<float>(s.last_logits().begin(), s.last_logits().end()), with_x);
  ASSERT_TRUE((*s2)->SetAdapters({{x, 1.0f}}).ok());
  ASSERT_TRUE((*s2)->SetContext(prompt).ok());
  EXPECT_EQ(std::vector<float>((*s2)->last_logits().begin(), (*s2)->last_logits().end()), with_x);
  EXPECT_GE(x.use_count(), 3);  // shared by both sessions and this test, never copied
  EXPECT_FALSE(s.SetAdapters({{nullptr, 1.0f}}).ok());
}

// Two sessions with different adapters on one model: the base is mapped once. After the first
// session has read every weight, the second (another adapter) adds its own KV cache, scratch and
// adapter buffers to the resident memory, never a second copy of the weights.
TEST(LoraTest, TwoSessionsWithDifferentAdaptersShareOneBaseMapping) {
  auto c = PresetConfig("tiny", Architecture::kQwen3);
  ASSERT_TRUE(c.ok());
  c->d_model = 512;
  c->n_heads = 8;
  c->n_kv_heads = 4;
  c->head_dim = 64;
  c->d_ff = 1536;
  c->n_layers = 6;
  c->vocab_size = 2048;
  const std::string path = Dir() + "/wide-q8_0.gguf";
  if (!std::filesystem::exists(path)) {
    SyntheticOptions o;
    o.config = *c;
    o.seed = 3;
    o.weight_type = DType::kQ8_0;
    ASSERT_TRUE(WriteSyntheticGguf(o, path).ok());
  }
  auto m = Model::Load(path);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::shared_ptr<const Model> model = *m;
  const uint64_t file_bytes = std::filesystem::file_size(path);
  auto x = Adapter(*model, "wide-x", 4, 21), y = Adapter(*model, "wide-y", 8, 22);
  ASSERT_NE(x, nullptr);
  ASSERT_NE(y, nullptr);
  SessionOptions so;
  so.n_threads = 2;
  so.n_ctx = 64;
  const std::vector<int32_t> prompt = Ids(24, 3, c->vocab_size);
  auto s1 = Session::Create(model, so);
  ASSERT_TRUE(s1.ok());
  ASSERT_TRUE((*s1)->SetAdapters({{x, 1.0f}}).ok());
  ASSERT_TRUE((*s1)->SetContext(prompt).ok());
  const uint64_t one = ReadProcessMemory().rss_bytes;
  auto s2 = Session::Create(model, so);
  ASSERT_TRUE(s2.ok());
  ASSERT_TRUE((*s2)->SetAdapters({{y, 1.0f}}).ok());
  ASSERT_TRUE((*s2)->SetContext(prompt).ok());
  const uint64_t two = ReadProcessMemory().rss_bytes;
  if (one == 0) GTEST_SKIP() << "the platform reports no resident memory";
  const double grew = static_cast<double>(two) - static_cast<double>(one);
  std::printf("weights file %.1f MB; resident with one session %.1f MB, with two %.1f MB (+%.1f)\n",
              file_bytes / 1e6, one / 1e6, two / 1e6, grew / 1e6);
  // The outputs differ (each session its adapter), the weights are not duplicated.
  EXPECT_NE(std::vector<float>((*s1)->last_logits().begin(), (*s1)->last_logits().end()),
            std::vector<float>((*s2)->last_logits().begin(), (*s2)->last_logits().end()));
  EXPECT_LT(grew, 0.25 * static_cast<double>(file_bytes));
}

}  // namespace
}  // namespace pocket
