// Sessions over one shared Model: threads, cancellation (per token and between prefill chunks),
// stop strings, token budgets, seeds, prefix reuse. Uses the real stories260K model.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "runtime/request.h"
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

GenerateOptions Greedy(int32_t n) {
  GenerateOptions g;
  g.sampling.temperature = 0.0f;
  g.max_tokens = n;
  return g;
}

TEST(SessionTest, SessionsShareOneModelAcrossThreads) {
  auto model = Stories();
  ASSERT_TRUE(model);
  auto one = Session::Create(model);
  ASSERT_TRUE(one.ok());
  auto expected = (*one)->Generate(std::string_view("Once upon a time"), Greedy(60));
  ASSERT_TRUE(expected.ok());
  std::vector<std::string> texts(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto s = Session::Create(model);
      ASSERT_TRUE(s.ok());
      for (int rep = 0; rep < 3; ++rep) {
        (*s)->Reset();
        auto r = (*s)->Generate(std::string_view("Once upon a time"), Greedy(60));
        ASSERT_TRUE(r.ok());
        texts[static_cast<size_t>(t)] = r->text;
      }
    });
  }
  for (auto& th : threads) th.join();
  // The same computation on one table; concurrent sessions share no arithmetic: the same bits.
  for (const std::string& text : texts) EXPECT_EQ(text, expected->text);
}

TEST(SessionTest, CancelFromAnotherThreadStopsWithinOneToken) {
  auto model = Stories();
  ASSERT_TRUE(model);
  auto s = Session::Create(model);
  ASSERT_TRUE(s.ok());
  Session* session = s->get();
  std::atomic<int> pieces{0};
  std::atomic<int> tokens_at_cancel{-1};
  std::mutex mu;
  std::condition_variable cv;
  bool cancel_now = false;
  std::thread canceller([&] {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return cancel_now; });
    session->Cancel();
    tokens_at_cancel = pieces.load();
  });
  GenerateOptions g = Greedy(100000);
  g.sampling.temperature = 0.8f;  // a long story: EOS would end it too soon at temp 0
  g.sampling.seed = 3;
  auto r = session->Generate(std::string_view("Once upon a time"), g, [&](std::string_view) {
    if (++pieces == 10) {
      {
        std::lock_guard<std::mutex> lock(mu);
        cancel_now = true;
      }
      cv.notify_one();
      // Wait until the cancel has been issued, so the bound below is exact.
      while (tokens_at_cancel.load() < 0) std::this_thread::yield();
    }
    return true;
  });
  canceller.join();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stop_reason, StopReason::kCancelled);
  // Cancelled after the 10th piece: at most one more token is produced.
  EXPECT_LE(r->tokens.size(), static_cast<size_t>(tokens_at_cancel.load()) + 1);
}

TEST(SessionTest, CancelDuringALongPrefillStopsBetweenChunks) {
  auto model = Stories();
  ASSERT_TRUE(model);
  SessionOptions so;
  so.n_ctx = 512;
  so.n_batch = 16;
  auto s = Session::Create(model, so);
  ASSERT_TRUE(s.ok());
  std::vector<int32_t> prompt(400);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = 3 + static_cast<int32_t>(i % 500);
  GenerateOptions g = Greedy(10);
  Session* session = s->get();
  int chunks_seen = 0;
  g.on_prefill_progress = [&](int32_t done, int32_t total) {
    EXPECT_EQ(total, 400);
    if (++chunks_seen == 3) {
      std::thread([session] { session->Cancel(); }).join();  // from another thread
    }
    (void)done;
  };
  auto r = session->Generate(std::span<const int32_t>(prompt), g);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stop_reason, StopReason::kCancelled);
  EXPECT_EQ(chunks_seen, 3);
  EXPECT_EQ(session->history().size(), 48u);  // three chunks of 16, then it stopped
  EXPECT_TRUE(r->tokens.empty());
}

TEST(SessionTest, StopStringsAreNeverEmitted) {
  auto model = Stories();
  ASSERT_TRUE(model);
  auto s = Session::Create(model);
  ASSERT_TRUE(s.ok());
  auto full = (*s)->Generate(std::string_view("Once upon a time"), Greedy(80));
  ASSERT_TRUE(full.ok());
  const size_t lily = full->text.find("Lily");
  ASSERT_NE(lily, std::string::npos) << full->text;
  GenerateOptions g = Greedy(80);
  g.stop_strings = {"Lily", "zzzz"};
  std::string streamed;
  auto r = (*s)->Generate(std::string_view("Once upon a time"), g, [&](std::string_view piece) {
    streamed += piece;
    return true;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stop_reason, StopReason::kStopString);
  EXPECT_EQ(r->text, full->text.substr(0, lily));
  EXPECT_EQ(streamed, r->text);
}

TEST(SessionTest, BudgetEosAndSeeds) {
  auto model = Stories();
  ASSERT_TRUE(model);
  auto s = Session::Create(model);
  ASSERT_TRUE(s.ok());
  auto r = (*s)->Generate(std::string_view("Once upon a time"), Greedy(5));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens.size(), 5u);
  EXPECT_EQ(r->stop_reason, StopReason::kMaxTokens);
  auto eos = (*s)->Generate(std::string_view("Once upon a time"), Greedy(2000));
  ASSERT_TRUE(eos.ok());
  EXPECT_EQ(eos->stop_reason, StopReason::kEos);  // stories end with BOS, as run.c stops

  GenerateOptions g;
  g.max_tokens = 40;
  g.sampling.temperature = 1.0f;
  g.sampling.seed = 11;
  auto a = (*s)->Generate(std::string_view("Once upon a time"), g);
  auto b = (*s)->Generate(std::string_view("Once upon a time"), g);
  g.sampling.seed = 12;
  auto c = (*s)->Generate(std::string_view("Once upon a time"), g);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_NE(a->tokens, c->tokens);
}

TEST(SessionTest, CancelBeforeACallStopsThatCallOnly) {
  auto model = Stories();
  ASSERT_TRUE(model);
  auto s = Session::Create(model);
  ASSERT_TRUE(s.ok());
  Session* session = s->get();
  // Requested while nothing runs (as when a UI cancels just before the call starts): not lost.
  std::thread([session] { session->Cancel(); }).join();
  int pieces = 0;
  auto cancelled = session->Generate(std::string_view("Once upon a time"), Greedy(40),
                                     [&](std::string_view) { return ++pieces > 0; });
  ASSERT_TRUE(cancelled.ok()) << cancelled.status().ToString();
  EXPECT_EQ(cancelled->stop_reason, StopReason::kCancelled);
  EXPECT_TRUE(cancelled->tokens.empty());
  EXPECT_EQ(pieces, 0);
  // Used up by the call it stopped: the next one runs in full.
  auto next = session->Generate(std::string_view("Once upon a time"), Greedy(5));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->stop_reason, StopReason::kMaxTokens);
  EXPECT_EQ(next->tokens.size(), 5u);

  // The same for Score: a Cancelled error, then a normal call.
  const std::vector<int32_t> prompt = {1, 400, 401, 402};
  const std::vector<std::vector<int32_t>> candidates = {{403}, {404, 405}};
  session->Reset();
  session->Cancel();
  auto score = session->Score(prompt, candidates);
  ASSERT_FALSE(score.ok());
  EXPECT_EQ(score.status().code(), StatusCode::kCancelled);
  auto rescored = session->Score(prompt, candidates);
  ASSERT_TRUE(rescored.ok()) << rescored.status().ToString();
  EXPECT_EQ(rescored->size(), 2u);
  // The prompt is now the context with its logits at hand, so a second Score evaluates nothing
  // before the candidates: a request made before it must still stop it.
  session->Cancel();
  auto cached = session->Score(prompt, candidates);
  ASSERT_FALSE(cached.ok());
  EXPECT_EQ(cached.status().code(), StatusCode::kCancelled);
  session->Cancel();
  auto separately = session->ScoreSeparately(prompt, candidates);
  ASSERT_FALSE(separately.ok());
  EXPECT_EQ(separately.status().code(), StatusCode::kCancelled);
  ASSERT_TRUE(session->Score(prompt, candidates).ok());
}

TEST(SessionTest, ResultReportsTheSeedThatReproducesIt) {
  auto model = Stories();
  ASSERT_TRUE(model);
  auto s = Session::Create(model);
  ASSERT_TRUE(s.ok());
  GenerateOptions g;
  g.max_tokens = 30;
  g.sampling.temperature = 1.0f;
  g.sampling.seed = 0x9e3779b97f4a7c15ULL;
  auto a = (*s)->Generate(std::string_view("Once upon a time"), g);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->seed, 0x9e3779b97f4a7c15ULL);
  g.sampling.seed = a->seed;
  auto b = (*s)->Generate(std::string_view("Once upon a time"), g);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->seed, a->seed);
  EXPECT_EQ(b->tokens, a->tokens);
}

TEST(SessionTest, PrefixIsReusedAndResultsMatchAFreshSession) {
  auto model = Stories();
  ASSERT_TRUE(model);
  auto s = Session::Create(model);
  ASSERT_TRUE(s.ok());
  auto first = (*s)->Generate(std::string_view("Once upon a time, there was a dog"), Greedy(10));
  ASSERT_TRUE(first.ok());
  auto second = (*s)->Generate(std::string_view("Once upon a time, there was a cat"), Greedy(20));
  ASSERT_TRUE(second.ok());
  EXPECT_GT(second->n_reused_tokens, 5);
  auto fresh = Session::Create(model);
  ASSERT_TRUE(fresh.ok());
  auto expected =
      (*fresh)->Generate(std::string_view("Once upon a time, there was a cat"), Greedy(20));
  ASSERT_TRUE(expected.ok());
  // stories260K (f32, head_dim 8) never takes a tile form: a reused prefix gives the same bits.
  EXPECT_EQ(second->tokens, expected->tokens);
}

TEST(SessionTest, ErrorsAreValues) {
  auto model = Stories();
  ASSERT_TRUE(model);
  SessionOptions so;
  so.n_ctx = 16;
  auto s = Session::Create(model, so);
  ASSERT_TRUE(s.ok());
  auto long_prompt = (*s)->Generate(
      std::string_view("Once upon a time there was a little girl named Lily who loved the park"),
      Greedy(4));
  ASSERT_FALSE(long_prompt.ok());
  EXPECT_EQ(long_prompt.status().code(), StatusCode::kOutOfRange);
  auto bad_utf8 = (*s)->Generate(std::string_view("a\xc3"), Greedy(4));
  EXPECT_EQ(bad_utf8.status().code(), StatusCode::kInvalidArgument);
  std::vector<int32_t> bad_ids = {1, 5000};
  auto bad = (*s)->Generate(std::span<const int32_t>(bad_ids), Greedy(4));
  EXPECT_EQ(bad.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(bad.status().message().find("5000"), std::string::npos);
  // The context fills up: a clean stop, not an error.
  auto full = (*s)->Generate(std::string_view("Once upon a time"), Greedy(100));
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->stop_reason, StopReason::kContextFull);
}

// "No limit" (pocket run -n -1) runs to the end of the context and reserves only what the context
// can hold: the output buffers were once reserved for INT32_MAX tokens (24 GB of address space,
// which an allocator that touches its reservations, ASan's or a phone's, pays for).
TEST(SessionTest, NoTokenLimitReservesOnlyWhatTheContextHolds) {
  auto model = Stories();
  ASSERT_TRUE(model);
  SessionOptions so;
  so.n_ctx = 32;
  auto s = Session::Create(model, so);
  ASSERT_TRUE(s.ok());
  GenerateOptions o = Greedy(kNoTokenLimit);
  o.ignore_stop_tokens = true;
  auto r = (*s)->Generate(std::string_view("Once upon a time"), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stop_reason, StopReason::kContextFull);
  EXPECT_GT(r->tokens.size(), 0u);
  EXPECT_LE(r->tokens.capacity(), 33u);
  EXPECT_LE(r->text.capacity(), 33u * 8u);
}

// Sampling works on a copy: penalties must not change the logits the session keeps for its
// context, which the next call with the same context reuses (they once did: a second call saw
// the prompt's tokens penalized twice).
TEST(SessionTest, PenaltiesLeaveTheCachedLogitsAlone) {
  auto model = Stories();
  ASSERT_NE(model, nullptr);
  SessionOptions so;
  so.n_ctx = 256;
  so.n_threads = 1;
  auto a = Session::Create(model, so);
  auto b = Session::Create(model, so);
  ASSERT_TRUE(a.ok() && b.ok());
  auto prompt = model->tokenizer()->Encode("Once upon a time there was a cat", {.add_bos = true});
  ASSERT_TRUE(prompt.ok());
  GenerateOptions o = Greedy(1);
  o.sampling.repetition_penalty = 1.5f;
  o.sampling.presence_penalty = 2.0f;
  o.sampling.frequency_penalty = 1.0f;
  auto first = (*a)->Generate(*prompt, o);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE((*b)->SetContext(*prompt).ok());
  const std::span<const float> kept = (*a)->last_logits(), fresh = (*b)->last_logits();
  ASSERT_EQ(kept.size(), fresh.size());
  // The same prompt in the same chunks on one table: penalties aside, the same computation.
  for (size_t i = 0; i < kept.size(); ++i) ASSERT_EQ(kept[i], fresh[i]) << "token " << i;
  // And the same request again picks the same token.
  auto second = (*a)->Generate(*prompt, o);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->tokens, first->tokens);
}

// Sessions of one model share one thread pool; sessions given the pool compute what a session
// with a pool of its own computes.
TEST(SessionTest, SessionsShareAnInjectedPool) {
  auto model = Stories();
  ASSERT_NE(model, nullptr);
  auto pool = MakeThreadPool(2);
  ASSERT_TRUE(pool.ok());
  SessionOptions own_options;
  own_options.n_ctx = 256;
  own_options.n_threads = 2;
  auto own = Session::Create(model, own_options);
  ASSERT_TRUE(own.ok());
  std::vector<std::string> texts(3);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < texts.size(); ++t) {
    threads.emplace_back([&, t] {
      SessionOptions shared;
      shared.n_ctx = 256;
      shared.pool = *pool;
      auto s = Session::Create(model, shared);
      ASSERT_TRUE(s.ok());
      EXPECT_EQ((*s)->n_threads(), 2);
      auto r = (*s)->Generate("Once upon a time", Greedy(24));
      ASSERT_TRUE(r.ok());
      texts[t] = r->text;
    });
  }
  for (std::thread& t : threads) t.join();
  auto alone = (*own)->Generate("Once upon a time", Greedy(24));
  ASSERT_TRUE(alone.ok());
  // Two threads either way, and each output is computed by one thread: the same bits by design.
  for (const std::string& text : texts) EXPECT_EQ(text, alone->text);
  EXPECT_EQ((*pool)->n_threads(), 2);
  // A thread count that contradicts the pool is an error, not a silent choice.
  SessionOptions contradicting;
  contradicting.pool = *pool;
  contradicting.n_threads = 3;
  EXPECT_FALSE(Session::Create(model, contradicting).ok());
}

}  // namespace
}  // namespace pocket
