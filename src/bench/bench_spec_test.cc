// The speculative side of `pocket bench`: the benchmark-only oracle drafter (the target's greedy
// continuation, each drafted token kept with probability P, deterministic per position) and the
// --spec mode syntax.
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bench/bench.h"

namespace pocket {
namespace {

constexpr int32_t kVocab = 50;
constexpr int32_t kPromptSize = 5;

std::vector<int32_t> Continuation(size_t n) {
  std::vector<int32_t> c(n);
  for (size_t i = 0; i < n; ++i) c[i] = static_cast<int32_t>((i * 7 + 3) % kVocab);
  return c;
}

// The prompt followed by the first `at` continuation tokens.
std::vector<int32_t> Context(const std::vector<int32_t>& continuation, size_t at) {
  std::vector<int32_t> context(kPromptSize, 1);
  context.insert(context.end(), continuation.begin(),
                 continuation.begin() + static_cast<std::ptrdiff_t>(at));
  return context;
}

TEST(OracleDrafter, KeepsEveryTokenAtOne) {
  const std::vector<int32_t> cont = Continuation(40);
  OracleDrafter oracle(kPromptSize, cont, 1.0, kVocab);
  std::vector<int32_t> draft;
  draft.reserve(8);
  for (size_t at : {size_t{0}, size_t{1}, size_t{17}}) {
    ASSERT_TRUE(oracle.Draft(Context(cont, at), 8, &draft).ok());
    ASSERT_EQ(draft.size(), 8u);
    for (size_t i = 0; i < draft.size(); ++i) EXPECT_EQ(draft[i], cont[at + i]) << at << " " << i;
  }
  // The end of the continuation bounds the draft.
  ASSERT_TRUE(oracle.Draft(Context(cont, 37), 8, &draft).ok());
  EXPECT_EQ(draft, std::vector<int32_t>(cont.begin() + 37, cont.end()));
  ASSERT_TRUE(oracle.Draft(Context(cont, 40), 8, &draft).ok());
  EXPECT_TRUE(draft.empty());
}

TEST(OracleDrafter, ReplacesEveryTokenAtZero) {
  const std::vector<int32_t> cont = Continuation(200);
  OracleDrafter oracle(kPromptSize, cont, 0.0, kVocab);
  std::vector<int32_t> draft;
  ASSERT_TRUE(oracle.Draft(Context(cont, 0), 200, &draft).ok());
  ASSERT_EQ(draft.size(), 200u);
  for (size_t i = 0; i < draft.size(); ++i) {
    EXPECT_NE(draft[i], cont[i]) << i;
    EXPECT_GE(draft[i], 0);
    EXPECT_LT(draft[i], kVocab);
  }
}

TEST(OracleDrafter, KeepsAboutPAndIsDeterministicPerPosition) {
  const std::vector<int32_t> cont = Continuation(20000);
  OracleDrafter oracle(kPromptSize, cont, 0.7, kVocab);
  OracleDrafter again(kPromptSize, cont, 0.7, kVocab);
  size_t kept = 0;
  for (size_t i = 0; i < cont.size(); ++i) {
    kept += oracle.Keeps(i) ? 1 : 0;
    ASSERT_EQ(oracle.Keeps(i), again.Keeps(i));
    ASSERT_EQ(oracle.Proposal(i) == cont[i], oracle.Keeps(i)) << i;
  }
  EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(cont.size()), 0.7, 0.015);
  // A token's proposal does not depend on where the draft starts.
  std::vector<int32_t> a, b;
  ASSERT_TRUE(oracle.Draft(Context(cont, 10), 8, &a).ok());
  ASSERT_TRUE(oracle.Draft(Context(cont, 13), 8, &b).ok());
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(a[3 + i], b[i]);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(a[i], oracle.Proposal(10 + i));
}

TEST(OracleDrafter, NoDraftOffTheContinuation) {
  const std::vector<int32_t> cont = Continuation(40);
  OracleDrafter oracle(kPromptSize, cont, 1.0, kVocab);
  std::vector<int32_t> draft = {9};
  std::vector<int32_t> context = Context(cont, 6);
  context.back() = (context.back() + 1) % kVocab;  // not the continuation's token
  ASSERT_TRUE(oracle.Draft(context, 8, &draft).ok());
  EXPECT_TRUE(draft.empty());
  ASSERT_TRUE(oracle.Draft(std::vector<int32_t>(3, 1), 8, &draft).ok());  // shorter than the prompt
  EXPECT_TRUE(draft.empty());
  ASSERT_TRUE(oracle.Draft(Context(cont, 2), 0, &draft).ok());
  EXPECT_TRUE(draft.empty());
}

TEST(OracleDrafter, DraftAllocatesNothingWithReservedRoom) {
  const std::vector<int32_t> cont = Continuation(100);
  OracleDrafter oracle(kPromptSize, cont, 0.5, kVocab);
  std::vector<int32_t> draft;
  draft.reserve(8);
  const int32_t* data = draft.data();
  for (size_t at = 0; at < 90; ++at) {
    ASSERT_TRUE(oracle.Draft(Context(cont, at), 8, &draft).ok());
    ASSERT_EQ(draft.data(), data);
  }
}

TEST(BenchSpec, Parses) {
  auto lookup = ParseBenchSpec("lookup");
  ASSERT_TRUE(lookup.ok()) << lookup.status().message();
  EXPECT_EQ(lookup->drafter, "lookup");
  EXPECT_FALSE(lookup->spec_auto);
  auto oracle = ParseBenchSpec("oracle:0.7");
  ASSERT_TRUE(oracle.ok());
  EXPECT_EQ(oracle->drafter, "oracle");
  EXPECT_DOUBLE_EQ(oracle->oracle_p, 0.7);
  EXPECT_EQ(oracle->mode, "oracle:0.7");
  auto auto_oracle = ParseBenchSpec("auto:oracle:0");
  ASSERT_TRUE(auto_oracle.ok());
  EXPECT_TRUE(auto_oracle->spec_auto);
  EXPECT_EQ(auto_oracle->oracle_p, 0.0);
  auto auto_lookup = ParseBenchSpec("auto:lookup");
  ASSERT_TRUE(auto_lookup.ok());
  EXPECT_TRUE(auto_lookup->spec_auto);
  EXPECT_TRUE(ParseBenchSpec("oracle:1").ok());
  // A draft model, guarded as `pocket run --spec draft:FILE`; under auto, auto's own policy.
  auto draft = ParseBenchSpec("draft:small.gguf");
  ASSERT_TRUE(draft.ok());
  EXPECT_EQ(draft->drafter, "draft");
  EXPECT_EQ(draft->arg, "small.gguf");
  EXPECT_TRUE(draft->spec_guard);
  EXPECT_FALSE(draft->spec_auto);
  auto auto_draft = ParseBenchSpec("auto:draft:small.gguf");
  ASSERT_TRUE(auto_draft.ok());
  EXPECT_TRUE(auto_draft->spec_auto);
  EXPECT_FALSE(auto_draft->spec_guard);
}

TEST(BenchSpec, RejectsBadModesNamingThem) {
  for (const char* bad :
       {"", "auto", "auto:", "oracle", "oracle:", "oracle:1.5", "oracle:-0.1", "oracle:nan",
        "oracle:0.5x", "lookup:3", "dflash", "draft:", "auto:draft:", "auto:auto:lookup"}) {
    auto parsed = ParseBenchSpec(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(parsed.status().message().find("--spec"), std::string::npos)
        << parsed.status().message();
  }
}

}  // namespace
}  // namespace pocket
