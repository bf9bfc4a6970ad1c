// Bounded JSON numbers. The lazy rule's payload is the text so far; its expansion asks two exact
// questions: does the text satisfy the bounds (the empty alternative), and does a next character
// keep some completion possible (viability).
//
// Viability. The values reachable from a prefix under the limits of json_number.h (at most 17
// significant digits, at most 21 integer digits, at most 5 zeros after "0."), as magnitudes (a
// negative prefix is checked against the mirrored bounds), form intervals of decimals on a grid:
//   integer part P of L digits (not "0"): for each k >= 0 more integer digits (L+k <= 21),
//     [P*10^k, (P+1)*10^k) on the grid 10^(L+k-17) (17 significant digits in all);
//   integer part "0": zero, and for each z >= 0 leading fraction zeros (z <= 5),
//     [10^-(z+1), 10^-z) on the grid 10^-(z+17);
//   fraction part P with d digits: [P, P + 10^-d) on the grid of the 17 digits the text allows.
// (|x| < 1e21 is one more pair of bounds.) A value on the grid 10^-D that is a multiple of m is a
// multiple of lcm(m, 10^-D), so each interval is asked one question: does it hold a multiple of
// that step within [lower, upper] (ends closed or open)? The smallest multiple at or above the
// lower end answers it. Every decimal here is exact: (sign, digit string, power of ten).
//
// Without the limits (NumberLimits::kNone) a rule checks given texts: it offers every
// syntactically valid next character, and the end where the whole text satisfies the bounds.
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

// 1e21: every magnitude is below it (at most 21 integer digits).
Dec Limit() {
  return Pow10(kMaxIntegerDigits);
}

bool InSide(const Side& side, const Dec& v) {
  if (side.lo) {
    const int c = Cmp(v, side.lo->value);
    if (c < 0 || (c == 0 && side.lo->strict)) return false;
  }
  if (side.hi) {
    const int c = Cmp(v, side.hi->value);
    if (c > 0 || (c == 0 && side.hi->strict)) return false;
  }
  return true;
}

// A whole number text without its sign, -?(0|[1-9][0-9]*)(\.[0-9]+)? syntax given, keeps the
// digit limits of json_number.h (the magnitude limit is a bound, checked with the others).
bool WithinDigitLimits(std::string_view body) {
  const size_t dot = body.find('.');
  const std::string_view ip = body.substr(0, dot);
  if (dot == std::string_view::npos) {
    if (ip.size() > static_cast<size_t>(kMaxIntegerDigits)) return false;
    const size_t first = ip.find_first_not_of('0');
    if (first == std::string_view::npos) return true;  // "0"
    return ip.find_last_not_of('0') - first + 1 <= static_cast<size_t>(kMaxSignificantDigits);
  }
  const std::string_view fp = body.substr(dot + 1);
  if (ip != "0") return ip.size() + fp.size() <= static_cast<size_t>(kMaxSignificantDigits);
  const size_t first = std::min(fp.find_first_not_of('0'), fp.size());
  return first <= static_cast<size_t>(kMaxLeadingFractionZeros) &&
         fp.size() - first <= static_cast<size_t>(kMaxSignificantDigits);
}

class NumberTemplate final : public GrammarTemplate {
 public:
  // With the limits, `side` already holds the bounds |x| < 1e21.
  NumberTemplate(bool integer, Side side, std::optional<Dec> multiple_of, NumberLimits limits)
      : integer_(integer),
        limited_(limits == NumberLimits::kGenerate),
        pos_(std::move(side)),
        m_(std::move(multiple_of)) {
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
    if (limited_ && text.size() >= kMaxNumberChars) return alts;
    const bool neg = !text.empty() && text[0] == '-';
    const std::string_view body = std::string_view(text).substr(neg ? 1 : 0);
    const bool has_dot = body.find('.') != std::string_view::npos;
    for (char c : std::string_view("-0123456789.")) {
      if (c == '-' && !text.empty()) continue;
      if (c == '.' && (integer_ || has_dot || body.empty())) continue;
      if (c >= '0' && c <= '9' && body == "0") continue;  // no leading zeros
      std::string next = text + c;
      if (limited_ && !Viable(next)) continue;
      alts.push_back({g->Char(static_cast<char32_t>(c)), Grammar::Lazy(self_, Intern(next))});
    }
    return alts;
  }

  std::string Describe(uint32_t payload) const override {
    return "number{" + texts_[payload] + "}";
  }

  void set_self(uint32_t id) { self_ = id; }

  // Some number satisfies every bound (and the limits, if kept).
  bool Satisfiable() const {
    if (limited_) return Viable("") || Viable("-");
    return AnyMagnitude(pos_) || AnyMagnitude(neg_);
  }

 private:
  uint32_t Intern(const std::string& text) {
    auto it = index_.find(text);
    if (it != index_.end()) return it->second;
    const uint32_t id = static_cast<uint32_t>(texts_.size());
    texts_.push_back(text);
    index_.emplace(text, id);
    return id;
  }

  // The text is a whole number (within the digit limits, if kept) whose value satisfies every
  // bound.
  bool Satisfies(std::string_view text) const {
    if (text.empty() || text.back() < '0' || text.back() > '9') return false;  // "", "-", "1."
    if (limited_ && !WithinDigitLimits(text.substr(text[0] == '-' ? 1 : 0))) return false;
    StatusOr<Dec> v = ParseDec(text);
    if (!v.ok()) return false;
    return InSide(pos_, *v) && (!m_ || IsMultiple(*v, *m_));
  }

  // lcm(m, 10^-d): the spacing of the values with at most d fraction digits (d < 0: multiples of
  // 10^-d) that are multiples of m. With m = M*10^e, M not a multiple of 10, and e < -d:
  // M/gcd(M, 10^(-d-e)) * 10^-d.
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

  // Without the limits: whether some magnitude within the side (the value's bounds or the mirrored
  // ones) is an integer (`integer`) and a multiple of m. Unbounded above, one is; otherwise
  // [0, max] is searched on the grid of those multiples, or without them on a grid finer than the
  // bounds' digits, so that it holds a value strictly between two different bounds.
  bool AnyMagnitude(const Side& side) const {
    if (!side.hi) return true;
    if (side.hi->value.neg) return false;
    Dec step;
    if (integer_ || m_) {
      step = integer_ ? Step(0) : *m_;
    } else {
      int e = 0;
      for (const std::optional<Bound>* b : {&side.lo, &side.hi}) {
        if (*b && !IsZero((*b)->value)) e = std::min(e, (*b)->value.exp);
      }
      step = Pow10(e - 1);
    }
    return Hit(side, Dec{}, Add(side.hi->value, Pow10(0)), step);
  }

  // Whether a non-zero value written "0." + at least z0 zeros + digits, that is in (0, 10^-z0),
  // satisfies the side: for each count z of leading zeros, [10^-(z+1), 10^-z) on the grid of z
  // + 17 fraction digits.
  bool FractionHit(const Side& side, int z0) const {
    if (side.hi) {  // start where the intervals come below max: hi < 10^o, skip a > hi
      if (side.hi->value.neg || IsZero(side.hi->value)) return false;
      const int o = static_cast<int>(side.hi->value.mag.size()) + side.hi->value.exp;
      z0 = std::max(z0, -o - 1);
    }
    for (int z = z0; z <= kMaxLeadingFractionZeros; ++z) {
      const Dec a = Pow10(-(z + 1)), b = Pow10(-z);
      if (side.lo && Cmp(b, side.lo->value) <= 0) break;  // this and all further are too small
      if (side.hi) {
        const int c = Cmp(a, side.hi->value);
        if (c > 0 || (c == 0 && side.hi->strict)) continue;
      }
      if (Hit(side, a, b, Step(z + kMaxSignificantDigits))) return true;
    }
    return false;
  }

  // Some completion of `text` (a syntactically valid prefix) within the digit limits satisfies
  // every bound.
  bool Viable(const std::string& text) const {
    if (text.size() > kMaxNumberChars) return false;
    const bool neg = !text.empty() && text[0] == '-';
    const std::string_view body = std::string_view(text).substr(neg ? 1 : 0);
    if (body.empty()) {
      for (char c = '0'; c <= '9'; ++c) {
        if (Viable(text + c)) return true;
      }
      return false;
    }
    const Side& side = neg ? neg_ : pos_;
    const size_t dot = body.find('.');
    const std::string_view ip = body.substr(0, dot);
    if (dot == std::string_view::npos) {
      if (ip == "0") return InSide(side, Dec{}) || (!integer_ && FractionHit(side, 0));
      const int len = static_cast<int>(ip.size());
      if (len > kMaxIntegerDigits ||
          ip.find_last_not_of('0') + 1 > static_cast<size_t>(kMaxSignificantDigits))
        return false;
      Dec a = MakeDec(false, std::string(ip), 0);
      Dec b = MakeDec(false, AddInt(ip, "1"), 0);
      for (int k = 0; len + k <= kMaxIntegerDigits; ++k, ++a.exp, ++b.exp) {
        if (side.hi) {  // the intervals only grow: none further can hold a value below max
          const int c = Cmp(a, side.hi->value);
          if (c > 0 || (c == 0 && side.hi->strict)) break;
        }
        if (side.lo && Cmp(b, side.lo->value) <= 0) continue;
        // Fraction digits left (negative: that many integer digits must be zeros).
        const int d = kMaxSignificantDigits - len - k;
        if (Hit(side, a, b, Step(integer_ ? std::min(d, 0) : d))) return true;
      }
      return false;
    }
    const std::string_view frac = body.substr(dot + 1);
    const int d = static_cast<int>(frac.size());
    int max_d;  // the most fraction digits the text may reach
    if (ip == "0") {
      const size_t first = frac.find_first_not_of('0');
      if (first == std::string_view::npos) {  // zero so far: zero itself, or a smaller fraction
        if (d > kMaxLeadingFractionZeros) return false;
        return InSide(side, Dec{}) || FractionHit(side, d);
      }
      if (first > static_cast<size_t>(kMaxLeadingFractionZeros)) return false;
      max_d = static_cast<int>(first) + kMaxSignificantDigits;
    } else {
      max_d = kMaxSignificantDigits - static_cast<int>(ip.size());
    }
    if (std::max(d, 1) > max_d) return false;
    std::string digits(ip);
    digits += frac;
    const Dec a = MakeDec(false, std::move(digits), -d);
    const Dec b = Add(a, Pow10(-d));
    return Hit(side, a, b, Step(max_d));
  }

  const bool integer_;
  const bool limited_;
  Side pos_, neg_;
  const std::optional<Dec> m_;
  int v2_ = 0, v5_ = 0;
  uint32_t self_ = 0;
  std::vector<std::string> texts_;
  std::unordered_map<std::string, uint32_t> index_;
};

// The plain rule, -?(0|[1-9][0-9]*)(\.[0-9]+)? within the digit limits, as a static grammar:
//   number ::= "-"? ( "0" zero-fraction? | [1-9] int_1 )
//   int_k  ::= "" | [0-9] int_{k+1} | "." [0-9]{1,17-k}   (k = 1..16 digits so far)
//   int_17 ::= "0"{0,4}                                    (placeholder zeros, 21 digits in all)
//   zero-fraction ::= "." ( "0"{1,5} | "0"{0,5} [1-9] [0-9]{0,16} )
// With `integer`, no fractions. Without the limits: -?(0|[1-9][0-9]*)(\.[0-9]+)?.
uint32_t AddPlainNumberRule(Grammar* g, bool integer, NumberLimits limits) {
  const GrammarElem digit = g->Chars({{'0', '9'}});
  const GrammarElem zero = g->Char('0');
  const GrammarElem nonzero = g->Chars({{'1', '9'}});
  if (limits == NumberLimits::kNone) {
    GrammarSeq magnitude = {Grammar::Ref(g->Alternatives(
        {{zero}, {nonzero, Grammar::Ref(g->Repeat({digit}, 0, -1, "digits"))}}, "int"))};
    if (!integer) {
      magnitude.push_back(Grammar::Ref(g->Alternatives(
          {{}, {g->Char('.'), Grammar::Ref(g->Repeat({digit}, 1, -1, "digits"))}}, "frac")));
    }
    magnitude.insert(magnitude.begin(),
                     Grammar::Ref(g->Alternatives({{}, {g->Char('-')}}, "sign")));
    return g->AddRule(integer ? "integer" : "number", {std::move(magnitude)});
  }
  constexpr int kSig = kMaxSignificantDigits;
  std::vector<uint32_t> upto(kSig);  // upto[n]: at most n digits
  upto[0] = g->AddRule("digits?", {{}});
  for (size_t n = 1; n < upto.size(); ++n)
    upto[n] = g->AddRule("digits?", {{}, {digit, Grammar::Ref(upto[n - 1])}});
  std::vector<uint32_t> int_k(kSig + 1);
  int_k[kSig] = g->Repeat({zero}, 0, kMaxIntegerDigits - kSig, "zeros");
  for (int k = kSig - 1; k >= 1; --k) {
    std::vector<GrammarSeq> alts = {{}, {digit, Grammar::Ref(int_k[static_cast<size_t>(k) + 1])}};
    if (!integer)
      alts.push_back({g->Char('.'), digit, Grammar::Ref(upto[static_cast<size_t>(kSig - 1 - k)])});
    int_k[static_cast<size_t>(k)] = g->AddRule("int", std::move(alts));
  }
  std::vector<GrammarSeq> magnitude = {{nonzero, Grammar::Ref(int_k[1])}};
  if (integer) {
    magnitude.push_back({zero});
  } else {
    const uint32_t zero_value = g->Repeat({zero}, 1, kMaxLeadingFractionZeros, "zeros");
    const uint32_t leading = g->Repeat({zero}, 0, kMaxLeadingFractionZeros, "zeros");
    const uint32_t zero_fraction = g->AddRule(
        "frac", {{},
                 {g->Char('.'), Grammar::Ref(zero_value)},
                 {g->Char('.'), Grammar::Ref(leading), nonzero, Grammar::Ref(upto[kSig - 1])}});
    magnitude.push_back({zero, Grammar::Ref(zero_fraction)});
  }
  const uint32_t sign = g->Alternatives({{}, {g->Char('-')}}, "sign");
  return g->AddRule(integer ? "integer" : "number",
                    {{Grammar::Ref(sign), Grammar::Ref(g->Alternatives(std::move(magnitude)))}});
}

// A bound with the keyword it came from and its text, for messages.
struct NamedBound {
  Bound bound;
  const char* keyword = "";
  std::string text;
};

struct Prepared {
  std::optional<NamedBound> lo, hi;
  std::optional<Dec> multiple_of;
};

StatusOr<std::optional<Dec>> ParseBound(const std::optional<std::string>& text,
                                        std::string_view name) {
  if (!text) return std::optional<Dec>();
  StatusOr<Dec> d = ParseDec(*text);
  if (!d.ok()) return d.status().WithContext(name);
  return std::optional<Dec>(std::move(d).value());
}

// A bound as messages show it: as given, or in scientific notation when that is long (1e308
// written out).
std::string ShortText(const std::string& text, const Dec& d) {
  if (text.size() <= 24) return text;
  std::string out;  // by push_back and append: GCC 12 misreports -Wrestrict on "-" + ...
  if (d.neg) out.push_back('-');
  out.push_back(d.mag[0]);
  if (d.mag.size() > 1) {
    out.push_back('.');
    out.append(d.mag, 1);
  }
  out.push_back('e');
  out.append(std::to_string(d.exp + static_cast<int>(d.mag.size()) - 1));
  return out;
}

// Parses the bounds and keeps the tighter of each pair (at equal values the exclusive one).
StatusOr<Prepared> Prepare(const NumberBounds& bounds) {
  POCKET_ASSIGN_OR_RETURN(std::optional<Dec> min, ParseBound(bounds.minimum, "minimum"));
  POCKET_ASSIGN_OR_RETURN(std::optional<Dec> max, ParseBound(bounds.maximum, "maximum"));
  POCKET_ASSIGN_OR_RETURN(std::optional<Dec> xmin,
                          ParseBound(bounds.exclusive_minimum, "exclusiveMinimum"));
  POCKET_ASSIGN_OR_RETURN(std::optional<Dec> xmax,
                          ParseBound(bounds.exclusive_maximum, "exclusiveMaximum"));
  Prepared p;
  POCKET_ASSIGN_OR_RETURN(p.multiple_of, ParseBound(bounds.multiple_of, "multipleOf"));
  if (p.multiple_of && (p.multiple_of->neg || IsZero(*p.multiple_of)))
    return InvalidArgumentError("multipleOf: must be positive, not ", *bounds.multiple_of);
  // Field by field: GCC 12 misreports -Wmaybe-uninitialized on an optional of an aggregate.
  auto set = [](std::optional<NamedBound>* slot, const Dec& value, bool strict, const char* keyword,
                const std::string& text) {
    slot->emplace();
    (*slot)->bound.value = value;
    (*slot)->bound.strict = strict;
    (*slot)->keyword = keyword;
    (*slot)->text = ShortText(text, value);
  };
  if (min) set(&p.lo, *min, false, "minimum", *bounds.minimum);
  if (xmin && (!p.lo || Cmp(*xmin, p.lo->bound.value) >= 0))
    set(&p.lo, *xmin, true, "exclusiveMinimum", *bounds.exclusive_minimum);
  if (max) set(&p.hi, *max, false, "maximum", *bounds.maximum);
  if (xmax && (!p.hi || Cmp(*xmax, p.hi->bound.value) <= 0))
    set(&p.hi, *xmax, true, "exclusiveMaximum", *bounds.exclusive_maximum);
  return p;
}

// The user's bounds and, with the limits, -1e21 < x < 1e21, whichever are tighter.
Side MakeSide(const Prepared& p, NumberLimits limits) {
  Side side;
  if (p.lo) side.lo = p.lo->bound;
  if (p.hi) side.hi = p.hi->bound;
  if (limits == NumberLimits::kNone) return side;
  const Dec limit = Limit();
  if (!side.hi || Cmp(limit, side.hi->value) <= 0) side.hi = Bound{limit, true};
  if (!side.lo || Cmp(side.lo->value, Neg(limit)) <= 0) side.lo = Bound{Neg(limit), true};
  return side;
}

bool Unbounded(const NumberBounds& b) {
  return !b.minimum && !b.maximum && !b.exclusive_minimum && !b.exclusive_maximum && !b.multiple_of;
}

}  // namespace

StatusOr<uint32_t> AddNumberRule(Grammar* grammar, const NumberBounds& bounds,
                                 NumberLimits limits) {
  if (Unbounded(bounds)) return AddPlainNumberRule(grammar, bounds.integer, limits);
  POCKET_ASSIGN_OR_RETURN(Prepared p, Prepare(bounds));
  auto t =
      std::make_unique<NumberTemplate>(bounds.integer, MakeSide(p, limits), p.multiple_of, limits);
  NumberTemplate* raw = t.get();
  const uint32_t id = grammar->AddTemplate(std::move(t));
  raw->set_self(id);
  return grammar->AddRule("number", {{Grammar::Lazy(id, 0)}});
}

StatusOr<std::optional<NumberConflict>> FindNumberConflict(const NumberBounds& bounds,
                                                           NumberLimits limits) {
  using Found = std::optional<NumberConflict>;
  if (Unbounded(bounds)) return Found();
  POCKET_ASSIGN_OR_RETURN(Prepared p, Prepare(bounds));
  auto named = [](const NamedBound& b) { return std::string(b.keyword) + " " + b.text; };
  if (p.lo && p.hi) {
    const int c = Cmp(p.lo->bound.value, p.hi->bound.value);
    if (c > 0)
      return Found(
          NumberConflict{p.lo->keyword, named(*p.lo) + " is greater than " + named(*p.hi)});
    if (c == 0 && (p.lo->bound.strict || p.hi->bound.strict))
      return Found(NumberConflict{p.lo->bound.strict ? p.lo->keyword : p.hi->keyword,
                                  named(*p.lo) + " equals " + named(*p.hi) +
                                      ", and an exclusive bound leaves no number between them"});
  }
  const bool limited = limits == NumberLimits::kGenerate;
  const Dec limit = Limit();
  if (limited && p.lo && Cmp(p.lo->bound.value, limit) >= 0) {
    return Found(NumberConflict{p.lo->keyword,
                                named(*p.lo) + " is not below 1e21, the bound on the magnitude " +
                                    "of the numbers pocket writes (no exponent, 21 digits)"});
  }
  if (limited && p.hi && Cmp(p.hi->bound.value, Neg(limit)) <= 0) {
    return Found(NumberConflict{p.hi->keyword,
                                named(*p.hi) + " is not above -1e21, the bound on the magnitude " +
                                    "of the numbers pocket writes (no exponent, 21 digits)"});
  }
  const NumberTemplate t(bounds.integer, MakeSide(p, limits), p.multiple_of, limits);
  if (t.Satisfiable()) return Found();
  std::string range;
  if (p.lo) range = named(*p.lo);
  if (p.hi) range += (range.empty() ? "" : " and ") + named(*p.hi);
  if (!range.empty()) range = " within " + range;
  const char* what = bounds.integer ? "integer" : "number";
  if (p.multiple_of)
    return Found(NumberConflict{
        "multipleOf", std::string("no ") + what + " that is a multiple of " +
                          ShortText(*bounds.multiple_of, *p.multiple_of) + " lies" + range});
  return Found(
      NumberConflict{p.lo ? p.lo->keyword : p.hi->keyword,
                     std::string("no ") + what +
                         (bounds.integer || !limited
                              ? ""
                              : " pocket writes (17 significant digits, 0 or 1e-6 <= |x|)") +
                         " lies" + range});
}

}  // namespace pocket
