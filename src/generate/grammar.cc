// The grammar engine: construction helpers, the pushdown recognizer, span rules, and the grammar
// constraint with its token masks.
//
// Masks. A naive mask feeds every vocabulary token through the recognizer at every step (151K
// tokens for Qwen3). Instead the vocabulary is a byte trie, walked depth first while the
// recognizer's state stays alive, so a dead prefix prunes every token under it. The walk for one
// stack is cut into segments of kSegmentFrames frames: the top segment alone decides most tokens
// (those consumed before its frames are all popped), and the trie nodes where a token runs past
// the segment's bottom are handed to the next segment down, which walks on from those nodes. A
// segment's result (tokens accepted, nodes handed on) depends only on its frames and the nodes it
// starts from, so it is cached under that key: inside a JSON string the same key comes back for
// every character, and the step costs a cache lookup and an OR of bit masks.
#include "generate/grammar.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <limits>
#include <map>

#include "base/str.h"
#include "tokenizer/utf8.h"

namespace pocket {

// ---------------------------------------------------------------------------------------------
// Grammar construction.

namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;

std::vector<CharRange> Normalize(std::vector<CharRange> r) {
  std::sort(r.begin(), r.end(), [](CharRange a, CharRange b) { return a.lo < b.lo; });
  std::vector<CharRange> out;
  for (CharRange x : r) {
    if (x.lo > x.hi) continue;
    if (!out.empty() && x.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, x.hi);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

bool InRanges(const std::vector<CharRange>& r, char32_t c) {
  // Sets are short; a binary search pays off for the long ones (classes of many ranges).
  auto it = std::upper_bound(r.begin(), r.end(), c,
                             [](char32_t v, const CharRange& x) { return v < x.lo; });
  if (it == r.begin()) return false;
  --it;
  return c <= it->hi;
}

bool Overlaps(const std::vector<CharRange>& r, char32_t lo, char32_t hi) {
  for (const CharRange& x : r) {
    if (x.lo <= hi && lo <= x.hi) return true;
  }
  return false;
}

std::string RangeText(char32_t c) {
  if (c == '\\' || c == ']' || c == '-' || c == '"' || c == '[' || c == '^')
    return std::string("\\") + static_cast<char>(c);
  if (c >= 0x20 && c < 0x7F) return std::string(1, static_cast<char>(c));
  char buf[16];
  std::snprintf(buf, sizeof buf, c <= 0xFFFF ? "\\u%04X" : "\\U%08X", static_cast<unsigned>(c));
  return buf;
}

}  // namespace

uint32_t Grammar::AddChars(std::vector<CharRange> ranges) {
  ranges = Normalize(std::move(ranges));
  std::string key(reinterpret_cast<const char*>(ranges.data()), ranges.size() * sizeof(CharRange));
  auto it = set_index_.find(key);
  if (it != set_index_.end()) return it->second;
  const uint32_t id = static_cast<uint32_t>(sets_.size());
  sets_.push_back(std::move(ranges));
  set_index_.emplace(std::move(key), id);
  return id;
}

uint32_t Grammar::AddRule(std::string name) {
  rules_.push_back(Rule{std::move(name), {}});
  return static_cast<uint32_t>(rules_.size() - 1);
}

void Grammar::AddAlt(uint32_t rule, GrammarSeq seq) {
  num_elements_ += seq.size() + 1;
  rules_[rule].alts.push_back(std::move(seq));
}

uint32_t Grammar::AddRule(std::string name, std::vector<GrammarSeq> alts) {
  for (const GrammarSeq& seq : alts) num_elements_ += seq.size() + 1;
  rules_.push_back(Rule{std::move(name), std::move(alts)});
  return static_cast<uint32_t>(rules_.size() - 1);
}

uint32_t Grammar::AddTemplate(std::unique_ptr<GrammarTemplate> t) {
  templates_.push_back(std::move(t));
  return static_cast<uint32_t>(templates_.size() - 1);
}

void Grammar::AppendLiteral(GrammarSeq* seq, std::string_view utf8) {
  size_t at = 0;
  while (at < utf8.size()) {
    const char32_t c = utf8::DecodeAt(utf8, &at);
    seq->push_back(Char(c));
  }
}

uint32_t Grammar::Repeat(const GrammarSeq& item, int min, int max, std::string name) {
  // The tail: unbounded (star ::= item star | ε) or a chain of max - min optional copies.
  uint32_t tail;
  bool have_tail = true;
  if (max < 0) {
    tail = AddRule(name + "*");
    GrammarSeq again = item;
    again.push_back(Ref(tail));
    AddAlt(tail, std::move(again));
    AddAlt(tail, {});
  } else if (max > min) {
    tail = AddRule(name + "?");
    AddAlt(tail, {});
    for (int k = min + 1; k < max; ++k) {
      const uint32_t outer = AddRule(name + "?");
      GrammarSeq seq = item;
      seq.push_back(Ref(tail));
      AddAlt(outer, std::move(seq));
      AddAlt(outer, {});
      tail = outer;
    }
    // tail now matches up to max - min - 1 copies; one more optional copy in front.
    const uint32_t top = AddRule(name + "?");
    GrammarSeq seq = item;
    seq.push_back(Ref(tail));
    AddAlt(top, std::move(seq));
    AddAlt(top, {});
    tail = top;
  } else {
    have_tail = false;
    tail = 0;
  }
  GrammarSeq body;
  for (int k = 0; k < min; ++k) body.insert(body.end(), item.begin(), item.end());
  if (have_tail) body.push_back(Ref(tail));
  return AddRule(std::move(name), {std::move(body)});
}

uint32_t Grammar::FromRegex(const RegexNfa& nfa, std::string name, bool json_string) {
  const uint32_t first = static_cast<uint32_t>(rules_.size());
  for (size_t s = 0; s < nfa.states.size(); ++s) AddRule(name + "#" + std::to_string(s));
  for (size_t s = 0; s < nfa.states.size(); ++s) {
    const RegexNfa::State& st = nfa.states[s];
    const uint32_t rule = first + static_cast<uint32_t>(s);
    if (!st.ranges.empty()) {
      GrammarElem ch = json_string ? Ref(JsonStringCharRule(this, st.ranges)) : Chars(st.ranges);
      AddAlt(rule, {ch, Ref(first + static_cast<uint32_t>(st.next))});
    } else {
      for (int e : st.eps) {
        if (e >= 0) AddAlt(rule, {Ref(first + static_cast<uint32_t>(e))});
      }
      if (static_cast<int>(s) == nfa.accept) AddAlt(rule, {});
    }
  }
  return first + static_cast<uint32_t>(nfa.start);
}

StatusOr<uint32_t> Grammar::Resolve(const GrammarElem& e) {
  if (e.kind == GrammarElem::kRule) return e.a;
  const uint64_t key = (static_cast<uint64_t>(e.a) << 32) | e.b;
  auto it = lazy_rules_.find(key);
  if (it != lazy_rules_.end()) return it->second;
  if (e.a >= templates_.size()) return InternalError("lazy rule of unknown template ", e.a);
  GrammarTemplate* t = templates_[e.a].get();
  const uint32_t rule = AddRule(t->Describe(e.b));
  lazy_rules_.emplace(key, rule);  // before expanding: the expansion may refer to itself
  POCKET_ASSIGN_OR_RETURN(std::vector<GrammarSeq> alts, t->Expand(this, e.b));
  rules_[rule].alts = std::move(alts);
  return rule;
}

Status Grammar::Check() const {
  if (root_ >= rules_.size()) return InvalidArgumentError("grammar: no root rule");
  const size_t n = rules_.size();
  for (size_t r = 0; r < n; ++r) {
    for (const GrammarSeq& seq : rules_[r].alts) {
      for (const GrammarElem& e : seq) {
        if (e.kind == GrammarElem::kRule && e.a >= n)
          return InvalidArgumentError("grammar: rule '", rules_[r].name, "' refers to rule ", e.a,
                                      " which does not exist");
        if (e.kind == GrammarElem::kLazy && e.a >= templates_.size())
          return InvalidArgumentError("grammar: rule '", rules_[r].name,
                                      "' uses an unknown template");
        if (e.kind == GrammarElem::kChars && e.a >= sets_.size())
          return InvalidArgumentError("grammar: bad character set");
      }
    }
  }
  // Nullable rules (lazy rules count as not nullable: their contract forbids left recursion).
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const GrammarSeq& seq : rules_[r].alts) {
        bool all = true;
        for (const GrammarElem& e : seq) {
          if (!(e.kind == GrammarElem::kRule && nullable[e.a])) {
            all = false;
            break;
          }
        }
        if (all) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  // Left edges r -> s (s can start r). A reference that is the last element of its alternative
  // is a tail call and pushes nothing, so a cycle of tail calls is harmless (the recognizer sees
  // the same stack again); a cycle through a reference with something after it grows the stack
  // forever: that is the left recursion refused here.
  std::vector<std::vector<uint32_t>> edges(n);
  std::vector<std::pair<uint32_t, uint32_t>> growing;
  for (size_t r = 0; r < n; ++r) {
    for (const GrammarSeq& seq : rules_[r].alts) {
      for (size_t i = 0; i < seq.size(); ++i) {
        const GrammarElem& e = seq[i];
        if (e.kind != GrammarElem::kRule) break;
        edges[r].push_back(e.a);
        if (i + 1 < seq.size()) growing.emplace_back(static_cast<uint32_t>(r), e.a);
        if (!nullable[e.a]) break;
      }
    }
  }
  std::vector<uint32_t> mark(n, 0);
  uint32_t stamp = 0;
  for (auto [from, to] : growing) {
    // Can `to` reach `from` over left edges?
    ++stamp;
    std::vector<uint32_t> todo = {to};
    while (!todo.empty()) {
      const uint32_t x = todo.back();
      todo.pop_back();
      if (x == from) {
        return InvalidArgumentError("grammar: rule '", rules_[from].name,
                                    "' is left-recursive (through '", rules_[to].name,
                                    "'); rewrite it with repetition");
      }
      if (mark[x] == stamp) continue;
      mark[x] = stamp;
      for (uint32_t y : edges[x]) todo.push_back(y);
    }
  }
  return Status::Ok();
}

std::string Grammar::ToString() const {
  std::string out;
  for (size_t r = 0; r < rules_.size(); ++r) {
    out += 'r';
    out += std::to_string(r);
    out += '(';
    out += rules_[r].name;
    out += ") ::=";
    for (size_t a = 0; a < rules_[r].alts.size(); ++a) {
      if (a > 0) out += " |";
      for (const GrammarElem& e : rules_[r].alts[a]) {
        out += ' ';
        if (e.kind == GrammarElem::kRule) {
          out += 'r';
          out += std::to_string(e.a);
        } else if (e.kind == GrammarElem::kLazy) {
          out += templates_[e.a]->Describe(e.b);
        } else {
          out += '[';
          for (CharRange x : sets_[e.a]) {
            out += RangeText(x.lo);
            if (x.hi != x.lo) {
              out += '-';
              out += RangeText(x.hi);
            }
          }
          out += ']';
        }
      }
      if (rules_[r].alts[a].empty()) out += " ()";
    }
    out += '\n';
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// JSON string characters and span rules.

void AppendJsonStringChar(Grammar* g, GrammarSeq* seq, char32_t c) {
  auto lit = [&](const char* s) { g->AppendLiteral(seq, s); };
  switch (c) {
    case '"':
      return lit("\\\"");
    case '\\':
      return lit("\\\\");
    case '\b':
      return lit("\\b");
    case '\t':
      return lit("\\t");
    case '\n':
      return lit("\\n");
    case '\f':
      return lit("\\f");
    case '\r':
      return lit("\\r");
    default:
      break;
  }
  if (c < 0x20) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
    return lit(buf);
  }
  seq->push_back(g->Char(c));
}

uint32_t JsonStringCharRule(Grammar* g, const std::vector<CharRange>& ranges_in) {
  const std::vector<CharRange> ranges = Normalize(ranges_in);
  // Raw characters: the set minus '"', '\\' and the controls; the rest one escape each.
  std::vector<CharRange> raw;
  std::vector<GrammarSeq> alts;
  for (CharRange x : ranges) {
    char32_t lo = x.lo;
    const char32_t hi = std::min(x.hi, kMaxCodePoint);
    for (; lo <= hi && lo < 0x20; ++lo) {
      GrammarSeq s;
      AppendJsonStringChar(g, &s, lo);
      alts.push_back(std::move(s));
    }
    if (lo > hi) continue;
    // [lo, hi] with lo >= 0x20: cut out '"' (0x22) and '\\' (0x5C).
    char32_t start = lo;
    for (char32_t special : {char32_t{'"'}, char32_t{'\\'}}) {
      if (special >= start && special <= hi) {
        if (special > start) raw.push_back({start, special - 1});
        GrammarSeq s;
        AppendJsonStringChar(g, &s, special);
        alts.push_back(std::move(s));
        start = special + 1;
      }
    }
    if (start <= hi) raw.push_back({start, hi});
  }
  if (!raw.empty()) alts.insert(alts.begin(), GrammarSeq{g->Chars(raw)});
  return g->AddRule("json-char", std::move(alts));
}

namespace {

// Span rule family. The source is cut into units (one per code point: the character, or its
// canonical JSON escape); the payload is (set of unit positions the span may continue at, length
// so far). Alternatives: stop (when long enough), or one more unit, grouped by its text.
class SpanTemplate final : public GrammarTemplate {
 public:
  SpanTemplate(std::vector<std::string> units, int min_chars, int max_chars)
      : units_(std::move(units)), min_(min_chars), max_(max_chars) {
    Payload all;
    for (uint32_t p = 0; p <= units_.size(); ++p) all.positions.push_back(p);
    Intern(std::move(all));
  }

  StatusOr<std::vector<GrammarSeq>> Expand(Grammar* g, uint32_t payload) override {
    const Payload here = payloads_[payload];  // copy: Intern below may reallocate
    std::vector<GrammarSeq> alts;
    if (here.length >= min_) alts.push_back({});
    if (max_ >= 0 && here.length >= max_) return alts;
    std::map<std::string_view, std::vector<uint32_t>> by_unit;
    for (uint32_t p : here.positions) {
      if (p < units_.size()) by_unit[units_[p]].push_back(p + 1);
    }
    for (auto& [unit, next] : by_unit) {
      GrammarSeq seq;
      g->AppendLiteral(&seq, unit);
      seq.push_back(Grammar::Lazy(self_, Intern(Payload{std::move(next), here.length + 1})));
      alts.push_back(std::move(seq));
    }
    return alts;
  }

  std::string Describe(uint32_t payload) const override {
    return "span{n=" + std::to_string(payloads_[payload].positions.size()) +
           ",len=" + std::to_string(payloads_[payload].length) + "}";
  }

  void set_self(uint32_t id) { self_ = id; }

 private:
  struct Payload {
    std::vector<uint32_t> positions;
    int length = 0;
  };
  uint32_t Intern(Payload p) {
    std::string key(reinterpret_cast<const char*>(p.positions.data()),
                    p.positions.size() * sizeof(uint32_t));
    key.append(reinterpret_cast<const char*>(&p.length), sizeof p.length);
    auto it = index_.find(key);
    if (it != index_.end()) return it->second;
    const uint32_t id = static_cast<uint32_t>(payloads_.size());
    payloads_.push_back(std::move(p));
    index_.emplace(std::move(key), id);
    return id;
  }

  std::vector<std::string> units_;
  int min_, max_;
  uint32_t self_ = 0;
  std::vector<Payload> payloads_;
  std::unordered_map<std::string, uint32_t> index_;
};

}  // namespace

StatusOr<uint32_t> AddSpanRule(Grammar* grammar, std::string_view source, SpanEscaping escaping,
                               int min_chars, int max_chars) {
  POCKET_RETURN_IF_ERROR(utf8::Validate(source));
  if (max_chars >= 0 && max_chars < min_chars)
    return InvalidArgumentError("span: max length ", max_chars, " below min length ", min_chars);
  std::vector<std::string> units;
  size_t at = 0;
  while (at < source.size()) {
    const size_t begin = at;
    const char32_t c = utf8::DecodeAt(source, &at);
    if (escaping == SpanEscaping::kRaw) {
      units.emplace_back(source.substr(begin, at - begin));
      continue;
    }
    // The canonical escape, spelled out (the same as AppendJsonStringChar).
    std::string u;
    switch (c) {
      case '"':
        u = "\\\"";
        break;
      case '\\':
        u = "\\\\";
        break;
      case '\b':
        u = "\\b";
        break;
      case '\t':
        u = "\\t";
        break;
      case '\n':
        u = "\\n";
        break;
      case '\f':
        u = "\\f";
        break;
      case '\r':
        u = "\\r";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          u = buf;
        } else {
          u = std::string(source.substr(begin, at - begin));
        }
    }
    units.push_back(std::move(u));
  }
  auto t = std::make_unique<SpanTemplate>(std::move(units), min_chars, max_chars);
  SpanTemplate* raw = t.get();
  const uint32_t id = grammar->AddTemplate(std::move(t));
  raw->set_self(id);
  return grammar->AddRule("span", {{Grammar::Lazy(id, 0)}});
}

// ---------------------------------------------------------------------------------------------
// The recognizer's machinery: interned stacks and closure.

namespace {

constexpr size_t kMaxClosure = 1 << 16;  // stacks one closure may create (ambiguity guard)
constexpr uint32_t kEmpty = 0;           // the empty stack: the grammar is complete
constexpr uint32_t kContext = 1;         // a cut segment's bottom: the context continues

struct Frame {
  uint32_t rule, alt, idx;
  bool operator==(const Frame&) const = default;
};

// Stacks as interned linked lists: equal stacks have equal ids, so a state is a sorted id set.
class Stacks {
 public:
  Stacks() { Clear(); }

  void Clear() {
    nodes_.clear();
    index_.clear();
    nodes_.push_back({{~0u, 0, 0}, 0});  // kEmpty
    nodes_.push_back({{~0u, 1, 0}, 0});  // kContext
  }
  size_t size() const { return nodes_.size(); }
  // Drops the stacks made after the first `n` (n >= 2): ids only refer to older ones (a parent is
  // made before its children), so states made before then stay valid.
  void Truncate(size_t n) {
    while (nodes_.size() > n) {
      index_.erase(Key{nodes_.back().frame, nodes_.back().parent});
      nodes_.pop_back();
    }
  }

  uint32_t Push(Frame f, uint32_t parent) {
    Key k{f, parent};
    auto it = index_.find(k);
    if (it != index_.end()) return it->second;
    const uint32_t id = static_cast<uint32_t>(nodes_.size());
    nodes_.push_back({f, parent});
    index_.emplace(k, id);
    return id;
  }
  const Frame& top(uint32_t s) const { return nodes_[s].frame; }
  uint32_t parent(uint32_t s) const { return nodes_[s].parent; }

 private:
  struct Node {
    Frame frame;
    uint32_t parent;
  };
  struct Key {
    Frame f;
    uint32_t parent;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      uint64_t h = (static_cast<uint64_t>(k.f.rule) << 32) ^
                   (static_cast<uint64_t>(k.f.alt) << 20) ^ k.f.idx;
      h ^= static_cast<uint64_t>(k.parent) * 0x9E3779B97F4A7C15ull;
      h ^= h >> 29;
      h *= 0xBF58476D1CE4E5B9ull;
      return static_cast<size_t>(h ^ (h >> 32));
    }
  };
  std::vector<Node> nodes_;
  std::unordered_map<Key, uint32_t, KeyHash> index_;
};

// Closure and steps over one Stacks arena. A stack in a closed state has a character set on top,
// or is kEmpty (complete) or kContext (a cut segment ran out).
class Machine {
 public:
  explicit Machine(Grammar* g) : g_(g) {}

  Stacks& stacks() { return stacks_; }
  const Status& error() const { return error_; }
  void ClearError() { error_ = Status::Ok(); }

  // Adds the closure of stack s (whose top frame may point anywhere) to *out (unsorted, unique
  // within this call sequence by the stamp `mark`).
  void Close(uint32_t s, std::vector<uint32_t>* out) {
    todo_.clear();
    todo_.push_back(s);
    size_t made = 0;
    while (!todo_.empty()) {
      const uint32_t x = todo_.back();
      todo_.pop_back();
      if (x >= seen_.size()) seen_.resize(std::max<size_t>(x + 1, seen_.size() * 2), 0);
      if (seen_[x] == stamp_) continue;
      seen_[x] = stamp_;
      if (x == kEmpty || x == kContext) {
        out->push_back(x);
        continue;
      }
      const Frame f = stacks_.top(x);
      // Copies: resolving a lazy rule adds rules and may move the grammar's storage.
      const GrammarSeq& seq = g_->alts(f.rule)[f.alt];
      const size_t seq_size = seq.size();
      if (f.idx >= seq_size) {
        todo_.push_back(stacks_.parent(x));
        continue;
      }
      const GrammarElem e = seq[f.idx];
      if (e.kind == GrammarElem::kChars) {
        out->push_back(x);
        continue;
      }
      auto rule = g_->Resolve(e);
      if (!rule.ok()) {
        if (error_.ok()) error_ = rule.status();
        continue;
      }
      const uint32_t cont = f.idx + 1 < seq_size
                                ? stacks_.Push({f.rule, f.alt, f.idx + 1}, stacks_.parent(x))
                                : stacks_.parent(x);
      const size_t n_alts = g_->alts(*rule).size();
      for (size_t b = 0; b < n_alts; ++b) {
        todo_.push_back(stacks_.Push({*rule, static_cast<uint32_t>(b), 0}, cont));
      }
      if (++made > kMaxClosure) {
        if (error_.ok())
          error_ = ResourceExhaustedError("grammar: more than ", kMaxClosure,
                                          " parse stacks at one position (ambiguous grammar)");
        todo_.clear();
      }
    }
  }
  void BeginSet() { ++stamp_; }

  // The character set on top of a closed stack (not kEmpty/kContext).
  const std::vector<CharRange>& TopChars(uint32_t s) const {
    const Frame& f = stacks_.top(s);
    return g_->chars(g_->alts(f.rule)[f.alt][f.idx].a);
  }

  // next = closure of every stack of `state` that takes c. kEmpty and kContext in `state` are
  // skipped (they take no character).
  void Step(const std::vector<uint32_t>& state, char32_t c, std::vector<uint32_t>* next) {
    next->clear();
    BeginSet();
    for (uint32_t s : state) {
      if (s == kEmpty || s == kContext) continue;
      if (!InRanges(TopChars(s), c)) continue;
      const Frame f = stacks_.top(s);
      Close(stacks_.Push({f.rule, f.alt, f.idx + 1}, stacks_.parent(s)), next);
    }
  }

  // Some stack of `state` can take a character whose UTF-8 starts with `pending` (incomplete).
  bool PartialViable(const std::vector<uint32_t>& state, const std::string& pending) const {
    const size_t len = utf8::LengthFromLead(static_cast<uint8_t>(pending[0]));
    std::string lo_s = pending, hi_s = pending;
    lo_s.append(len - pending.size(), '\x80');
    hi_s.append(len - pending.size(), '\xBF');
    size_t a = 0, b = 0;
    char32_t lo = utf8::DecodeAt(lo_s, &a), hi = utf8::DecodeAt(hi_s, &b);
    static constexpr char32_t kMinOfLength[5] = {0, 0, 0x80, 0x800, 0x10000};
    lo = std::max(lo, kMinOfLength[len]);
    hi = std::min(hi, kMaxCodePoint);
    if (static_cast<uint8_t>(pending[0]) == 0xED && pending.size() == 1)
      hi = std::min<char32_t>(hi, 0xD7FF);
    if (lo > hi) return false;
    for (uint32_t s : state) {
      if (s == kEmpty || s == kContext) continue;
      if (Overlaps(TopChars(s), lo, hi)) return true;
    }
    return false;
  }

  // Feeds one byte: false when dead. *state and *pending are updated only on success.
  bool Byte(std::vector<uint32_t>* state, std::string* pending, char b,
            std::vector<uint32_t>* scratch) {
    pending->push_back(b);
    const utf8::SequenceInfo info = utf8::Classify(*pending);
    if (info.kind == utf8::SequenceInfo::kInvalid) {
      pending->pop_back();
      return false;
    }
    if (info.kind == utf8::SequenceInfo::kIncomplete) {
      if (PartialViable(*state, *pending)) return true;
      pending->pop_back();
      return false;
    }
    size_t at = 0;
    const char32_t c = utf8::DecodeAt(*pending, &at);
    Step(*state, c, scratch);
    if (scratch->empty()) {
      pending->pop_back();
      return false;
    }
    pending->clear();
    std::sort(scratch->begin(), scratch->end());
    state->swap(*scratch);
    return true;
  }

 private:
  Grammar* g_;
  Stacks stacks_;
  std::vector<uint32_t> todo_;
  std::vector<uint32_t> seen_;
  uint32_t stamp_ = 0;
  Status error_ = Status::Ok();
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Recognizer.

struct Recognizer::Impl {
  explicit Impl(Grammar* g) : grammar(g), machine(g) {}
  Grammar* grammar;
  Machine machine;
  std::vector<uint32_t> state;
  std::string pending;
  std::vector<uint32_t> scratch;
};

Recognizer::Recognizer(Grammar* grammar) : impl_(std::make_unique<Impl>(grammar)) {
  (void)Reset();
}
Recognizer::Recognizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Recognizer::~Recognizer() = default;

Status Recognizer::Reset() {
  Impl& m = *impl_;
  m.machine.stacks().Clear();
  m.machine.ClearError();
  m.state.clear();
  m.pending.clear();
  const uint32_t root = m.grammar->root();
  m.machine.BeginSet();
  for (size_t a = 0; a < m.grammar->alts(root).size(); ++a) {
    m.machine.Close(m.machine.stacks().Push({root, static_cast<uint32_t>(a), 0}, kEmpty), &m.state);
  }
  std::sort(m.state.begin(), m.state.end());
  return m.machine.error();
}

StatusOr<bool> Recognizer::Feed(std::string_view bytes) {
  Impl& m = *impl_;
  std::vector<uint32_t> state = m.state;
  std::string pending = m.pending;
  for (char b : bytes) {
    const bool ok = m.machine.Byte(&state, &pending, b, &m.scratch);
    POCKET_RETURN_IF_ERROR(m.machine.error());
    if (!ok) return false;
  }
  m.state = std::move(state);
  m.pending = std::move(pending);
  return true;
}

StatusOr<bool> Recognizer::Probe(std::string_view bytes) {
  Impl& m = *impl_;
  std::vector<uint32_t> state = m.state;
  std::string pending = m.pending;
  for (char b : bytes) {
    const bool ok = m.machine.Byte(&state, &pending, b, &m.scratch);
    POCKET_RETURN_IF_ERROR(m.machine.error());
    if (!ok) return false;
  }
  return true;
}

bool Recognizer::Complete() const {
  return impl_->pending.empty() &&
         std::binary_search(impl_->state.begin(), impl_->state.end(), kEmpty);
}

bool Recognizer::CanContinue() const {
  for (uint32_t s : impl_->state) {
    if (s != kEmpty) return true;
  }
  return false;
}

StatusOr<bool> Recognizer::Matches(std::string_view text) {
  POCKET_RETURN_IF_ERROR(Reset());
  POCKET_ASSIGN_OR_RETURN(bool ok, Feed(text));
  return ok && Complete();
}

// ---------------------------------------------------------------------------------------------
// The constraint.

namespace {

constexpr size_t kSegmentFrames = 3;
constexpr size_t kMaxMemoBytes = size_t{96} << 20;

// The vocabulary's byte trie, nodes in depth-first order; the tokens under a node are a
// contiguous range of `tokens`.
struct Trie {
  struct Node {
    uint32_t child_begin = 0, child_end = 0;  // into edge_byte / edge_child
    uint32_t tok_begin = 0, tok_end = 0;      // tokens ending here
    uint32_t sub_end = 0;                     // tokens of the subtree: [tok_begin, sub_end)
  };
  std::vector<Node> nodes;
  std::vector<uint8_t> edge_byte;
  std::vector<uint32_t> edge_child;
  std::vector<int32_t> tokens;
  size_t max_depth = 0;

  void Build(const Tokenizer& tok) {
    std::vector<std::pair<std::string_view, int32_t>> all;
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
      if (tok.IsSpecial(id)) continue;
      const std::string_view b = tok.TokenBytes(id);
      if (!b.empty()) all.emplace_back(b, id);
    }
    std::sort(all.begin(), all.end());
    nodes.clear();
    edge_byte.clear();
    edge_child.clear();
    tokens.clear();
    BuildNode(all, 0, all.size(), 0);
  }

 private:
  uint32_t BuildNode(const std::vector<std::pair<std::string_view, int32_t>>& all, size_t lo,
                     size_t hi, size_t depth) {
    const uint32_t id = static_cast<uint32_t>(nodes.size());
    max_depth = std::max(max_depth, depth);
    nodes.emplace_back();
    nodes[id].tok_begin = static_cast<uint32_t>(tokens.size());
    while (lo < hi && all[lo].first.size() == depth) tokens.push_back(all[lo++].second);
    nodes[id].tok_end = static_cast<uint32_t>(tokens.size());
    // Groups by the byte at `depth` (sorted, so contiguous).
    std::vector<std::pair<size_t, size_t>> groups;
    for (size_t i = lo; i < hi;) {
      size_t j = i + 1;
      while (j < hi && all[j].first[depth] == all[i].first[depth]) ++j;
      groups.emplace_back(i, j);
      i = j;
    }
    const uint32_t first_edge = static_cast<uint32_t>(edge_byte.size());
    edge_byte.resize(first_edge + groups.size());
    edge_child.resize(first_edge + groups.size());
    nodes[id].child_begin = first_edge;
    nodes[id].child_end = first_edge + static_cast<uint32_t>(groups.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      edge_byte[first_edge + g] = static_cast<uint8_t>(all[groups[g].first].first[depth]);
      const uint32_t child = BuildNode(all, groups[g].first, groups[g].second, depth + 1);
      edge_child[first_edge + g] = child;
    }
    nodes[id].sub_end = static_cast<uint32_t>(tokens.size());
    return id;
  }
};

// What one segment decides: the tokens it accepts, and the trie nodes where tokens run past its
// bottom (to be walked on by the segment below).
struct SegmentResult {
  std::vector<int32_t> accepted;    // sorted ids (when not dense)
  std::vector<uint64_t> dense;      // a bit mask instead, when many are accepted
  std::vector<uint32_t> handed_on;  // trie nodes
  size_t Bytes() const {
    return accepted.size() * 4 + dense.size() * 8 + handed_on.size() * 4 + 64;
  }
};

// Segment results by key (see MaskForStack). A key names rules and trie nodes, never the
// recognizer's stack ids, so an entry stays right after a rollback and for every clone sharing the
// grammar (whose rule ids never change: lazy rules are only added).
struct MaskCache {
  std::unordered_map<std::string, SegmentResult> memo;
  size_t bytes = 0;
};

std::shared_ptr<const Trie> BuildTrie(const Tokenizer& tok) {
  auto trie = std::make_shared<Trie>();
  trie->Build(tok);
  return trie;
}

}  // namespace

class GrammarConstraint final : public Constraint {
 public:
  GrammarConstraint(const Tokenizer& tok, std::unique_ptr<Grammar> g)
      : tok_(&tok),
        grammar_(std::move(g)),
        trie_(BuildTrie(tok)),
        cache_(std::make_shared<MaskCache>()),
        recognizer_(grammar_.get()),
        walker_(grammar_.get()) {
    bufs_.resize(trie_->max_depth + 2);
    words_ = (static_cast<size_t>(tok.vocab_size()) + 63) / 64;
  }

  Status Init() { return recognizer_.Reset(); }

  void Reset() override {
    status_ = recognizer_.Reset();
    history_.clear();
  }

  std::unique_ptr<Constraint> Clone() const override {
    return std::unique_ptr<Constraint>(new GrammarConstraint(*this));
  }

  size_t n_accepted() const override { return history_.size(); }

  const std::vector<int32_t>& Allowed() override {
    std::vector<uint64_t> mask;
    AllowedMask(&mask);
    allowed_.clear();
    for (size_t w = 0; w < mask.size(); ++w) {
      for (uint64_t bits = mask[w]; bits != 0; bits &= bits - 1) {
        allowed_.push_back(
            static_cast<int32_t>(w * 64 + static_cast<size_t>(std::countr_zero(bits))));
      }
    }
    return allowed_;
  }

  size_t AllowedMask(std::vector<uint64_t>* mask) override {
    mask->assign(words_, 0);
    if (!status_.ok()) return 0;
    Recognizer::Impl& r = *recognizer_.impl_;
    for (uint32_t s : r.state) {
      if (s == kEmpty) continue;
      MaskForStack(s, r.pending, mask);
      if (!status_.ok()) {
        mask->assign(words_, 0);
        return 0;
      }
    }
    size_t n = 0;
    for (uint64_t w : *mask) n += static_cast<size_t>(std::popcount(w));
    return n;
  }

  Status Accept(int32_t token) override {
    POCKET_RETURN_IF_ERROR(status_);
    const std::string_view bytes = tok_->TokenBytes(token);
    if (bytes.empty() || tok_->IsSpecial(token))
      return InvalidArgumentError("token ", token, " cannot continue the grammar");
    Recognizer::Impl& r = *recognizer_.impl_;
    Checkpoint before{r.state, r.pending, r.machine.stacks().size()};
    POCKET_ASSIGN_OR_RETURN(bool ok, recognizer_.Feed(bytes));
    if (!ok) {
      return InvalidArgumentError("token ", token, " ", QuoteBytes(bytes),
                                  " cannot continue the grammar here");
    }
    history_.push_back(std::move(before));
    return Status::Ok();
  }

  bool Complete() const override { return status_.ok() && recognizer_.Complete(); }
  Status error() const override { return status_; }

 protected:
  void RollbackTokens(size_t n_tokens) override {
    const size_t keep = history_.size() - n_tokens;
    Checkpoint& to = history_[keep];
    Recognizer::Impl& r = *recognizer_.impl_;
    r.state = std::move(to.state);
    r.pending = std::move(to.pending);
    // The stacks the undone tokens made (and any a refused token made since) go with them.
    r.machine.stacks().Truncate(to.stacks);
    history_.resize(keep);
    // Every accept saw no error (Accept refuses after one), so neither did the state restored: an
    // error of the engine's limits met after it belongs to the undone tokens.
    r.machine.ClearError();
    status_ = Status::Ok();
  }

 private:
  // The recognizer's state before an accepted token: its stack set and unfinished character, and
  // how many stacks its arena held (the stacks made after are dropped on rollback).
  struct Checkpoint {
    std::vector<uint32_t> state;
    std::string pending;
    size_t stacks = 0;
  };

  // Clone: shares the grammar, the trie and the mask cache; copies the recognizer (its stacks
  // arena and state) and the history; fresh scratch.
  GrammarConstraint(const GrammarConstraint& other)
      : Constraint(other),
        tok_(other.tok_),
        grammar_(other.grammar_),
        trie_(other.trie_),
        cache_(other.cache_),
        recognizer_(std::make_unique<Recognizer::Impl>(*other.recognizer_.impl_)),
        walker_(grammar_.get()),
        words_(other.words_),
        status_(other.status_),
        history_(other.history_) {
    bufs_.resize(trie_->max_depth + 2);
  }

  // The segments of one stack of the recognizer's state, top down, each looked up in the cache.
  void MaskForStack(uint32_t s, const std::string& pending, std::vector<uint64_t>* mask) {
    Stacks& main = recognizer_.impl_->machine.stacks();
    std::vector<uint32_t> starts = {0};
    bool first = true;
    uint32_t seg = s;
    while (true) {
      // Key: start nodes, pending bytes (first segment), frames, and whether it is the bottom.
      std::string key;
      auto put = [&key](uint32_t v) { key.append(reinterpret_cast<const char*>(&v), 4); };
      put(static_cast<uint32_t>(starts.size()));
      for (uint32_t n : starts) put(n);
      if (first) key += pending;
      key += '|';
      Frame frames[kSegmentFrames];
      size_t nf = 0;
      uint32_t x = seg;
      while (nf < kSegmentFrames && x != kEmpty) {
        frames[nf++] = main.top(x);
        x = main.parent(x);
      }
      const bool bottom = x == kEmpty;
      for (size_t i = 0; i < nf; ++i) {
        put(frames[i].rule);
        put(frames[i].alt);
        put(frames[i].idx);
      }
      key += bottom ? 'B' : 'C';
      MaskCache& cache = *cache_;
      auto it = cache.memo.find(key);
      if (it == cache.memo.end()) {
        SegmentResult res = Walk(starts, first ? pending : std::string(), frames, nf, bottom);
        if (!status_.ok()) return;
        cache.bytes += res.Bytes() + key.size();
        if (cache.bytes > kMaxMemoBytes) {
          cache.memo.clear();
          cache.bytes = res.Bytes() + key.size();
        }
        it = cache.memo.emplace(std::move(key), std::move(res)).first;
      }
      const SegmentResult& res = it->second;
      if (!res.dense.empty()) {
        for (size_t w = 0; w < words_; ++w) (*mask)[w] |= res.dense[w];
      } else {
        for (int32_t id : res.accepted)
          (*mask)[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
      }
      if (res.handed_on.empty() || bottom) return;
      starts = res.handed_on;
      first = false;
      seg = x;
    }
  }

  // Walks the trie from `starts` for the segment of `nf` frames (top first).
  SegmentResult Walk(const std::vector<uint32_t>& starts, const std::string& pending,
                     const Frame* frames, size_t nf, bool bottom) {
    Stacks& st = walker_.stacks();
    st.Clear();
    walker_.ClearError();
    uint32_t s = bottom ? kEmpty : kContext;
    for (size_t i = nf; i-- > 0;) s = st.Push(frames[i], s);
    std::vector<uint32_t> state;
    walker_.BeginSet();
    walker_.Close(s, &state);
    std::sort(state.begin(), state.end());
    accepted_bits_.assign(words_, 0);
    n_accepted_ = 0;
    handed_on_.clear();
    for (uint32_t start : starts) {
      Visit(start, state, pending, /*depth=*/0);
    }
    if (!walker_.error().ok() && status_.ok()) status_ = walker_.error();
    SegmentResult res;
    if (n_accepted_ * 32 > static_cast<size_t>(tok_->vocab_size())) {
      res.dense = accepted_bits_;
    } else {
      for (size_t w = 0; w < words_; ++w) {
        for (uint64_t bits = accepted_bits_[w]; bits != 0; bits &= bits - 1)
          res.accepted.push_back(
              static_cast<int32_t>(w * 64 + static_cast<size_t>(std::countr_zero(bits))));
      }
    }
    std::sort(handed_on_.begin(), handed_on_.end());
    handed_on_.erase(std::unique(handed_on_.begin(), handed_on_.end()), handed_on_.end());
    res.handed_on = handed_on_;
    return res;
  }

  void AcceptToken(int32_t id) {
    uint64_t& w = accepted_bits_[static_cast<size_t>(id) >> 6];
    const uint64_t bit = uint64_t{1} << (id & 63);
    if ((w & bit) == 0) {
      w |= bit;
      ++n_accepted_;
    }
  }

  // At trie node `node` with the segment's state after the node's bytes. The tokens ending at
  // the node were decided by the caller.
  void Visit(uint32_t node, const std::vector<uint32_t>& state, const std::string& pending,
             size_t depth) {
    const Trie& trie = *trie_;
    const Trie::Node& n = trie.nodes[node];
    if (n.child_begin == n.child_end) return;
    // A stack ran out of the segment here: tokens going on need the segment below.
    if (pending.empty() && std::binary_search(state.begin(), state.end(), kContext))
      handed_on_.push_back(node);
    bool live = false;
    for (uint32_t x : state) {
      if (x != kEmpty && x != kContext) {
        live = true;
        break;
      }
    }
    if (!live) return;
    Buf& buf = bufs_[depth];  // sized for the longest token at construction
    for (uint32_t e = n.child_begin; e < n.child_end; ++e) {
      buf.state = state;
      buf.pending = pending;
      if (!walker_.Byte(&buf.state, &buf.pending, static_cast<char>(trie.edge_byte[e]),
                        &buf.scratch))
        continue;
      const uint32_t child = trie.edge_child[e];
      const Trie::Node& c = trie.nodes[child];
      for (uint32_t t = c.tok_begin; t < c.tok_end; ++t) AcceptToken(trie.tokens[t]);
      Visit(child, buf.state, buf.pending, depth + 1);
    }
  }

  struct Buf {
    std::vector<uint32_t> state, scratch;
    std::string pending;
  };

  const Tokenizer* tok_;
  // Shared with clones: the grammar (its lazy rules are added as met, for all of them alike), the
  // vocabulary trie (immutable) and the segment cache.
  std::shared_ptr<Grammar> grammar_;
  std::shared_ptr<const Trie> trie_;
  std::shared_ptr<MaskCache> cache_;
  Recognizer recognizer_;
  Machine walker_;  // its own arena for the walks
  size_t words_ = 0;
  Status status_ = Status::Ok();
  std::vector<Checkpoint> history_;  // one per accepted token
  // Scratch of the walks.
  std::vector<uint64_t> accepted_bits_;
  size_t n_accepted_ = 0;
  std::vector<uint32_t> handed_on_;
  std::vector<Buf> bufs_;
  std::vector<int32_t> allowed_;
};

StatusOr<std::unique_ptr<Constraint>> MakeGrammarConstraint(const Tokenizer& tokenizer,
                                                            std::unique_ptr<Grammar> grammar) {
  if (grammar == nullptr) return InvalidArgumentError("no grammar");
  POCKET_RETURN_IF_ERROR(grammar->Check());
  auto c = std::make_unique<GrammarConstraint>(tokenizer, std::move(grammar));
  POCKET_RETURN_IF_ERROR(c->Init());
  return std::unique_ptr<Constraint>(std::move(c));
}

}  // namespace pocket
