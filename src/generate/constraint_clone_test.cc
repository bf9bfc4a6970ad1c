// Constraint::Clone and Constraint::Rollback, which speculative decoding needs (a drafter explores
// on a copy; a verifier keeps a prefix of the drafted tokens and undoes the rest), for every kind
// of constraint (choice, regex, GBNF, JSON Schema) with real tokenizers: after Rollback(k) a
// constraint must say exactly what a fresh one says after only the tokens kept (Allowed,
// AllowedMask, Complete, error), and go on alike; a clone must go on like its original, and
// neither may see what is done to the other. The same checks run on deliberately broken
// constraints (a Rollback that does nothing, clones that share their state) to show they fail.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/timer.h"
#include "generate/constraint.h"
#include "tokenizer/tokenizer.h"

namespace pocket {
namespace {

using Factory = std::function<std::unique_ptr<Constraint>()>;

std::shared_ptr<const Tokenizer> StoriesTokenizer() {
  static const auto tok = [] {
    auto t = Tokenizer::FromLlama2cFile(
        std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/tok512.bin", 512);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? *t : nullptr;
  }();
  return tok;
}

std::shared_ptr<const Tokenizer> QwenTokenizer() {
  static const auto tok = [] {
    auto t = Tokenizer::FromHfJsonFile(std::string(POCKET_CACHE_DIR) +
                                       "/tokenizer-qwen3/package/models/tokenizer.json");
    EXPECT_TRUE(t.ok()) << t.status().ToString() << " (run scripts/fetch_fixtures.sh)";
    return t.ok() ? *t : nullptr;
  }();
  return tok;
}

Factory FactoryFor(const Tokenizer& tok, ConstraintSpec spec) {
  return [&tok, spec] {
    auto c = MakeConstraint(tok, spec);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  };
}

// Everything a constraint says at one point.
struct View {
  std::vector<int32_t> allowed;
  std::vector<uint64_t> mask;
  size_t mask_count = 0;
  bool complete = false;
  std::string error;
  bool operator==(const View&) const = default;
};

View Look(Constraint& c) {
  View v;
  v.allowed = c.Allowed();
  v.mask_count = c.AllowedMask(&v.mask);
  v.complete = c.Complete();
  v.error = c.error().ToString();
  return v;
}

std::string Describe(const View& v) {
  std::string s = std::to_string(v.allowed.size()) + " allowed {";
  for (size_t i = 0; i < v.allowed.size() && i < 8; ++i) s += std::to_string(v.allowed[i]) + ",";
  s += v.allowed.size() > 8 ? "...}" : "}";
  s += " mask " + std::to_string(v.mask_count) + " of " + std::to_string(v.mask.size()) + " words";
  s += v.complete ? " complete" : " incomplete";
  s += " error=" + v.error;
  return s;
}

// How TokensOf picks among the allowed tokens that spell the next bytes.
enum class Pick { kLongest, kShortest };

// The tokens of `text` as `c` allows them: at each step the longest (or shortest: single bytes
// where the vocabulary has them, splitting characters) allowed token that spells the next bytes
// (any allowed token that does keeps the rest of a valid text valid).
std::vector<int32_t> TokensOf(const Tokenizer& tok, Constraint& c, std::string_view text,
                              Pick pick = Pick::kLongest) {
  std::vector<int32_t> out;
  size_t at = 0;
  while (at < text.size()) {
    int32_t best = -1;
    size_t best_len = 0;
    for (int32_t id : c.Allowed()) {
      const std::string_view b = tok.TokenBytes(id);
      const bool better =
          best < 0 || (pick == Pick::kLongest ? b.size() > best_len : b.size() < best_len);
      if (better && text.substr(at, b.size()) == b) {
        best = id;
        best_len = b.size();
      }
    }
    if (best < 0) {
      ADD_FAILURE() << "no allowed token spells " << QuoteBytes(text.substr(at));
      return {};
    }
    EXPECT_TRUE(c.Accept(best).ok());
    out.push_back(best);
    at += best_len;
  }
  EXPECT_TRUE(c.Complete()) << QuoteBytes(text);
  return out;
}

// An allowed token other than `avoid` (-1 when there is none): where a draft goes astray.
int32_t OtherAllowed(Constraint& c, int32_t avoid) {
  const std::vector<int32_t>& allowed = c.Allowed();
  for (size_t i = allowed.size(); i-- > 0;) {
    if (allowed[i] != avoid) return allowed[i];
  }
  return -1;
}

// Mismatches found, by kind, and the first of them described.
struct Findings {
  size_t rollback = 0;  // a rolled-back constraint differs from a fresh one
  size_t clone = 0;     // a clone differs from its original, or one sees the other's changes
  size_t errors = 0;    // argument checking: beyond the start, Rollback(0), after Reset
  std::string first;
  void Add(size_t* counter, const std::string& what) {
    if (*counter == 0 && first.empty()) first = what;
    ++*counter;
  }
};

class Checker {
 public:
  Checker(Factory make, std::vector<int32_t> tokens, std::vector<View> ref)
      : make_(std::move(make)), tokens_(std::move(tokens)), ref_(std::move(ref)) {}

  const Findings& findings() const { return f_; }

  // `c` (n_accepted() == i) against the fresh constraint after i tokens.
  void Expect(size_t* counter, Constraint& c, size_t i, const std::string& where) {
    if (c.n_accepted() != i) {
      f_.Add(counter, where + ": n_accepted " + std::to_string(c.n_accepted()) + ", want " +
                          std::to_string(i));
      return;
    }
    const View got = Look(c);
    if (!(got == ref_[i])) {
      f_.Add(counter, where + ": after " + std::to_string(i) + " tokens got " + Describe(got) +
                          ", a fresh constraint says " + Describe(ref_[i]));
    }
  }

  std::unique_ptr<Constraint> After(size_t i) {
    auto c = make_();
    for (size_t t = 0; t < i; ++t) EXPECT_TRUE(c->Accept(tokens_[t]).ok());
    return c;
  }

  // Goes on from n_accepted() to the end along the output, checking every step.
  void GoOn(size_t* counter, Constraint& c, const std::string& where) {
    for (size_t i = c.n_accepted(); i < tokens_.size(); ++i) {
      if (!c.Accept(tokens_[i]).ok()) {
        f_.Add(counter, where + ": token " + std::to_string(i) + " refused");
        return;
      }
      Expect(counter, c, i + 1, where + " (going on)");
    }
  }

  // Every (accepted m, rolled back k): for each m (at a stride) a fresh constraint accepts m
  // tokens, then for each k rolls back k, is checked, and takes the k tokens again, checked at
  // every step; last it goes on to the end.
  void RollbackEverywhere(size_t every) {
    const size_t n = tokens_.size();
    for (size_t m = 0; m <= n; m += every) {
      auto c = After(m);
      for (size_t k = 0; k <= m; ++k) {
        const std::string where =
            "accepted " + std::to_string(m) + ", Rollback(" + std::to_string(k) + ")";
        const Status st = c->Rollback(k);
        if (!st.ok()) {
          f_.Add(&f_.rollback, where + ": " + st.ToString());
          return;
        }
        Expect(&f_.rollback, *c, m - k, where);
        for (size_t i = m - k; i < m; ++i) {
          if (!c->Accept(tokens_[i]).ok()) {
            f_.Add(&f_.rollback, where + ": token " + std::to_string(i) + " refused");
            return;
          }
          Expect(&f_.rollback, *c, i + 1, where + " (again)");
        }
      }
      GoOn(&f_.rollback, *c, "after the rollbacks at " + std::to_string(m));
    }
  }

  // Speculative decoding on one constraint: at every step a draft of up to three tokens that goes
  // astray is accepted and rolled back, the right token is taken, and the last two are undone and
  // redone.
  void DraftAndVerify() {
    auto c = make_();
    for (size_t m = 0; m < tokens_.size(); ++m) {
      const std::string where = "draft at " + std::to_string(m);
      size_t drafted = 0;
      int32_t d = OtherAllowed(*c, tokens_[m]);
      while (d >= 0 && drafted < 3 && c->Accept(d).ok()) {
        ++drafted;
        d = OtherAllowed(*c, -1);
      }
      if (!c->Rollback(drafted).ok()) f_.Add(&f_.rollback, where + ": Rollback failed");
      Expect(&f_.rollback, *c, m, where + " rolled back " + std::to_string(drafted));
      if (!c->Accept(tokens_[m]).ok()) {
        f_.Add(&f_.rollback, where + ": the right token refused");
        return;
      }
      Expect(&f_.rollback, *c, m + 1, where + " accepted");
      if (m + 1 >= 2) {
        if (!c->Rollback(2).ok()) f_.Add(&f_.rollback, where + ": Rollback(2) failed");
        Expect(&f_.rollback, *c, m - 1, where + " Rollback(2)");
        (void)c->Accept(tokens_[m - 1]);
        (void)c->Accept(tokens_[m]);
        Expect(&f_.rollback, *c, m + 1, where + " redone");
      }
    }
  }

  // A clone taken after m tokens (m at a stride) goes on like the original; changing either (going
  // astray, rolling back past the clone point, Reset) leaves the other as it was.
  void Clones(size_t every) {
    const size_t n = tokens_.size();
    for (size_t m = 0; m <= n; m += every) {
      const std::string where = "clone at " + std::to_string(m);
      auto original = After(m);
      auto clone = original->Clone();
      Expect(&f_.clone, *clone, m, where + ": the clone");
      // Diverge the clone: astray, then back past the clone point to the start.
      const int32_t d = OtherAllowed(*clone, m < n ? tokens_[m] : -1);
      if (d >= 0) (void)clone->Accept(d);
      (void)clone->Rollback(clone->n_accepted());
      Expect(&f_.clone, *clone, 0, where + ": the clone rolled back to the start");
      Expect(&f_.clone, *original, m, where + ": the original after the clone diverged");
      GoOn(&f_.clone, *original, where + ": the original");
      // The clone goes on along the output, unaffected by the original's going on.
      GoOn(&f_.clone, *clone, where + ": the clone");
      // The reverse: a clone of the original (now at the end) rolled back to m; then the original
      // is reset and goes astray, and the clone goes on.
      auto second = original->Clone();
      (void)second->Rollback(n - m);
      original->Reset();
      const int32_t e = OtherAllowed(*original, tokens_.empty() ? -1 : tokens_[0]);
      if (e >= 0) (void)original->Accept(e);
      Expect(&f_.clone, *second, m, where + ": a clone after its original was reset");
      GoOn(&f_.clone, *second, where + ": the second clone");
      // A clone of a clone.
      auto third = second->Clone();
      (void)third->Rollback(n - m);
      Expect(&f_.clone, *third, m, where + ": a clone of a clone rolled back");
      Expect(&f_.clone, *second, n, where + ": its original");
    }
  }

  void Errors() {
    const size_t m = std::min<size_t>(3, tokens_.size());
    auto c = After(m);
    const Status beyond = c->Rollback(m + 1);
    const std::string want = "cannot roll back " + std::to_string(m + 1) + " tokens: only " +
                             std::to_string(m) + " accepted";
    if (beyond.code() != StatusCode::kInvalidArgument ||
        beyond.message().find(want) == std::string::npos)
      f_.Add(&f_.errors, "Rollback beyond the start gave " + beyond.ToString());
    Expect(&f_.errors, *c, m, "after a refused Rollback");
    if (!c->Rollback(0).ok()) f_.Add(&f_.errors, "Rollback(0) failed");
    Expect(&f_.errors, *c, m, "after Rollback(0)");
    c->Reset();
    Expect(&f_.errors, *c, 0, "after Reset");
    if (c->Rollback(1).ok()) f_.Add(&f_.errors, "Rollback(1) after Reset succeeded");
    if (!c->Rollback(0).ok()) f_.Add(&f_.errors, "Rollback(0) after Reset failed");
    Expect(&f_.errors, *c, 0, "after Reset and Rollback(0)");
    GoOn(&f_.errors, *c, "after Reset");
  }

 private:
  Factory make_;
  std::vector<int32_t> tokens_;
  std::vector<View> ref_;
  Findings f_;
};

// The tokens of `text` and the fresh constraint's view after each prefix of them.
struct Walk {
  std::vector<int32_t> tokens;
  std::vector<View> ref;
  size_t split_chars = 0;  // prefixes of the tokens that end inside a UTF-8 character
};

// `text` ends inside a UTF-8 character (a lead byte not followed by all its continuation bytes).
bool EndsInsideCharacter(std::string_view text) {
  size_t i = text.size();
  while (i > 0 && (static_cast<uint8_t>(text[i - 1]) & 0xC0) == 0x80) --i;
  if (i == 0) return false;
  const uint8_t lead = static_cast<uint8_t>(text[i - 1]);
  const size_t len = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  return text.size() - (i - 1) < len;
}

Walk WalkOf(const Tokenizer& tok, const Factory& make, std::string_view text, Pick pick) {
  Walk w;
  auto first = make();
  if (first == nullptr) return w;
  w.tokens = TokensOf(tok, *first, text, pick);
  auto c = make();
  std::string prefix;
  for (size_t i = 0;; ++i) {
    w.ref.push_back(Look(*c));
    w.split_chars += EndsInsideCharacter(prefix);
    if (i == w.tokens.size()) break;
    EXPECT_TRUE(c->Accept(w.tokens[i]).ok());
    prefix += tok.TokenBytes(w.tokens[i]);
  }
  return w;
}

// The views must change along the output, or a Rollback that does nothing would pass: most
// rollbacks of one or more tokens must land on a view unlike the one they start from.
void ExpectInformative(const Walk& w, const std::string& text) {
  size_t pairs = 0, differ = 0;
  for (size_t m = 1; m < w.ref.size(); ++m) {
    for (size_t k = 1; k <= m; ++k) {
      ++pairs;
      differ += !(w.ref[m] == w.ref[m - k]);
    }
  }
  EXPECT_GE(differ * 4, pairs * 3) << QuoteBytes(text) << ": " << differ << " of " << pairs;
  std::printf(
      "  %s: %zu tokens (%zu prefixes end inside a character), %zu of %zu rollbacks "
      "change the view\n",
      QuoteBytes(text).c_str(), w.tokens.size(), w.split_chars, differ, pairs);
}

Findings RunAll(const Factory& make, const Walk& w, size_t stride) {
  Checker check(make, w.tokens, w.ref);
  check.RollbackEverywhere(stride);
  check.DraftAndVerify();
  check.Clones(stride);
  check.Errors();
  return check.findings();
}

// `split`: some prefix of the output's tokens must end inside a character (rollbacks then restore
// an unfinished character).
void CheckConstraint(const Tokenizer& tok, const ConstraintSpec& spec, const std::string& text,
                     Pick pick, bool split, size_t stride = 1) {
  const Factory make = FactoryFor(tok, spec);
  const Walk w = WalkOf(tok, make, text, pick);
  ASSERT_GE(w.tokens.size(), 8u) << QuoteBytes(text);
  if (split) {
    EXPECT_GT(w.split_chars, 0u) << QuoteBytes(text);
  }
  ExpectInformative(w, text);
  const Findings f = RunAll(make, w, stride);
  EXPECT_EQ(f.rollback, 0u) << f.first;
  EXPECT_EQ(f.clone, 0u) << f.first;
  EXPECT_EQ(f.errors, 0u) << f.first;
}

ConstraintSpec Choices() {
  ConstraintSpec spec;
  spec.choices = {"Once upon a time, there was a big dog.", "Once upon a time, there was a cat.",
                  "Once upon a hill", "Once", "yes"};
  return spec;
}

constexpr const char* kChoiceText = "Once upon a time, there was a big dog.";

ConstraintSpec Regex() {
  ConstraintSpec spec;
  spec.regex = R"((Tim|Lily) (was|is) [0-9]{1,3} (years|days) old(, [a-zé]+)?\.)";
  return spec;
}
constexpr const char* kRegexText = "Lily was 42 days old, café.";

ConstraintSpec Gbnf() {
  ConstraintSpec spec;
  spec.grammar = R"(root ::= "{" ws "\"name\":" ws str "," ws "\"tags\":" ws "[" tags? "]" ws "}"
tags ::= str ("," ws str)*
str  ::= "\"" [a-z é]* "\""
ws   ::= " "?
)";
  return spec;
}
constexpr const char* kGbnfText = R"({"name": "lily", "tags": ["big","red é"] })";

ConstraintSpec Schema() {
  ConstraintSpec spec;
  spec.json_schema = R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 12},
      "age": {"type": "integer", "minimum": 0, "maximum": 120},
      "pets": {"type": "array", "maxItems": 3, "items": {
        "type": "object",
        "properties": {"kind": {"enum": ["dog", "cat"]},
                       "weight": {"type": "number", "minimum": 0, "maximum": 50}},
        "required": ["kind"], "additionalProperties": false}}
    },
    "required": ["name", "age"],
    "additionalProperties": false
  })";
  return spec;
}
constexpr const char* kSchemaText =
    R"({"pets": [{"weight": 3.5, "kind": "dog"}], "name": "Tim é", "age": 7})";

TEST(ConstraintRollback, Choice) {
  auto tok = StoriesTokenizer();
  ASSERT_NE(tok, nullptr);
  CheckConstraint(*tok, Choices(), kChoiceText, Pick::kLongest, /*split=*/false);
}

TEST(ConstraintRollback, Regex) {
  auto tok = StoriesTokenizer();
  ASSERT_NE(tok, nullptr);
  CheckConstraint(*tok, Regex(), kRegexText, Pick::kShortest, /*split=*/true);
}

TEST(ConstraintRollback, Gbnf) {
  auto tok = StoriesTokenizer();
  ASSERT_NE(tok, nullptr);
  CheckConstraint(*tok, Gbnf(), kGbnfText, Pick::kShortest, /*split=*/true);
}

TEST(ConstraintRollback, JsonSchema) {
  auto tok = StoriesTokenizer();
  ASSERT_NE(tok, nullptr);
  CheckConstraint(*tok, Schema(), kSchemaText, Pick::kShortest, /*split=*/true);
}

// The 151,643-token vocabulary: multi-byte tokens, and characters split across tokens. Rollbacks
// from every fifth position (a fresh constraint's first masks walk the whole vocabulary). A clone
// shares the trie and the grammar, so it costs far less than making the constraint.
TEST(ConstraintRollback, GbnfQwenVocabulary) {
  auto tok = QwenTokenizer();
  ASSERT_NE(tok, nullptr);
  ConstraintSpec spec;
  spec.grammar = R"(root ::= "{" ws "\"name\":" ws str "," ws "\"tags\":" ws "[" tags? "]" ws "}"
tags ::= str ("," ws str)*
str  ::= "\"" [a-z é一-鿿]* "\""
ws   ::= " "?
)";
  const std::string text = R"({"name": "lily 屏幕", "tags": ["big","red é 鿏"] })";
  CheckConstraint(*tok, spec, text, Pick::kLongest, /*split=*/true, /*stride=*/5);

  const Factory make = FactoryFor(*tok, spec);
  Stopwatch make_watch;
  auto c = make();
  const int64_t make_us = make_watch.elapsed_us();
  ASSERT_NE(c, nullptr);
  (void)TokensOf(*tok, *c, text);
  Stopwatch clone_watch;
  auto copy = c->Clone();
  const int64_t clone_us = clone_watch.elapsed_us();
  std::printf("  make %lld us, clone after %zu tokens %lld us\n", static_cast<long long>(make_us),
              c->n_accepted(), static_cast<long long>(clone_us));
  EXPECT_LT(clone_us * 10, make_us);
}

// The checks catch broken implementations: a constraint wrapper whose Rollback only counts (the
// state stays), and one whose clones share their state with the original.
class Broken final : public Constraint {
 public:
  enum Fault { kRollbackDoesNothing, kClonesShareState };
  Broken(std::shared_ptr<Constraint> inner, Fault fault)
      : inner_(std::move(inner)), fault_(fault) {}

  void Reset() override {
    inner_->Reset();
    n_ = 0;
  }
  std::unique_ptr<Constraint> Clone() const override {
    auto c = std::make_unique<Broken>(
        fault_ == kClonesShareState ? inner_ : std::shared_ptr<Constraint>(inner_->Clone()),
        fault_);
    c->n_ = n_;
    return c;
  }
  size_t n_accepted() const override { return n_; }
  const std::vector<int32_t>& Allowed() override { return inner_->Allowed(); }
  size_t AllowedMask(std::vector<uint64_t>* mask) override { return inner_->AllowedMask(mask); }
  Status Accept(int32_t token) override {
    Status s = inner_->Accept(token);
    if (s.ok()) ++n_;
    return s;
  }
  bool Complete() const override { return inner_->Complete(); }
  Status error() const override { return inner_->error(); }

 protected:
  void RollbackTokens(size_t n_tokens) override {
    n_ -= n_tokens;
    if (fault_ != kRollbackDoesNothing) (void)inner_->Rollback(n_tokens);
  }

 private:
  std::shared_ptr<Constraint> inner_;
  Fault fault_;
  size_t n_ = 0;
};

TEST(ConstraintRollback, TheChecksCatchBrokenConstraints) {
  auto tok = StoriesTokenizer();
  ASSERT_NE(tok, nullptr);
  for (const auto& [spec, text] :
       {std::pair{Choices(), std::string(kChoiceText)}, std::pair{Regex(), std::string(kRegexText)},
        std::pair{Gbnf(), std::string(kGbnfText)}, std::pair{Schema(), std::string(kSchemaText)}}) {
    const Factory real = FactoryFor(*tok, spec);
    const Walk w = WalkOf(*tok, real, text, Pick::kShortest);
    ASSERT_GE(w.tokens.size(), 8u);
    for (Broken::Fault fault : {Broken::kRollbackDoesNothing, Broken::kClonesShareState}) {
      const Factory broken = [&real, fault] {
        return std::make_unique<Broken>(std::shared_ptr<Constraint>(real()), fault);
      };
      const Findings f = RunAll(broken, w, /*stride=*/3);
      if (fault == Broken::kRollbackDoesNothing) {
        EXPECT_GT(f.rollback, 0u) << QuoteBytes(text);
      } else {
        EXPECT_EQ(f.rollback, 0u) << QuoteBytes(text) << ": " << f.first;
        EXPECT_GT(f.clone, 0u) << QuoteBytes(text);
      }
    }
  }
}

}  // namespace
}  // namespace pocket
