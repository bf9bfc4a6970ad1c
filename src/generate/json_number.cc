// Bounded JSON numbers. The lazy rule's payload is the text so far; its expansion asks two exact
// questions: does the text satisfy the bounds (the empty alternative), and does a next character
// keep some completion possible (viability).
//
// Viability. The values reachable from a prefix, as magnitudes (a negative prefix is checked
// against the mirrored bounds), form intervals of decimals on a grid:
//   integer part P (not "0"), r characters left: for each k >= 0 more digits, [P*10^k, (P+1)*10^k)
//     with at most r-k-1 fraction digits (none when the type is integer);
//   integer part "0": k = 0 only;
//   fraction part P with d digits: [P, P + 10^-d) with at most d+r fraction digits.
// A value with at most D fraction digits that is a multiple of m is a multiple of
// lcm(m, 10^-D), so each interval is asked one question: does it hold a multiple of that step
// within [lower, upper] (ends closed or open)? The smallest multiple at or above the lower end
// answers it. Every decimal here is exact: (sign, digit string, power of ten).
#include "generate/json_number.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pocket {
namespace {

constexpr int kMaxExponent = 1000;

// ---- Non-negative integers as decimal digit strings (no leading zeros; zero is "0").

int CmpInt(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  const int c = a.compare(b);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

void StripLeadingZeros(std::string* s) {
  const size_t i = s->find_first_not_of('0');
  if (i == std::string::npos) {
    s->assign(1, '0');  // not = "0": GCC 12 misreports -Wrestrict
  } else {
    s->erase(0, i);
  }
}

std::string AddInt(std::string_view a, std::string_view b) {
  std::string out;
  int carry = 0;
  for (size_t i = 0; i < std::max(a.size(), b.size()) || carry; ++i) {
    int s = carry;
    if (i < a.size()) s += a[a.size() - 1 - i] - '0';
    if (i < b.size()) s += b[b.size() - 1 - i] - '0';
    out.push_back(static_cast<char>('0' + s % 10));
    carry = s / 10;
  }
  std::reverse(out.begin(), out.end());
  StripLeadingZeros(&out);
  return out;
}

// a - b, a >= b.
std::string SubInt(std::string_view a, std::string_view b) {
  std::string out(a);
  int borrow = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    char& c = out[out.size() - 1 - i];
    int v = c - '0' - borrow - (i < b.size() ? b[b.size() - 1 - i] - '0' : 0);
    borrow = v < 0;
    c = static_cast<char>('0' + v + 10 * borrow);
  }
  StripLeadingZeros(&out);
  return out;
}

// a mod b, b > 0.
std::string ModInt(std::string_view a, std::string_view b) {
  if (b.size() <= 17) {  // the remainder times ten fits in 64 bits
    uint64_t m = 0;
    for (char ch : b) m = m * 10 + static_cast<uint64_t>(ch - '0');
    uint64_t r = 0;
    for (char ch : a) r = (r * 10 + static_cast<uint64_t>(ch - '0')) % m;
    return std::to_string(r);
  }
  // Schoolbook: the remainder stays below 10*b, so each digit costs at most nine subtractions.
  std::string r = "0";
  for (char ch : a) {
    if (r == "0") r.clear();
    r.push_back(ch);
    while (CmpInt(r, b) >= 0) r = SubInt(r, b);
  }
  return r;
}

std::string MulSmall(std::string_view a, int k) {
  std::string out;
  int carry = 0;
  for (size_t i = a.size(); i-- > 0;) {
    const int v = (a[i] - '0') * k + carry;
    out.push_back(static_cast<char>('0' + v % 10));
    carry = v / 10;
  }
  for (; carry; carry /= 10) out.push_back(static_cast<char>('0' + carry % 10));
  std::reverse(out.begin(), out.end());
  StripLeadingZeros(&out);
  return out;
}

// How many times k (2 or 5) divides a > 0, at most `cap`.
int Valuation(std::string a, int k, int cap) {
  int n = 0;
  while (n < cap) {
    std::string q;
    int rem = 0;
    for (char ch : a) {
      rem = rem * 10 + (ch - '0');
      q.push_back(static_cast<char>('0' + rem / k));
      rem %= k;
    }
    if (rem != 0) break;
    StripLeadingZeros(&q);
    a = std::move(q);
    ++n;
  }
  return n;
}

// ---- Decimals: (neg ? -1 : 1) * mag * 10^exp, normalized (mag without leading or trailing
// zeros; zero is {false, "0", 0}), so equal values are equal structs.

struct Dec {
  bool neg = false;
  std::string mag = "0";
  int exp = 0;
};

Dec MakeDec(bool neg, std::string mag, int exp) {
  StripLeadingZeros(&mag);
  if (mag == "0") return Dec{};
  const size_t last = mag.find_last_not_of('0');
  exp += static_cast<int>(mag.size() - 1 - last);
  mag.resize(last + 1);
  return Dec{neg, std::move(mag), exp};
}

bool IsZero(const Dec& d) {
  return d.mag == "0";
}
Dec Pow10(int e) {
  return Dec{false, "1", e};
}
Dec Neg(Dec d) {
  if (!IsZero(d)) d.neg = !d.neg;
  return d;
}

int CmpMag(const Dec& a, const Dec& b) {
  if (IsZero(a) || IsZero(b)) return IsZero(a) == IsZero(b) ? 0 : (IsZero(a) ? -1 : 1);
  const long oa = static_cast<long>(a.mag.size()) + a.exp;
  const long ob = static_cast<long>(b.mag.size()) + b.exp;
  if (oa != ob) return oa < ob ? -1 : 1;
  const size_t n = std::max(a.mag.size(), b.mag.size());
  for (size_t i = 0; i < n; ++i) {
    const char da = i < a.mag.size() ? a.mag[i] : '0';
    const char db = i < b.mag.size() ? b.mag[i] : '0';
    if (da != db) return da < db ? -1 : 1;
  }
  return 0;
}

int Cmp(const Dec& a, const Dec& b) {
  if (a.neg != b.neg) return a.neg ? -1 : 1;
  const int c = CmpMag(a, b);
  return a.neg ? -c : c;
}

// |d| as an integer count of 10^e units (e <= d.exp unless d is zero).
std::string Scaled(const Dec& d, int e) {
  if (IsZero(d)) return "0";
  return d.mag + std::string(static_cast<size_t>(d.exp - e), '0');
}

int MinExp(const Dec& a, const Dec& b) {
  if (IsZero(a)) return b.exp;
  if (IsZero(b)) return a.exp;
  return std::min(a.exp, b.exp);
}

Dec Add(const Dec& a, const Dec& b) {
  const int e = MinExp(a, b);
  const std::string x = Scaled(a, e), y = Scaled(b, e);
  if (a.neg == b.neg) return MakeDec(a.neg, AddInt(x, y), e);
  if (CmpInt(x, y) >= 0) return MakeDec(a.neg, SubInt(x, y), e);
  return MakeDec(b.neg, SubInt(y, x), e);
}

// |x| mod s, s > 0. With x = X*10^a and s = S*10^b, S below 10^9 (the common case: S is 1 for
// the power-of-ten steps of plain decimals), without writing out long scaled numbers:
//   a >= b: 10^b * (X * 10^(a-b) mod S);
//   a < b, j = b-a: X mod S*10^j = (X div 10^j mod S) * 10^j + X mod 10^j.
Dec Mod(const Dec& x, const Dec& s) {
  if (IsZero(x)) return x;
  if (s.mag.size() > 9) {
    const int e = std::min(x.exp, s.exp);
    return MakeDec(false, ModInt(Scaled(x, e), Scaled(s, e)), e);
  }
  uint64_t m = 0;
  for (char ch : s.mag) m = m * 10 + static_cast<uint64_t>(ch - '0');
  auto mod = [m](std::string_view digits) {
    uint64_t r = 0;
    for (char ch : digits) r = (r * 10 + static_cast<uint64_t>(ch - '0')) % m;
    return r;
  };
  if (x.exp >= s.exp) {
    uint64_t r = mod(x.mag), p = 10 % m;
    for (int n = x.exp - s.exp; n > 0; n >>= 1, p = p * p % m) {  // r * 10^(a-b) mod S
      if (n & 1) r = r * p % m;
    }
    return MakeDec(false, std::to_string(r), s.exp);
  }
  const size_t j = static_cast<size_t>(s.exp - x.exp);
  if (j >= x.mag.size()) return Dec{false, x.mag, x.exp};  // |x| < 10^b <= s
  const std::string_view head = std::string_view(x.mag).substr(0, x.mag.size() - j);
  return MakeDec(false, std::to_string(mod(head)) + x.mag.substr(x.mag.size() - j), x.exp);
}

// The smallest multiple of s > 0 that is >= x >= 0.
Dec CeilMultiple(const Dec& x, const Dec& s) {
  const Dec r = Mod(x, s);
  if (IsZero(r)) return x;
  return Add(Add(x, Neg(r)), s);
}

bool IsMultiple(const Dec& v, const Dec& m) {
  return IsZero(Mod(v, m));
}

// -?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?
StatusOr<Dec> ParseDec(std::string_view text) {
  auto bad = [&] { return InvalidArgumentError("not a decimal number: \"", text, "\""); };
  size_t i = 0;
  const bool neg = i < text.size() && text[i] == '-';
  if (neg) ++i;
  std::string digits;
  int exp = 0;
  const size_t int_start = i;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') digits.push_back(text[i++]);
  if (i == int_start) return bad();
  if (i < text.size() && text[i] == '.') {
    const size_t frac_start = ++i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') digits.push_back(text[i++]);
    if (i == frac_start) return bad();
    exp = -static_cast<int>(i - frac_start);
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    const bool eneg = i < text.size() && text[i] == '-';
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
    const size_t exp_start = i;
    long e = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      e = e * 10 + (text[i++] - '0');
      if (e > kMaxExponent) return InvalidArgumentError("exponent out of range: \"", text, "\"");
    }
    if (i == exp_start) return bad();
    exp += static_cast<int>(eneg ? -e : e);
  }
  if (i != text.size()) return bad();
  if (digits.size() > kMaxNumberChars + 2 * kMaxExponent)
    return InvalidArgumentError("too many digits: \"", text.substr(0, 20), "...\"");
  return MakeDec(neg, std::move(digits), exp);
}

struct Bound {
  Dec value;
  bool strict = false;
};

// Bounds on a magnitude: the value's own bounds for non-negative texts, the mirrored ones
// (x = -v in [-max, -min]) for texts with a minus sign.
struct Side {
  std::optional<Bound> lo, hi;
};

class NumberTemplate final : public GrammarTemplate {
 public:
  NumberTemplate(bool integer, Side side, std::optional<Dec> multiple_of)
      : integer_(integer), pos_(std::move(side)), m_(std::move(multiple_of)) {
    if (pos_.hi) neg_.lo = Bound{Neg(pos_.hi->value), pos_.hi->strict};
    if (pos_.lo) neg_.hi = Bound{Neg(pos_.lo->value), pos_.lo->strict};
    if (m_) {
      // m's mantissa is not a multiple of 10, so at most one of these is non-zero.
      const int cap = static_cast<int>(m_->mag.size()) * 4;
      v2_ = Valuation(m_->mag, 2, cap);
      v5_ = Valuation(m_->mag, 5, cap);
    }
    Intern("");
  }

  StatusOr<std::vector<GrammarSeq>> Expand(Grammar* g, uint32_t payload) override {
    const std::string text = texts_[payload];  // copy: Intern below may reallocate
    std::vector<GrammarSeq> alts;
    if (Satisfies(text)) alts.push_back({});
    if (text.size() >= kMaxNumberChars) return alts;
    const bool neg = !text.empty() && text[0] == '-';
    const std::string_view body = std::string_view(text).substr(neg ? 1 : 0);
    const bool has_dot = body.find('.') != std::string_view::npos;
    for (char c : std::string_view("-0123456789.")) {
      if (c == '-' && !text.empty()) continue;
      if (c == '.' && (integer_ || has_dot || body.empty())) continue;
      if (c >= '0' && c <= '9' && body == "0") continue;  // no leading zeros
      std::string next = text + c;
      if (!Viable(next)) continue;
      alts.push_back({g->Char(static_cast<char32_t>(c)), Grammar::Lazy(self_, Intern(next))});
    }
    return alts;
  }

  std::string Describe(uint32_t payload) const override {
    return "number{" + texts_[payload] + "}";
  }

  void set_self(uint32_t id) { self_ = id; }

 private:
  uint32_t Intern(const std::string& text) {
    auto it = index_.find(text);
    if (it != index_.end()) return it->second;
    const uint32_t id = static_cast<uint32_t>(texts_.size());
    texts_.push_back(text);
    index_.emplace(text, id);
    return id;
  }

  // The text is a whole number whose value satisfies every bound.
  bool Satisfies(std::string_view text) const {
    if (text.empty() || text.back() < '0' || text.back() > '9') return false;  // "", "-", "1."
    StatusOr<Dec> v = ParseDec(text);
    if (!v.ok()) return false;
    if (pos_.lo) {
      const int c = Cmp(*v, pos_.lo->value);
      if (c < 0 || (c == 0 && pos_.lo->strict)) return false;
    }
    if (pos_.hi) {
      const int c = Cmp(*v, pos_.hi->value);
      if (c > 0 || (c == 0 && pos_.hi->strict)) return false;
    }
    return !m_ || IsMultiple(*v, *m_);
  }

  // lcm(m, 10^-d): the spacing of the values with at most d fraction digits (that are multiples
  // of m). With m = M*10^e, M not a multiple of 10, and e < -d: M/gcd(M, 10^(-d-e)) * 10^-d.
  Dec Step(int d) const {
    if (!m_) return Pow10(-d);
    if (m_->exp >= -d) return *m_;
    const int j = -d - m_->exp;
    const int a = std::min(v2_, j), b = std::min(v5_, j);
    std::string mag = m_->mag;  // M / (2^a 5^b) = M * 5^a * 2^b / 10^(a+b)
    for (int i = 0; i < a; ++i) mag = MulSmall(mag, 5);
    for (int i = 0; i < b; ++i) mag = MulSmall(mag, 2);
    return MakeDec(false, std::move(mag), -d - a - b);
  }

  // Whether [a, b) (magnitudes, 0 <= a < b) holds a multiple of `step` within the side's bounds.
  static bool Hit(const Side& side, const Dec& a, const Dec& b, const Dec& step) {
    const Dec* low = &a;
    bool low_strict = false;
    if (side.lo) {
      const int c = Cmp(side.lo->value, a);
      if (c >= 0) low_strict = side.lo->strict;
      if (c > 0) low = &side.lo->value;
    }
    const Dec* high = &b;
    bool high_closed = false;
    if (side.hi && Cmp(side.hi->value, b) < 0) {
      high = &side.hi->value;
      high_closed = !side.hi->strict;
    }
    Dec c = CeilMultiple(*low, step);
    if (low_strict && Cmp(c, *low) == 0) c = Add(c, step);
    const int cmp = Cmp(c, *high);
    return cmp < 0 || (cmp == 0 && high_closed);
  }

  // Some completion of `text` (a syntactically valid prefix) within kMaxNumberChars characters
  // satisfies every bound.
  bool Viable(const std::string& text) const {
    if (text.size() > kMaxNumberChars) return false;
    const bool neg = !text.empty() && text[0] == '-';
    const std::string_view body = std::string_view(text).substr(neg ? 1 : 0);
    if (body.empty()) {
      if (text.size() >= kMaxNumberChars) return false;
      for (char c = '0'; c <= '9'; ++c) {
        if (Viable(text + c)) return true;
      }
      return false;
    }
    const Side& side = neg ? neg_ : pos_;
    const int r = static_cast<int>(kMaxNumberChars - text.size());
    const size_t dot = body.find('.');
    if (dot == std::string_view::npos) {
      Dec a = MakeDec(false, std::string(body), 0);
      Dec b = MakeDec(false, AddInt(body, "1"), 0);
      const int kmax = body == "0" ? 0 : r;
      for (int k = 0; k <= kmax; ++k, ++a.exp, ++b.exp) {
        if (side.hi) {  // the intervals only grow: none further can hold a value below max
          const int c = Cmp(a, side.hi->value);
          if (c > 0 || (c == 0 && side.hi->strict)) break;
        }
        if (side.lo && Cmp(b, side.lo->value) <= 0) continue;
        const int d = integer_ || r - k < 2 ? 0 : r - k - 1;
        if (Hit(side, a, b, Step(d))) return true;
      }
      return false;
    }
    const std::string_view frac = body.substr(dot + 1);
    const int d = static_cast<int>(frac.size());
    if (d == 0 && r == 0) return false;
    std::string digits(body.substr(0, dot));
    digits += frac;
    const Dec a = MakeDec(false, std::move(digits), -d);
    const Dec b = Add(a, Pow10(-d));
    return Hit(side, a, b, Step(d + r));
  }

  const bool integer_;
  Side pos_, neg_;
  const std::optional<Dec> m_;
  int v2_ = 0, v5_ = 0;
  uint32_t self_ = 0;
  std::vector<std::string> texts_;
  std::unordered_map<std::string, uint32_t> index_;
};

// -?(0|[1-9][0-9]*)(\.[0-9]+)?
uint32_t AddPlainNumberRule(Grammar* g, bool integer) {
  const GrammarElem digit = g->Chars({{'0', '9'}});
  const uint32_t digits0 = g->Repeat({digit}, 0, -1, "digits");
  const uint32_t int_part =
      g->Alternatives({{g->Char('0')}, {g->Chars({{'1', '9'}}), Grammar::Ref(digits0)}}, "int");
  const uint32_t sign = g->Alternatives({{}, {g->Char('-')}}, "sign");
  GrammarSeq seq = {Grammar::Ref(sign), Grammar::Ref(int_part)};
  if (!integer) {
    const uint32_t digits1 = g->Repeat({digit}, 1, -1, "digits");
    seq.push_back(
        Grammar::Ref(g->Alternatives({{}, {g->Char('.'), Grammar::Ref(digits1)}}, "frac")));
  }
  return g->AddRule(integer ? "integer" : "number", {std::move(seq)});
}

StatusOr<std::optional<Dec>> ParseBound(const std::optional<std::string>& text,
                                        std::string_view name) {
  if (!text) return std::optional<Dec>();
  StatusOr<Dec> d = ParseDec(*text);
  if (!d.ok()) return d.status().WithContext(name);
  return std::optional<Dec>(std::move(d).value());
}

}  // namespace

StatusOr<uint32_t> AddNumberRule(Grammar* grammar, const NumberBounds& bounds) {
  if (!bounds.minimum && !bounds.maximum && !bounds.exclusive_minimum &&
      !bounds.exclusive_maximum && !bounds.multiple_of) {
    return AddPlainNumberRule(grammar, bounds.integer);
  }
  POCKET_ASSIGN_OR_RETURN(std::optional<Dec> min, ParseBound(bounds.minimum, "minimum"));
  POCKET_ASSIGN_OR_RETURN(std::optional<Dec> max, ParseBound(bounds.maximum, "maximum"));
  POCKET_ASSIGN_OR_RETURN(std::optional<Dec> xmin,
                          ParseBound(bounds.exclusive_minimum, "exclusiveMinimum"));
  POCKET_ASSIGN_OR_RETURN(std::optional<Dec> xmax,
                          ParseBound(bounds.exclusive_maximum, "exclusiveMaximum"));
  POCKET_ASSIGN_OR_RETURN(std::optional<Dec> m, ParseBound(bounds.multiple_of, "multipleOf"));
  if (m && (m->neg || IsZero(*m)))
    return InvalidArgumentError("multipleOf: must be positive, not ", *bounds.multiple_of);
  // The tighter of each pair; at equal values the exclusive one.
  Side side;
  if (min) side.lo = Bound{*min, false};
  if (xmin && (!side.lo || Cmp(*xmin, side.lo->value) >= 0)) side.lo = Bound{*xmin, true};
  if (max) side.hi = Bound{*max, false};
  if (xmax && (!side.hi || Cmp(*xmax, side.hi->value) <= 0)) side.hi = Bound{*xmax, true};
  auto t = std::make_unique<NumberTemplate>(bounds.integer, std::move(side), std::move(m));
  NumberTemplate* raw = t.get();
  const uint32_t id = grammar->AddTemplate(std::move(t));
  raw->set_self(id);
  return grammar->AddRule("number", {{Grammar::Lazy(id, 0)}});
}

}  // namespace pocket
