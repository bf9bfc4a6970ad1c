// No heap allocation per decoded token: between one streamed token and the next, Session::Generate
// (the token-step pipeline, the forward pass, the thread pool, the sampler, the text stream)
// allocates nothing but the paged KV cache's pages, one per 64 positions the session reaches for
// the first time (counted: exactly the pages its cache grew by); a session whose pages are held
// from an earlier turn allocates nothing at all. A binary of its own: it replaces the global
// operator new to count allocations (skipped under the sanitizers, which bring their own). Uses the
// real stories260K.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <vector>

#include <filesystem>

#include "generate/constraint.h"
#include "generate/drafter.h"
#include "model/dflash.h"
#include "runtime/block_drafter.h"
#include "runtime/draft_model.h"
#include "runtime/session.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define POCKET_COUNT_ALLOCATIONS 0
#else
#define POCKET_COUNT_ALLOCATIONS 1
#endif

namespace {
std::atomic<int64_t> g_allocations{0};
// Where TheCountCanFail's allocation escapes to, so the compiler cannot elide the new/delete pair.
std::vector<int>* volatile g_sink = nullptr;
}  // namespace

#if POCKET_COUNT_ALLOCATIONS
// The replacements pair malloc with free; GCC, seeing a replaced operator new inlined next to a
// free, takes it for a mismatch.
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

const std::string kStories =
    std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/stories260K.bin";
const std::string kTok = std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/tok512.bin";

// Allocations counted at every streamed piece of one Generate call.
struct Trace {
  std::vector<int64_t> at_piece;
  std::vector<size_t> kv_bytes_at_piece;  // the session's KV bytes held at each piece
  size_t kv_page_bytes = 0;
  GenerateResult result;
};

Trace GenerateTraced(Session& session, const GenerateOptions& options) {
  Trace trace;
  trace.at_piece.reserve(1024);
  trace.kv_bytes_at_piece.reserve(1024);
  const ModelConfig& c = session.model().config();
  trace.kv_page_bytes = static_cast<size_t>(c.n_layers) * static_cast<size_t>(c.n_kv_heads) * 2 *
                        kKvPagePositions * static_cast<size_t>(c.head_dim) * 2;  // f16
  EXPECT_EQ(trace.kv_page_bytes, session.kv_page_bytes());
  auto r = session.Generate("Once upon a time", options, [&](std::string_view) {
    trace.at_piece.push_back(g_allocations.load(std::memory_order_relaxed));
    trace.kv_bytes_at_piece.push_back(session.kv_bytes());
    return true;
  });
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (r.ok()) trace.result = std::move(*r);
  return trace;
}

// Between the 2nd streamed piece and the last, nothing was allocated (the first token may still
// grow a buffer to its working size).
void ExpectNoAllocationPerToken(const Trace& t, int32_t min_pieces) {
  ASSERT_GE(static_cast<int32_t>(t.at_piece.size()), min_pieces)
      << "too few tokens to measure; stop reason " << StopReasonName(t.result.stop_reason);
  const int64_t pages =
      static_cast<int64_t>((t.kv_bytes_at_piece.back() - t.kv_bytes_at_piece[1]) / t.kv_page_bytes);
  EXPECT_EQ(t.at_piece.back() - t.at_piece[1], pages)
      << "heap allocations over " << t.at_piece.size() - 2 << " decoded tokens, of which " << pages
      << " KV pages";
}

class DecodeAllocTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!POCKET_COUNT_ALLOCATIONS) GTEST_SKIP() << "the sanitizers replace operator new";
    LoadOptions o;
    o.tokenizer_path = kTok;
    auto m = Model::Load(kStories, o);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = *m;
    auto pool = MakeThreadPool(GetParam());
    ASSERT_TRUE(pool.ok());
    pool_ = *pool;
    SessionOptions so;
    so.n_ctx = 256;
    so.pool = pool_;  // shared with the drafters (they run in turn)
    auto s = Session::Create(model_, so);
    ASSERT_TRUE(s.ok());
    session_ = std::move(*s);
  }
  std::shared_ptr<const Model> model_;
  std::shared_ptr<ThreadPool> pool_;
  std::unique_ptr<Session> session_;
};

TEST_P(DecodeAllocTest, Greedy) {
  GenerateOptions o;
  o.sampling.temperature = 0.0f;
  o.max_tokens = 140;
  o.ignore_stop_tokens = true;
  const Trace first = GenerateTraced(*session_, o);
  ExpectNoAllocationPerToken(first, 24);
  // The cache grew by pages as the context did (the count can fail: 140 tokens cross pages).
  EXPECT_GE(first.kv_bytes_at_piece.back() - first.kv_bytes_at_piece[1], 2 * first.kv_page_bytes);
  // The same turn again: the pages are held (the history is cut back to the prompt, its pages
  // kept for reuse), so nothing at all is allocated.
  const Trace again = GenerateTraced(*session_, o);
  ExpectNoAllocationPerToken(again, 24);
  EXPECT_EQ(again.at_piece.back() - again.at_piece[1], 0);
}

TEST_P(DecodeAllocTest, SamplingWithPenaltiesAndStopStrings) {
  GenerateOptions o;
  o.sampling.temperature = 0.9f;
  o.sampling.top_k = 40;
  o.sampling.top_p = 0.9f;
  o.sampling.repetition_penalty = 1.1f;
  o.sampling.presence_penalty = 0.5f;
  o.sampling.frequency_penalty = 0.2f;
  o.sampling.seed = 7;
  o.max_tokens = 48;
  o.ignore_stop_tokens = true;  // 24+ pieces on every table, whatever the story does
  o.stop_strings = {"zzzz", "qqq"};
  ExpectNoAllocationPerToken(GenerateTraced(*session_, o), 24);
}

TEST_P(DecodeAllocTest, SpeculativeWithPromptLookup) {
  PromptLookupDrafter lookup({.min_ngram = 1, .max_ngram = 3});
  GenerateOptions o;
  o.sampling.temperature = 0.0f;
  o.max_tokens = 64;
  o.ignore_stop_tokens = true;  // 24+ pieces on every table, whatever the story does
  o.drafter = &lookup;
  const Trace t = GenerateTraced(*session_, o);
  EXPECT_GT(t.result.n_verify_passes, 0);
  ExpectNoAllocationPerToken(t, 24);
}

TEST_P(DecodeAllocTest, SpeculativeWithADraftTree) {
  PromptLookupDrafter lookup({.min_ngram = 1, .max_ngram = 3, .max_branches = 4});
  GenerateOptions o;
  o.sampling.temperature = 0.0f;
  o.max_tokens = 64;
  o.ignore_stop_tokens = true;  // 24+ pieces on every table, whatever the story does
  o.drafter = &lookup;
  const Trace t = GenerateTraced(*session_, o);
  EXPECT_GT(t.result.n_tree_passes, 0);
  ExpectNoAllocationPerToken(t, 24);
}

TEST_P(DecodeAllocTest, SpeculativeWithADraftModel) {
  for (float draft_temperature : {0.0f, 1.0f}) {
    for (bool automatic : {false, true}) {
      DraftModelOptions d;
      d.temperature = draft_temperature;
      d.session.n_ctx = 256;
      d.session.pool = pool_;
      auto drafter = DraftModelDrafter::Create(model_, *model_, d);
      ASSERT_TRUE(drafter.ok()) << drafter.status().ToString();
      GenerateOptions o;
      o.sampling.temperature = draft_temperature;  // a sampled draft under a sampled target
      o.sampling.seed = 3;
      o.max_tokens = 64;
      o.ignore_stop_tokens = true;  // 24+ pieces on every table, whatever the story does
      o.drafter = drafter->get();
      o.spec_auto = automatic;
      SCOPED_TRACE(testing::Message()
                   << "draft temperature " << draft_temperature << ", auto " << automatic);
      session_->Reset();
      // A first turn grows the draft model's own KV pages too (they are not the target session's
      // to count); the measured turn after it finds every page held. The first turn drafts every
      // step (not auto: auto's choices follow timings), so it reaches every position a later
      // turn's drafts can.
      GenerateOptions warm = o;
      warm.spec_auto = false;
      GenerateTraced(*session_, warm);
      const Trace t = GenerateTraced(*session_, o);
      EXPECT_EQ(t.at_piece.back() - t.at_piece[1], 0);
      // (Auto may rightly decline: this draft model costs as much as the target.)
      if (!automatic) {
        EXPECT_GT(t.result.n_verify_passes, 0);
      }
      ExpectNoAllocationPerToken(t, 24);
    }
  }
}

TEST_P(DecodeAllocTest, SpeculativeWithABlockDrafter) {
  const std::string dir = ::testing::TempDir() + "/alloc-dflash";
  std::filesystem::create_directories(dir);
  DFlashSyntheticOptions w;
  w.target = model_->config();
  ASSERT_TRUE(WriteSyntheticDFlashDrafter(w, dir).ok());
  auto loaded = DFlashDrafter::Load(dir, model_);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  for (bool automatic : {false, true}) {
    auto drafter = BlockDrafter::Create(*loaded, 256, pool_);
    ASSERT_TRUE(drafter.ok()) << drafter.status().ToString();
    GenerateOptions o;
    o.sampling.temperature = 0.0f;
    o.max_tokens = 64;
    o.ignore_stop_tokens = true;  // 24+ pieces on every table, whatever the story does
    o.drafter = drafter->get();
    o.spec_auto = automatic;
    session_->Reset();
    const Trace t = GenerateTraced(*session_, o);
    if (!automatic) {
      EXPECT_GT(t.result.n_verify_passes, 0);
    }
    ExpectNoAllocationPerToken(t, 24);
  }
}

TEST_P(DecodeAllocTest, TheCountCanFail) {
  // The counter sees an allocation made inside the callback: the measurement is real.
  GenerateOptions o;
  o.sampling.temperature = 0.0f;
  o.max_tokens = 8;
  int64_t before = 0, after = 0;
  int pieces = 0;
  auto r = session_->Generate("Once upon a time", o, [&](std::string_view) {
    if (++pieces == 3) {
      before = g_allocations.load();
      g_sink = new std::vector<int>(100);
      delete g_sink;
      g_sink = nullptr;
      after = g_allocations.load();
    }
    return true;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(after - before, 2);
}

INSTANTIATE_TEST_SUITE_P(Threads, DecodeAllocTest, ::testing::Values(1, 2));

}  // namespace
}  // namespace pocket
