// The DFlash block drafter's state: rollback, incremental context, quantized forms, errors and
// allocations. Fidelity against the numpy reference is tests/e2e/test_dflash_reference.py.
#include "model/dflash.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <new>

#include "model/forward.h"
#include "model/synthetic.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define POCKET_COUNT_ALLOCATIONS 0
#else
#define POCKET_COUNT_ALLOCATIONS 1
#endif

namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

#if POCKET_COUNT_ALLOCATIONS
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(size_t n_bytes) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n_bytes == 0 ? 1 : n_bytes)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n_bytes) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n_bytes == 0 ? 1 : n_bytes)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p, size_t) noexcept {
  std::free(p);
}
#endif

namespace pocket {
namespace {

constexpr int32_t kTokens = 48;

// A 4-layer tiny qwen3 target, a 2-layer drafter for it, and the target's hidden states of the
// drafter's layers over kTokens ids.
struct Fixture {
  Fixture() {
    const std::string dir = std::string(POCKET_BINARY_DIR) + "/dflash-test";
    std::filesystem::create_directories(dir + "/drafter");
    auto c = PresetConfig("tiny", Architecture::kQwen3);
    EXPECT_TRUE(c.ok());
    SyntheticOptions so;
    so.config = *c;
    so.config.n_layers = 4;
    so.seed = 7;
    const std::string target_path = dir + "/target.gguf";
    EXPECT_TRUE(WriteSyntheticGguf(so, target_path).ok());
    DFlashSyntheticOptions dso;
    dso.target = so.config;
    dso.seed = 11;
    EXPECT_TRUE(WriteSyntheticDFlashDrafter(dso, dir + "/drafter").ok());
    drafter_dir = dir + "/drafter";
    auto m = Model::Load(target_path);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    target = *m;
    auto d = DFlashDrafter::Load(drafter_dir, target);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    drafter = *d;
    vocab = target->config().vocab_size;
    for (int i = 0; i < kTokens; ++i) ids.push_back((i * 37 + 5) % vocab);
    // The target over every id: hidden states [layers, kTokens, d_model].
    auto scratch = ForwardScratch::Create(*target, kTokens, pool.n_threads());
    EXPECT_TRUE(scratch.ok());
    auto kv = KvCache::Create(target->config(), kTokens, KvType::kF32);
    EXPECT_TRUE(kv.ok());
    const int64_t d_model = target->config().d_model;
    hidden.resize(drafter->target_layer_ids().size() * kTokens * static_cast<size_t>(d_model));
    const BatchSegment seg{&*kv, 0, kTokens, 0};
    ForwardBatch b;
    b.tokens = ids;
    b.segments = std::span<const BatchSegment>(&seg, 1);
    b.output_rows = scratch->rows(0, kTokens);
    b.hidden_layers = drafter->target_layer_ids();
    b.layer_hidden = hidden.data();
    const Status s = Forward(*target, *scratch, pool, b);
    EXPECT_TRUE(s.ok()) << s.ToString();
    stride = int64_t{kTokens} * d_model;
  }

  const float* Rows(int32_t pos) const {
    return hidden.data() + int64_t{pos} * target->config().d_model;
  }

  DFlashState State(std::shared_ptr<const DFlashDrafter> d = nullptr) {
    auto st = DFlashState::Create(d ? d : drafter, kTokens, &pool, KvType::kF32);
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    return std::move(st.value());
  }

  std::string drafter_dir;
  ThreadPool pool{2};
  std::shared_ptr<const Model> target;
  std::shared_ptr<const DFlashDrafter> drafter;
  int32_t vocab = 0;
  std::vector<int32_t> ids;
  std::vector<float> hidden;
  int64_t stride = 0;
};

Fixture& F() {
  static Fixture* f = new Fixture();
  return *f;
}

double MaxAbs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

double MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

TEST(DFlashTest, ConfigFromTheSyntheticDrafter) {
  const DFlashDrafter& d = *F().drafter;
  EXPECT_EQ(d.block_size(), 9);
  EXPECT_EQ(d.mask_token_id(), F().vocab - 1);
  EXPECT_EQ(std::vector<int32_t>(d.target_layer_ids().begin(), d.target_layer_ids().end()),
            (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(d.config().layers.n_layers, 2);
  EXPECT_EQ(DefaultTargetLayerIds(28), (std::vector<int32_t>{1, 14, 26}));
  EXPECT_EQ(DefaultTargetLayerIds(2), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(DefaultTargetLayerIds(1), (std::vector<int32_t>{0}));
}

// Drafting after the context was cut back and regrown (the target rejected drafts) computes what
// a state that only ever saw the final context computes.
TEST(DFlashTest, RollbackEqualsFromScratch) {
  Fixture& f = F();
  const int32_t B = f.drafter->block_size();
  std::vector<float> rolled(static_cast<size_t>(B) * f.vocab), fresh(rolled.size());
  std::vector<int32_t> draft_rolled, draft_fresh;
  DFlashState a = f.State();
  ASSERT_TRUE(a.AppendContext(0, 30, f.Rows(0), f.stride).ok());
  ASSERT_TRUE(a.DraftBlock(f.ids[30], 8, &draft_rolled).ok());
  ASSERT_TRUE(a.AppendContext(12, 0, nullptr, 0).ok());  // rollback only
  EXPECT_EQ(a.context_length(), 12);
  ASSERT_TRUE(a.AppendContext(12, 8, f.Rows(12), f.stride).ok());
  ASSERT_TRUE(a.AppendContext(20, 5, f.Rows(20), f.stride).ok());
  ASSERT_TRUE(a.DraftBlock(f.ids[25], 8, &draft_rolled, rolled.data()).ok());
  DFlashState b = f.State();
  ASSERT_TRUE(b.AppendContext(0, 25, f.Rows(0), f.stride).ok());
  ASSERT_TRUE(b.DraftBlock(f.ids[25], 8, &draft_fresh, fresh.data()).ok());
  // Every append is under 32 rows (30, 8, 5 vs 25) and the drafter is f32: no tile form on either
  // side, so the drafted tokens are equal by design.
  EXPECT_EQ(draft_rolled, draft_fresh);
  EXPECT_GT(MaxAbs(fresh), 0.1);
  EXPECT_LE(MaxDiff(rolled, fresh), 1e-6 * MaxAbs(fresh));
  // The block's slots are scratch: drafting twice gives the same block.
  ASSERT_TRUE(b.DraftBlock(f.ids[25], 8, &draft_fresh, rolled.data()).ok());
  EXPECT_EQ(MaxDiff(rolled, fresh), 0.0);
}

TEST(DFlashTest, DraftLengthFollowsMaxTokensAndLogitsArgmax) {
  Fixture& f = F();
  const int32_t B = f.drafter->block_size();
  std::vector<float> logits(static_cast<size_t>(B) * f.vocab);
  std::vector<int32_t> draft;
  DFlashState s = f.State();
  ASSERT_TRUE(s.AppendContext(0, 10, f.Rows(0), f.stride).ok());
  ASSERT_TRUE(s.DraftBlock(f.ids[10], 3, &draft).ok());
  EXPECT_EQ(draft.size(), 3u);
  ASSERT_TRUE(s.DraftBlock(f.ids[10], 100, &draft, logits.data()).ok());
  ASSERT_EQ(draft.size(), static_cast<size_t>(B - 1));
  for (int32_t j = 1; j < B; ++j) {
    const float* row = logits.data() + static_cast<size_t>(j) * f.vocab;
    EXPECT_EQ(draft[static_cast<size_t>(j - 1)], std::max_element(row, row + f.vocab) - row);
  }
  // No context at all: the block attends to itself only.
  DFlashState empty = f.State();
  ASSERT_TRUE(empty.DraftBlock(f.ids[0], 8, &draft).ok());
  EXPECT_EQ(draft.size(), 8u);
}

TEST(DFlashTest, QuantizedFormsStayCloseToFloat) {
  Fixture& f = F();
  const int32_t B = f.drafter->block_size();
  std::vector<float> ref(static_cast<size_t>(B) * f.vocab), q(ref.size());
  std::vector<int32_t> draft;
  DFlashState s = f.State();
  ASSERT_TRUE(s.AppendContext(0, 40, f.Rows(0), f.stride).ok());
  ASSERT_TRUE(s.DraftBlock(f.ids[40], 8, &draft, ref.data()).ok());
  const double scale = MaxAbs(ref);
  for (auto [kind, tol] : {std::pair{DFlashWeights::kInt8, 0.08}, {DFlashWeights::kInt4, 0.5}}) {
    DFlashLoadOptions o;
    o.weights = kind;
    auto d = DFlashDrafter::Load(f.drafter_dir, f.target, o);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_LT((*d)->weight_bytes() * 3, f.drafter->weight_bytes()) << DFlashWeightsName(kind);
    DFlashState sq = f.State(*d);
    ASSERT_TRUE(sq.AppendContext(0, 40, f.Rows(0), f.stride).ok());
    ASSERT_TRUE(sq.DraftBlock(f.ids[40], 8, &draft, q.data()).ok());
    const double err = MaxDiff(q, ref) / scale;
    std::printf("%s: max error %.3g of the largest logit\n",
                std::string(DFlashWeightsName(kind)).c_str(), err);
    EXPECT_LE(err, tol) << DFlashWeightsName(kind);
  }
}

TEST(DFlashTest, NoAllocationPerBlockOrContextAppend) {
  Fixture& f = F();
  DFlashState s = f.State();
  std::vector<int32_t> draft;
  draft.reserve(16);
  ASSERT_TRUE(s.AppendContext(0, 20, f.Rows(0), f.stride).ok());
  ASSERT_TRUE(s.DraftBlock(f.ids[20], 8, &draft).ok());  // warm the pool
  const int64_t before = g_allocations.load();
  for (int32_t pos = 20; pos < 30; ++pos) {
    Status a = s.AppendContext(pos, 1, f.Rows(pos), f.stride);
    Status d = s.DraftBlock(f.ids[static_cast<size_t>(pos) + 1], 8, &draft);
    if (!a.ok() || !d.ok()) FAIL() << a.ToString() << d.ToString();
  }
  Status r = s.AppendContext(22, 3, f.Rows(22), f.stride);
  if (!r.ok()) FAIL() << r.ToString();
  const int64_t allocations = g_allocations.load() - before;
#if POCKET_COUNT_ALLOCATIONS
  EXPECT_EQ(allocations, 0);
#else
  (void)allocations;
#endif
}

TEST(DFlashTest, MisuseIsAnErrorThatSaysWhy) {
  Fixture& f = F();
  DFlashState s = f.State();
  std::vector<int32_t> draft;
  Status st = s.AppendContext(1, 2, f.Rows(0), f.stride);  // past the context of 0
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("outside the context"), std::string::npos) << st.ToString();
  st = s.AppendContext(0, kTokens + 1, f.Rows(0), f.stride);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("do not fit"), std::string::npos) << st.ToString();
  st = s.AppendContext(0, 2, nullptr, f.stride);
  EXPECT_FALSE(st.ok());
  st = s.DraftBlock(f.vocab, 8, &draft);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("outside the vocabulary"), std::string::npos) << st.ToString();
  st = s.DraftBlock(0, 8, nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(DFlashState::Create(f.drafter, 0, &f.pool).ok());
  EXPECT_FALSE(DFlashState::Create(f.drafter, 8, nullptr).ok());
  EXPECT_FALSE(DFlashDrafter::Load(f.drafter_dir, nullptr).ok());
  auto missing = DFlashDrafter::Load(f.drafter_dir + "/nope", f.target);
  EXPECT_FALSE(missing.ok());
}

}  // namespace
}  // namespace pocket
