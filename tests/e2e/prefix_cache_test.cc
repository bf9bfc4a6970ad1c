// The prefix cache (runtime/prefix_cache.h): a session whose prompt starts with a prefix another
// session evaluated copies those keys and values instead of evaluating them, and generates what it
// generates without the cache; entries are per model, adapter set and KV type, evicted least
// recently used beyond the budget; the engine's requests use it too. Real stories260K and a
// quantized synthetic model.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "model/adapter.h"
#include "model/synthetic.h"
#include "runtime/engine.h"
#include "runtime/prefix_cache.h"
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

std::vector<int32_t> Encode(const Model& m, const std::string& text) {
  EncodeOptions enc;
  enc.add_bos = m.tokenizer()->spec().add_bos;
  auto ids = m.tokenizer()->Encode(text, enc);
  EXPECT_TRUE(ids.ok());
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

const char kStory[] =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park "
    "with her friends. One day, she saw a big tree with a red ball stuck in its branches. She "
    "wanted the ball very much, so she asked her friend Tom to help her";

std::unique_ptr<Session> NewSession(std::shared_ptr<const Model> model,
                                    std::shared_ptr<PrefixCache> cache,
                                    KvType type = KvType::kF16) {
  SessionOptions so;
  so.n_ctx = 256;
  so.n_batch = 32;
  so.n_threads = 2;
  so.kv_type = type;
  so.prefix_cache = std::move(cache);
  auto s = Session::Create(std::move(model), so);
  EXPECT_TRUE(s.ok());
  return s.ok() ? std::move(*s) : nullptr;
}

GenerateOptions Greedy(int32_t n) {
  GenerateOptions g;
  g.sampling.temperature = 0.0f;
  g.max_tokens = n;
  return g;
}

TEST(PrefixCacheTest, ASecondSessionCopiesTheSharedPrefixAndGeneratesTheSame) {
  auto model = Stories();
  ASSERT_TRUE(model);
  auto cache = std::make_shared<PrefixCache>();
  const std::vector<int32_t> first = Encode(*model, kStory);
  ASSERT_GE(first.size(), 50u);
  std::vector<int32_t> second = Encode(*model, std::string(kStory) + " get it down.");
  auto a = NewSession(model, cache);
  auto ra = a->Generate(std::span<const int32_t>(first), Greedy(20));
  ASSERT_TRUE(ra.ok());
  EXPECT_EQ(ra->n_cached_tokens, 0);
  EXPECT_EQ(cache->stats().stores, 1);
  EXPECT_EQ(cache->stats().entries, 1);
  // The entry is a's whole context, its reply too: b reuses as much of it as its prompt repeats
  // (stories260K continues the story with the words the second prompt adds), to the token.
  const std::span<const int32_t> context = a->history();
  ASSERT_EQ(context.size(), first.size() + ra->tokens.size() - 1);
  size_t common = 0;
  while (common < context.size() && common < second.size() - 1 &&
         context[common] == second[common]) {
    ++common;
  }
  ASSERT_GE(common, first.size());
  a.reset();  // the entry outlives the session that computed it

  auto b = NewSession(model, cache);
  auto rb = b->Generate(std::span<const int32_t>(second), Greedy(40));
  ASSERT_TRUE(rb.ok());
  const int32_t expect_cached = static_cast<int32_t>(common);
  EXPECT_EQ(rb->n_cached_tokens, expect_cached);
  EXPECT_EQ(rb->n_reused_tokens, expect_cached);
  EXPECT_EQ(rb->n_prompt_tokens, static_cast<int32_t>(second.size()) - expect_cached);
  auto alone = NewSession(model, nullptr);
  auto expected = alone->Generate(std::span<const int32_t>(second), Greedy(40));
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(rb->tokens, expected->tokens);
  EXPECT_EQ(rb->text, expected->text);
  EXPECT_EQ(b->history().size(), alone->history().size());
  // The logits after the last token are those without the cache, bit for bit (f32 model: one
  // kernel form, whatever the chunks).
  EXPECT_TRUE(
      std::equal(b->last_logits().begin(), b->last_logits().end(), alone->last_logits().begin()));
  auto c = NewSession(model, cache);
  ASSERT_TRUE(c->SetContext(second).ok());  // SetContext does not use the cache
  EXPECT_EQ(cache->stats().hits, 1);
  // b's context (its prompt and reply) was stored beside a's, which b's prompt does not extend
  // where a's reply and b's prompt part.
  EXPECT_EQ(cache->stats().entries, common + 1 < first.size() + ra->tokens.size() ? 2 : 1);
  const PrefixCacheStats st = cache->stats();
  EXPECT_EQ(st.hit_tokens, expect_cached);
  // A prompt that differs within its first 16 tokens (PrefixCacheOptions::min_match) gets
  // nothing.
  std::vector<int32_t> other = second;
  other[3] = (other[3] + 1) % model->config().vocab_size;
  auto d = NewSession(model, cache);
  auto rd = d->Generate(std::span<const int32_t>(other), Greedy(4));
  ASSERT_TRUE(rd.ok());
  EXPECT_EQ(rd->n_cached_tokens, 0);
}

TEST(PrefixCacheTest, EntriesArePerAdapterSetAndKvTypeAndEvictedLeastRecentlyUsed) {
  const std::string dir = std::string(POCKET_BINARY_DIR) + "/prefix-cache-test";
  std::filesystem::create_directories(dir + "/adapter");
  auto c = PresetConfig("tiny", Architecture::kQwen3);
  ASSERT_TRUE(c.ok());
  SyntheticOptions so;
  so.config = *c;
  so.seed = 31;
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
  ao.rank = 4;
  ao.alpha = 8;
  ao.targets = {LoraTarget::kK, LoraTarget::kV};
  ao.seed = 2;
  ASSERT_TRUE(WriteSyntheticAdapter(ao, dir + "/adapter").ok());
  auto adapter = LoraAdapter::Load(dir + "/adapter", *model);
  ASSERT_TRUE(adapter.ok());
  const int32_t vocab = model->config().vocab_size;
  std::vector<int32_t> prompt(100);
  for (size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<int32_t>((i * 37 + 11) % vocab);
  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), {5, 6, 7, 8, 9});

  auto cache = std::make_shared<PrefixCache>();
  auto bare = NewSession(model, cache);
  ASSERT_TRUE(bare->Generate(std::span<const int32_t>(prompt), Greedy(2)).ok());
  // Another adapter set, another KV type: no hit.
  auto with = NewSession(model, cache);
  ASSERT_TRUE(with->SetAdapters({{*adapter, 1.0f}}).ok());
  auto r = with->Generate(std::span<const int32_t>(longer), Greedy(8));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->n_cached_tokens, 0);
  auto q8 = NewSession(model, cache, KvType::kQ8);
  auto rq = q8->Generate(std::span<const int32_t>(longer), Greedy(8));
  ASSERT_TRUE(rq.ok());
  EXPECT_EQ(rq->n_cached_tokens, 0);
  EXPECT_EQ(cache->stats().entries, 3);
  // The same set on a new session: a hit, and the tokens it makes without the cache (the copied
  // rows were computed in the same chunks of 32 as its own would be).
  auto with2 = NewSession(model, cache);
  ASSERT_TRUE(with2->SetAdapters({{*adapter, 1.0f}}).ok());
  // A prompt that parts from `longer` at 96 = 3 whole chunks of n_batch keeps this exact on tile
  // tables: no cached row changes form.
  std::vector<int32_t> parted(prompt.begin(), prompt.begin() + 96);
  parted.insert(parted.end(), {(prompt[96] + 1) % vocab, 5, 6, 7, 8, 9});
  auto r2 = with2->Generate(std::span<const int32_t>(parted), Greedy(8));
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->n_cached_tokens, 96);
  auto with_alone = NewSession(model, nullptr);
  ASSERT_TRUE(with_alone->SetAdapters({{*adapter, 1.0f}}).ok());
  auto r2_alone = with_alone->Generate(std::span<const int32_t>(parted), Greedy(8));
  ASSERT_TRUE(r2_alone.ok());
  EXPECT_EQ(r2->tokens, r2_alone->tokens);

  // A budget of one and a half entries: the least recently used goes.
  auto one = KvCache::Create(model->config(), 96, KvType::kF16);
  ASSERT_TRUE(one.ok());
  PrefixCacheOptions small;
  small.max_bytes = (one->context_bytes() + 96 * sizeof(int32_t)) * 3 / 2;
  auto tight = std::make_shared<PrefixCache>(small);
  std::vector<int32_t> p2 = prompt;
  p2[0] = (p2[0] + 1) % vocab;
  auto s1 = NewSession(model, tight);
  ASSERT_TRUE(s1->Generate(std::span<const int32_t>(prompt), Greedy(1)).ok());
  ASSERT_TRUE(s1->Generate(std::span<const int32_t>(p2), Greedy(1)).ok());
  EXPECT_EQ(tight->stats().entries, 1);
  EXPECT_EQ(tight->stats().evictions, 1);
  auto s2 = NewSession(model, tight);
  auto hit = s2->Generate(std::span<const int32_t>(p2), Greedy(1));
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->n_cached_tokens, static_cast<int32_t>(p2.size()) - 1);  // the most recent entry
  auto s3 = NewSession(model, tight);
  auto miss = s3->Generate(std::span<const int32_t>(prompt), Greedy(1));
  ASSERT_TRUE(miss.ok());
  EXPECT_EQ(miss->n_cached_tokens, 0);  // evicted

  // The cache does not keep a model alive, and a model that is gone matches nothing, not even
  // another load of the same file.
  auto outliving = std::make_shared<PrefixCache>();
  {
    auto first_load = Model::Load(path);
    ASSERT_TRUE(first_load.ok());
    auto s = NewSession(*first_load, outliving);
    ASSERT_TRUE(s->Generate(std::span<const int32_t>(prompt), Greedy(1)).ok());
    EXPECT_EQ(outliving->stats().entries, 1);
  }
  auto second_load = Model::Load(path);
  ASSERT_TRUE(second_load.ok());
  auto s5 = NewSession(*second_load, outliving);
  auto fresh = s5->Generate(std::span<const int32_t>(prompt), Greedy(1));
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(fresh->n_cached_tokens, 0);
  EXPECT_EQ(outliving->stats().entries, 1);  // the dead model's entry dropped, the new one kept
}

TEST(PrefixCacheTest, EngineRequestsUseTheCache) {
  auto model = Stories();
  ASSERT_TRUE(model);
  auto cache = std::make_shared<PrefixCache>();
  auto pool = MakeThreadPool(2);
  ASSERT_TRUE(pool.ok());
  EngineOptions eo;
  eo.max_chunk = 32;
  auto engine = Engine::Create(model, *pool, eo);
  ASSERT_TRUE(engine.ok());
  auto session = [&](std::shared_ptr<PrefixCache> c) -> std::unique_ptr<Session> {
    SessionOptions so;
    so.n_ctx = 256;
    so.n_batch = 32;
    so.pool = *pool;
    so.prefix_cache = std::move(c);
    auto s = Session::Create(model, so);
    EXPECT_TRUE(s.ok());
    return s.ok() ? std::move(*s) : nullptr;
  };
  const std::vector<int32_t> first = Encode(*model, kStory);
  const std::vector<int32_t> second = Encode(*model, std::string(kStory) + " climb the tree.");
  auto a = session(cache);
  auto ia = (*engine)->Submit(a.get(), first, Greedy(10));
  ASSERT_TRUE(ia.ok());
  ASSERT_TRUE((*engine)->Run().ok());
  ASSERT_TRUE((*engine)->Take(*ia).ok());
  auto b = session(cache);
  auto ib = (*engine)->Submit(b.get(), second, Greedy(30));
  ASSERT_TRUE(ib.ok());
  ASSERT_TRUE((*engine)->Run().ok());
  auto rb = (*engine)->Take(*ib);
  ASSERT_TRUE(rb.ok());
  size_t common = 0;
  while (common < a->history().size() && common < second.size() - 1 &&
         a->history()[common] == second[common]) {
    ++common;
  }
  ASSERT_GE(common, first.size());
  EXPECT_EQ(rb->n_cached_tokens, static_cast<int32_t>(common));
  auto alone = session(nullptr);
  auto expected = alone->Generate(std::span<const int32_t>(second), Greedy(30));
  ASSERT_TRUE(expected.ok());
  // Other chunks after the restore, but stories260K (f32, head_dim 8) never takes a tile form.
  EXPECT_EQ(rb->tokens, expected->tokens);
}

// Whole pages of a prefix are shared, not copied: the session that stored it, the entry and the
// sessions that restore it hold the same pages (the engine counts them once), and a session that
// rewinds into its prefix copies the page it writes, leaving the entry's as they were.
TEST(PrefixCacheTest, WholePagesAreSharedAndCopiedOnlyWhenWritten) {
  auto model = Stories();
  ASSERT_TRUE(model);
  auto cache = std::make_shared<PrefixCache>();
  auto pool = MakeThreadPool(2);
  ASSERT_TRUE(pool.ok());
  auto session = [&](std::shared_ptr<PrefixCache> c) -> std::unique_ptr<Session> {
    SessionOptions so;
    so.n_ctx = 512;
    so.n_batch = 32;
    so.pool = *pool;
    so.prefix_cache = std::move(c);
    auto s = Session::Create(model, so);
    EXPECT_TRUE(s.ok());
    return s.ok() ? std::move(*s) : nullptr;
  };
  std::string text;
  for (int i = 0; i < 4; ++i) text += std::string(kStory) + ". ";
  const std::vector<int32_t> prompt = Encode(*model, text);
  ASSERT_GE(prompt.size(), 300u);
  ASSERT_LE(prompt.size(), 400u);
  const size_t whole_pages = prompt.size() / 16 * 16 / kKvPagePositions;
  ASSERT_GE(whole_pages, 4u);

  auto alone = session(nullptr);
  auto expected = alone->Generate(std::span<const int32_t>(prompt), Greedy(24));
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(alone->kv_shared_bytes(), 0u);

  auto a = session(cache);
  auto ra = a->Generate(std::span<const int32_t>(prompt), Greedy(24));
  ASSERT_TRUE(ra.ok());
  // Here and below: stories260K (f32, head_dim 8) never takes a tile form, so a restored prefix
  // followed by other chunks gives the same bits as a fresh prefill.
  EXPECT_EQ(ra->tokens, expected->tokens);
  const size_t page = a->kv_page_bytes();
  // The entry holds a's whole pages of its context (the prompt and the reply).
  EXPECT_EQ(a->kv_shared_bytes(), a->history().size() / kKvPagePositions * page);

  auto b = session(cache);
  auto rb = b->Generate(std::span<const int32_t>(prompt), Greedy(24));
  ASSERT_TRUE(rb.ok());
  // All but the last token (its logits are the first sample's), to the token.
  EXPECT_EQ(rb->n_cached_tokens, static_cast<int32_t>(prompt.size()) - 1);
  EXPECT_EQ(rb->tokens, expected->tokens);
  EXPECT_EQ(b->kv_shared_bytes(), whole_pages * page);

  // The engine counts a page held by several sessions (and the cache's entries) once.
  EngineOptions eo;
  eo.max_chunk = 32;
  auto engine = Engine::Create(model, *pool, eo);
  ASSERT_TRUE(engine.ok());
  auto c = session(cache);
  auto d = session(cache);
  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), ra->tokens.begin(), ra->tokens.begin() + 8);
  auto ic = (*engine)->Submit(c.get(), longer, Greedy(16));
  auto id = (*engine)->Submit(d.get(), longer, Greedy(16));
  ASSERT_TRUE(ic.ok() && id.ok());
  ASSERT_TRUE((*engine)->Run().ok());
  const size_t held = (*engine)->stats().kv_bytes;
  EXPECT_GE(held, c->kv_bytes() + d->kv_bytes() - c->kv_shared_bytes());
  EXPECT_LT(held, c->kv_bytes() + d->kv_bytes() + cache->stats().bytes - c->kv_shared_bytes());
  auto rc = (*engine)->Take(*ic);
  auto rd = (*engine)->Take(*id);
  ASSERT_TRUE(rc.ok() && rd.ok());
  // The same prompt from the same entry on one table: the same computation twice.
  EXPECT_EQ(rc->tokens, rd->tokens);

  // b rewinds into the prefix (a prompt that differs from position 70 to 199): it copies the
  // pages it writes; the entry is unchanged, so a new session restoring the prompt still computes
  // what it does alone, bit for bit (f32 model), and so does a, whose pages are the entry's.
  std::vector<int32_t> changed = prompt;
  for (size_t i = 70; i < 200; ++i) {
    changed[i] = (changed[i] + 7) % model->config().vocab_size;
  }
  auto rb2 = b->Generate(std::span<const int32_t>(changed), Greedy(24));
  ASSERT_TRUE(rb2.ok());
  auto alone2 = session(nullptr);
  auto expected2 = alone2->Generate(std::span<const int32_t>(changed), Greedy(24));
  ASSERT_TRUE(expected2.ok());
  EXPECT_EQ(rb2->tokens, expected2->tokens);
  // Its pages now: page 0 still the first entry's, the copies it wrote shared with the entry
  // that stored `changed` and its reply.
  EXPECT_EQ(b->kv_shared_bytes(), b->history().size() / kKvPagePositions * page);
  EXPECT_EQ(cache->stats().entries, 2);
  auto e = session(cache);
  auto re = e->Generate(std::span<const int32_t>(prompt), Greedy(24));
  ASSERT_TRUE(re.ok());
  EXPECT_EQ(re->n_cached_tokens, static_cast<int32_t>(prompt.size()) - 1);
  EXPECT_EQ(re->tokens, expected->tokens);
  EXPECT_TRUE(
      std::equal(e->last_logits().begin(), e->last_logits().end(), alone->last_logits().begin()));
  std::vector<int32_t> cont = prompt;
  cont.insert(cont.end(), ra->tokens.begin(), ra->tokens.end());
  auto ra2 = a->Generate(std::span<const int32_t>(cont), Greedy(8));
  auto alone3 = session(nullptr);
  auto expected3 = alone3->Generate(std::span<const int32_t>(cont), Greedy(8));
  ASSERT_TRUE(ra2.ok() && expected3.ok());
  EXPECT_EQ(ra2->tokens, expected3->tokens);
  EXPECT_TRUE(
      std::equal(a->last_logits().begin(), a->last_logits().end(), alone3->last_logits().begin()));
}

// A conversation through the engine, each turn on whichever session is free (as pocket serve's
// slots): the next turn's prompt is the previous context, the reply as generated, and a new
// message (a chat template that renders a past reply as it was generated). Each turn evaluates
// only the tokens that are new: the reply's last token (sampled, never evaluated) and the new
// message. Another salt reuses nothing, on the same cache.
TEST(PrefixCacheTest, ConversationsKeepTheirRepliesUnderTheirSalt) {
  auto model = Stories();
  ASSERT_TRUE(model);
  auto cache = std::make_shared<PrefixCache>();
  auto pool = MakeThreadPool(2);
  ASSERT_TRUE(pool.ok());
  EngineOptions eo;
  eo.max_chunk = 32;
  auto engine = Engine::Create(model, *pool, eo);
  ASSERT_TRUE(engine.ok());
  auto session = [&](std::shared_ptr<PrefixCache> c) -> std::unique_ptr<Session> {
    SessionOptions so;
    so.n_ctx = 512;
    so.n_batch = 32;
    so.pool = *pool;
    so.prefix_cache = std::move(c);
    auto s = Session::Create(model, so);
    EXPECT_TRUE(s.ok());
    return s.ok() ? std::move(*s) : nullptr;
  };
  const char* messages[] = {" Lily said hello to the dog.", " Then she ran to her mom.",
                            " The sun was warm and the sky was blue."};
  std::vector<int32_t> prompt = Encode(*model, kStory);
  std::vector<std::unique_ptr<Session>> slots;
  for (int turn = 0; turn < 3; ++turn) {
    slots.push_back(session(cache));  // a fresh session each turn: only the cache remembers
    auto id = (*engine)->Submit(slots.back().get(), prompt, Greedy(12));
    ASSERT_TRUE(id.ok());
    ASSERT_TRUE((*engine)->Run().ok());
    auto r = (*engine)->Take(*id);
    ASSERT_TRUE(r.ok());
    const size_t before = prompt.size();
    if (turn > 0) {
      // Everything but the new message and the previous reply's last token came from the cache.
      const size_t added = Encode(*model, messages[turn - 1]).size() - 1;  // without BOS
      EXPECT_EQ(r->n_cached_tokens, static_cast<int32_t>(before - added - 1)) << "turn " << turn;
      EXPECT_EQ(r->n_prompt_tokens, static_cast<int32_t>(added + 1)) << "turn " << turn;
    }
    // Alone, without a cache: the same tokens (stories260K: one kernel form whatever the chunks).
    auto alone = session(nullptr);
    auto expected = alone->Generate(std::span<const int32_t>(prompt), Greedy(12));
    ASSERT_TRUE(expected.ok());
    EXPECT_EQ(r->tokens, expected->tokens) << "turn " << turn;
    if (turn == 2) break;
    prompt.insert(prompt.end(), r->tokens.begin(), r->tokens.end());
    std::vector<int32_t> more = Encode(*model, messages[turn]);
    prompt.insert(prompt.end(), more.begin() + 1, more.end());  // without BOS
  }
  // Another tenant's salt: nothing reused, not even the story's start.
  auto other = session(cache);
  other->SetCacheSalt("tenant-b");
  auto io = (*engine)->Submit(other.get(), prompt, Greedy(4));
  ASSERT_TRUE(io.ok());
  ASSERT_TRUE((*engine)->Run().ok());
  auto ro = (*engine)->Take(*io);
  ASSERT_TRUE(ro.ok());
  EXPECT_EQ(ro->n_cached_tokens, 0);
  // Its own context stays its own: a session that changes salt forgets it.
  auto again = (*engine)->Submit(other.get(), prompt, Greedy(4));
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*engine)->Run().ok());
  auto ra = (*engine)->Take(*again);
  ASSERT_TRUE(ra.ok());
  EXPECT_EQ(ra->n_reused_tokens, static_cast<int32_t>(prompt.size()) - 1);
  other->SetCacheSalt("");
  EXPECT_TRUE(other->history().empty());
  // Under the shared salt again, the conversation's context is found.
  auto back = (*engine)->Submit(other.get(), prompt, Greedy(4));
  ASSERT_TRUE(back.ok());
  ASSERT_TRUE((*engine)->Run().ok());
  auto rback = (*engine)->Take(*back);
  ASSERT_TRUE(rback.ok());
  EXPECT_GT(rback->n_cached_tokens, 0);
}

// Under a KV budget the engine counts the cache's entries too, and evicts them (least recently
// used) before it would fail a request: entries piling up from finished requests never starve
// the next one.
TEST(PrefixCacheTest, EngineBudgetEvictsCacheEntriesBeforeFailing) {
  auto model = Stories();
  ASSERT_TRUE(model);
  auto cache = std::make_shared<PrefixCache>();
  auto pool = MakeThreadPool(2);
  ASSERT_TRUE(pool.ok());
  auto session = [&]() -> std::unique_ptr<Session> {
    SessionOptions so;
    so.n_ctx = 256;
    so.n_batch = 32;
    so.pool = *pool;
    so.prefix_cache = cache;
    auto s = Session::Create(model, so);
    EXPECT_TRUE(s.ok());
    return s.ok() ? std::move(*s) : nullptr;
  };
  const size_t page = session()->kv_page_bytes();
  EngineOptions eo;
  eo.max_chunk = 32;
  eo.kv_budget_bytes = 4 * page;
  eo.swap_dir = std::string(POCKET_BINARY_DIR);
  auto engine = Engine::Create(model, *pool, eo);
  ASSERT_TRUE(engine.ok());
  const char* names[] = {"Anna", "Ben", "Carl", "Dora", "Emma", "Fred"};
  std::vector<std::unique_ptr<Session>> kept;  // alive: their pages are no longer the engine's
  for (const char* name : names) {
    const std::vector<int32_t> prompt =
        Encode(*model, std::string(name) + " said: " + std::string(kStory));
    ASSERT_LE(prompt.size() + 20, 128u);  // two pages at most
    kept.push_back(session());
    auto id = (*engine)->Submit(kept.back().get(), prompt, Greedy(20));
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ASSERT_TRUE((*engine)->Run().ok());
    auto r = (*engine)->Take(*id);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    EXPECT_FALSE(r->tokens.empty());
  }
  EXPECT_GT(cache->stats().evictions, 0);
  EXPECT_LE((*engine)->stats().peak_kv_bytes, eo.kv_budget_bytes);
}

// Idle sessions that keep their contexts (pocket serve's free slots) count toward the budget when
// parked, and give way first: their contexts go to the prefix cache, from which a later request
// restores them. Without parking the six sessions above keep six contexts outside the budget.
TEST(PrefixCacheTest, ParkedSessionsCountTowardTheBudgetAndGiveWayFirst) {
  auto model = Stories();
  ASSERT_TRUE(model);
  auto cache = std::make_shared<PrefixCache>();
  auto pool = MakeThreadPool(2);
  ASSERT_TRUE(pool.ok());
  auto session = [&]() -> std::unique_ptr<Session> {
    SessionOptions so;
    so.n_ctx = 256;
    so.n_batch = 32;
    so.pool = *pool;
    so.prefix_cache = cache;
    auto s = Session::Create(model, so);
    EXPECT_TRUE(s.ok());
    return s.ok() ? std::move(*s) : nullptr;
  };
  const size_t page = session()->kv_page_bytes();
  EngineOptions eo;
  eo.max_chunk = 32;
  eo.kv_budget_bytes = 8 * page;
  eo.swap_dir = std::string(POCKET_BINARY_DIR);
  auto engine = Engine::Create(model, *pool, eo);
  ASSERT_TRUE(engine.ok());
  const char* names[] = {"Anna", "Ben", "Carl", "Dora", "Emma", "Fred"};
  std::vector<std::unique_ptr<Session>> slots;
  std::vector<std::vector<int32_t>> first_tokens;
  for (const char* name : names) {
    const std::vector<int32_t> prompt =
        Encode(*model, std::string(name) + " said: " + std::string(kStory));
    slots.push_back(session());
    auto id = (*engine)->Submit(slots.back().get(), prompt, Greedy(20));
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ASSERT_TRUE((*engine)->Run().ok());
    auto r = (*engine)->Take(*id);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    ASSERT_LE(prompt.size() + r->tokens.size(), 128u);  // two pages at most
    first_tokens.push_back(r->tokens);
    (*engine)->Park(slots.back().get());
    // Every session's own pages and the cache's, counted independently of the engine.
    size_t held = cache->stats().bytes;
    for (const auto& s : slots) held += s->kv_bytes() - s->kv_shared_bytes();
    // (The cache's entries count their token ids too, 4 bytes each: at most 6 x 128 here.)
    EXPECT_LE(held, eo.kv_budget_bytes + 6 * 128 * sizeof(int32_t)) << name;
  }
  const EngineStats st = (*engine)->stats();
  EXPECT_GT(st.parked_evictions, 0);
  EXPECT_EQ(st.n_parked, 6 - st.parked_evictions);
  // The oldest parked slots were reset, Anna's first; the latest one reset continues from the
  // cache with the same greedy tokens as before.
  EXPECT_EQ(slots[0]->history().size(), 0u);
  size_t reset = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i]->history().empty()) reset = i;
  }
  const PrefixCacheStats before = cache->stats();
  const std::vector<int32_t> again =
      Encode(*model, std::string(names[reset]) + " said: " + std::string(kStory));
  auto id = (*engine)->Submit(slots[reset].get(), again, Greedy(20));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  ASSERT_TRUE((*engine)->Run().ok());
  auto r = (*engine)->Take(*id);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->tokens, first_tokens[reset]);
  EXPECT_GT(cache->stats().hit_tokens, before.hit_tokens) << names[reset];
  // A session's end unparks it; the engine's end leaves the parked sessions usable.
  slots[1].reset();
  EXPECT_LE((*engine)->stats().n_parked, 5);
  engine->reset();
  EXPECT_TRUE(slots[2]->Generate(again, Greedy(4)).ok());
}

}  // namespace
}  // namespace pocket
