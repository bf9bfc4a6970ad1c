// The one forward entry (model/forward.h): a batch of segments, each with its own KV cache,
// slots, RoPE positions and visibility, computes for every row exactly what that row computes in
// a batch of its own, on every kernel table (the kernel form is chosen per segment); and a
// malformed batch is an error that names the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numeric>
#include <string_view>
#include <vector>

#include "kernels/select.h"
#include "model/forward.h"
#include "model/synthetic.h"

namespace pocket {
namespace {

std::shared_ptr<const Model> Tiny(DType type, const KernelTable* kernels) {
  const std::string dir = std::string(POCKET_BINARY_DIR) + "/forward-batch-test";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/tiny-" + std::string(DTypeName(type)) + ".gguf";
  auto c = PresetConfig("tiny", Architecture::kQwen3);
  EXPECT_TRUE(c.ok());
  SyntheticOptions o;
  o.config = *c;
  o.seed = 5;
  o.weight_type = type;
  if (!std::filesystem::exists(path)) {
    EXPECT_TRUE(WriteSyntheticGguf(o, path).ok());
  }
  LoadOptions lo;
  lo.kernels = kernels;
  auto m = Model::Load(path, lo);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

std::vector<int32_t> Ids(int n, int seed, int32_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = (seed * 131 + i * 37) % vocab;
  return ids;
}

KvCache Kv(const ModelConfig& c, int32_t n_ctx) {
  auto kv = KvCache::Create(c, n_ctx);
  EXPECT_TRUE(kv.ok());
  return std::move(kv.value());
}

struct Fixture {
  explicit Fixture(std::shared_ptr<const Model> m, int32_t max_batch = 64) : model(std::move(m)) {
    if (model == nullptr) return;
    vocab = model->config().vocab_size;
    auto s = ForwardScratch::Create(*model, max_batch, pool.n_threads());
    EXPECT_TRUE(s.ok());
    scratch = std::move(s.value());
  }
  std::shared_ptr<const Model> model;
  ThreadPool pool{2};
  ForwardScratch scratch;
  int32_t vocab = 0;

  // Runs `tokens` as one segment at slot `pos` of `kv`; logits of every row.
  std::vector<float> Alone(KvCache& kv, const std::vector<int32_t>& tokens, int32_t pos) {
    std::vector<float> logits(tokens.size() * static_cast<size_t>(vocab));
    const BatchSegment seg{&kv, 0, static_cast<int32_t>(tokens.size()), pos};
    ForwardBatch b;
    b.tokens = tokens;
    b.segments = std::span<const BatchSegment>(&seg, 1);
    b.output_rows = scratch.rows(0, static_cast<int32_t>(tokens.size()));
    b.logits = logits.data();
    const Status s = Forward(*model, scratch, pool, b);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return logits;
  }
};

class ForwardBatchTest : public ::testing::TestWithParam<const KernelTable*> {};

// Three sessions in one batch: a decode row, a prompt long enough for the tile form, and a short
// chunk; each row's logits equal those of its segment run alone (bit for bit).
TEST_P(ForwardBatchTest, EveryRowComputesWhatItComputesAlone) {
  for (DType type : {DType::kQ4_0, DType::kF32}) {
    Fixture f(Tiny(type, GetParam()));
    ASSERT_NE(f.model, nullptr);
    const ModelConfig& c = f.model->config();
    auto make_kv = [&] { return Kv(c, 128); };
    KvCache a1 = make_kv(), a2 = make_kv(), b1 = make_kv(), b2 = make_kv(), c1 = make_kv(),
            c2 = make_kv();
    const std::vector<int32_t> pa = Ids(9, 1, f.vocab), pc = Ids(20, 3, f.vocab);
    f.Alone(a1, pa, 0);
    f.Alone(a2, pa, 0);
    f.Alone(c1, pc, 0);
    f.Alone(c2, pc, 0);
    const std::vector<int32_t> da = {Ids(1, 7, f.vocab)}, pb = Ids(40, 2, f.vocab),
                               dc = Ids(5, 4, f.vocab);
    const std::vector<float> want_a = f.Alone(a1, da, 9), want_b = f.Alone(b1, pb, 0),
                             want_c = f.Alone(c1, dc, 20);
    std::vector<int32_t> tokens = da;
    tokens.insert(tokens.end(), pb.begin(), pb.end());
    tokens.insert(tokens.end(), dc.begin(), dc.end());
    const BatchSegment segs[] = {{&a2, 0, 1, 9}, {&b2, 1, 41, 0}, {&c2, 41, 46, 20}};
    std::vector<float> got(tokens.size() * static_cast<size_t>(f.vocab));
    ForwardBatch batch;
    batch.tokens = tokens;
    batch.segments = segs;
    batch.output_rows = f.scratch.rows(0, static_cast<int32_t>(tokens.size()));
    batch.logits = got.data();
    ASSERT_TRUE(Forward(*f.model, f.scratch, f.pool, batch).ok());
    const size_t v = static_cast<size_t>(f.vocab);
    // Same table both ways, and the form follows each segment's own rows (1, 40, 5): by design.
    for (size_t i = 0; i < v; ++i) ASSERT_EQ(got[i], want_a[i]) << "decode row, logit " << i;
    for (size_t i = 0; i < want_b.size(); ++i) ASSERT_EQ(got[v + i], want_b[i]) << "prompt " << i;
    for (size_t i = 0; i < want_c.size(); ++i)
      ASSERT_EQ(got[41 * v + i], want_c[i]) << "chunk " << i;
  }
}

// Outputs: a subset of rows, final hidden states, and per-layer hidden states.
TEST_P(ForwardBatchTest, OutputRowsHiddenStatesAndLayers) {
  Fixture f(Tiny(DType::kQ4_0, GetParam()));
  ASSERT_NE(f.model, nullptr);
  const ModelConfig& c = f.model->config();
  KvCache k1 = Kv(c, 64), k2 = Kv(c, 64);
  const std::vector<int32_t> p = Ids(12, 9, f.vocab);
  const std::vector<float> all = f.Alone(k1, p, 0);
  const BatchSegment seg{&k2, 0, 12, 0};
  const int32_t rows[] = {3, 11};
  const int32_t layers[] = {0, c.n_layers - 1};
  const size_t d = static_cast<size_t>(c.d_model), v = static_cast<size_t>(f.vocab);
  std::vector<float> logits(2 * v), hidden(2 * d), layer_hidden(2 * 2 * d);
  ForwardBatch b;
  b.tokens = p;
  b.segments = std::span<const BatchSegment>(&seg, 1);
  b.output_rows = rows;
  b.logits = logits.data();
  b.final_hidden = hidden.data();
  b.hidden_layers = layers;
  b.layer_hidden = layer_hidden.data();
  ASSERT_TRUE(Forward(*f.model, f.scratch, f.pool, b).ok());
  // 12 rows < kTileFormMinRows: the output matrix takes the exact form for 2 rows or 12.
  for (size_t i = 0; i < v; ++i) {
    ASSERT_EQ(logits[i], all[3 * v + i]);
    ASSERT_EQ(logits[v + i], all[11 * v + i]);
  }
  // The last layer's residual stream through the final norm is the final hidden state.
  // Forward applies this table's rmsnorm kernel to the same row: the same bits.
  std::vector<float> normed(d);
  for (size_t r = 0; r < 2; ++r) {
    f.model->kernels().rmsnorm(layer_hidden.data() + (2 + r) * d, f.model->weights().output_norm,
                               c.rms_eps, c.d_model, normed.data());
    for (size_t i = 0; i < d; ++i) ASSERT_EQ(normed[i], hidden[r * d + i]) << r << " " << i;
  }
  // Layer 0's state differs from the last layer's (the layers are really selected).
  EXPECT_NE(layer_hidden[0], layer_hidden[2 * d]);
}

// Bidirectional segments: the first row sees the rows after it (its logits change; the kernels'
// tests check the attention itself against the reference), and a segment of one row computes
// exactly what it computes causally.
TEST_P(ForwardBatchTest, BidirectionalSegmentsSeeTheirLaterRows) {
  Fixture f(Tiny(DType::kQ4_0, GetParam()));
  ASSERT_NE(f.model, nullptr);
  const ModelConfig& c = f.model->config();
  const size_t v = static_cast<size_t>(f.vocab);
  const std::vector<int32_t> prompt = Ids(10, 2, f.vocab);
  for (const int32_t n : {6, 1}) {
    KvCache k1 = Kv(c, 64), k2 = Kv(c, 64);
    const std::vector<int32_t> block = Ids(n, 8, f.vocab);
    f.Alone(k1, prompt, 0);
    f.Alone(k2, prompt, 0);
    const std::vector<float> causal = f.Alone(k1, block, 10);
    BatchSegment seg{&k2, 0, n, 10};
    seg.visibility = Visibility::kBidirectional;
    std::vector<float> both(causal.size());
    ForwardBatch b;
    b.tokens = block;
    b.segments = std::span<const BatchSegment>(&seg, 1);
    b.output_rows = f.scratch.rows(0, n);
    b.logits = both.data();
    ASSERT_TRUE(Forward(*f.model, f.scratch, f.pool, b).ok());
    if (n == 1) {
      // One row sees the same slots either way, on the same table: the same bits.
      for (size_t i = 0; i < v; ++i) ASSERT_EQ(both[i], causal[i]) << i;
    } else {
      bool first_differs = false;
      for (size_t i = 0; i < v; ++i) first_differs |= both[i] != causal[i];
      EXPECT_TRUE(first_differs);
    }
  }
}

// Draft trees: branches after the first continue a path of slots that are not consecutive; each
// branch's rows compute exactly (bit for bit) what the same tokens compute in consecutive slots,
// whatever the KV type and wherever the tree starts within a 16-position block, and the accepted
// branch's rows moved down (KvCache::MoveSlots) are the rows a plain run writes.
TEST_P(ForwardBatchTest, TreeBranchesComputeWhatConsecutiveSlotsCompute) {
  Fixture f(Tiny(DType::kQ4_0, GetParam()));
  ASSERT_NE(f.model, nullptr);
  const ModelConfig& c = f.model->config();
  const size_t v = static_cast<size_t>(f.vocab);
  std::vector<KvType> types = {KvType::kF16, KvType::kF32, KvType::kQ8};
  std::vector<int32_t> prompts = {5, 14, 15, 16, 29};
#if defined(__SANITIZE_ADDRESS__)
  // The reference table is slow under the sanitizers (3 minutes for all): one type, both sides of
  // a block boundary.
  if (GetParam()->name == std::string_view("reference")) {
    types = {KvType::kQ8};
    prompts = {15, 16};
  }
#endif
  for (KvType type : types) {
    for (const int32_t n_prompt : prompts) {
      SCOPED_TRACE(std::string(KvTypeName(type)) + " prompt " + std::to_string(n_prompt));
      auto make_kv = [&] {
        auto kv = KvCache::Create(c, 96, type);
        EXPECT_TRUE(kv.ok());
        return std::move(kv.value());
      };
      const std::vector<int32_t> prompt = Ids(n_prompt, 4, f.vocab);
      const int32_t P = n_prompt;
      const int32_t a = 3, c1 = 17, c2 = 29, b1 = 41, b2 = 5, b3 = 77, e1 = 90, e2 = 11;
      // Plain: each path in consecutive slots of a cache of its own.
      KvCache r1 = make_kv(), r2 = make_kv(), r3 = make_kv(), tree = make_kv();
      for (KvCache* kv : {&r1, &r2, &r3, &tree}) f.Alone(*kv, prompt, 0);
      const std::vector<float> want1 = f.Alone(r1, {a, c1, c2}, P);
      const std::vector<float> want2 = f.Alone(r2, {a, b1, b2, b3}, P);
      const std::vector<float> want3 = f.Alone(r3, {a, c1, e1, e2}, P);
      // The tree: [a c1 c2] at P.., [b1 b2 b3] after a at P+3.., [e1 e2] after c1 at P+6...
      const std::vector<int32_t> tokens = {a, c1, c2, b1, b2, b3, e1, e2};
      const int32_t path2[] = {P}, path3[] = {P, P + 1};
      BatchSegment segs[3] = {{&tree, 0, 3, P}, {&tree, 3, 6, P + 3}, {&tree, 6, 8, P + 6}};
      segs[1].path_from = P;
      segs[1].path = path2;
      segs[2].path_from = P;
      segs[2].path = path3;
      std::vector<float> got(tokens.size() * v);
      ForwardBatch b;
      b.tokens = tokens;
      b.segments = segs;
      b.output_rows = f.scratch.rows(0, 8);
      b.logits = got.data();
      const Status st = Forward(*f.model, f.scratch, f.pool, b);
      ASSERT_TRUE(st.ok()) << st.ToString();
      auto same = [&](size_t got_row, const std::vector<float>& want, size_t want_row) {
        for (size_t i = 0; i < v; ++i) {
          if (got[got_row * v + i] != want[want_row * v + i]) {
            ADD_FAILURE() << "tree row " << got_row << " differs at logit " << i << ": "
                          << got[got_row * v + i] << " vs " << want[want_row * v + i];
            return;
          }
        }
      };
      // Every segment here is under 32 rows (branches with a path never tile), and attention
      // through a gathered tail is the in-place sum (kernels_test): the same bits by design.
      for (size_t r = 0; r < 3; ++r) same(r, want1, r);
      for (size_t r = 0; r < 3; ++r) same(3 + r, want2, 1 + r);
      for (size_t r = 0; r < 2; ++r) same(6 + r, want3, 2 + r);
      // Accept the second branch: its rows move down behind a; the next token then computes
      // what it computes after the plain path.
      const int32_t moved[] = {P + 3, P + 4, P + 5};
      tree.MoveSlots(moved, P + 1);
      const std::vector<float> next_plain = f.Alone(r2, {b3}, P + 4);
      const std::vector<float> next_tree = f.Alone(tree, {b3}, P + 4);
      ASSERT_EQ(next_plain, next_tree);
    }
  }
}

TEST_P(ForwardBatchTest, MalformedBatchesAreErrorsThatSayWhy) {
  Fixture f(Tiny(DType::kQ4_0, GetParam()), 16);
  ASSERT_NE(f.model, nullptr);
  const ModelConfig& c = f.model->config();
  KvCache kv = Kv(c, 32);
  const std::vector<int32_t> t = {1, 2, 3, 4};
  auto run = [&](std::vector<BatchSegment> segs, std::vector<int32_t> rows = {},
                 std::vector<int32_t> tokens = {}) {
    ForwardBatch b;
    const std::vector<int32_t>& toks = tokens.empty() ? t : tokens;
    b.tokens = toks;
    b.segments = segs;
    b.output_rows = rows;
    return Forward(*f.model, f.scratch, f.pool, b);
  };
  EXPECT_NE(run({{&kv, 0, 2, 0}}).message().find("cover 2 of 4"), std::string::npos);
  EXPECT_NE(run({{&kv, 0, 2, 0}, {&kv, 3, 4, 2}}).message().find("does not continue"),
            std::string::npos);
  EXPECT_NE(run({{nullptr, 0, 4, 0}}).message().find("no cache"), std::string::npos);
  EXPECT_NE(run({{&kv, 0, 4, 30}}).message().find("do not fit the context of 32"),
            std::string::npos);
  BatchSegment hides_ahead{&kv, 0, 4, 4};
  hides_ahead.hidden_begin = 2;
  hides_ahead.hidden_end = 6;
  EXPECT_NE(run({hides_ahead}).message().find("hides slots [2, 6)"), std::string::npos);
  EXPECT_NE(run({{&kv, 0, 4, 0}}, {2, 1}).message().find("ascend"), std::string::npos);
  EXPECT_NE(run({{&kv, 0, 4, 0}}, {}, {1, 2, c.vocab_size, 4})
                .message()
                .find("token id " + std::to_string(c.vocab_size) + " at position 2"),
            std::string::npos);
  EXPECT_EQ(run({}, {}, std::vector<int32_t>(17, 1)).code(), StatusCode::kInternal);
  // Tree branches: a path must start at or before the branch's slots, fit the gathered tail and
  // name slots inside the cache.
  const int32_t path[] = {2}, bad_path[] = {40};
  BatchSegment branch{&kv, 0, 4, 4};
  branch.path_from = 6;
  branch.path = path;
  EXPECT_NE(run({branch}).message().find("tree branch of rows [0, 4)"), std::string::npos);
  branch.path_from = 3;
  branch.path = bad_path;
  EXPECT_NE(run({branch}).message().find("names slot 40 outside the context of 32"),
            std::string::npos);
  branch.path = path;
  branch.rope_pos = 8;
  EXPECT_NE(run({branch}).message().find("RoPE positions from the path"), std::string::npos);
  branch.rope_pos = -1;
  EXPECT_TRUE(run({branch}).ok());
  EXPECT_TRUE(run({{&kv, 0, 4, 0}}).ok());
}

INSTANTIATE_TEST_SUITE_P(Tables, ForwardBatchTest, ::testing::ValuesIn(AvailableKernelTables()),
                         [](const auto& table) { return std::string(table.param->name); });

}  // namespace
}  // namespace pocket
