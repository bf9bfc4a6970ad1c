// Context-free grammars over Unicode code points, the engine under the GBNF, JSON Schema and span
// constraints.
//
// A Grammar is a list of rules; a rule is a list of alternatives; an alternative is a sequence of
// elements: a character set, a reference to a rule, or a reference to a *lazy* rule, a rule of a
// GrammarTemplate family instantiated on demand for one payload (the JSON Schema compiler uses
// them for what a plain grammar cannot say compactly: objects whose properties may come in any
// order but at most once, bounded numbers, strings copied from a source text). An instantiated
// lazy rule is an ordinary rule from then on.
//
// The Recognizer runs the grammar as a pushdown automaton: its state is a set of stacks of
// positions (rule, alternative, element), each with a character set on top, advanced one code
// point at a time. A reference in the last position of an alternative does not push (a tail call),
// so right-recursive rules (repetitions, regular expressions) run in constant depth. Left
// recursion is refused when the grammar is checked.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "generate/constraint.h"
#include "generate/regex.h"

namespace pocket {

class Grammar;

struct GrammarElem {
  enum Kind : uint8_t { kChars, kRule, kLazy };
  Kind kind = kChars;
  uint32_t a = 0;  // kChars: char-set index; kRule: rule index; kLazy: template index
  uint32_t b = 0;  // kLazy: the payload (its meaning belongs to the template)
  bool operator==(const GrammarElem&) const = default;
};
using GrammarSeq = std::vector<GrammarElem>;

// A family of rules parametrized by a payload (an integer the template interprets, typically an
// index into its own table of interned parameters).
class GrammarTemplate {
 public:
  virtual ~GrammarTemplate() = default;
  // The alternatives of the rule for `payload`. May add character sets, rules and payloads to the
  // grammar. Must not be left-recursive (an alternative must not start with a reference that can
  // come back to this rule without consuming a character).
  virtual StatusOr<std::vector<GrammarSeq>> Expand(Grammar* grammar, uint32_t payload) = 0;
  // A name for messages and debugging, e.g. "object{seen=3}".
  virtual std::string Describe(uint32_t payload) const = 0;
};

class Grammar {
 public:
  Grammar() = default;
  Grammar(const Grammar&) = delete;
  Grammar& operator=(const Grammar&) = delete;

  // Character sets are normalized (sorted, merged) and interned.
  uint32_t AddChars(std::vector<CharRange> ranges);
  // A new rule with no alternatives yet (fill with AddAlt); names need not be unique.
  uint32_t AddRule(std::string name);
  void AddAlt(uint32_t rule, GrammarSeq seq);
  uint32_t AddRule(std::string name, std::vector<GrammarSeq> alts);
  uint32_t AddTemplate(std::unique_ptr<GrammarTemplate> t);
  void SetRoot(uint32_t rule) { root_ = rule; }

  // Element builders.
  GrammarElem Chars(std::vector<CharRange> ranges) {
    return {GrammarElem::kChars, AddChars(std::move(ranges)), 0};
  }
  GrammarElem Char(char32_t c) { return Chars({{c, c}}); }
  static GrammarElem Ref(uint32_t rule) { return {GrammarElem::kRule, rule, 0}; }
  static GrammarElem Lazy(uint32_t tmpl, uint32_t payload) {
    return {GrammarElem::kLazy, tmpl, payload};
  }
  // Appends the code points of `utf8` (must be valid UTF-8) as single-character elements.
  void AppendLiteral(GrammarSeq* seq, std::string_view utf8);
  GrammarSeq Literal(std::string_view utf8) {
    GrammarSeq s;
    AppendLiteral(&s, utf8);
    return s;
  }
  // A rule matching `item` repeated min..max times (max < 0: unbounded), right-recursive.
  uint32_t Repeat(const GrammarSeq& item, int min, int max, std::string name = "repeat");
  // A rule matching any one of `alts`.
  uint32_t Alternatives(std::vector<GrammarSeq> alts, std::string name = "alt") {
    return AddRule(std::move(name), std::move(alts));
  }
  // A rule matching `nfa`'s language (right-linear: one rule per NFA state). With `json_string`,
  // each character is matched as a JSON string-body character (JsonStringCharRule).
  uint32_t FromRegex(const RegexNfa& nfa, std::string name = "regex", bool json_string = false);

  // Resolves a lazy element to its rule (instantiating it the first time).
  StatusOr<uint32_t> Resolve(const GrammarElem& e);

  // Checks references and refuses left recursion among the rules present now (lazy rules are
  // trusted to follow the GrammarTemplate contract). Call once when construction is done.
  Status Check() const;

  uint32_t root() const { return root_; }
  size_t num_rules() const { return rules_.size(); }
  // Elements in all alternatives (each alternative counts one more): the grammar's size.
  size_t num_elements() const { return num_elements_; }
  const std::vector<GrammarSeq>& alts(uint32_t rule) const { return rules_[rule].alts; }
  const std::string& rule_name(uint32_t rule) const { return rules_[rule].name; }
  const std::vector<CharRange>& chars(uint32_t set) const { return sets_[set]; }
  size_t num_templates() const { return templates_.size(); }
  // The grammar in GBNF-like text (for --help-style dumps and test failure messages).
  std::string ToString() const;

 private:
  struct Rule {
    std::string name;
    std::vector<GrammarSeq> alts;
  };
  std::vector<Rule> rules_;
  size_t num_elements_ = 0;
  std::vector<std::vector<CharRange>> sets_;
  std::unordered_map<std::string, uint32_t> set_index_;
  std::vector<std::unique_ptr<GrammarTemplate>> templates_;
  std::unordered_map<uint64_t, uint32_t> lazy_rules_;  // (template << 32 | payload) -> rule
  uint32_t root_ = 0;
};

// Span rules: a rule matching any substring (possibly empty) of `source`, for extraction fields
// whose value must be copied from the input. kRaw matches the characters themselves (a GBNF rule);
// kJsonString matches them as they are written inside a JSON string: `"` as \", `\` as \\,
// U+0008/0009/000A/000C/000D as \b \t \n \f \r, other controls below U+0020 as \u00xx (lower
// case hex), everything else as itself: the escaping a JSON serializer produces, and the only one
// the rule accepts.
enum class SpanEscaping { kRaw, kJsonString };
// min_chars/max_chars bound the span's length in code points of the source (max < 0: none).
StatusOr<uint32_t> AddSpanRule(Grammar* grammar, std::string_view source, SpanEscaping escaping,
                               int min_chars = 0, int max_chars = -1);

// The canonical JSON string-body form of one code point (see kJsonString above), as elements:
// appends to `seq`. Used by the JSON Schema compiler for string characters.
void AppendJsonStringChar(Grammar* grammar, GrammarSeq* seq, char32_t c);
// A rule matching one JSON string-body character (canonical escaping) whose decoded code point is
// in `ranges` (e.g. the whole range for "any character").
uint32_t JsonStringCharRule(Grammar* grammar, const std::vector<CharRange>& ranges);

// Runs a grammar over text: the acceptor behind the constraint, usable alone (conformance tests).
class Recognizer {
 public:
  // The grammar must outlive the recognizer (lazy rules are added to it as they are met).
  explicit Recognizer(Grammar* grammar);
  ~Recognizer();
  Recognizer(const Recognizer&) = delete;
  Recognizer& operator=(const Recognizer&) = delete;

  Status Reset();
  // Feeds bytes (UTF-8; a character may be split across calls). False (state unchanged) when the
  // grammar cannot continue with them; an error only for engine limits (too many stacks).
  StatusOr<bool> Feed(std::string_view bytes);
  // Whether Feed(bytes) would succeed, leaving the state unchanged.
  StatusOr<bool> Probe(std::string_view bytes);
  // The text so far is a whole sentence of the grammar.
  bool Complete() const;
  // The text so far can still be extended (some stack is live).
  bool CanContinue() const;
  // Convenience: resets, feeds all of `text`, and reports whether it is accepted as a whole.
  StatusOr<bool> Matches(std::string_view text);

 private:
  friend class GrammarConstraint;
  struct Impl;
  explicit Recognizer(std::unique_ptr<Impl> impl);  // a copy's state (GrammarConstraint::Clone)
  std::unique_ptr<Impl> impl_;
};

// A constraint from a grammar: masks computed over a byte trie of the vocabulary, with per-position
// caches (see grammar.cc). Owns the grammar, shared with its clones (with the trie and the mask
// cache); its lazy rules are instantiated for the constraint and its clones alike. Rollback keeps
// a snapshot of the recognizer's state per accepted token and drops the parse stacks the undone
// tokens made. The tokenizer must outlive the constraint and its clones.
StatusOr<std::unique_ptr<Constraint>> MakeGrammarConstraint(const Tokenizer& tokenizer,
                                                            std::unique_ptr<Grammar> grammar);

}  // namespace pocket
