// The grammar engine: the recognizer on hand-built grammars, span rules, and the constraint's
// token masks against a brute-force oracle (every vocabulary token probed through the
// recognizer) on random walks.
#include "generate/grammar.h"

#include <gtest/gtest.h>

#include <random>

#include "base/timer.h"
#include "tokenizer/tokenizer.h"

namespace pocket {
namespace {

bool Matches(Grammar* g, std::string_view text) {
  Recognizer r(g);
  auto ok = r.Matches(text);
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  return ok.ok() && *ok;
}

// S ::= "(" S ")" S | ε  (balanced parentheses: not regular).
std::unique_ptr<Grammar> Balanced() {
  auto g = std::make_unique<Grammar>();
  const uint32_t s = g->AddRule("S");
  g->AddAlt(s, {g->Char('('), Grammar::Ref(s), g->Char(')'), Grammar::Ref(s)});
  g->AddAlt(s, {});
  g->SetRoot(s);
  return g;
}

TEST(Recognizer, BalancedParentheses) {
  auto g = Balanced();
  ASSERT_TRUE(g->Check().ok());
  EXPECT_TRUE(Matches(g.get(), ""));
  EXPECT_TRUE(Matches(g.get(), "()"));
  EXPECT_TRUE(Matches(g.get(), "(()())()"));
  EXPECT_FALSE(Matches(g.get(), "(()"));
  EXPECT_FALSE(Matches(g.get(), "())"));
  EXPECT_FALSE(Matches(g.get(), "(x)"));
  // Prefixes: live but not complete.
  Recognizer r(g.get());
  ASSERT_TRUE(*r.Feed("(("));
  EXPECT_FALSE(r.Complete());
  EXPECT_TRUE(r.CanContinue());
  EXPECT_FALSE(*r.Feed(")x"));  // rejected as a whole, state unchanged
  ASSERT_TRUE(*r.Feed("))"));
  EXPECT_TRUE(r.Complete());
}

TEST(Recognizer, RepeatBounds) {
  for (auto [min, max] : {std::pair{0, 0}, {0, 1}, {1, 3}, {2, 2}, {3, -1}, {0, -1}}) {
    Grammar g;
    GrammarSeq ab = g.Literal("ab");
    g.SetRoot(g.Repeat(ab, min, max));
    ASSERT_TRUE(g.Check().ok());
    for (int n = 0; n <= 6; ++n) {
      std::string text;
      for (int k = 0; k < n; ++k) text += "ab";
      const bool want = n >= min && (max < 0 || n <= max);
      EXPECT_EQ(Matches(&g, text), want) << "{" << min << "," << max << "} n=" << n;
    }
    EXPECT_FALSE(Matches(&g, "aba"));
  }
}

TEST(Recognizer, UnicodeAndSplitCharacters) {
  Grammar g;
  GrammarSeq han = {g.Chars({{0x4E00, 0x9FFF}})};
  g.SetRoot(g.Repeat(han, 1, -1));
  EXPECT_TRUE(Matches(&g, "中文"));
  EXPECT_FALSE(Matches(&g, "中a"));
  Recognizer r(&g);
  const std::string zh = "中";
  ASSERT_TRUE(*r.Feed(zh.substr(0, 1)));  // a partial character that can become one
  EXPECT_FALSE(r.Complete());
  ASSERT_TRUE(*r.Feed(zh.substr(1)));
  EXPECT_TRUE(r.Complete());
  EXPECT_FALSE(*r.Feed("\xC3"));  // starts only U+00C0..U+00FF: none in the set
  EXPECT_FALSE(*r.Feed("\xFF"));  // never UTF-8
}

TEST(Recognizer, RegexRulesIncludingEpsilonCycles) {
  for (const char* pattern : {"(a*)*b", "(a|b)*abb", "x(y?)*z", "[0-9]{2,4}"}) {
    auto nfa = CompileRegexNfa(pattern);
    ASSERT_TRUE(nfa.ok());
    Grammar g;
    g.SetRoot(g.FromRegex(*nfa));
    ASSERT_TRUE(g.Check().ok()) << pattern;
    Recognizer r(&g);
    (void)r;
  }
  auto nfa = CompileRegexNfa("(a|b)*abb");
  Grammar g;
  g.SetRoot(g.FromRegex(*nfa));
  EXPECT_TRUE(Matches(&g, "abb"));
  EXPECT_TRUE(Matches(&g, "babababb"));
  EXPECT_FALSE(Matches(&g, "abba"));
  auto nfa2 = CompileRegexNfa("(a*)*b");
  Grammar g2;
  g2.SetRoot(g2.FromRegex(*nfa2));
  EXPECT_TRUE(Matches(&g2, "aaab"));
  EXPECT_TRUE(Matches(&g2, "b"));
  EXPECT_FALSE(Matches(&g2, "aa"));
}

TEST(Recognizer, JsonStringCharacters) {
  // "..." with any character, canonical escapes only.
  Grammar g;
  const uint32_t ch = JsonStringCharRule(&g, {{0, 0x10FFFF}});
  GrammarSeq body = {Grammar::Ref(ch)};
  const uint32_t str = g.AddRule("string");
  g.AddAlt(str, {g.Char('"'), Grammar::Ref(g.Repeat(body, 0, -1)), g.Char('"')});
  g.SetRoot(str);
  EXPECT_TRUE(Matches(&g, R"("")"));
  EXPECT_TRUE(Matches(&g, R"("a \"q\" \\ \n\t\u0001 é")"));
  EXPECT_FALSE(Matches(&g, "\"a\nb\""));     // a raw newline
  EXPECT_FALSE(Matches(&g, R"("\u0041")"));  // not the canonical form of 'A'
  EXPECT_FALSE(Matches(&g, R"("\/")"));
  EXPECT_FALSE(Matches(&g, R"("a"")"));
}

TEST(Recognizer, LeftRecursionIsRefused) {
  Grammar g;
  const uint32_t e = g.AddRule("expr");
  g.AddAlt(e, {Grammar::Ref(e), g.Char('+'), g.Char('1')});
  g.AddAlt(e, {g.Char('1')});
  g.SetRoot(e);
  Status s = g.Check();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("left-recursive"), std::string::npos) << s.ToString();
  // Through a nullable prefix too.
  Grammar h;
  const uint32_t opt = h.AddRule("opt", {{h.Char('x')}, {}});
  const uint32_t a = h.AddRule("a");
  h.AddAlt(a, {Grammar::Ref(opt), Grammar::Ref(a), h.Char('y')});
  h.AddAlt(a, {h.Char('y')});
  h.SetRoot(a);
  EXPECT_FALSE(h.Check().ok());
  // A cycle of tail calls is fine.
  Grammar t;
  const uint32_t p = t.AddRule("p");
  const uint32_t q = t.AddRule("q");
  t.AddAlt(p, {Grammar::Ref(q)});
  t.AddAlt(q, {Grammar::Ref(p)});
  t.AddAlt(q, {t.Char('z')});
  t.SetRoot(p);
  ASSERT_TRUE(t.Check().ok());
  EXPECT_TRUE(Matches(&t, "z"));
  EXPECT_FALSE(Matches(&t, "zz"));
}

TEST(SpanRule, RawSubstrings) {
  const std::string source = "the battery lasts long";
  Grammar g;
  auto span = AddSpanRule(&g, source, SpanEscaping::kRaw);
  ASSERT_TRUE(span.ok());
  const uint32_t root = g.AddRule("root");
  g.AddAlt(root, {g.Char('<'), Grammar::Ref(*span), g.Char('>')});
  g.SetRoot(root);
  for (size_t i = 0; i <= source.size(); ++i) {
    for (size_t j = i; j <= source.size(); j += 3) {
      std::string text = "<";
      text.append(source, i, j - i);
      text += '>';
      EXPECT_TRUE(Matches(&g, text));
    }
  }
  EXPECT_FALSE(Matches(&g, "<battery  lasts>"));
  EXPECT_FALSE(Matches(&g, "<long time>"));
}

TEST(SpanRule, JsonEscapedAndBounded) {
  const std::string source = "say \"hi\"\n中文";
  Grammar g;
  auto span = AddSpanRule(&g, source, SpanEscaping::kJsonString, 1, 4);
  ASSERT_TRUE(span.ok());
  const uint32_t root = g.AddRule("root");
  g.AddAlt(root, {g.Char('"'), Grammar::Ref(*span), g.Char('"')});
  g.SetRoot(root);
  EXPECT_TRUE(Matches(&g, R"("\"hi")"));
  EXPECT_TRUE(Matches(&g, "\"\\n中文\""));
  EXPECT_FALSE(Matches(&g, R"("")"));        // shorter than 1
  EXPECT_FALSE(Matches(&g, R"("say \"")"));  // 5 characters
  EXPECT_FALSE(Matches(&g, "\"\"hi\"\""));   // unescaped quote
  EXPECT_FALSE(Matches(&g, "\"\n中\""));     // raw newline
  EXPECT_FALSE(AddSpanRule(&g, "\xFF", SpanEscaping::kRaw).ok());
}

// ---------------------------------------------------------------------------------------------
// Masks against brute force.

std::shared_ptr<const Tokenizer> QwenTokenizer() {
  auto t = Tokenizer::FromHfJsonFile(std::string(POCKET_CACHE_DIR) +
                                     "/tokenizer-qwen3/package/models/tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status().ToString() << " (run scripts/fetch_fixtures.sh)";
  return t.ok() ? *t : nullptr;
}

std::shared_ptr<const Tokenizer> StoriesTokenizer() {
  auto t = Tokenizer::FromLlama2cFile(
      std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/tok512.bin", 512);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : nullptr;
}

// A small JSON-ish grammar: objects of string keys to strings, numbers or nested objects.
std::unique_ptr<Grammar> MiniJson() {
  auto g = std::make_unique<Grammar>();
  const uint32_t ch = JsonStringCharRule(g.get(), {{0x20, 0x10FFFF}});
  const uint32_t str = g->AddRule("string");
  g->AddAlt(str, {g->Char('"'), Grammar::Ref(g->Repeat({Grammar::Ref(ch)}, 0, 12)), g->Char('"')});
  const uint32_t digits = g->Repeat({g->Chars({{'0', '9'}})}, 1, 6);
  const uint32_t value = g->AddRule("value");
  const uint32_t object = g->AddRule("object");
  g->AddAlt(value, {Grammar::Ref(str)});
  g->AddAlt(value, {Grammar::Ref(digits)});
  g->AddAlt(value, {Grammar::Ref(object)});
  const uint32_t ws = g->AddRule("ws", {{g->Char(' ')}, {}});
  GrammarSeq member = {Grammar::Ref(str), g->Char(':'), Grammar::Ref(ws), Grammar::Ref(value)};
  GrammarSeq more = {g->Char(','), Grammar::Ref(ws)};
  more.insert(more.end(), member.begin(), member.end());
  GrammarSeq body = member;
  body.push_back(Grammar::Ref(g->Repeat(more, 0, 3)));
  g->AddAlt(object, {g->Char('{'), Grammar::Ref(g->AddRule("members", {body, {}})), g->Char('}')});
  g->SetRoot(object);
  return g;
}

std::unique_ptr<Grammar> SpanObject(const std::string& source) {
  auto g = std::make_unique<Grammar>();
  auto span = AddSpanRule(g.get(), source, SpanEscaping::kJsonString);
  EXPECT_TRUE(span.ok());
  const uint32_t root = g->AddRule("root");
  GrammarSeq seq = g->Literal("{\"aspect\": \"");
  seq.push_back(Grammar::Ref(*span));
  g->AppendLiteral(&seq, "\", \"n\": ");
  seq.push_back(Grammar::Ref(g->Repeat({g->Chars({{'0', '9'}})}, 1, 3)));
  g->AppendLiteral(&seq, "}");
  g->AddAlt(root, seq);
  g->SetRoot(root);
  return g;
}

// Random walks: at every step the mask must equal the set of tokens the recognizer can take.
void CheckMasksAgainstBruteForce(const Tokenizer& tok,
                                 std::function<std::unique_ptr<Grammar>()> make, int walks,
                                 int max_steps, uint32_t seed) {
  auto constraint = MakeGrammarConstraint(tok, make());
  ASSERT_TRUE(constraint.ok()) << constraint.status().ToString();
  auto oracle_grammar = make();
  Recognizer oracle(oracle_grammar.get());
  std::mt19937 rng(seed);
  std::vector<uint64_t> mask;
  int steps = 0;
  int64_t mask_us = 0;
  for (int w = 0; w < walks; ++w) {
    (*constraint)->Reset();
    ASSERT_TRUE(oracle.Reset().ok());
    std::string text;
    for (int step = 0; step < max_steps; ++step) {
      const Stopwatch watch;
      const size_t n = (*constraint)->AllowedMask(&mask);
      mask_us += watch.elapsed_us();
      ++steps;
      std::vector<int32_t> want;
      for (int32_t id = 0; id < tok.vocab_size(); ++id) {
        if (tok.IsSpecial(id) || tok.TokenBytes(id).empty()) continue;
        auto ok = oracle.Probe(tok.TokenBytes(id));
        ASSERT_TRUE(ok.ok());
        if (*ok) want.push_back(id);
      }
      std::vector<int32_t> got;
      for (int32_t id = 0; id < tok.vocab_size(); ++id) {
        if (static_cast<size_t>(id) / 64 < mask.size() &&
            (mask[static_cast<size_t>(id) / 64] >> (id % 64)) & 1)
          got.push_back(id);
      }
      ASSERT_EQ(got.size(), n);
      ASSERT_EQ(got, want) << "walk " << w << " step " << step << " after " << QuoteBytes(text);
      EXPECT_EQ((*constraint)->Complete(), oracle.Complete());
      if (want.empty()) break;
      // Prefer ending sometimes when complete.
      if (oracle.Complete() && rng() % 4 == 0) break;
      const int32_t pick = want[rng() % want.size()];
      ASSERT_TRUE((*constraint)->Accept(pick).ok());
      ASSERT_TRUE(*oracle.Feed(tok.TokenBytes(pick)));
      text += tok.TokenBytes(pick);
    }
  }
  // The walks must really walk (a grammar that dies at once would pass vacuously).
  EXPECT_GE(steps, walks * 5);
  std::printf("  %d masks, %.1f us per mask (first computations included)\n", steps,
              static_cast<double>(mask_us) / std::max(steps, 1));
}

TEST(GrammarMask, MatchesBruteForceSmallVocabulary) {
  auto tok = StoriesTokenizer();
  ASSERT_NE(tok, nullptr);
  CheckMasksAgainstBruteForce(*tok, MiniJson, 30, 60, 1);
  CheckMasksAgainstBruteForce(*tok, Balanced, 10, 40, 2);
  CheckMasksAgainstBruteForce(
      *tok, [] { return SpanObject("Tim saw a big dog. \"Hi!\" he said."); }, 30, 40, 3);
}

#ifdef NDEBUG
constexpr int kQwenWalks = 3;
#else
constexpr int kQwenWalks = 1;  // sanitizer builds: the same paths, fewer 151K-token oracle scans
#endif

TEST(GrammarMask, MatchesBruteForceQwenVocabulary) {
  auto tok = QwenTokenizer();
  ASSERT_NE(tok, nullptr);
  CheckMasksAgainstBruteForce(*tok, MiniJson, kQwenWalks, 25, 4);
  CheckMasksAgainstBruteForce(
      *tok, [] { return SpanObject("屏幕很清晰，电池\"耐用\"。Battery ok"); }, 3, 20, 5);
}

}  // namespace
}  // namespace pocket
