// GBNF, llama.cpp's grammar syntax (grammars/README.md and src/llama-grammar.cpp upstream), parsed
// into a Grammar: one rule per named rule, a rule per group of several alternatives (a group of
// one alternative is inlined), repetitions through Grammar::Repeat, literals through
// Grammar::AppendLiteral.
//
// The syntax read here:
//   grammar  ::= rule*                      rules are separated by newlines
//   rule     ::= name "::=" alts            a newline ends the rule, except right after "::=" or
//                                           "|", inside parentheses, or when the next non-blank
//                                           line starts with "|" (an extension: llama.cpp refuses
//                                           a line that starts with "|")
//   alts     ::= seq ("|" seq)*             an alternative may be empty
//   seq      ::= (item repeat*)*
//   item     ::= "..." | [...] | [^...] | . | name | "(" alts ")"
//   repeat   ::= "*" | "+" | "?" | "{" m "}" | "{" m "," "}" | "{" m "," n "}"
//   name     ::= [a-zA-Z0-9_-]+             ('_' is an extension: llama.cpp allows [a-zA-Z0-9-])
// Escapes in literals and classes: \n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH. In a class,
// `a-b` is a range of code points and a '-' first, last or escaped is itself; `.` is any
// character. Comments run from '#' to the end of the line. Blanks are spaces and tabs; "\r\n"
// ends a line like "\n".
//
// Left out or stricter than llama.cpp (a documented subset):
// - Token references `<[123]>`, `<token>` and `!<...>` are refused: this grammar runs over
//   characters, not vocabulary tokens.
// - A rule defined twice is an error (llama.cpp silently keeps the last definition).
// - Repetition counts above 10000 are errors, and so is a total of more than 200000 repeated
//   copies in one grammar (llama.cpp refuses a minimum above 2000 and reads a maximum above 2000
//   as unbounded).
// - An unbounded repetition (*, +, {m,}) of an item that can match the empty string is an error
//   here, at the operator (llama.cpp refuses it later, as left recursion).
// - Empty classes `[]`, classes that match nothing, reversed ranges `[z-a]`, escapes naming a
//   surrogate or a value past U+10FFFF, a raw line break inside a literal or class, and invalid
//   UTF-8 anywhere are errors (llama.cpp accepts or misreads them).
// - Parentheses nest at most 200 deep.
// Left recursion is refused (as llama.cpp does) with the position of a rule on the cycle; the
// grammar then passes Grammar::Check(), whose error, if any, is returned as it is.
// Every parse error starts with the line and column (both from 1, the column counted in
// characters) of the problem: "3:14: unterminated literal".
#include "generate/gbnf.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/str.h"
#include "tokenizer/utf8.h"

namespace pocket {
namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr int kMaxRepeat = 10000;            // one repetition count
constexpr int64_t kMaxTotalRepeat = 200000;  // all repetitions of a grammar together
constexpr int kMaxNesting = 200;             // parentheses
constexpr size_t kNone = static_cast<size_t>(-1);

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}
bool IsDigit(char c) {
  return c >= '0' && c <= '9';
}
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string HexCode(char32_t c) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string digits;
  for (char32_t v = c; v != 0 || digits.size() < 4; v >>= 4)
    digits.insert(digits.begin(), kHex[v & 15]);
  return "U+" + digits;
}

// "'x'" for a visible ASCII character, "U+000A" for a control, "'ä' (U+00E4)" otherwise.
std::string DescribeChar(char32_t c) {
  if (c > 0x20 && c < 0x7F) return StrCat("'", static_cast<char>(c), "'");
  if (c < 0xA0 || (c >= 0xD800 && c <= 0xDFFF) || c > kMaxCodePoint) return HexCode(c);
  std::string s = "'";
  utf8::Append(c, &s);
  return StrCat(s, "' (", HexCode(c), ")");
}

std::vector<CharRange> Normalize(std::vector<CharRange> r) {
  std::sort(r.begin(), r.end(), [](CharRange a, CharRange b) { return a.lo < b.lo; });
  std::vector<CharRange> out;
  for (CharRange x : r) {
    if (!out.empty() && x.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, x.hi);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

std::vector<CharRange> Complement(const std::vector<CharRange>& normalized) {
  std::vector<CharRange> out;
  char32_t next = 0;
  for (CharRange x : normalized) {
    if (x.lo > next) out.push_back({next, x.lo - 1});
    next = x.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

class Parser {
 public:
  Parser(std::string_view text, const GbnfOptions& options)
      : text_(text), options_(options), grammar_(std::make_unique<Grammar>()) {}

  StatusOr<std::unique_ptr<Grammar>> Run() {
    POCKET_RETURN_IF_ERROR(ValidateUtf8());
    SkipSpace(true);
    if (AtEnd())
      return Error(pos_, "empty grammar: no rules (the start rule is '", options_.root, "')");
    while (!AtEnd()) POCKET_RETURN_IF_ERROR(ParseRule());
    POCKET_RETURN_IF_ERROR(Finish());
    return std::move(grammar_);
  }

 private:
  struct Named {
    uint32_t rule = 0;
    bool defined = false;
    size_t def_pos = kNone;
    size_t ref_pos = kNone;  // the first reference
  };
  struct Loop {  // an unbounded repetition, checked for an item that can match nothing
    GrammarSeq item;
    size_t pos;
  };

  // ---- positions and errors

  std::pair<size_t, size_t> LineCol(size_t pos) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos && i < text_.size(); ++i) {
      unsigned char b = static_cast<unsigned char>(text_[i]);
      if (b == '\n') {
        ++line;
        col = 1;
      } else if ((b & 0xC0) != 0x80) {
        ++col;
      }
    }
    return {line, col};
  }
  std::string Where(size_t pos) const {
    auto [line, col] = LineCol(pos);
    return StrCat(line, ":", col);
  }
  template <typename... Args>
  Status Error(size_t pos, const Args&... args) const {
    return InvalidArgumentError(Where(pos), ": ", args...);
  }

  Status ValidateUtf8() const {
    for (size_t i = 0; i < text_.size();) {
      utf8::SequenceInfo info = utf8::Classify(text_.substr(i));
      if (info.kind != utf8::SequenceInfo::kComplete) {
        static const char kHex[] = "0123456789ABCDEF";
        auto b = static_cast<unsigned char>(text_[i]);
        return Error(i, "invalid UTF-8 (byte 0x", kHex[b >> 4], kHex[b & 15], ")");
      }
      i += info.length;
    }
    return Status::Ok();
  }

  // ---- scanning

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }
  bool AtLineBreak() const { return !AtEnd() && (Peek() == '\n' || Peek() == '\r'); }
  char32_t CharAt(size_t pos) const { return utf8::DecodeAt(text_, &pos); }

  // Blanks and comments; line breaks too when `newlines`.
  void SkipSpace(bool newlines) {
    while (!AtEnd()) {
      char c = Peek();
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && Peek() != '\n' && Peek() != '\r') ++pos_;
      } else {
        break;
      }
    }
  }

  // At `name ::=` (the start of a rule)?
  bool AtRuleStart() const {
    size_t p = pos_;
    while (p < text_.size() && IsNameChar(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t')) ++p;
    return text_.substr(p, 3) == "::=";
  }

  std::string ParseName() {
    size_t start = pos_;
    while (!AtEnd() && IsNameChar(Peek())) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  // The error for something that cannot continue a sequence where it stands.
  Status Unexpected(std::string_view rule_name) const {
    char c = Peek();
    if (AtRuleStart()) {
      size_t p = pos_;
      while (p < text_.size() && IsNameChar(text_[p])) ++p;
      return Error(pos_, "rule '", text_.substr(pos_, p - pos_), "' starts before rule '",
                   rule_name,
                   "' has ended (a line break ends a rule, but not right after '::=' or '|', "
                   "nor inside parentheses)");
    }
    if (c == ')') return Error(pos_, "')' without a matching '('");
    if (c == '<' || c == '!') {
      return Error(pos_,
                   "token references (<...>, !<...>) are not supported: this grammar matches "
                   "characters");
    }
    return Error(pos_, "unexpected ", DescribeChar(CharAt(pos_)), " in rule '", rule_name, "'");
  }

  // ---- rules and references

  std::string AnonName(std::string_view rule_name) { return StrCat(rule_name, "_", ++anon_count_); }
  void SetRulePos(uint32_t rule, size_t pos) {
    if (rule >= rule_pos_.size()) rule_pos_.resize(rule + 1, kNone);
    rule_pos_[rule] = pos;
  }
  bool IsSpanName(std::string_view name) const {
    return !options_.span_rule.empty() && name == options_.span_rule;
  }

  StatusOr<GrammarElem> Reference(const std::string& name, size_t pos) {
    if (IsSpanName(name)) {
      if (!span_rule_) {
        POCKET_ASSIGN_OR_RETURN(
            uint32_t rule, AddSpanRule(grammar_.get(), options_.span_source, SpanEscaping::kRaw));
        span_rule_ = rule;
      }
      return Grammar::Ref(*span_rule_);
    }
    auto [it, inserted] = named_.try_emplace(name);
    if (inserted) it->second.rule = grammar_->AddRule(name);
    if (it->second.ref_pos == kNone) it->second.ref_pos = pos;
    return Grammar::Ref(it->second.rule);
  }

  StatusOr<uint32_t> Define(const std::string& name, size_t pos) {
    if (IsSpanName(name)) {
      return Error(pos, "rule '", name,
                   "' is the span rule (it matches substrings of the source text) and must not be "
                   "defined");
    }
    auto [it, inserted] = named_.try_emplace(name);
    if (inserted) it->second.rule = grammar_->AddRule(name);
    if (it->second.defined) {
      return Error(pos, "rule '", name, "' is defined twice (first at ", Where(it->second.def_pos),
                   ")");
    }
    it->second.defined = true;
    it->second.def_pos = pos;
    SetRulePos(it->second.rule, pos);
    return it->second.rule;
  }

  // ---- the syntax

  Status ParseRule() {
    size_t start = pos_;
    if (!IsNameChar(Peek())) {
      if (Peek() == '<' || Peek() == '!') return Unexpected("");
      return Error(pos_, "expected a rule name (`name ::= ...`), found ",
                   DescribeChar(CharAt(pos_)));
    }
    std::string name = ParseName();
    SkipSpace(false);
    if (text_.substr(pos_, 3) != "::=") {
      return Error(pos_, "expected '::=' after the rule name '", name, "'",
                   named_.empty() ? ""
                                  : " (a line break ends a rule, except right after '::=' or '|' "
                                    "and inside parentheses)");
    }
    pos_ += 3;
    SkipSpace(true);
    POCKET_ASSIGN_OR_RETURN(uint32_t rule, Define(name, start));
    std::vector<GrammarSeq> alts;
    POCKET_RETURN_IF_ERROR(ParseAlternates(name, false, 0, &alts));
    while (!AtEnd()) {
      if (!AtLineBreak()) return Unexpected(name);
      SkipSpace(true);
      if (AtEnd() || Peek() != '|') break;
      // A line starting with '|' continues the rule.
      ++pos_;
      SkipSpace(true);
      std::vector<GrammarSeq> more;
      POCKET_RETURN_IF_ERROR(ParseAlternates(name, false, 0, &more));
      for (GrammarSeq& seq : more) alts.push_back(std::move(seq));
    }
    for (GrammarSeq& seq : alts) grammar_->AddAlt(rule, std::move(seq));
    return Status::Ok();
  }

  Status ParseAlternates(const std::string& rule_name, bool nested, int depth,
                         std::vector<GrammarSeq>* alts) {
    for (;;) {
      GrammarSeq seq;
      POCKET_RETURN_IF_ERROR(ParseSequence(rule_name, nested, depth, &seq));
      alts->push_back(std::move(seq));
      if (AtEnd() || Peek() != '|') return Status::Ok();
      ++pos_;
      SkipSpace(true);
    }
  }

  Status ParseSequence(const std::string& rule_name, bool nested, int depth, GrammarSeq* seq) {
    size_t item = kNone;  // where the last item starts in `seq`, for a repetition
    while (!AtEnd()) {
      char c = Peek();
      size_t at = pos_;
      if (c == '"') {
        item = seq->size();
        POCKET_RETURN_IF_ERROR(ParseLiteral(seq));
      } else if (c == '[') {
        item = seq->size();
        POCKET_ASSIGN_OR_RETURN(GrammarElem e, ParseClass());
        seq->push_back(e);
      } else if (c == '.') {
        ++pos_;
        item = seq->size();
        seq->push_back(grammar_->Chars({{0, kMaxCodePoint}}));
      } else if (IsNameChar(c)) {
        if (AtRuleStart()) break;
        std::string name = ParseName();
        POCKET_ASSIGN_OR_RETURN(GrammarElem e, Reference(name, at));
        item = seq->size();
        seq->push_back(e);
      } else if (c == '(') {
        if (depth >= kMaxNesting)
          return Error(at, "parentheses nested more than ", kMaxNesting, " deep");
        ++pos_;
        SkipSpace(true);
        std::vector<GrammarSeq> alts;
        POCKET_RETURN_IF_ERROR(ParseAlternates(rule_name, true, depth + 1, &alts));
        if (AtEnd()) return Error(at, "unclosed '('");
        if (Peek() != ')') {
          if (AtRuleStart())
            return Error(at, "unclosed '(' (the next rule starts at ", Where(pos_), ")");
          return Unexpected(rule_name);
        }
        ++pos_;
        item = seq->size();
        if (alts.size() == 1) {
          seq->insert(seq->end(), alts[0].begin(), alts[0].end());
        } else {
          uint32_t rule = grammar_->AddRule(AnonName(rule_name), std::move(alts));
          SetRulePos(rule, at);
          seq->push_back(Grammar::Ref(rule));
        }
      } else if (c == '*' || c == '+' || c == '?') {
        ++pos_;
        int min = c == '+' ? 1 : 0, max = c == '?' ? 1 : -1;
        POCKET_RETURN_IF_ERROR(ApplyRepeat(seq, item, min, max, at, rule_name));
      } else if (c == '{') {
        int min = 0, max = 0;
        POCKET_RETURN_IF_ERROR(ParseBounds(nested, &min, &max));
        POCKET_RETURN_IF_ERROR(ApplyRepeat(seq, item, min, max, at, rule_name));
      } else {
        break;
      }
      SkipSpace(nested);
    }
    return Status::Ok();
  }

  // One character of a literal or class (an escape or itself); not at the end of the text.
  StatusOr<char32_t> ParseChar() {
    size_t start = pos_;
    if (Peek() != '\\') return utf8::DecodeAt(text_, &pos_);
    ++pos_;
    if (AtEnd() || AtLineBreak()) return Error(start, "'\\' at the end of a line");
    char e = Peek();
    int digits = 0;
    switch (e) {
      case 'n':
        ++pos_;
        return U'\n';
      case 'r':
        ++pos_;
        return U'\r';
      case 't':
        ++pos_;
        return U'\t';
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
        ++pos_;
        return static_cast<char32_t>(e);
      case 'x':
        digits = 2;
        break;
      case 'u':
        digits = 4;
        break;
      case 'U':
        digits = 8;
        break;
      default:
        return Error(start, "unknown escape: '\\' before ", DescribeChar(CharAt(pos_)),
                     "; the escapes are \\n \\r \\t \\\\ \\\" \\[ \\] \\- \\xHH \\uHHHH "
                     "\\UHHHHHHHH");
    }
    ++pos_;
    uint32_t value = 0;
    for (int i = 0; i < digits; ++i) {
      int h = HexValue(Peek());
      if (AtEnd() || h < 0) {
        return Error(start, "'\\", e, "' needs ", digits, " hex digits");
      }
      value = (value << 4) | static_cast<uint32_t>(h);
      ++pos_;
    }
    if (value > kMaxCodePoint) return Error(start, "escape past U+10FFFF: ", HexCode(value));
    if (value >= 0xD800 && value <= 0xDFFF) {
      return Error(start, "escape of a surrogate (", HexCode(value), "), which is not a character");
    }
    return static_cast<char32_t>(value);
  }

  Status ParseLiteral(GrammarSeq* seq) {
    size_t open = pos_++;
    std::string utf8;
    for (;;) {
      if (AtEnd() || AtLineBreak()) {
        return Error(open,
                     "unterminated literal (a literal ends on its line; write a line break "
                     "as \\n)");
      }
      if (Peek() == '"') break;
      POCKET_ASSIGN_OR_RETURN(char32_t c, ParseChar());
      utf8::Append(c, &utf8);
    }
    ++pos_;
    grammar_->AppendLiteral(seq, utf8);
    return Status::Ok();
  }

  StatusOr<GrammarElem> ParseClass() {
    size_t open = pos_++;
    bool negated = Peek() == '^' && !AtEnd();
    if (negated) ++pos_;
    std::vector<CharRange> ranges;
    for (;;) {
      if (AtEnd() || AtLineBreak()) {
        return Error(open,
                     "unterminated character class (a class ends on its line; write a line "
                     "break as \\n)");
      }
      if (Peek() == ']') break;
      size_t at = pos_;
      POCKET_ASSIGN_OR_RETURN(char32_t lo, ParseChar());
      char32_t hi = lo;
      if (Peek() == '-' && pos_ + 1 < text_.size() && Peek(1) != ']' && Peek(1) != '\n' &&
          Peek(1) != '\r') {
        ++pos_;
        POCKET_ASSIGN_OR_RETURN(hi, ParseChar());
        if (hi < lo) {
          return Error(at, "reversed range in a class: ", DescribeChar(lo), " to ",
                       DescribeChar(hi));
        }
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;
    if (ranges.empty()) return Error(open, "empty character class");
    ranges = Normalize(std::move(ranges));
    if (negated) {
      ranges = Complement(ranges);
      if (ranges.empty()) return Error(open, "the negated class matches no character");
    }
    return grammar_->Chars(std::move(ranges));
  }

  StatusOr<int> ParseCount() {
    size_t start = pos_;
    int64_t value = 0;
    while (!AtEnd() && IsDigit(Peek())) {
      if (value <= kMaxRepeat) value = value * 10 + (Peek() - '0');
      ++pos_;
    }
    if (value > kMaxRepeat) {
      return Error(start, "repetition count ", text_.substr(start, pos_ - start),
                   " is above the limit of ", kMaxRepeat);
    }
    return static_cast<int>(value);
  }

  // `{m}`, `{m,}` or `{m,n}` (max -1: unbounded).
  Status ParseBounds(bool nested, int* min, int* max) {
    size_t open = pos_++;
    SkipSpace(nested);
    if (AtEnd() || !IsDigit(Peek())) return Error(pos_, "expected a number after '{'");
    POCKET_ASSIGN_OR_RETURN(*min, ParseCount());
    SkipSpace(nested);
    if (Peek() == '}' && !AtEnd()) {
      *max = *min;
    } else if (Peek() == ',' && !AtEnd()) {
      ++pos_;
      SkipSpace(nested);
      *max = -1;
      if (!AtEnd() && IsDigit(Peek())) {
        POCKET_ASSIGN_OR_RETURN(*max, ParseCount());
        SkipSpace(nested);
      }
      if (AtEnd() || Peek() != '}')
        return Error(pos_, "expected '}' to close the '{' at ", Where(open));
    } else {
      return Error(pos_, "expected ',' or '}' in the repetition at ", Where(open));
    }
    ++pos_;
    if (*max >= 0 && *min > *max) {
      return Error(open, "repetition {", *min, ",", *max, "}: the minimum is above the maximum");
    }
    return Status::Ok();
  }

  // Replaces seq[item..] by its repetition.
  Status ApplyRepeat(GrammarSeq* seq, size_t item, int min, int max, size_t at,
                     const std::string& rule_name) {
    std::string op(text_.substr(at, 1));
    if (item == kNone) {
      return Error(at, "'", op,
                   "' must follow what it repeats (a literal, class, '.', group or "
                   "rule name)");
    }
    GrammarSeq body(seq->begin() + static_cast<std::ptrdiff_t>(item), seq->end());
    if (body.empty()) return Error(at, "'", op, "' repeats nothing (the item before it is empty)");
    total_repeat_ += std::max(max, std::max(min, 1));
    if (total_repeat_ > kMaxTotalRepeat) {
      return Error(at, "the grammar's repetitions add up to more than ", kMaxTotalRepeat,
                   " copies of their items");
    }
    if (min == 1 && max == 1) return Status::Ok();
    seq->resize(item);
    if (max == 0) return Status::Ok();
    if (body.size() > 1) {  // a literal: one rule for it, so that copies are single references
      uint32_t rule = grammar_->AddRule(AnonName(rule_name), {std::move(body)});
      SetRulePos(rule, at);
      body = {Grammar::Ref(rule)};
    }
    uint32_t rule = grammar_->Repeat(body, min, max, AnonName(rule_name));
    SetRulePos(rule, at);
    if (max < 0) loops_.push_back({body, at});
    seq->push_back(Grammar::Ref(rule));
    return Status::Ok();
  }

  // ---- the end: references, the root, left recursion

  Status Finish() {
    const Named* undefined = nullptr;
    std::string undefined_name;
    for (const auto& [name, n] : named_) {
      if (!n.defined && (undefined == nullptr || n.ref_pos < undefined->ref_pos)) {
        undefined = &n;
        undefined_name = name;
      }
    }
    if (undefined != nullptr) {
      return Error(undefined->ref_pos, "undefined rule '", undefined_name, "'");
    }
    auto root = named_.find(options_.root);
    if (root == named_.end()) {
      return Error(0, "the grammar does not define its start rule '", options_.root, "'");
    }
    grammar_->SetRoot(root->second.rule);
    POCKET_RETURN_IF_ERROR(CheckLoops());
    return grammar_->Check();
  }

  // Which rules can match the empty string (lazy elements count as consuming, which can only
  // miss a left recursion, never invent one: Grammar::Check() has the last word).
  std::vector<bool> Nullable() const {
    size_t n = grammar_->num_rules();
    std::vector<bool> nullable(n, false);
    std::vector<uint32_t> alt_rule;
    std::vector<int64_t> pending;  // per alternative: references not yet known nullable
    std::vector<std::vector<uint32_t>> users(n);
    std::vector<uint32_t> work;
    constexpr int64_t kDead = INT64_MAX;
    for (uint32_t r = 0; r < n; ++r) {
      for (const GrammarSeq& alt : grammar_->alts(r)) {
        auto id = static_cast<uint32_t>(pending.size());
        int64_t count = 0;
        for (const GrammarElem& e : alt) {
          if (e.kind == GrammarElem::kRule && e.a < n) {
            ++count;
            users[e.a].push_back(id);
          } else {
            count = kDead;
            break;
          }
        }
        alt_rule.push_back(r);
        pending.push_back(count);
        if (count == 0 && !nullable[r]) {
          nullable[r] = true;
          work.push_back(r);
        }
      }
    }
    while (!work.empty()) {
      uint32_t r = work.back();
      work.pop_back();
      for (uint32_t id : users[r]) {
        if (pending[id] == kDead || pending[id] == 0) continue;
        if (--pending[id] == 0 && !nullable[alt_rule[id]]) {
          nullable[alt_rule[id]] = true;
          work.push_back(alt_rule[id]);
        }
      }
    }
    return nullable;
  }

  Status CheckLoops() const {
    std::vector<bool> nullable = Nullable();
    for (const Loop& loop : loops_) {
      bool empty = std::all_of(loop.item.begin(), loop.item.end(), [&](const GrammarElem& e) {
        return e.kind == GrammarElem::kRule && e.a < nullable.size() && nullable[e.a];
      });
      if (empty) {
        return Error(loop.pos, "'", text_.substr(loop.pos, 1),
                     "' repeats an item that can match the empty string (an endless loop); make "
                     "the item consume a character");
      }
    }
    // Left recursion among the rules, with the position of a rule of the cycle.
    size_t n = grammar_->num_rules();
    std::vector<std::vector<uint32_t>> edges(n);
    for (uint32_t r = 0; r < n; ++r) {
      for (const GrammarSeq& alt : grammar_->alts(r)) {
        for (const GrammarElem& e : alt) {
          if (e.kind != GrammarElem::kRule || e.a >= n) break;
          edges[r].push_back(e.a);
          if (!nullable[e.a]) break;
        }
      }
    }
    std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the stack, 2 done
    std::vector<std::pair<uint32_t, size_t>> stack;
    for (uint32_t s = 0; s < n; ++s) {
      if (color[s] != 0) continue;
      stack.push_back({s, 0});
      color[s] = 1;
      while (!stack.empty()) {
        auto& [v, i] = stack.back();
        if (i == edges[v].size()) {
          color[v] = 2;
          stack.pop_back();
          continue;
        }
        uint32_t w = edges[v][i++];
        if (color[w] == 0) {
          color[w] = 1;
          stack.push_back({w, 0});
        } else if (color[w] == 1) {
          return LeftRecursion(stack, w);
        }
      }
    }
    return Status::Ok();
  }

  Status LeftRecursion(const std::vector<std::pair<uint32_t, size_t>>& stack, uint32_t w) const {
    size_t first = 0;
    while (stack[first].first != w) ++first;
    std::string path;
    size_t where = kNone;
    std::string named = grammar_->rule_name(w);
    for (size_t k = first; k < stack.size(); ++k) {
      uint32_t r = stack[k].first;
      path += grammar_->rule_name(r) + " -> ";
      size_t p = r < rule_pos_.size() ? rule_pos_[r] : kNone;
      if (where == kNone && p != kNone) {
        where = p;
        named = grammar_->rule_name(r);
      }
    }
    path += grammar_->rule_name(w);
    std::string message =
        StrCat("left recursion: rule '", named,
               "' can come back to itself before matching a character (", path, ")");
    if (where == kNone) return InvalidArgumentError(message);
    return Error(where, message);
  }

  std::string_view text_;
  const GbnfOptions& options_;
  std::unique_ptr<Grammar> grammar_;
  size_t pos_ = 0;
  std::unordered_map<std::string, Named> named_;
  std::optional<uint32_t> span_rule_;
  std::vector<size_t> rule_pos_;  // by rule: where it was written (kNone: made by the engine)
  std::vector<Loop> loops_;
  int anon_count_ = 0;
  int64_t total_repeat_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<Grammar>> ParseGbnf(std::string_view text, const GbnfOptions& options) {
  Parser parser(text, options);
  return parser.Run();
}

}  // namespace pocket
