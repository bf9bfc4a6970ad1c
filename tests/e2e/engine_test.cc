// The batched engine (runtime/engine.h) on the real stories260K model: every request of a batch of
// 1 to 8, with different prompt lengths (several prefill chunks), sampling settings, constraints,
// stop strings and budgets, produces token for token what Session::GenerateUnbatched (the
// session's own token-by-token loop) produces alone, and so does Session::Generate (a one-request
// engine); requests that join while others decode, cancelled ones, and reuse of a session's
// context too.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "generate/constraint.h"
#include "model/adapter.h"
#include "model/synthetic.h"
#include "runtime/engine.h"
#include "runtime/session.h"

namespace pocket {
namespace {

const std::string kStories =
    std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/stories260K.bin";
const std::string kTok = std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/tok512.bin";

std::shared_ptr<const Model> Stories() {
  LoadOptions o;
  o.tokenizer_path = kTok;
  auto m = Model::Load(kStories, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

// One request of a test: its prompt and options (a constraint, when wanted, made per run).
struct Case {
  std::string prompt;
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  int32_t max_tokens = 40;
  std::vector<std::string> stop;
  std::vector<std::string> choices;  // a choice constraint when not empty
};

std::vector<Case> Cases() {
  std::vector<Case> c(8);
  c[0].prompt = "Once upon a time";
  c[1].prompt =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park with her friends. One day, she saw a big tree";
  c[1].max_tokens = 60;
  c[2].prompt = "The cat";
  c[2].temperature = 0.8f;
  c[2].top_k = 20;
  c[2].top_p = 0.9f;
  c[2].seed = 7;
  c[3].prompt = "Tom had a red ball. He threw it";
  c[3].choices = {"to the dog", "at the wall", "up high"};
  c[4].prompt = "One day, a boy named Tim went to the store with his mom. They wanted to buy";
  c[4].stop = {"."};
  c[4].max_tokens = 80;
  c[5].prompt = "Lily";
  c[5].temperature = 1.0f;
  c[5].top_k = 0;
  c[5].seed = 12345;
  c[5].max_tokens = 30;
  c[6].prompt =
      "The sun was shining and the birds were singing. Sam and his sister went to the beach to "
      "build a big sand castle. They had buckets and spades and a little flag for the top";
  c[6].max_tokens = 1;
  c[7].prompt = "A little bird";
  c[7].max_tokens = 0;
  return c;
}

struct Prepared {
  std::vector<int32_t> prompt;
  GenerateOptions options;
  std::unique_ptr<Constraint> constraint;
};

Prepared Prepare(const Model& model, const Case& c) {
  Prepared p;
  EncodeOptions enc;
  enc.add_bos = model.tokenizer()->spec().add_bos;
  auto ids = model.tokenizer()->Encode(c.prompt, enc);
  EXPECT_TRUE(ids.ok());
  p.prompt = *ids;
  p.options.sampling.temperature = c.temperature;
  p.options.sampling.top_k = c.top_k;
  p.options.sampling.top_p = c.top_p;
  p.options.sampling.seed = c.seed;
  p.options.max_tokens = c.max_tokens;
  p.options.stop_strings = c.stop;
  if (!c.choices.empty()) {
    auto k = MakeChoiceConstraint(*model.tokenizer(), c.choices);
    EXPECT_TRUE(k.ok());
    p.constraint = std::move(*k);
    p.options.constraint = p.constraint.get();
  }
  return p;
}

struct Fixture {
  Fixture() {
    model = Stories();
    auto p = MakeThreadPool(2);
    EXPECT_TRUE(p.ok());
    pool = *p;
    EngineOptions eo;
    eo.max_requests = 8;
    eo.max_chunk = 16;
    auto e = Engine::Create(model, pool, eo);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    if (e.ok()) engine = std::move(*e);
  }
  std::unique_ptr<Session> NewSession(int32_t n_batch = 16) {
    SessionOptions so;
    so.n_ctx = 256;
    so.n_batch = n_batch;
    so.pool = pool;
    auto s = Session::Create(model, so);
    EXPECT_TRUE(s.ok());
    return s.ok() ? std::move(*s) : nullptr;
  }
  // The oracle (GenerateUnbatched), checked against Generate on a one-request engine.
  GenerateResult Alone(const Case& c, std::vector<int32_t>* history = nullptr) {
    auto s = NewSession();
    Prepared p = Prepare(*model, c);
    auto r = s->GenerateUnbatched(std::span<const int32_t>(p.prompt), p.options);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (history != nullptr) history->assign(s->history().begin(), s->history().end());
    auto t = NewSession();
    Prepared q = Prepare(*model, c);
    auto g = t->Generate(std::span<const int32_t>(q.prompt), q.options);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    // One table, and both evaluate the prompt in the session's own n_batch chunks: by design.
    if (r.ok() && g.ok()) {
      EXPECT_EQ(g->tokens, r->tokens) << c.prompt;
      EXPECT_EQ(g->text, r->text) << c.prompt;
      EXPECT_EQ(g->stop_reason, r->stop_reason) << c.prompt;
      EXPECT_EQ(g->n_prompt_tokens, r->n_prompt_tokens) << c.prompt;
      EXPECT_EQ(g->n_forced_tokens, r->n_forced_tokens) << c.prompt;
      EXPECT_EQ(std::vector<int32_t>(t->history().begin(), t->history().end()),
                std::vector<int32_t>(s->history().begin(), s->history().end()))
          << c.prompt;
    }
    return r.ok() ? *r : GenerateResult{};
  }
  std::shared_ptr<const Model> model;
  std::shared_ptr<ThreadPool> pool;
  std::unique_ptr<Engine> engine;
};

// Same table and same chunk sizes (n_batch == max_chunk): batched and alone are bit-identical by
// design.
void ExpectSame(const GenerateResult& batched, const GenerateResult& alone, size_t i) {
  EXPECT_EQ(batched.tokens, alone.tokens) << "request " << i;
  EXPECT_EQ(batched.text, alone.text) << "request " << i;
  EXPECT_EQ(batched.stop_reason, alone.stop_reason) << "request " << i;
  EXPECT_EQ(batched.n_prompt_tokens, alone.n_prompt_tokens) << "request " << i;
  EXPECT_EQ(batched.n_reused_tokens, alone.n_reused_tokens) << "request " << i;
  EXPECT_EQ(batched.n_forced_tokens, alone.n_forced_tokens) << "request " << i;
}

TEST(EngineTest, EveryRequestOfABatchProducesWhatItProducesAlone) {
  Fixture f;
  ASSERT_TRUE(f.engine);
  const std::vector<Case> cases = Cases();
  std::vector<GenerateResult> alone;
  std::vector<std::vector<int32_t>> histories(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) alone.push_back(f.Alone(cases[i], &histories[i]));
  // The cases produce something to compare: several tokens, and not all the same.
  EXPECT_GE(alone[1].tokens.size(), 20u);
  EXPECT_NE(alone[0].tokens, alone[2].tokens);
  EXPECT_TRUE(alone[6].tokens.size() == 1 && alone[7].tokens.empty());
  for (size_t n : {1u, 2u, 3u, 5u, 8u}) {
    std::vector<std::unique_ptr<Session>> sessions;
    std::vector<Prepared> prepared;
    std::vector<int64_t> ids;
    std::vector<std::string> streamed(n);
    for (size_t i = 0; i < n; ++i) {
      sessions.push_back(f.NewSession());
      prepared.push_back(Prepare(*f.model, cases[i]));
      auto id = f.engine->Submit(sessions[i].get(), prepared[i].prompt, prepared[i].options,
                                 [&streamed, i](std::string_view piece) {
                                   streamed[i] += piece;
                                   return true;
                                 });
      ASSERT_TRUE(id.ok()) << id.status().ToString();
      ids.push_back(*id);
    }
    int32_t max_rows = 0;
    while (true) {
      auto active = f.engine->Step();
      ASSERT_TRUE(active.ok()) << active.status().ToString();
      max_rows = std::max(max_rows, f.engine->last_rows());
      if (*active == 0) break;
    }
    if (n > 1) {
      EXPECT_GT(max_rows, 16) << "requests were not batched";
    }
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(f.engine->done(ids[i]));
      auto r = f.engine->Take(ids[i]);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ExpectSame(*r, alone[i], i);
      EXPECT_EQ(streamed[i], r->text) << "request " << i;
      // The session continues as it would have: its context is the one alone leaves.
      const std::vector<int32_t> history(sessions[i]->history().begin(),
                                         sessions[i]->history().end());
      EXPECT_EQ(history, histories[i]) << "request " << i;
    }
    EXPECT_EQ(f.engine->n_active(), 0);
  }
}

TEST(EngineTest, RequestsJoinWhileOthersDecodeAndSessionsAreReused) {
  Fixture f;
  ASSERT_TRUE(f.engine);
  const std::vector<Case> cases = Cases();
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<Prepared> prepared;
  for (size_t i = 0; i < 6; ++i) {
    sessions.push_back(f.NewSession());
    prepared.push_back(Prepare(*f.model, cases[i]));
  }
  std::vector<int64_t> ids(6);
  for (size_t i = 0; i < 2; ++i) {
    auto id = f.engine->Submit(sessions[i].get(), prepared[i].prompt, prepared[i].options);
    ASSERT_TRUE(id.ok());
    ids[i] = *id;
  }
  // Four more join one by one while the first two decode (one of them a long prompt in chunks).
  for (size_t i = 2; i < 6; ++i) {
    for (int k = 0; k < 3; ++k) ASSERT_TRUE(f.engine->Step().ok());
    auto id = f.engine->Submit(sessions[i].get(), prepared[i].prompt, prepared[i].options);
    ASSERT_TRUE(id.ok());
    ids[i] = *id;
  }
  ASSERT_TRUE(f.engine->Run().ok());
  for (size_t i = 0; i < 6; ++i) {
    auto r = f.engine->Take(ids[i]);
    ASSERT_TRUE(r.ok());
    ExpectSame(*r, f.Alone(cases[i]), i);
  }
  // A second request on session 1 extends its context: the common prefix is reused as alone.
  Case more = cases[1];
  more.prompt += " and a little house";
  Prepared p = Prepare(*f.model, more);
  auto solo = f.NewSession();
  Prepared p0 = Prepare(*f.model, cases[1]);
  ASSERT_TRUE(solo->GenerateUnbatched(std::span<const int32_t>(p0.prompt), p0.options).ok());
  auto expected = solo->GenerateUnbatched(std::span<const int32_t>(p.prompt), p.options);
  ASSERT_TRUE(expected.ok());
  EXPECT_GT(expected->n_reused_tokens, 20);
  auto id = f.engine->Submit(sessions[1].get(), p.prompt, p.options);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(f.engine->Run().ok());
  auto r = f.engine->Take(*id);
  ASSERT_TRUE(r.ok());
  ExpectSame(*r, *expected, 1);
}

TEST(EngineTest, CancelStopsOneRequestOnly) {
  Fixture f;
  ASSERT_TRUE(f.engine);
  const std::vector<Case> cases = Cases();
  auto a = f.NewSession();
  auto b = f.NewSession();
  Prepared pa = Prepare(*f.model, cases[1]);
  Prepared pb = Prepare(*f.model, cases[0]);
  auto ia = f.engine->Submit(a.get(), pa.prompt, pa.options);
  auto ib = f.engine->Submit(b.get(), pb.prompt, pb.options);
  ASSERT_TRUE(ia.ok() && ib.ok());
  for (int k = 0; k < 12; ++k) ASSERT_TRUE(f.engine->Step().ok());
  a->Cancel();
  ASSERT_TRUE(f.engine->Step().ok());
  EXPECT_TRUE(f.engine->done(*ia));
  ASSERT_TRUE(f.engine->Run().ok());
  auto ra = f.engine->Take(*ia);
  auto rb = f.engine->Take(*ib);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(ra->stop_reason, StopReason::kCancelled);
  EXPECT_LT(ra->tokens.size(), static_cast<size_t>(pa.options.max_tokens));
  ExpectSame(*rb, f.Alone(cases[0]), 0);
  // The cancel request was consumed: the session's next call runs.
  auto again = a->Generate(std::span<const int32_t>(pb.prompt), pb.options);
  ASSERT_TRUE(again.ok());
  EXPECT_NE(again->stop_reason, StopReason::kCancelled);
}

// A quantized model (packed kernels: the exact form of decode rows and chunk tails, the tile form
// of full 40-row chunks) with sessions that carry adapters and sessions that do not, in one batch.
TEST(EngineTest, QuantizedBatchWithAdaptersMatchesAlone) {
  const std::string dir = std::string(POCKET_BINARY_DIR) + "/engine-test";
  std::filesystem::create_directories(dir);
  auto c = PresetConfig("tiny", Architecture::kQwen3);
  ASSERT_TRUE(c.ok());
  SyntheticOptions so;
  so.config = *c;
  so.seed = 21;
  so.weight_type = DType::kQ8_0;
  const std::string path = dir + "/tiny-q8_0.gguf";
  if (!std::filesystem::exists(path)) {
    ASSERT_TRUE(WriteSyntheticGguf(so, path).ok());
  }
  auto loaded = Model::Load(path);
  ASSERT_TRUE(loaded.ok());
  std::shared_ptr<const Model> model = *loaded;
  SyntheticAdapterOptions ao;
  ao.base = model->config();
  ao.rank = 8;
  ao.alpha = 16;
  ao.targets = {LoraTarget::kQ, LoraTarget::kV, LoraTarget::kGate, LoraTarget::kDown,
                LoraTarget::kOutput};
  ao.seed = 4;
  ao.type = DType::kBF16;
  std::filesystem::create_directories(dir + "/adapter");
  ASSERT_TRUE(WriteSyntheticAdapter(ao, dir + "/adapter").ok());
  auto adapter = LoraAdapter::Load(dir + "/adapter", *model);
  ASSERT_TRUE(adapter.ok()) << adapter.status().ToString();
  const AdapterSet set{{*adapter, 0.9f}};

  auto pool = MakeThreadPool(2);
  ASSERT_TRUE(pool.ok());
  EngineOptions eo;
  eo.max_requests = 6;
  eo.max_chunk = 40;
  auto engine = Engine::Create(model, *pool, eo);
  ASSERT_TRUE(engine.ok());
  const int32_t vocab = model->config().vocab_size;
  auto session = [&](bool with_adapter) {
    SessionOptions o;
    o.n_ctx = 192;
    o.n_batch = 40;
    o.pool = *pool;
    auto s = Session::Create(model, o);
    EXPECT_TRUE(s.ok());
    if (with_adapter) {
      EXPECT_TRUE((*s)->SetAdapters(set).ok());
    }
    return std::move(*s);
  };
  const int lengths[6] = {3, 90, 40, 1, 57, 12};
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GenerateOptions> options;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p(static_cast<size_t>(lengths[i]));
    for (int j = 0; j < lengths[i]; ++j)
      p[static_cast<size_t>(j)] = (i * 977 + j * 131 + 5) % vocab;
    prompts.push_back(p);
    GenerateOptions g;
    g.max_tokens = 24;
    g.sampling.temperature = i % 3 == 2 ? 0.9f : 0.0f;
    g.sampling.seed = static_cast<uint64_t>(i);
    options.push_back(g);
  }
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<int64_t> ids;
  for (int i = 0; i < 6; ++i) {
    sessions.push_back(session(i % 2 == 1));
    auto id = (*engine)->Submit(sessions.back().get(), prompts[static_cast<size_t>(i)],
                                options[static_cast<size_t>(i)]);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(*id);
  }
  ASSERT_TRUE((*engine)->Run().ok());
  for (size_t i = 0; i < 6; ++i) {
    auto r = (*engine)->Take(ids[i]);
    ASSERT_TRUE(r.ok());
    auto alone = session(i % 2 == 1);
    auto expected = alone->GenerateUnbatched(std::span<const int32_t>(prompts[i]), options[i]);
    ASSERT_TRUE(expected.ok());
    // Same table, same 40-row chunks (n_batch == max_chunk): the same forms on both sides. No
    // tokenizer, so no stop ids: 24 tokens by construction.
    EXPECT_EQ(r->tokens, expected->tokens) << "request " << i;
    EXPECT_EQ(r->tokens.size(), 24u) << "request " << i;
    // The adapter changes what the session generates (else the mix would prove nothing).
    if (i % 2 == 1) {
      auto bare = session(false);
      auto without = bare->GenerateUnbatched(std::span<const int32_t>(prompts[i]), options[i]);
      ASSERT_TRUE(without.ok());
      EXPECT_NE(without->tokens, r->tokens) << "request " << i;
    }
  }
}

// A KV budget of half what the 8 requests hold at their ends: sessions are saved to disk, their
// pages freed and restored later, and every request still produces what it produces alone.
TEST(EngineTest, KvBudgetSwapsSessionsAndEveryRequestCompletes) {
  Fixture f;
  ASSERT_TRUE(f.engine);
  const std::vector<Case> cases = Cases();
  std::vector<GenerateResult> alone;
  std::vector<std::vector<int32_t>> histories(cases.size());
  size_t page_bytes = 0, held = 0, largest = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    alone.push_back(f.Alone(cases[i], &histories[i]));
    auto s = f.NewSession();
    Prepared p = Prepare(*f.model, cases[i]);
    ASSERT_TRUE(s->Generate(std::span<const int32_t>(p.prompt), p.options).ok());
    page_bytes = s->kv_page_bytes();
    // Paged: the cache holds the positions used, in whole pages (not the 256-token context).
    const size_t pages = (histories[i].size() + kKvPagePositions - 1) / kKvPagePositions;
    EXPECT_LE(s->kv_bytes(), pages * page_bytes) << "request " << i;
    EXPECT_GE(s->kv_bytes(), page_bytes) << "request " << i;
    held += pages * page_bytes;
    const size_t need =
        (std::min<size_t>(p.prompt.size() + static_cast<size_t>(p.options.max_tokens), 256) +
         kKvPagePositions - 1) /
        kKvPagePositions * page_bytes;
    largest = std::max(largest, need);
  }
  EngineOptions eo;
  eo.max_requests = 8;
  eo.max_chunk = 16;
  eo.kv_budget_bytes = std::max(held / 2, largest);
  eo.swap_dir = std::string(POCKET_BINARY_DIR) + "/engine-swap";
  std::filesystem::remove_all(eo.swap_dir);  // what an earlier run left: the engine makes it
  // Swapped sessions are users' conversations: 0600 files in a 0700 directory whatever the umask.
  const mode_t saved_umask = ::umask(022);
  size_t swap_files_seen = 0;
  // ... and the bytes the stats report swapped are those files' (pocket serve's /metrics).
  auto expect_private = [&](const EngineStats& st) {
    namespace fs = std::filesystem;
    uint64_t on_disk = 0;
    if (fs::exists(eo.swap_dir)) {
      EXPECT_EQ(fs::status(eo.swap_dir).permissions(), fs::perms::owner_all);
      for (const auto& entry : fs::directory_iterator(eo.swap_dir)) {
        ++swap_files_seen;
        on_disk += entry.file_size();
        EXPECT_EQ(entry.status().permissions(), fs::perms::owner_read | fs::perms::owner_write)
            << entry.path();
      }
    }
    EXPECT_EQ(st.swapped_bytes, on_disk);
  };
  ASSERT_LT(eo.kv_budget_bytes, held);
  auto engine = Engine::Create(f.model, f.pool, eo);
  ASSERT_TRUE(engine.ok());
  Engine& e = **engine;
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<Prepared> prepared;
  std::vector<int64_t> ids;
  for (size_t i = 0; i < cases.size(); ++i) {
    sessions.push_back(f.NewSession());
    prepared.push_back(Prepare(*f.model, cases[i]));
    auto id = e.Submit(sessions[i].get(), prepared[i].prompt, prepared[i].options);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(*id);
  }
  while (true) {
    auto active = e.Step();
    ASSERT_TRUE(active.ok()) << active.status().ToString();
    EXPECT_LE(e.stats().kv_bytes, eo.kv_budget_bytes);
    expect_private(e.stats());
    if (*active == 0) break;
  }
  ::umask(saved_umask);
  EXPECT_GT(swap_files_seen, 0u);
  const EngineStats st = e.stats();
  EXPECT_GT(st.swaps_out, 0);
  EXPECT_GT(st.swaps_in, 0);
  EXPECT_LE(st.peak_kv_bytes, eo.kv_budget_bytes);
  for (size_t i = 0; i < cases.size(); ++i) {
    auto r = e.Take(ids[i]);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    // A swapped session is saved and restored bit for bit, so swaps change nothing either.
    ExpectSame(*r, alone[i], i);
    const std::vector<int32_t> history(sessions[i]->history().begin(),
                                       sessions[i]->history().end());
    EXPECT_EQ(history, histories[i]) << "request " << i;
  }
  EXPECT_EQ(e.stats().n_swapped, 0);
  // No swap file is left behind.
  EXPECT_TRUE(std::filesystem::is_empty(eo.swap_dir));
  // A request that cannot fit alone is refused, naming the sizes.
  eo.kv_budget_bytes = 2 * page_bytes;
  auto small = Engine::Create(f.model, f.pool, eo);
  ASSERT_TRUE(small.ok());
  auto big = f.NewSession();
  GenerateOptions g;
  g.max_tokens = 200;
  auto refused = (*small)->Submit(big.get(), std::vector<int32_t>(40, 5), g);
  ASSERT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("KV budget"), std::string::npos)
      << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("240 positions"), std::string::npos)
      << refused.status().ToString();
}

// A prompt of n token ids (no tokenizer: the counts must be exact).
std::vector<int32_t> Ids(int32_t n, int32_t salt) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int32_t j = 0; j < n; ++j) p[static_cast<size_t>(j)] = 1 + (salt * 131 + j * 37) % 500;
  return p;
}

// Under a budget older requests come first (a review found a swapped request waiting while newer
// ones took the room). Budget 4 pages: X (oldest, 100 + 80 positions: 3 pages at its end) evicts A
// (70 + 50: 2 pages) when it needs its third page; C (4 + 100), submitted while A is on disk,
// runs in the page left. When X ends, A comes back at once (it needs no headroom for C, which is
// newer and would be saved to make room) and ends before C, which has more tokens left. Before
// the fix A waited for room for itself and a page for every session in memory, so C went first.
TEST(EngineTest, AnOlderSwappedRequestComesBackBeforeNewerOnes) {
  Fixture f;
  ASSERT_TRUE(f.engine);
  GenerateOptions g;
  g.sampling.temperature = 0;
  g.ignore_stop_tokens = true;
  GenerateOptions gx = g, ga = g, gc = g;
  gx.max_tokens = 80;
  ga.max_tokens = 50;
  gc.max_tokens = 100;
  const std::vector<int32_t> px = Ids(100, 1), pa = Ids(70, 2), pc = Ids(4, 3);
  auto alone = [&](const std::vector<int32_t>& p, const GenerateOptions& o) {
    auto s = f.NewSession();
    auto r = s->GenerateUnbatched(std::span<const int32_t>(p), o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->tokens : std::vector<int32_t>{};
  };
  const std::vector<int32_t> want_x = alone(px, gx), want_a = alone(pa, ga), want_c = alone(pc, gc);
  auto sx = f.NewSession(), sa = f.NewSession(), sc = f.NewSession();
  EngineOptions eo;
  eo.max_requests = 8;
  eo.max_chunk = 16;
  eo.kv_budget_bytes = 4 * sx->kv_page_bytes();
  eo.swap_dir = std::string(POCKET_BINARY_DIR) + "/engine-swap-order";
  std::filesystem::remove_all(eo.swap_dir);
  std::filesystem::create_directories(eo.swap_dir);
  auto engine = Engine::Create(f.model, f.pool, eo);
  ASSERT_TRUE(engine.ok());
  Engine& e = **engine;
  auto idx = e.Submit(sx.get(), px, gx);
  auto ida = e.Submit(sa.get(), pa, ga);
  ASSERT_TRUE(idx.ok() && ida.ok());
  int64_t idc = 0;
  std::vector<int64_t> finished;
  for (int32_t step = 0; step < 1000; ++step) {
    auto active = e.Step();
    ASSERT_TRUE(active.ok()) << active.status().ToString();
    EXPECT_LE(e.stats().kv_bytes, eo.kv_budget_bytes);
    if (idc == 0 && e.stats().n_swapped == 1) {  // A is on disk: C joins
      EXPECT_FALSE(e.done(*ida));
      auto id = e.Submit(sc.get(), pc, gc);
      ASSERT_TRUE(id.ok()) << id.status().ToString();
      idc = *id;
    }
    for (int64_t id : {*idx, *ida, idc}) {
      if (id != 0 && e.done(id) &&
          std::find(finished.begin(), finished.end(), id) == finished.end()) {
        finished.push_back(id);
      }
    }
    if (*active == 0 && idc != 0) break;
  }
  ASSERT_NE(idc, 0) << "A was never swapped out: the scenario did not happen";
  EXPECT_EQ(finished, (std::vector<int64_t>{*idx, *ida, idc}));
  EXPECT_GE(e.stats().swaps_in, 1);
  auto rx = e.Take(*idx);
  auto ra = e.Take(*ida);
  auto rc = e.Take(idc);
  ASSERT_TRUE(rx.ok() && ra.ok() && rc.ok());
  // Same table and chunks as alone, and swaps restore the KV bits exactly: the same tokens.
  EXPECT_EQ(rx->tokens, want_x);
  EXPECT_EQ(ra->tokens, want_a);
  EXPECT_EQ(rc->tokens, want_c);
}

// A session destroyed while its request runs (or waits on disk) drops the request and its swap
// file; an engine that ends with requests not taken hands their sessions back with their context,
// a swapped one loaded from its file (a review found it left empty).
TEST(EngineTest, SessionsAndEnginesEndInEitherOrder) {
  Fixture f;
  ASSERT_TRUE(f.engine);
  GenerateOptions g;
  g.sampling.temperature = 0;
  g.ignore_stop_tokens = true;
  GenerateOptions gx = g, ga = g;
  gx.max_tokens = 80;
  ga.max_tokens = 50;
  const std::vector<int32_t> px = Ids(100, 1), pa = Ids(70, 2);
  std::vector<int32_t> want_a;
  {
    auto s = f.NewSession();
    ASSERT_TRUE(s->GenerateUnbatched(std::span<const int32_t>(pa), ga).ok());
    want_a.assign(s->history().begin(), s->history().end());
  }
  EngineOptions eo;
  eo.max_requests = 8;
  eo.max_chunk = 16;
  eo.swap_dir = std::string(POCKET_BINARY_DIR) + "/engine-swap-end";
  for (int round = 0; round < 2; ++round) {
    std::filesystem::remove_all(eo.swap_dir);
    std::filesystem::create_directories(eo.swap_dir);
    auto sx = f.NewSession(), sa = f.NewSession();
    eo.kv_budget_bytes = 4 * sx->kv_page_bytes();
    auto engine = Engine::Create(f.model, f.pool, eo);
    ASSERT_TRUE(engine.ok());
    auto idx = (*engine)->Submit(sx.get(), px, gx);
    auto ida = (*engine)->Submit(sa.get(), pa, ga);
    ASSERT_TRUE(idx.ok() && ida.ok());
    while ((*engine)->stats().n_swapped == 0) {
      auto active = (*engine)->Step();
      ASSERT_TRUE(active.ok());
      ASSERT_GT(*active, 0) << "A was never swapped out: the scenario did not happen";
    }
    ASSERT_FALSE(std::filesystem::is_empty(eo.swap_dir));
    if (round == 0) {
      // A's session ends while it is on disk: its request and file go; X goes on.
      sa.reset();
      EXPECT_TRUE(std::filesystem::is_empty(eo.swap_dir));
      EXPECT_EQ((*engine)->stats().n_swapped, 0);
      ASSERT_TRUE((*engine)->Run().ok());
      EXPECT_EQ((*engine)->Take(*ida).status().code(), StatusCode::kNotFound);
      EXPECT_TRUE((*engine)->Take(*idx).ok());
    } else {
      // The engine ends first: A's session gets back the context it had when saved.
      engine->reset();
      EXPECT_TRUE(std::filesystem::is_empty(eo.swap_dir));
      const std::vector<int32_t> h(sa->history().begin(), sa->history().end());
      EXPECT_GT(h.size(), pa.size());
      ASSERT_LE(h.size(), want_a.size());
      EXPECT_EQ(h, std::vector<int32_t>(want_a.begin(), want_a.begin() + h.size()));
      // And it is free for another engine (or Generate).
      auto r = sa->Generate(std::span<const int32_t>(pa), ga);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
    }
  }
}

TEST(EngineTest, RefusesWhatItCannotRun) {
  Fixture f;
  ASSERT_TRUE(f.engine);
  auto s = f.NewSession();
  const std::vector<int32_t> prompt = {1, 2, 3};
  GenerateOptions g;
  g.sampling.temperature = 0;
  // A token outside the vocabulary, named by its position.
  const std::vector<int32_t> bad = {1, 2, 100000};
  auto r = f.engine->Submit(s.get(), bad, g);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);  // as the forward pass says it
  EXPECT_NE(r.status().message().find("prompt token 2"), std::string::npos)
      << r.status().ToString();
  // A session of another pool; a prefill chunk over the engine's.
  SessionOptions so;
  so.n_ctx = 64;
  so.n_threads = 1;
  auto other = Session::Create(f.model, so);
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(f.engine->Submit(other->get(), prompt, g).ok());
  auto wide = f.NewSession(64);
  EXPECT_FALSE(f.engine->Submit(wide.get(), prompt, g).ok());
  // A session twice; an empty prompt; a too long one.
  auto id = f.engine->Submit(s.get(), prompt, g);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(f.engine->Submit(s.get(), prompt, g).status().code(), StatusCode::kFailedPrecondition);
  auto t = f.NewSession();
  EXPECT_FALSE(f.engine->Submit(t.get(), {}, g).ok());
  const std::vector<int32_t> long_prompt(300, 5);
  EXPECT_EQ(f.engine->Submit(t.get(), long_prompt, g).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(f.engine->Take(*id).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.engine->Take(999).status().code(), StatusCode::kNotFound);
  // From inside a step (a stream callback), the engine refuses to be changed.
  Status inside = Status::Ok();
  auto u = f.NewSession();
  GenerateOptions g8 = g;
  g8.max_tokens = 8;
  auto cb = f.engine->Submit(u.get(), std::vector<int32_t>{1, 2, 3, 4}, g8, [&](std::string_view) {
    if (inside.ok()) inside = f.engine->Take(*id).status();
    return true;
  });
  ASSERT_TRUE(cb.ok());
  ASSERT_TRUE(f.engine->Run().ok());
  EXPECT_EQ(inside.code(), StatusCode::kFailedPrecondition) << inside.ToString();
  EXPECT_TRUE(f.engine->Take(*id).ok());
  EXPECT_TRUE(f.engine->Take(*cb).ok());
}

}  // namespace
}  // namespace pocket

namespace pocket {
namespace {

// Scoring as engine work (Engine::SubmitScore): a score request runs beside generating ones, its
// prompt in chunks and its candidates a group a step (the scoring session's n_batch of 16 makes
// several groups), and gives Session::Score's numbers while the generating request still makes
// what it makes alone. The groups' passes hold other rows than Session::Score's one pass, which
// on some tables (avx2) rounds differently in the last bits: equal to 1e-4, the ranking the same.
TEST(EngineScoreTest, ScoresBesideGenerationAsSessionScoreDoes) {
  auto model = Stories();
  ASSERT_TRUE(model);
  auto pool = MakeThreadPool(2);
  ASSERT_TRUE(pool.ok());
  EngineOptions eo;
  eo.max_chunk = 32;
  auto engine = Engine::Create(model, *pool, eo);
  ASSERT_TRUE(engine.ok());
  auto session = [&](int32_t n_batch) {
    SessionOptions so;
    so.n_ctx = 512;
    so.n_batch = n_batch;
    so.pool = *pool;
    auto s = Session::Create(model, so);
    EXPECT_TRUE(s.ok());
    return s.ok() ? std::move(*s) : nullptr;
  };
  const Tokenizer& tok = *model->tokenizer();
  EncodeOptions enc;
  enc.add_bos = true;
  std::string text;
  for (int i = 0; i < 3; ++i) {
    text += "Once upon a time, there was a little girl named Lily. She loved to play outside. ";
  }
  auto prompt = tok.Encode(text + "One day she saw a", enc);
  ASSERT_TRUE(prompt.ok());
  EncodeOptions plain;
  std::vector<std::vector<int32_t>> candidates;
  for (const char* c : {" big dog in the park", " cat", " bird that could sing very well", " tree",
                        " little red ball under the table"}) {
    auto ids = tok.Encode(c, plain);
    ASSERT_TRUE(ids.ok());
    candidates.push_back(*ids);
  }
  auto alone = session(64);
  auto want = alone->Score(*prompt, candidates);
  ASSERT_TRUE(want.ok()) << want.status().ToString();

  GenerateOptions g;
  g.sampling.temperature = 0.0f;
  g.max_tokens = 60;
  auto gen_alone = session(32);
  auto expected = gen_alone->GenerateUnbatched(*prompt, g);
  ASSERT_TRUE(expected.ok());

  auto gen = session(32);
  auto scorer = session(16);
  auto ig = (*engine)->Submit(gen.get(), *prompt, g);
  ASSERT_TRUE(ig.ok());
  auto is = (*engine)->SubmitScore(scorer.get(), *prompt, candidates);
  ASSERT_TRUE(is.ok()) << is.status().ToString();
  int32_t steps = 0, max_rows = 0;
  while ((*engine)->n_active() > 0) {
    ASSERT_TRUE((*engine)->Step().ok());
    ++steps;
    max_rows = std::max(max_rows, (*engine)->last_rows());
  }
  // Chunks of 16 prompt rows and candidate groups of at most 16 rows beside one decode row (the
  // generating request's prompt, 32 a step, comes first).
  EXPECT_LE(max_rows, 32 + 16);
  auto got = (*engine)->TakeScores(*is);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < got->size(); ++i) {
    EXPECT_EQ((*got)[i].index, (*want)[i].index);
    ASSERT_EQ((*got)[i].token_logprobs.size(), (*want)[i].token_logprobs.size());
    for (size_t j = 0; j < (*got)[i].token_logprobs.size(); ++j) {
      EXPECT_NEAR((*got)[i].token_logprobs[j], (*want)[i].token_logprobs[j], 1e-4)
          << "candidate " << i << " token " << j;
    }
    EXPECT_NEAR((*got)[i].probability, (*want)[i].probability, 1e-5);
  }
  EXPECT_EQ(scorer->history().size(), prompt->size());  // the context stays the prompt
  auto r = (*engine)->Take(*ig);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens, expected->tokens);
  // Take and TakeScores do not mix up the kinds; a bad candidate or one longer than a step's
  // rows is refused; a cancelled score request ends with Cancelled.
  auto again = (*engine)->SubmitScore(scorer.get(), *prompt, candidates);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*engine)->Run().ok());
  EXPECT_EQ((*engine)->Take(*again).status().code(), StatusCode::kFailedPrecondition);
  auto kept = (*engine)->TakeScores(*again);  // the wrong Take left it there
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(kept->size(), candidates.size());
  EXPECT_EQ((*engine)->TakeScores(*ig).status().code(), StatusCode::kNotFound);  // taken
  auto empty = (*engine)->SubmitScore(scorer.get(), *prompt, {{}});
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  std::vector<int32_t> too_long(18, candidates[0][0]);
  auto longer = (*engine)->SubmitScore(scorer.get(), *prompt, {too_long});
  EXPECT_EQ(longer.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(longer.status().message().find("candidate 0"), std::string::npos);
  scorer->Reset();
  auto cancelled = (*engine)->SubmitScore(scorer.get(), *prompt, candidates);
  ASSERT_TRUE(cancelled.ok());
  ASSERT_TRUE((*engine)->Step().ok());
  scorer->Cancel();
  ASSERT_TRUE((*engine)->Run().ok());
  EXPECT_EQ((*engine)->TakeScores(*cancelled).status().code(), StatusCode::kCancelled);
}

}  // namespace
}  // namespace pocket
