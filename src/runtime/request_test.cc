// PrepareRequest: the one translation of a request (prompt text, prompt tokens or chat messages,
// sampling, seed, stop strings, budget, constraint) into a Session's inputs. On stories260K
// (llama2.c tokenizer, no chat template) and, for special tokens and chats, a tiny random Qwen3
// model with the Qwen3 tokenizer and its chat template (scripts/fetch_fixtures.sh).
#include "runtime/request.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "model/synthetic.h"
#include "runtime/candidates.h"

namespace pocket {
namespace {

const std::string kStories =
    std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/stories260K.bin";
const std::string kStoriesTok = std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/tok512.bin";
const std::string kQwenTok =
    std::string(POCKET_CACHE_DIR) + "/tokenizer-qwen3/package/models/tokenizer.json";

std::shared_ptr<const Model> Stories() {
  static const std::shared_ptr<const Model> model = [] {
    LoadOptions o;
    o.tokenizer_path = kStoriesTok;
    auto m = Model::Load(kStories, o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? std::shared_ptr<const Model>(*m) : nullptr;
  }();
  return model;
}

// A tiny random Qwen3 model with the Qwen3 tokenizer (special tokens, a chat template); null when
// the tokenizer is not fetched.
std::shared_ptr<const Model> Qwen() {
  static const std::shared_ptr<const Model> model = []() -> std::shared_ptr<const Model> {
    if (access(kQwenTok.c_str(), R_OK) != 0) return nullptr;
    auto tok = Tokenizer::FromHfJsonFile(kQwenTok);
    EXPECT_TRUE(tok.ok()) << tok.status().ToString();
    if (!tok.ok()) return nullptr;
    auto config = PresetConfig("tiny", Architecture::kQwen3);
    EXPECT_TRUE(config.ok()) << config.status().ToString();
    if (!config.ok()) return nullptr;
    SyntheticOptions o;
    o.config = *config;
    o.seed = 3;
    o.tokenizer = *tok;
    const std::string path = std::string(POCKET_BINARY_DIR) + "/request_test_qwen3_" +
                             std::to_string(getpid()) + ".gguf";
    const Status written = WriteSyntheticGguf(o, path);
    EXPECT_TRUE(written.ok()) << written.ToString();
    if (!written.ok()) return nullptr;
    auto m = Model::Load(path);
    unlink(path.c_str());
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? std::shared_ptr<const Model>(*m) : nullptr;
  }();
  return model;
}

#define REQUIRE_QWEN() \
  if (Qwen() == nullptr) GTEST_SKIP() << kQwenTok << " missing (run scripts/fetch_fixtures.sh)"

std::vector<int32_t> Encode(const Model& model, const std::string& text, bool parse_special) {
  EncodeOptions eo;
  eo.parse_special = parse_special;
  eo.add_bos = model.tokenizer()->spec().add_bos;
  auto ids = model.tokenizer()->Encode(text, eo);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

SessionOptions Small() {
  SessionOptions o;
  o.n_ctx = 256;
  o.n_batch = 64;
  return o;
}

GenerateRequest PromptOf(const std::string& text, bool parse_special) {
  GenerateRequest r;
  r.prompt = text;
  r.parse_special = parse_special;
  return r;
}

TEST(PrepareRequest, PromptTokensAreTheTokenizersEncoding) {
  const Model& m = *Stories();
  for (bool special : {false, true}) {
    const std::string text = "Once upon a time, there was a cat.";
    auto p = PrepareRequest(m, PromptOf(text, special));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->prompt.ids, Encode(m, text, special));
    EXPECT_EQ(p->prompt.candidate_context, text);
    EXPECT_EQ(p->constraint, nullptr);
    EXPECT_EQ(p->options.constraint, nullptr);
    EXPECT_FALSE(p->choose_best());
  }
}

TEST(PrepareRequest, SpecialTokensParsedOnlyWhenAsked) {
  REQUIRE_QWEN();
  const Model& m = *Qwen();
  const int32_t im_end = m.tokenizer()->FindToken("<|im_end|>");
  ASSERT_GE(im_end, 0);
  const std::string text = "Hello<|im_end|> world";
  auto parsed = PrepareRequest(m, PromptOf(text, true));
  auto plain = PrepareRequest(m, PromptOf(text, false));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(parsed->prompt.ids, Encode(m, text, true));
  EXPECT_EQ(plain->prompt.ids, Encode(m, text, false));
  auto count = [&](const std::vector<int32_t>& ids) {
    return std::count(ids.begin(), ids.end(), im_end);
  };
  EXPECT_EQ(count(parsed->prompt.ids), 1);
  EXPECT_EQ(count(plain->prompt.ids), 0);
}

TEST(PrepareRequest, ChatIsTheTemplatesRendering) {
  REQUIRE_QWEN();
  const Model& m = *Qwen();
  auto tmpl = ChatTemplate::Detect(m.tokenizer()->spec().chat_template);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hi <|im_end|>"}};
  for (bool thinking : {true, false}) {
    ChatOptions co;
    co.enable_thinking = thinking;
    auto rendered = tmpl->Apply(messages, co);
    ASSERT_TRUE(rendered.ok()) << rendered.status().ToString();
    GenerateRequest r;
    r.messages = messages;
    r.chat = co;
    r.parse_special = true;  // the CLI: the rendering encoded as text with special tokens
    auto p = PrepareRequest(m, r);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->prompt.ids, Encode(m, *rendered, true));
    // Without parse_special the user's "<|im_end|>" is text: one control token fewer.
    r.parse_special = false;
    auto q = PrepareRequest(m, r);
    ASSERT_TRUE(q.ok()) << q.status().ToString();
    const int32_t im_end = m.tokenizer()->FindToken("<|im_end|>");
    EXPECT_EQ(std::count(p->prompt.ids.begin(), p->prompt.ids.end(), im_end),
              std::count(q->prompt.ids.begin(), q->prompt.ids.end(), im_end) + 1);
  }
}

TEST(PrepareRequest, NoChatTemplateIsWordedByTheCaller) {
  const Model& m = *Stories();
  GenerateRequest r;
  r.messages = std::vector<ChatMessage>{{"user", "Hi"}};
  auto p = PrepareRequest(m, r);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(p.status().message().find("has no chat template"), std::string::npos)
      << p.status().message();
  r.wording.no_chat_template = "no template: use plain completion";
  p = PrepareRequest(m, r);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), "no template: use plain completion");
  r.messages = std::vector<ChatMessage>{};
  p = PrepareRequest(m, r);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), "the chat has no messages");
}

TEST(PrepareRequest, NoTokenizerIsWordedByTheCaller) {
  auto m = Model::Load(kStories);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ((*m)->tokenizer(), nullptr);
  auto p = PrepareRequest(**m, PromptOf("Once", false));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(p.status().message(), kStories + " has no tokenizer");
  GenerateRequest r = PromptOf("Once", false);
  r.wording.no_tokenizer = "no tokenizer; pass one with --tokenizer";
  p = PrepareRequest(**m, r);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), "no tokenizer; pass one with --tokenizer");
}

TEST(PrepareRequest, ExactlyOneInput) {
  const Model& m = *Stories();
  GenerateRequest none;
  auto p = PrepareRequest(m, none);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  GenerateRequest both = PromptOf("Once", false);
  both.prompt_tokens = std::vector<int32_t>{1};
  p = PrepareRequest(m, both);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
}

TEST(PrepareRequest, PromptTokensAreUsedAsGiven) {
  const Model& m = *Stories();
  GenerateRequest r;
  r.prompt_tokens = std::vector<int32_t>{1, 403, 407};
  auto p = PrepareRequest(m, r);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->prompt.ids, (std::vector<int32_t>{1, 403, 407}));
  r.prompt_tokens = std::vector<int32_t>{1, 512};
  p = PrepareRequest(m, r);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("512"), std::string::npos) << p.status().message();
}

TEST(PrepareRequest, ConstraintIsCompiledAndOptionsPointToIt) {
  const Model& m = *Stories();
  GenerateRequest r = PromptOf("Once", false);
  r.constraint.regex = "[ab]+";
  auto p = PrepareRequest(m, r);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_NE(p->constraint, nullptr);
  EXPECT_EQ(p->options.constraint, p->constraint.get());
  // Still so after the prepared request moves.
  PreparedRequest moved = std::move(*p);
  EXPECT_EQ(moved.options.constraint, moved.constraint.get());
  // Choices streamed are a constraint too.
  r.constraint = ConstraintSpec();
  r.constraint.choices = {" yes", " no"};
  p = PrepareRequest(m, r);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_NE(p->constraint, nullptr);
  EXPECT_EQ(p->options.constraint, p->constraint.get());
  EXPECT_FALSE(p->choose_best());
}

TEST(PrepareRequest, ConstraintErrorsPassThrough) {
  const Model& m = *Stories();
  ConstraintSpec bad;
  bad.json_schema = R"({"type": "string", "minLength": 5, "maxLength": 2})";
  auto direct = MakeConstraint(*m.tokenizer(), bad);
  ASSERT_FALSE(direct.ok());
  GenerateRequest r = PromptOf("Once", false);
  r.constraint = bad;
  auto p = PrepareRequest(m, r);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), direct.status().code());
  EXPECT_EQ(p.status().message(), direct.status().message());
  r.constraint_origin = "schema.json";
  p = PrepareRequest(m, r);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), direct.status().code());
  EXPECT_EQ(p.status().message(), "schema.json: " + direct.status().message());
  // Several constraints at once: MakeConstraint's error.
  r = PromptOf("Once", false);
  r.constraint.regex = "a";
  r.constraint.grammar = "root ::= \"a\"";
  p = PrepareRequest(m, r);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("give one constraint"), std::string::npos);
}

TEST(PrepareRequest, BestChoiceTokenizesTheCandidates) {
  const Model& m = *Stories();
  const std::string text = "Sentiment:";
  GenerateRequest r = PromptOf(text, true);
  r.constraint.choices = {" positive", " negative"};
  r.choice_mode = ChoiceMode::kBest;
  auto p = PrepareRequest(m, r);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->choose_best());
  EXPECT_EQ(p->constraint, nullptr);
  EXPECT_EQ(p->options.constraint, nullptr);
  EXPECT_EQ(p->choices, r.constraint.choices);
  EncodeOptions eo;
  eo.add_bos = m.tokenizer()->spec().add_bos;
  auto expected = TokenizeCandidates(*m.tokenizer(), text, r.constraint.choices, eo);
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  EXPECT_EQ(p->prompt.ids, expected->prompt);
  EXPECT_EQ(p->candidates, expected->candidates);
  // At temperature 0 the most probable candidate is taken.
  auto session = Session::Create(Stories(), Small());
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  r.sampling.temperature = 0;
  p = PrepareRequest(m, r);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto chosen = ChooseCandidate(**session, *p);
  ASSERT_TRUE(chosen.ok()) << chosen.status().ToString();
  ASSERT_EQ(chosen->scores.size(), 2u);
  EXPECT_EQ(chosen->chosen, chosen->scores.front().index);
  EXPECT_EQ(chosen->result.text, r.constraint.choices[static_cast<size_t>(chosen->chosen)]);
  EXPECT_EQ(chosen->result.stop_reason, StopReason::kEos);
  // A budget shorter than the chosen candidate is an error, never a cut output.
  r.max_tokens = 0;
  p = PrepareRequest(m, r);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  chosen = ChooseCandidate(**session, *p);
  ASSERT_FALSE(chosen.ok());
  EXPECT_EQ(chosen.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(chosen.status().message().find("token budget of 0"), std::string::npos);
}

TEST(PrepareRequest, FixedSeedIsKept) {
  const Model& m = *Stories();
  GenerateRequest r = PromptOf("Once", false);
  r.sampling.seed = 1234;
  for (SeedBits bits : {SeedBits::k32, SeedBits::k64}) {
    r.seed_bits = bits;
    auto p = PrepareRequest(m, r);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->options.sampling.seed, 1234u);
  }
}

TEST(PrepareRequest, RandomSeedIsDrawnWhenAsked) {
  const Model& m = *Stories();
  GenerateRequest r = PromptOf("Once", false);
  r.sampling.seed = 1234;
  r.random_seed = true;
  std::set<uint64_t> seeds32, seeds64;
  for (int i = 0; i < 8; ++i) {
    r.seed_bits = SeedBits::k32;
    auto p = PrepareRequest(m, r);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_LE(p->options.sampling.seed, UINT32_MAX);
    seeds32.insert(p->options.sampling.seed);
    r.seed_bits = SeedBits::k64;
    p = PrepareRequest(m, r);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_NE(p->options.sampling.seed, UINT64_MAX);
    seeds64.insert(p->options.sampling.seed);
  }
  // Drawn, not the request's seed, and not the same every time.
  EXPECT_GT(seeds32.size(), 1u);
  EXPECT_GT(seeds64.size(), 1u);
  EXPECT_EQ(seeds32.count(1234), 0u);
  EXPECT_GT(*seeds64.rbegin(), uint64_t{UINT32_MAX});  // 64 bits: some draw above 2^32
  EXPECT_NE(DrawSeed(SeedBits::k64), UINT64_MAX);
}

TEST(PrepareRequest, SamplingStopStringsAndBudgetCarryOver) {
  const Model& m = *Stories();
  GenerateRequest r = PromptOf("Once", false);
  r.sampling.temperature = 0.5f;
  r.sampling.top_k = 7;
  r.sampling.top_p = 0.9f;
  r.sampling.min_p = 0.1f;
  r.sampling.repetition_penalty = 1.1f;
  r.sampling.presence_penalty = 0.2f;
  r.sampling.frequency_penalty = 0.3f;
  r.sampling.seed = 9;
  r.max_tokens = 17;
  r.stop = {"\n\n", "The end"};
  auto p = PrepareRequest(m, r);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const GenerateOptions& o = p->options;
  EXPECT_EQ(o.max_tokens, 17);
  EXPECT_EQ(o.stop_strings, r.stop);
  EXPECT_EQ(o.sampling.temperature, 0.5f);
  EXPECT_EQ(o.sampling.top_k, 7);
  EXPECT_EQ(o.sampling.top_p, 0.9f);
  EXPECT_EQ(o.sampling.min_p, 0.1f);
  EXPECT_EQ(o.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(o.sampling.presence_penalty, 0.2f);
  EXPECT_EQ(o.sampling.frequency_penalty, 0.3f);
  EXPECT_EQ(o.sampling.seed, 9u);
  r.max_tokens = kNoTokenLimit;
  p = PrepareRequest(m, r);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->options.max_tokens, kNoTokenLimit);
  // MakeGenerateOptions is the same translation without a constraint.
  const GenerateOptions direct = MakeGenerateOptions(r);
  EXPECT_EQ(direct.max_tokens, kNoTokenLimit);
  EXPECT_EQ(direct.stop_strings, r.stop);
  EXPECT_EQ(direct.constraint, nullptr);
}

TEST(PrepareRequest, InvalidSamplingIsAnError) {
  const Model& m = *Stories();
  GenerateRequest r = PromptOf("Once", false);
  r.sampling.top_p = 0;
  auto direct = r.sampling.Validate();
  ASSERT_FALSE(direct.ok());
  auto p = PrepareRequest(m, r);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), direct.message());
}

TEST(PrepareRequest, GeneratesFromThePreparedInputs) {
  auto session = Session::Create(Stories(), Small());
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  GenerateRequest r = PromptOf("Once upon a time", false);
  r.sampling.temperature = 0;
  r.max_tokens = 16;
  r.constraint.choices = {" yes", " no"};
  auto p = PrepareRequest(*Stories(), r);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto out = (*session)->Generate(std::span<const int32_t>(p->prompt.ids), p->options);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE(out->text == " yes" || out->text == " no") << out->text;
  EXPECT_EQ(out->seed, p->options.sampling.seed);
}

TEST(PrepareRequest, SpecNamesTheDrafterAndOptionsPointToIt) {
  const Model& m = *Stories();
  GenerateRequest r = PromptOf("Once", false);
  auto plain = PrepareRequest(m, r);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->drafter, nullptr);
  EXPECT_EQ(plain->options.drafter, nullptr);
  r.spec = "lookup";
  r.draft_max = 5;
  auto p = PrepareRequest(m, r);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_NE(p->drafter, nullptr);
  EXPECT_EQ(p->options.drafter, p->drafter.get());
  EXPECT_EQ(p->options.draft_max, 5);
  PreparedRequest moved = std::move(*p);
  EXPECT_EQ(moved.options.drafter, moved.drafter.get());
  r.spec = "medusa";
  auto unknown = PrepareRequest(m, r);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("\"medusa\""), std::string::npos);
  r.spec = "lookup";
  r.lookup.min_ngram = 4;
  r.lookup.max_ngram = 2;
  EXPECT_FALSE(PrepareRequest(m, r).ok());
}

}  // namespace
}  // namespace pocket
