// The runtime's scheduler (runtime/scheduler.h) on the real stories260K model: requests on slots
// and on their callers' sessions give token for token what Session::GenerateUnbatched gives alone;
// a slot is chosen by the longest common prefix of its context with the prompt; priorities,
// deadlines, the queue limit, cancellation (waiting and running), follow-ups on the same session,
// scoring beside generation, and Stop on the scheduler's own thread.
#include "runtime/scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine.h"
#include "runtime/session.h"

namespace pocket {
namespace {

const std::string kStories =
    std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/stories260K.bin";
const std::string kTok = std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/tok512.bin";

using Outcome = std::optional<StatusOr<GenerateResult>>;

struct Fixture {
  explicit Fixture(int32_t n_slots, int32_t max_requests = 8, SchedulerOptions so = {}) {
    LoadOptions o;
    o.tokenizer_path = kTok;
    auto m = Model::Load(kStories, o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    model = *m;
    pool = *MakeThreadPool(2);
    EngineOptions eo;
    eo.max_requests = max_requests;
    eo.max_chunk = 16;
    auto e = Engine::Create(model, pool, eo);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    std::vector<std::unique_ptr<Session>> slots;
    for (int32_t i = 0; i < n_slots; ++i) slots.push_back(NewSession());
    scheduler = std::make_unique<Scheduler>(std::move(*e), std::move(slots), std::move(so));
  }
  std::unique_ptr<Session> NewSession() {
    SessionOptions so;
    so.n_ctx = 256;
    so.n_batch = 16;
    so.pool = pool;
    auto s = Session::Create(model, so);
    EXPECT_TRUE(s.ok());
    return std::move(*s);
  }
  std::vector<int32_t> Encode(const std::string& text) const {
    EncodeOptions enc;
    enc.add_bos = model->tokenizer()->spec().add_bos;
    return *model->tokenizer()->Encode(text, enc);
  }
  static GenerateOptions Greedy(int32_t max_tokens) {
    GenerateOptions g;
    g.sampling.temperature = 0.0f;
    g.max_tokens = max_tokens;
    return g;
  }
  // The oracle: a fresh session's token-by-token loop.
  std::vector<int32_t> Alone(const std::vector<int32_t>& prompt, const GenerateOptions& options) {
    auto s = NewSession();
    auto r = s->GenerateUnbatched(prompt, options);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r->tokens;
  }
  // A request whose result lands in `out` (and whose order of ending in `ended`).
  SchedulerRequest Request(const std::vector<int32_t>& prompt, int32_t max_tokens,
                           std::shared_ptr<Outcome> out, std::vector<int>* ended = nullptr,
                           int tag = 0) {
    SchedulerRequest r;
    r.prompt = prompt;
    r.options = Greedy(max_tokens);
    r.on_generated = [out, ended, tag](StatusOr<GenerateResult> result) {
      out->emplace(std::move(result));
      if (ended != nullptr) ended->push_back(tag);
      return std::optional<SchedulerFollowUp>();
    };
    return r;
  }
  void Drain() {
    for (int i = 0; i < 10000 && scheduler->Step() > 0; ++i) {
    }
  }

  std::shared_ptr<const Model> model;
  std::shared_ptr<ThreadPool> pool;
  std::unique_ptr<Scheduler> scheduler;
};

const char* const kPrompts[] = {
    "Once upon a time",
    "Once upon a time, there was a little girl named Lily. She loved to play outside",
    "The cat sat on the mat and",
    "Tom had a red ball. He threw it",
    "One day, a boy named Tim went to the store with his mom.",
};

TEST(SchedulerTest, SlotsAndOwnSessionsGiveWhatEachGivesAlone) {
  Fixture f(/*n_slots=*/2);
  // Five requests for two slots (three wait), and one on the caller's session beside them.
  std::vector<std::shared_ptr<Outcome>> out;
  std::vector<SchedulerRequest> requests;
  for (const char* p : kPrompts) {
    out.push_back(std::make_shared<Outcome>());
    requests.push_back(f.Request(f.Encode(p), 24, out.back()));
  }
  auto own = f.NewSession();
  out.push_back(std::make_shared<Outcome>());
  requests.push_back(f.Request(f.Encode("A little bird"), 24, out.back()));
  requests.back().session = own.get();
  ASSERT_TRUE(f.scheduler->Submit(std::move(requests)).ok());
  EXPECT_EQ(f.scheduler->queued(), 6);
  f.Drain();
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(out[i]->has_value()) << i;
    ASSERT_TRUE((*out[i])->ok()) << (*out[i])->status().ToString();
    const std::string text = i < 5 ? kPrompts[i] : "A little bird";
    EXPECT_EQ((**out[i])->tokens, f.Alone(f.Encode(text), Fixture::Greedy(24))) << i;
  }
  EXPECT_EQ(f.scheduler->running(), 0);
}

TEST(SchedulerTest, ASlotIsChosenByTheLongestCommonPrefixOfItsWholeContext) {
  Fixture f(/*n_slots=*/3);
  // Three conversations fill the three slots; each one's next turn extends its context (prompt
  // and reply) and must land on that slot: only the new tokens (and the reply's last, sampled
  // and never evaluated) are prefilled.
  std::vector<std::vector<int32_t>> first;
  std::vector<std::shared_ptr<Outcome>> out;
  std::vector<SchedulerRequest> requests;
  for (int i = 0; i < 3; ++i) {
    first.push_back(f.Encode(kPrompts[i + 1]));
    out.push_back(std::make_shared<Outcome>());
    requests.push_back(f.Request(first.back(), 8, out.back()));
  }
  ASSERT_TRUE(f.scheduler->Submit(std::move(requests)).ok());
  f.Drain();
  // The second turns, in reverse order (LIFO reuse would put them on the wrong slots).
  for (int i = 2; i >= 0; --i) {
    std::vector<int32_t> next = first[static_cast<size_t>(i)];
    const auto& reply = (**out[static_cast<size_t>(i)])->tokens;
    next.insert(next.end(), reply.begin(), reply.end());
    const std::vector<int32_t> more = *f.model->tokenizer()->Encode(" And then", {});
    next.insert(next.end(), more.begin(), more.end());
    auto o = std::make_shared<Outcome>();
    ASSERT_TRUE(f.scheduler->Submit(f.Request(next, 8, o)).ok());
    f.Drain();
    ASSERT_TRUE(o->has_value() && (*o)->ok());
    EXPECT_EQ((**o)->n_reused_tokens,
              static_cast<int32_t>(first[static_cast<size_t>(i)].size() + reply.size() - 1))
        << i;
    EXPECT_EQ((**o)->tokens, f.Alone(next, Fixture::Greedy(8))) << i;
  }
}

TEST(SchedulerTest, HigherPriorityFirstThenInOrderAndTheQueueLimit) {
  SchedulerOptions so;
  so.queue_limit = 3;
  Fixture f(/*n_slots=*/1, 8, so);
  std::vector<int> ended;
  std::vector<std::shared_ptr<Outcome>> out;
  std::vector<SchedulerRequest> requests;
  const int priorities[] = {0, 0, 5, 0};
  for (int i = 0; i < 4; ++i) {
    out.push_back(std::make_shared<Outcome>());
    requests.push_back(f.Request(f.Encode(kPrompts[i]), 4, out.back(), &ended, i));
    requests.back().priority = priorities[i];
  }
  ASSERT_TRUE(f.scheduler->Submit(std::move(requests)).ok());  // 1 free slot + 3 waiting
  auto refused = f.scheduler->Submit(f.Request(f.Encode("Lily"), 4, std::make_shared<Outcome>()));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("queue is full"), std::string::npos);
  f.Drain();
  EXPECT_EQ(ended, (std::vector<int>{2, 0, 1, 3}));
  for (const auto& o : out) EXPECT_TRUE(o->has_value() && (*o)->ok());
}

TEST(SchedulerTest, CancelAndDeadlinesEndRequestsWaitingOrRunning) {
  Fixture f(/*n_slots=*/1);
  auto running = std::make_shared<Outcome>(), waiting = std::make_shared<Outcome>(),
       late = std::make_shared<Outcome>(), after = std::make_shared<Outcome>();
  const int64_t a = *f.scheduler->Submit(f.Request(f.Encode(kPrompts[1]), 200, running));
  const int64_t b = *f.scheduler->Submit(f.Request(f.Encode(kPrompts[2]), 8, waiting));
  SchedulerRequest r = f.Request(f.Encode(kPrompts[3]), 8, late);
  r.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
  ASSERT_TRUE(f.scheduler->Submit(std::move(r)).ok());
  for (int i = 0; i < 3; ++i) f.scheduler->Step();  // a prefills, b and late wait
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  f.scheduler->Cancel(b);
  f.scheduler->Cancel(a);
  f.scheduler->Step();
  ASSERT_TRUE(waiting->has_value() && (*waiting)->ok());
  EXPECT_EQ((**waiting)->stop_reason, StopReason::kCancelled);
  EXPECT_TRUE((**waiting)->tokens.empty());
  ASSERT_TRUE(late->has_value());
  EXPECT_EQ((*late)->status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE((*late)->status().message().find("deadline"), std::string::npos);
  f.Drain();
  ASSERT_TRUE(running->has_value() && (*running)->ok());
  EXPECT_EQ((**running)->stop_reason, StopReason::kCancelled);
  EXPECT_LT((**running)->tokens.size(), 200u);
  // The slot serves the next request normally (no cancel left on it).
  ASSERT_TRUE(f.scheduler->Submit(f.Request(f.Encode(kPrompts[4]), 8, after)).ok());
  f.Drain();
  ASSERT_TRUE(after->has_value() && (*after)->ok());
  EXPECT_EQ((**after)->tokens, f.Alone(f.Encode(kPrompts[4]), Fixture::Greedy(8)));
}

TEST(SchedulerTest, AFollowUpContinuesOnTheSameSessionUnderTheSameId) {
  Fixture f(/*n_slots=*/2);
  const std::vector<int32_t> prompt = f.Encode(kPrompts[0]);
  std::vector<int32_t> second;
  int calls = 0;
  Outcome last;
  SchedulerRequest r;
  r.prompt = prompt;
  r.options = Fixture::Greedy(6);
  r.on_generated = [&](StatusOr<GenerateResult> result) -> std::optional<SchedulerFollowUp> {
    ++calls;
    EXPECT_TRUE(result.ok());
    if (calls == 1) {
      second = prompt;
      second.insert(second.end(), result->tokens.begin(), result->tokens.end());
      SchedulerFollowUp next;
      next.prompt = second;
      next.options = Fixture::Greedy(6);
      return next;
    }
    last.emplace(std::move(result));
    return std::nullopt;
  };
  ASSERT_TRUE(f.scheduler->Submit(std::move(r)).ok());
  f.Drain();
  EXPECT_EQ(calls, 2);
  ASSERT_TRUE(last.has_value() && last->ok());
  // On the same session: everything but the first reply's last token was reused.
  EXPECT_EQ((*last)->n_reused_tokens, static_cast<int32_t>(second.size() - 1));
  EXPECT_EQ((*last)->tokens, f.Alone(second, Fixture::Greedy(6)));
}

TEST(SchedulerTest, ScoresBesideGenerationAndStopsOnItsThread) {
  Fixture f(/*n_slots=*/1);
  auto scorer = f.NewSession();
  const std::vector<int32_t> prompt = f.Encode("Tom had a red ball. He threw it");
  std::vector<std::vector<int32_t>> candidates;
  for (const char* c : {" to the dog", " at the wall", " up high"}) {
    candidates.push_back(*f.model->tokenizer()->Encode(c, {}));
  }
  auto alone = f.NewSession()->Score(prompt, candidates);
  ASSERT_TRUE(alone.ok());
  f.scheduler->Start();
  auto gen = std::make_shared<Outcome>();
  std::mutex mu;
  std::condition_variable cv;
  std::optional<StatusOr<std::vector<CandidateScore>>> scores;
  SchedulerRequest s;
  s.session = scorer.get();
  s.score = true;
  s.prompt = prompt;
  s.candidates = candidates;
  s.score_chunk = 4;
  s.on_scored = [&](StatusOr<std::vector<CandidateScore>> r) {
    std::lock_guard<std::mutex> lock(mu);
    scores.emplace(std::move(r));
    cv.notify_all();
  };
  ASSERT_TRUE(f.scheduler->Submit(f.Request(f.Encode(kPrompts[1]), 30, gen)).ok());
  ASSERT_TRUE(f.scheduler->Submit(std::move(s)).ok());
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return scores.has_value(); }));
  }
  ASSERT_TRUE(scores->ok()) << scores->status().ToString();
  ASSERT_EQ((*scores)->size(), alone->size());
  for (size_t i = 0; i < alone->size(); ++i) {
    EXPECT_EQ((**scores)[i].index, (*alone)[i].index);
    EXPECT_NEAR((**scores)[i].logprob, (*alone)[i].logprob, 1e-4);
  }
  // Stop: what runs ends (cancelled or finished), what waits fails with the message; which of
  // the two a request was when Stop came is up to the scheduler's thread.
  SchedulerOptions so;
  auto waiting = std::make_shared<Outcome>();
  auto long_one = std::make_shared<Outcome>();
  ASSERT_TRUE(f.scheduler->Submit(f.Request(f.Encode(kPrompts[2]), 200, long_one)).ok());
  ASSERT_TRUE(f.scheduler->Submit(f.Request(f.Encode(kPrompts[3]), 8, waiting)).ok());
  f.scheduler->Stop();
  ASSERT_TRUE(gen->has_value() && long_one->has_value() && waiting->has_value());
  EXPECT_TRUE((*gen)->ok());
  for (const auto& o : {long_one, waiting}) {
    if ((*o)->ok()) continue;
    EXPECT_EQ((*o)->status().code(), StatusCode::kResourceExhausted);
    EXPECT_EQ((*o)->status().message(), so.stopping_message);
  }
  auto refused = f.scheduler->Submit(f.Request(f.Encode("Lily"), 4, std::make_shared<Outcome>()));
  EXPECT_EQ(refused.status().message(), so.stopping_message);
}

}  // namespace
}  // namespace pocket
