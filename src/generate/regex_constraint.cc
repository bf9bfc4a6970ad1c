// Regular expressions: the documented subset parsed to a Thompson NFA over Unicode code points
// (CompileRegexNfa, also used by JSON Schema `pattern` and `format`); the regex constraint runs the
// NFA as right-linear grammar rules in the grammar engine.
#include <algorithm>
#include <map>

#include "generate/constraint.h"
#include "generate/grammar.h"
#include "generate/regex.h"
#include "tokenizer/utf8.h"

namespace pocket {
namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr size_t kMaxStates = 200000;
constexpr int kMaxGroupNesting = 200;  // parentheses, as GBNF's
constexpr int kMaxRepeat = 1000;

using Range = CharRange;
using State = RegexNfa::State;

std::vector<Range> Normalize(std::vector<Range> r) {
  std::sort(r.begin(), r.end(), [](Range a, Range b) { return a.lo < b.lo; });
  std::vector<Range> out;
  for (Range x : r) {
    if (!out.empty() && x.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, x.hi);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

std::vector<Range> Complement(const std::vector<Range>& r) {
  std::vector<Range> out;
  char32_t next = 0;
  for (Range x : r) {
    if (x.lo > next) out.push_back({next, x.lo - 1});
    next = x.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

const std::vector<Range>& Digits() {
  static const std::vector<Range> r = {{'0', '9'}};
  return r;
}
const std::vector<Range>& Word() {
  static const std::vector<Range> r = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
  return r;
}
const std::vector<Range>& Space() {
  static const std::vector<Range> r = {{'\t', '\r'}, {' ', ' '}};
  return r;
}

class Parser {
 public:
  Parser(std::string_view pattern, std::vector<State>* states) : p_(pattern), states_(states) {}

  // Parses the whole pattern into final_ (its start state and the exits to patch).
  Status Parse() {
    auto f = Alt();
    if (!f.ok()) return f.status();
    if (pos_ != p_.size()) return Error("unexpected ')'");
    if (states_->size() > kMaxStates) return Error("pattern too large");
    final_ = std::move(*f);
    return Status::Ok();
  }

 private:
  Status Error(const std::string& what) const {
    return InvalidArgumentError("regex: ", what, " at offset ", pos_, " of ", QuoteBytes(p_));
  }
  bool AtEnd() const { return pos_ >= p_.size(); }
  char Peek() const { return p_[pos_]; }

  int NewState() {
    states_->emplace_back();
    return static_cast<int>(states_->size()) - 1;
  }
  // Exits are (state, slot) pairs, resolved when patching (states_ may move as it grows).
  struct Exit {
    int state;
    int slot;  // 0: next, 1: eps[0], 2: eps[1]
  };
  struct Frag {
    int start;
    std::vector<Exit> exits;
  };
  void Patch(const std::vector<Exit>& exits, int target) {
    for (const Exit& e : exits) {
      State& s = (*states_)[static_cast<size_t>(e.state)];
      (e.slot == 0 ? s.next : s.eps[e.slot - 1]) = target;
    }
  }

 public:
  // The parse, on (start, exits) fragments.
  StatusOr<Frag> Alt() {
    POCKET_ASSIGN_OR_RETURN(Frag left, Concat());
    while (!AtEnd() && Peek() == '|') {
      ++pos_;
      POCKET_ASSIGN_OR_RETURN(Frag right, Concat());
      const int split = NewState();
      (*states_)[static_cast<size_t>(split)].eps[0] = left.start;
      (*states_)[static_cast<size_t>(split)].eps[1] = right.start;
      left.start = split;
      left.exits.insert(left.exits.end(), right.exits.begin(), right.exits.end());
    }
    return left;
  }

 private:
  Frag Empty() {
    const int s = NewState();
    return Frag{s, {{s, 1}}};
  }

  StatusOr<Frag> Concat() {
    Frag result = Empty();
    bool first = true;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      POCKET_ASSIGN_OR_RETURN(Frag piece, Repeat());
      if (first) {
        result = piece;
        first = false;
      } else {
        Patch(result.exits, piece.start);
        result.exits = piece.exits;
      }
      if (states_->size() > kMaxStates) return Error("pattern too large");
    }
    return result;
  }

  // A copy of the fragment built by `build` (re-parsing from `at`), for counted repetition.
  StatusOr<Frag> AtomAt(size_t at) {
    const size_t saved = pos_;
    pos_ = at;
    auto f = Atom();
    pos_ = saved;
    return f;
  }

  StatusOr<Frag> Repeat() {
    const size_t atom_at = pos_;
    POCKET_ASSIGN_OR_RETURN(Frag atom, Atom());
    const size_t atom_end = pos_;
    if (AtEnd()) return atom;
    const char q = Peek();
    int min = 1, max = 1;
    if (q == '*') {
      min = 0, max = -1;
    } else if (q == '+') {
      min = 1, max = -1;
    } else if (q == '?') {
      min = 0, max = 1;
    } else if (q == '{') {
      size_t i = pos_ + 1;
      auto number = [&](int* out) {
        const size_t begin = i;
        int v = 0;
        while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9' && v <= kMaxRepeat) {
          v = v * 10 + (p_[i++] - '0');
        }
        *out = v;
        return i > begin;
      };
      if (!number(&min)) return Error("'{' without a count (write \\{ for the character)");
      max = min;
      if (i < p_.size() && p_[i] == ',') {
        ++i;
        if (!number(&max)) max = -1;
      }
      if (i >= p_.size() || p_[i] != '}') return Error("unterminated {m,n}");
      if (min > kMaxRepeat || max > kMaxRepeat || (max >= 0 && max < min)) {
        return Error("bad repetition count (at most " + std::to_string(kMaxRepeat) + ")");
      }
      pos_ = i;
    } else {
      return atom;
    }
    ++pos_;
    if (!AtEnd() && (Peek() == '?' || Peek() == '+')) return Error("lazy/possessive quantifiers");
    // Build: min copies in sequence, then (max - min) optional copies or a star.
    Frag result = Empty();
    bool have = false;
    auto append = [&](Frag f) {
      if (!have) {
        result = f;
        have = true;
      } else {
        Patch(result.exits, f.start);
        result.exits = f.exits;
      }
    };
    for (int k = 0; k < min; ++k) {
      Frag copy = atom;
      if (k > 0) {
        POCKET_ASSIGN_OR_RETURN(copy, AtomAt(atom_at));
        if (states_->size() > kMaxStates) return Error("pattern too large");
      }
      append(copy);
    }
    const bool reuse_atom = min == 0;
    if (max < 0) {
      Frag body = atom;
      if (!reuse_atom) {
        POCKET_ASSIGN_OR_RETURN(body, AtomAt(atom_at));
      }
      const int split = NewState();
      (*states_)[static_cast<size_t>(split)].eps[0] = body.start;
      Patch(body.exits, split);
      append(Frag{split, {{split, 2}}});
    } else {
      for (int k = min; k < max; ++k) {
        Frag body = atom;
        if (!(reuse_atom && k == min)) {
          POCKET_ASSIGN_OR_RETURN(body, AtomAt(atom_at));
        }
        if (states_->size() > kMaxStates) return Error("pattern too large");
        const int split = NewState();
        (*states_)[static_cast<size_t>(split)].eps[0] = body.start;
        std::vector<Exit> exits = body.exits;
        exits.push_back({split, 2});
        append(Frag{split, exits});
      }
    }
    pos_ = std::max(pos_, atom_end);
    if (!have) return Empty();
    return result;
  }

  StatusOr<char32_t> Char() {
    if (AtEnd()) return Error("pattern ends early");
    size_t at = pos_;
    if (utf8::Classify(p_.substr(pos_)).kind != utf8::SequenceInfo::kComplete) {
      return Error("invalid UTF-8");
    }
    const char32_t c = utf8::DecodeAt(p_, &at);
    pos_ = at;
    return c;
  }

  // An escape after '\': a single character, or a class (into *ranges, returning true).
  StatusOr<bool> Escape(char32_t* c, std::vector<Range>* ranges) {
    if (AtEnd()) return Error("'\\' at the end");
    const char e = p_[pos_++];
    switch (e) {
      case 'd':
        *ranges = Digits();
        return true;
      case 'D':
        *ranges = Complement(Digits());
        return true;
      case 'w':
        *ranges = Word();
        return true;
      case 'W':
        *ranges = Complement(Word());
        return true;
      case 's':
        *ranges = Space();
        return true;
      case 'S':
        *ranges = Complement(Space());
        return true;
      case 'n':
        *c = '\n';
        return false;
      case 't':
        *c = '\t';
        return false;
      case 'r':
        *c = '\r';
        return false;
      case 'u': {
        if (pos_ + 4 > p_.size()) return Error("\\u needs 4 hex digits");
        char32_t v = 0;
        for (int i = 0; i < 4; ++i) {
          const char h = p_[pos_++];
          v = v * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                 ? h - '0'
                                                 : (std::tolower(h) - 'a' + 10));
          if (!std::isxdigit(static_cast<unsigned char>(h))) return Error("bad \\u escape");
        }
        if (v >= 0xD800 && v <= 0xDFFF) return Error("\\u escape of a surrogate");
        *c = v;
        return false;
      }
      default:
        if (std::isalnum(static_cast<unsigned char>(e))) {
          return Error(std::string("unsupported escape \\") + e);
        }
        *c = static_cast<unsigned char>(e);
        return false;
    }
  }

  StatusOr<Frag> Set(std::vector<Range> ranges) {
    if (ranges.empty()) return Error("a class that matches no character");
    const int s = NewState();
    (*states_)[static_cast<size_t>(s)].ranges = Normalize(std::move(ranges));
    return Frag{s, {{s, 0}}};
  }

  StatusOr<Frag> Atom() {
    const char c = Peek();
    if (c == '(') {
      // Each group recurses: bounded before it does (a pattern of 100,000 '(' is a schema's).
      if (depth_ >= kMaxGroupNesting) {
        return Error(StrCat("groups nested more than ", kMaxGroupNesting, " deep"));
      }
      ++pos_;
      if (p_.substr(pos_, 2) == "?:") pos_ += 2;
      if (!AtEnd() && Peek() == '?') return Error("unsupported group kind (lookaround, named)");
      ++depth_;
      StatusOr<Frag> f = Alt();
      --depth_;
      if (!f.ok()) return f.status();
      if (AtEnd() || Peek() != ')') return Error("missing ')'");
      ++pos_;
      return f;
    }
    if (c == '[') return Class();
    if (c == '.') {
      ++pos_;
      return Set({{0, '\n' - 1}, {'\n' + 1, kMaxCodePoint}});
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return Error("nothing to repeat");
    if (c == '^' || c == '$') return Error("anchors are implied (the whole output matches)");
    if (c == '\\') {
      ++pos_;
      char32_t ch = 0;
      std::vector<Range> ranges;
      POCKET_ASSIGN_OR_RETURN(bool is_class, Escape(&ch, &ranges));
      if (is_class) return Set(std::move(ranges));
      return Set({{ch, ch}});
    }
    POCKET_ASSIGN_OR_RETURN(char32_t ch, Char());
    return Set({{ch, ch}});
  }

  StatusOr<Frag> Class() {
    ++pos_;  // '['
    bool negate = false;
    if (!AtEnd() && Peek() == '^') {
      negate = true;
      ++pos_;
    }
    std::vector<Range> ranges;
    bool first = true;
    while (true) {
      if (AtEnd()) return Error("missing ']'");
      if (Peek() == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      char32_t lo;
      if (Peek() == '\\') {
        ++pos_;
        std::vector<Range> cls;
        POCKET_ASSIGN_OR_RETURN(bool is_class, Escape(&lo, &cls));
        if (is_class) {
          ranges.insert(ranges.end(), cls.begin(), cls.end());
          continue;
        }
      } else {
        POCKET_ASSIGN_OR_RETURN(lo, Char());
      }
      char32_t hi = lo;
      if (pos_ + 1 < p_.size() && Peek() == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        if (Peek() == '\\') {
          ++pos_;
          std::vector<Range> cls;
          POCKET_ASSIGN_OR_RETURN(bool is_class, Escape(&hi, &cls));
          if (is_class) return Error("a class cannot end a range");
        } else {
          POCKET_ASSIGN_OR_RETURN(hi, Char());
        }
        if (hi < lo) return Error("range out of order");
      }
      ranges.push_back({lo, hi});
    }
    ranges = Normalize(std::move(ranges));
    return Set(negate ? Complement(ranges) : ranges);
  }

 public:
  Frag final_{};

 private:
  std::string_view p_;
  size_t pos_ = 0;
  int depth_ = 0;  // groups open at pos_
  std::vector<State>* states_;
};

}  // namespace

StatusOr<RegexNfa> CompileRegexNfa(std::string_view pattern) {
  POCKET_RETURN_IF_ERROR(utf8::Validate(pattern));
  RegexNfa nfa;
  Parser parser(pattern, &nfa.states);
  POCKET_RETURN_IF_ERROR(parser.Parse());
  // One accepting state at the end of every exit.
  nfa.states.emplace_back();
  nfa.accept = static_cast<int>(nfa.states.size()) - 1;
  for (const auto& e : parser.final_.exits) {
    State& s = nfa.states[static_cast<size_t>(e.state)];
    (e.slot == 0 ? s.next : s.eps[e.slot - 1]) = nfa.accept;
  }
  nfa.start = parser.final_.start;
  return nfa;
}

StatusOr<std::unique_ptr<Constraint>> MakeRegexConstraint(const Tokenizer& tokenizer,
                                                          std::string_view pattern) {
  POCKET_ASSIGN_OR_RETURN(RegexNfa nfa, CompileRegexNfa(pattern));
  // The NFA as right-linear grammar rules: masks come from the grammar engine's trie walk and
  // segment cache (grammar.cc).
  auto grammar = std::make_unique<Grammar>();
  grammar->SetRoot(grammar->FromRegex(nfa));
  return MakeGrammarConstraint(tokenizer, std::move(grammar));
}

}  // namespace pocket
