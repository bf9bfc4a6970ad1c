// Bounded JSON number rules against an independent oracle (values scaled to integers of 10^-9),
// on grids of candidate texts; prefix feeding; random walks that must never reach a dead end.
#include "generate/json_number.h"

#include <gtest/gtest.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <regex>
#include <set>

#include "base/str.h"

namespace pocket {
namespace {

constexpr int64_t kScale = 1'000'000'000;  // the oracle's unit: 10^-9

// The exact value of a plain decimal text in units of 10^-9; nullopt when it has more than nine
// fraction digits or is too large (the grids never need either).
std::optional<int64_t> Scaled(std::string_view text) {
  static const std::regex kPlain("-?[0-9]+(\\.[0-9]+)?");
  if (!std::regex_match(text.begin(), text.end(), kPlain)) return std::nullopt;
  const bool neg = text[0] == '-';
  if (neg) text.remove_prefix(1);
  const size_t dot = text.find('.');
  const std::string_view ip = text.substr(0, dot);
  std::string_view fp = dot == std::string_view::npos ? "" : text.substr(dot + 1);
  while (fp.size() > 9 && fp.back() == '0') fp.remove_suffix(1);  // "0.1234567890"
  if (fp.size() > 9 || ip.size() > 9) return std::nullopt;
  int64_t v = 0;
  for (char c : ip) v = v * 10 + (c - '0');
  int64_t f = 0;
  for (size_t i = 0; i < 9; ++i) f = f * 10 + (i < fp.size() ? fp[i] - '0' : 0);
  v = v * kScale + f;
  return neg ? -v : v;
}

std::string Canonical(int64_t v) {
  std::string s = v < 0 ? "-" : "";
  const int64_t a = v < 0 ? -v : v;
  s += std::to_string(a / kScale);
  std::string f = std::to_string(a % kScale);
  f = std::string(9 - f.size(), '0') + f;
  while (!f.empty() && f.back() == '0') f.pop_back();
  if (!f.empty()) s += "." + f;
  return s;
}

struct Spec {
  const char* name;
  bool integer;
  const char *min, *max, *xmin, *xmax, *mult;
};

NumberBounds ToBounds(const Spec& s) {
  NumberBounds b;
  b.integer = s.integer;
  if (s.min) b.minimum = s.min;
  if (s.max) b.maximum = s.max;
  if (s.xmin) b.exclusive_minimum = s.xmin;
  if (s.xmax) b.exclusive_maximum = s.xmax;
  if (s.mult) b.multiple_of = s.mult;
  return b;
}

// The limits of json_number.h, on the text: at most 17 significant digits (integer-ending zeros
// of a number without fraction excluded), at most 21 integer digits, at most 5 zeros after "0.".
bool WithinLimits(std::string_view text) {
  if (!text.empty() && text[0] == '-') text.remove_prefix(1);
  const size_t dot = std::min(text.find('.'), text.size());
  const std::string_view ip = text.substr(0, dot);
  const std::string_view fp = dot < text.size() ? text.substr(dot + 1) : "";
  if (ip.size() > 21) return false;
  if (ip == "0") {
    const size_t zeros = std::min(fp.find_first_not_of('0'), fp.size());
    return zeros <= 5 && fp.size() - zeros <= 17;
  }
  if (dot == text.size()) return ip.find_last_not_of('0') + 1 <= 17;
  return ip.size() + fp.size() <= 17;
}

// The oracle: JSON number syntax without exponent within the limits, then exact bounds on the
// scaled value.
bool Oracle(const Spec& s, std::string_view text) {
  static const std::regex kNumber("-?(0|[1-9][0-9]*)(\\.[0-9]+)?");
  if (!std::regex_match(text.begin(), text.end(), kNumber)) return false;
  if (!WithinLimits(text)) return false;
  if (s.integer && text.find('.') != std::string_view::npos) return false;
  const std::optional<int64_t> v = Scaled(text);
  EXPECT_TRUE(v.has_value()) << text;
  if (!v) return false;
  if (s.min && *v < *Scaled(s.min)) return false;
  if (s.max && *v > *Scaled(s.max)) return false;
  if (s.xmin && *v <= *Scaled(s.xmin)) return false;
  if (s.xmax && *v >= *Scaled(s.xmax)) return false;
  if (s.mult && *v % *Scaled(s.mult) != 0) return false;
  return true;
}

constexpr Spec kSpecs[] = {
    {"min0", false, "0", nullptr, nullptr, nullptr, nullptr},
    {"max10", false, nullptr, "10", nullptr, nullptr, nullptr},
    {"range", false, "-1.5", "2.25", nullptr, nullptr, nullptr},
    {"xrange", false, nullptr, nullptr, "-1.5", "2.25", nullptr},
    {"mixed", false, "-3", nullptr, nullptr, "3", nullptr},
    {"int_range", true, "-7", "12", nullptr, nullptr, nullptr},
    {"int_xrange", true, nullptr, nullptr, "-7", "12", nullptr},
    {"int_frac_bounds", true, "-2.5", "3.5", nullptr, nullptr, nullptr},
    {"int_min_only", true, "-3.5", nullptr, nullptr, nullptr, nullptr},
    {"mult2", false, "-10", "10", nullptr, nullptr, "2"},
    {"mult_half", false, "-3", "3", nullptr, nullptr, "0.5"},
    {"mult_cent", false, "-1", "1", nullptr, nullptr, "0.01"},
    {"mult_e4", false, "-0.01", "0.01", nullptr, nullptr, "0.0001"},
    {"mult_1_5", false, "-10", "10", nullptr, nullptr, "1.5"},
    {"mult_irregular", false, "-2", "2", nullptr, nullptr, "0.123456789"},
    {"mult_only", false, nullptr, nullptr, nullptr, nullptr, "0.25"},
    {"mult_excl", false, nullptr, nullptr, "-3", "3", "1.5"},
    {"int_mult_1_5", true, "-20", "20", nullptr, nullptr, "1.5"},
    {"int_mult_quarter", true, "-5", "5", nullptr, nullptr, "0.25"},
    {"int_only_mult", true, nullptr, nullptr, nullptr, nullptr, "3"},
    {"neg_range", false, "-20", "-3.5", nullptr, nullptr, nullptr},
    {"neg_xrange", false, nullptr, nullptr, "-20", "-3.5", nullptr},
    {"neg_int", true, "-25", "-10", nullptr, nullptr, nullptr},
    {"max_neg_only", false, nullptr, "-0.5", nullptr, nullptr, nullptr},
    {"min_eq_max", false, "1.5", "1.5", nullptr, nullptr, nullptr},
    {"int_min_eq_max", true, "-7", "-7", nullptr, nullptr, nullptr},
    {"zero_only", false, "0", "0", nullptr, nullptr, nullptr},
    {"tiny_open", false, nullptr, "0.0001", "0", nullptr, nullptr},
    {"both_min_equal", false, "1", nullptr, "1", nullptr, nullptr},
    {"xmin_tighter", false, "1", nullptr, "2", nullptr, nullptr},
    {"min_tighter", false, "3", "4", "2", "5", nullptr},
    {"empty", false, "5", "4", nullptr, nullptr, nullptr},
    {"empty_excl", false, nullptr, nullptr, "2", "2", nullptr},
    {"empty_mult", false, "2.5", "3.5", nullptr, nullptr, "2"},
    {"empty_int", true, "0.2", "0.8", nullptr, nullptr, nullptr},
    {"empty_irregular", false, "0.2", "0.24", nullptr, nullptr, "0.123456789"},
};

std::vector<std::string> Candidates() {
  std::set<int64_t> values;
  for (int64_t k = -140; k <= 140; ++k) values.insert(k * kScale / 4);
  for (int64_t k = -300; k <= 300; ++k) values.insert(k * kScale / 100);
  for (const char* m : {"2", "0.5", "0.01", "0.0001", "1.5", "0.123456789", "0.25", "3"}) {
    for (int64_t k = -45; k <= 45; ++k) values.insert(k * *Scaled(m));
  }
  for (const Spec& s : kSpecs) {
    for (const char* b : {s.min, s.max, s.xmin, s.xmax}) {
      if (!b) continue;
      for (int64_t d : {0, 1, 100'000, 10'000'000, 1'000'000'000}) {
        values.insert(*Scaled(b) + d);
        values.insert(*Scaled(b) - d);
      }
    }
  }
  std::vector<std::string> out;
  for (int64_t v : values) {
    const std::string c = Canonical(v);
    out.push_back(c);
    out.push_back(c.find('.') == std::string::npos ? c + ".0" : c + "0");  // not canonical
  }
  for (const char* s : {"-0", "-0.0", "0.00", "00", "01", "-01", "", "-", ".5", "-.5", "1.", "1e5",
                        "--1", "+1", "1.5.", "0x1", " 1"}) {
    out.push_back(s);
  }
  return out;
}

std::unique_ptr<Grammar> MakeGrammar(const NumberBounds& b) {
  auto g = std::make_unique<Grammar>();
  StatusOr<uint32_t> rule = AddNumberRule(g.get(), b);
  EXPECT_TRUE(rule.ok()) << rule.status().ToString();
  if (!rule.ok()) return nullptr;
  g->SetRoot(*rule);
  EXPECT_TRUE(g->Check().ok());
  return g;
}

bool Accepts(Grammar* g, std::string_view text) {
  Recognizer r(g);
  StatusOr<bool> ok = r.Matches(text);
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  return ok.ok() && *ok;
}

// The dot first: completion searches then prefer fractions, whose intervals narrow.
constexpr std::string_view kAlphabet = ".0123456789-";

// Whether some completion of `prefix` within `depth` more characters is a whole number: a depth
// first search over the characters the recognizer allows, at most `*budget` nodes.
bool CanComplete(Grammar* g, std::string* prefix, int depth, int* budget) {
  if (--*budget < 0) return false;
  Recognizer r(g);
  StatusOr<bool> fed = r.Feed(*prefix);
  if (!fed.ok() || !*fed) return false;
  if (r.Complete()) return true;
  if (depth == 0) return false;
  std::vector<char> next;
  for (char c : kAlphabet) {
    StatusOr<bool> p = r.Probe(std::string(1, c));
    if (p.ok() && *p) next.push_back(c);
  }
  for (char c : next) {
    prefix->push_back(c);
    const bool ok = CanComplete(g, prefix, depth - 1, budget);
    prefix->pop_back();
    if (ok) return true;
  }
  return false;
}

// Whether always taking the first allowed character of kAlphabet completes `prefix` within
// `depth` more characters: one recognizer, so cheap on long numbers.
bool GreedyCompletes(Grammar* g, const std::string& prefix, int depth) {
  Recognizer r(g);
  StatusOr<bool> fed = r.Feed(prefix);
  if (!fed.ok() || !*fed) return false;
  for (int i = 0; i < depth && !r.Complete(); ++i) {
    bool moved = false;
    for (char c : kAlphabet) {
      fed = r.Feed(std::string(1, c));
      if (!fed.ok()) return false;
      if ((moved = *fed)) break;
    }
    if (!moved) return false;
  }
  return r.Complete();
}

// Random walks: every character the recognizer allows must lead somewhere that can still finish
// within `depth` more characters (checked at every `check_every`-th step: long walks are slow).
void RandomWalks(Grammar* g, const std::string& name, int walks, size_t max_len, int depth,
                 size_t check_every = 1) {
  std::mt19937 rng(12345);
  for (int w = 0; w < walks; ++w) {
    std::string text;
    Recognizer r(g);
    while (true) {
      std::vector<char> allowed;
      for (char c : kAlphabet) {
        StatusOr<bool> p = r.Probe(std::string(1, c));
        ASSERT_TRUE(p.ok());
        if (*p) allowed.push_back(c);
      }
      for (char c : allowed) {
        if (text.size() % check_every != 0) break;
        std::string probe = text + c;
        int shallow = 40, deep = 5000;  // cheap searches first
        EXPECT_TRUE(CanComplete(g, &probe, std::min(depth, 3), &shallow) ||
                    GreedyCompletes(g, probe, depth) || CanComplete(g, &probe, depth, &deep))
            << name << ": dead end after " << probe;
      }
      if (allowed.empty()) {
        EXPECT_TRUE(text.empty() || r.Complete()) << name << ": stuck at " << text;
        break;
      }
      if ((r.Complete() && rng() % 4 == 0) || text.size() >= max_len) break;
      const char c = allowed[rng() % allowed.size()];
      text.push_back(c);
      StatusOr<bool> fed = r.Feed(std::string(1, c));
      ASSERT_TRUE(fed.ok() && *fed);
    }
    EXPECT_TRUE(r.Complete() || text.empty() || text.size() >= max_len)
        << name << ": stopped at " << text;
  }
}

TEST(JsonNumber, PlainRuleIsStatic) {
  for (bool integer : {false, true}) {
    NumberBounds b;
    b.integer = integer;
    auto g = MakeGrammar(b);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->num_templates(), 0u);
    const Spec spec{"plain", integer, nullptr, nullptr, nullptr, nullptr, nullptr};
    for (const std::string& t : Candidates()) {
      EXPECT_EQ(Accepts(g.get(), t), Oracle(spec, t)) << (integer ? "integer " : "") << t;
    }
    // At most 17 significant digits (what a double holds): no run of 30 digits.
    EXPECT_TRUE(Accepts(g.get(), "12345678901234567"));
    EXPECT_FALSE(Accepts(g.get(), "123456789012345678901234567890"));
  }
}

TEST(JsonNumber, GridMatchesOracle) {
  const std::vector<std::string> candidates = Candidates();
  for (const Spec& s : kSpecs) {
    auto g = MakeGrammar(ToBounds(s));
    ASSERT_NE(g, nullptr);
    int accepted = 0;
    for (const std::string& t : candidates) {
      const bool want = Oracle(s, t);
      ASSERT_EQ(Accepts(g.get(), t), want) << s.name << ": " << t;
      if (!want) continue;
      ++accepted;
      Recognizer r(g.get());  // every prefix of a valid number can be fed
      for (char c : t) {
        StatusOr<bool> fed = r.Feed(std::string(1, c));
        ASSERT_TRUE(fed.ok() && *fed) << s.name << ": " << t;
      }
      EXPECT_TRUE(r.Complete());
    }
    if (std::string_view(s.name).starts_with("empty")) {
      EXPECT_EQ(accepted, 0) << s.name;
      Recognizer r(g.get());
      for (char c : kAlphabet) {
        StatusOr<bool> p = r.Probe(std::string(1, c));
        EXPECT_TRUE(p.ok() && !*p) << s.name << ": allows " << c;
      }
    } else {
      EXPECT_GT(accepted, 0) << s.name;
    }
  }
}

TEST(JsonNumber, NoDeadEnds) {
  for (const Spec& s : kSpecs) {
    auto g = MakeGrammar(ToBounds(s));
    ASSERT_NE(g, nullptr);
    RandomWalks(g.get(), s.name, 25, 40, 40);
  }
}

// The prefixes the rule allows, up to `len` characters (breadth first over Probe).
std::set<std::string> AllowedPrefixes(Grammar* g, size_t len) {
  std::set<std::string> out;
  std::vector<std::string> frontier = {""};
  for (size_t n = 0; n < len; ++n) {
    std::vector<std::string> next;
    for (const std::string& p : frontier) {
      Recognizer r(g);
      EXPECT_TRUE(*r.Feed(p));
      for (char c : kAlphabet) {
        if (*r.Probe(std::string(1, c))) next.push_back(p + c);
      }
    }
    out.insert(next.begin(), next.end());
    frontier = std::move(next);
  }
  return out;
}

// With a step (multipleOf or integer) and both ends bounded the values are finitely many, so the
// exact set of short prefixes is known: the rule must allow precisely those (no prefix that
// cannot finish, none missing).
void CheckExactPrefixes(const Spec& s, const std::string& name) {
  constexpr size_t kLen = 6;
  const int64_t step = s.mult ? *Scaled(s.mult) : kScale;
  std::set<std::string> want;
  const int64_t lo = *Scaled(s.min ? s.min : s.xmin), hi = *Scaled(s.max ? s.max : s.xmax);
  for (int64_t k = lo / step - 2; k <= hi / step + 2; ++k) {
    std::string t = Canonical(k * step);
    if (!Oracle(s, t)) continue;
    if (!s.integer) {  // trailing zeros are allowed: "3.000", "1.500"
      if (t.find('.') == std::string::npos) t += '.';
      t.resize(std::max(t.size(), kLen), '0');
    }
    for (size_t n = 1; n <= std::min(kLen, t.size()); ++n) want.insert(t.substr(0, n));
    if (k == 0) {  // "-0" is zero too
      for (size_t n = 1; n <= std::min(kLen, t.size() + 1); ++n)
        want.insert(("-" + t).substr(0, n));
    }
  }
  auto g = MakeGrammar(ToBounds(s));
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(AllowedPrefixes(g.get(), kLen), want) << name;
}

TEST(JsonNumber, ExactPrefixesOfFiniteSets) {
  int checked = 0;
  for (const Spec& s : kSpecs) {
    if (!(s.min || s.xmin) || !(s.max || s.xmax) || !(s.mult || s.integer)) continue;
    CheckExactPrefixes(s, s.name);
    ++checked;
  }
  EXPECT_GE(checked, 10);
  // Random combinations.
  const char* values[] = {"-30", "-12.5", "-7",  "-3.25", "-1", "-0.5", "-0.001",
                          "0",   "0.001", "0.3", "0.5",   "1",  "1.75", "2",
                          "3",   "7.5",   "10",  "11",    "25"};
  const char* steps[] = {"2",           "0.5", "0.01", "0.0001", "1.5",
                         "0.123456789", "3",   "0.25", "7",      "0.3"};
  std::mt19937 rng(7);
  auto pick = [&] { return values[rng() % std::size(values)]; };
  for (int i = 0; i < 150; ++i) {
    Spec s{"random", rng() % 3 == 0, nullptr, nullptr, nullptr, nullptr, nullptr};
    (rng() % 2 ? s.min : s.xmin) = pick();
    (rng() % 2 ? s.max : s.xmax) = pick();
    if (!s.integer || rng() % 2) s.mult = steps[rng() % std::size(steps)];
    CheckExactPrefixes(
        s, StrCat("integer=", s.integer, " min=", s.min ? s.min : "-",
                  " xmin=", s.xmin ? s.xmin : "-", " max=", s.max ? s.max : "-",
                  " xmax=", s.xmax ? s.xmax : "-", " multipleOf=", s.mult ? s.mult : "-"));
  }
}

TEST(JsonNumber, IntegerWithLargeStep) {
  // Integers that are multiples of 0.123456789 are the multiples of 123456789; here negative.
  NumberBounds b;
  b.integer = true;
  b.multiple_of = "0.123456789";
  b.maximum = "1.75";
  b.exclusive_maximum = "0";
  auto g = MakeGrammar(b);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g.get(), "-123456789"));
  EXPECT_TRUE(Accepts(g.get(), "-246913578"));
  EXPECT_FALSE(Accepts(g.get(), "-12345678"));
  EXPECT_FALSE(Accepts(g.get(), "0"));
  EXPECT_FALSE(Accepts(g.get(), "123456789"));
  // Exactly the prefixes (up to five characters) of some multiple: none is a dead end.
  std::set<std::string> want;
  for (int64_t k = 1; k <= 200000; ++k) {
    std::string t = std::to_string(-k * 123456789);
    for (size_t n = 1; n <= 5; ++n) want.insert(t.substr(0, n));
  }
  EXPECT_EQ(AllowedPrefixes(g.get(), 5), want);
}

TEST(JsonNumber, LargeIntegers) {
  // Bounds may be any decimal; the numbers written keep to 17 significant digits.
  const std::string u64max = "18446744073709551615";
  NumberBounds b;
  b.integer = true;
  b.minimum = "0";
  b.maximum = u64max;
  auto g = MakeGrammar(b);
  ASSERT_NE(g, nullptr);
  EXPECT_FALSE(Accepts(g.get(), u64max));  // 20 significant digits
  EXPECT_FALSE(Accepts(g.get(), "18446744073709551614"));
  EXPECT_TRUE(Accepts(g.get(), "18446744073709551000"));
  EXPECT_FALSE(Accepts(g.get(), "18446744073709552000"));
  EXPECT_TRUE(Accepts(g.get(), "9999999999999999900"));
  EXPECT_FALSE(Accepts(g.get(), "9999999999999999999"));
  EXPECT_TRUE(Accepts(g.get(), "0"));
  EXPECT_FALSE(Accepts(g.get(), "18446744073709551616"));
  EXPECT_FALSE(Accepts(g.get(), "99999999999999999999"));
  EXPECT_FALSE(Accepts(g.get(), "-1"));
  EXPECT_FALSE(Accepts(g.get(), "1.0"));
  RandomWalks(g.get(), "u64", 30, 25, 25);

  NumberBounds x;
  x.exclusive_maximum = u64max;
  x.multiple_of = "5";
  g = MakeGrammar(x);
  ASSERT_NE(g, nullptr);
  EXPECT_FALSE(Accepts(g.get(), u64max));
  EXPECT_TRUE(Accepts(g.get(), "18446744073709551000"));
  EXPECT_FALSE(Accepts(g.get(), "18446744073709551000.0"));  // the zeros count before a fraction
  EXPECT_FALSE(Accepts(g.get(), "18446744073709551610"));
  EXPECT_FALSE(Accepts(g.get(), "18446744073709551611"));
  EXPECT_TRUE(Accepts(g.get(), "-184467440737095510000"));    // 21 digits
  EXPECT_FALSE(Accepts(g.get(), "-1844674407370955100000"));  // 22 digits: |x| >= 1e21
}

// Bounds near and beyond 1e21, the magnitude limit.
TEST(JsonNumber, HugeBounds) {
  const std::string e20 = "1" + std::string(20, '0');
  NumberBounds b;
  b.minimum = e20;
  auto g = MakeGrammar(b);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g.get(), e20));
  EXPECT_FALSE(Accepts(g.get(), e20 + ".5"));  // 22 significant digits
  EXPECT_TRUE(Accepts(g.get(), "15" + std::string(19, '0')));
  EXPECT_TRUE(Accepts(g.get(), "99999999999999999" + std::string(4, '0')));
  EXPECT_FALSE(Accepts(g.get(), "1" + std::string(21, '0')));  // 1e21
  EXPECT_FALSE(Accepts(g.get(), std::string(20, '9')));
  EXPECT_FALSE(Accepts(g.get(), "-" + e20));
  RandomWalks(g.get(), "min1e20", 10, 30, 30);

  NumberBounds eq;
  eq.integer = true;
  eq.minimum = "-" + e20;
  eq.maximum = "-" + e20;
  g = MakeGrammar(eq);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g.get(), "-" + e20));
  EXPECT_FALSE(Accepts(g.get(), e20));
  EXPECT_FALSE(Accepts(g.get(), "-" + e20 + "0"));
  RandomWalks(g.get(), "eq-1e20", 3, 30, 30);

  // Multiples of 1.5 above 1e20: with 21 digits, 17 significant ones N and 4 zeros, those whose
  // N is a multiple of 3.
  NumberBounds m;
  m.exclusive_minimum = e20;
  m.multiple_of = "1.5";
  g = MakeGrammar(m);
  ASSERT_NE(g, nullptr);
  EXPECT_FALSE(Accepts(g.get(), e20));
  EXPECT_TRUE(Accepts(g.get(), "100000000000000020000"));
  EXPECT_FALSE(Accepts(g.get(), "100000000000000010000"));
  EXPECT_TRUE(Accepts(g.get(), "100000000000000050000"));
  EXPECT_FALSE(Accepts(g.get(), e20 + ".5"));
  EXPECT_FALSE(Accepts(g.get(), "100000000000000000001"));
  RandomWalks(g.get(), "mult1.5above1e20", 10, 30, 30);

  // No number is written at or beyond 1e21: such bounds leave nothing.
  for (const char* min : {"1e21", "1e308", "1000000000000000000000"}) {
    NumberBounds none;
    none.minimum = min;
    g = MakeGrammar(none);
    ASSERT_NE(g, nullptr);
    Recognizer r(g.get());
    for (char c : kAlphabet) EXPECT_FALSE(*r.Probe(std::string(1, c))) << min << ": " << c;
  }
}

TEST(JsonNumber, TinyValues) {
  // A non-zero magnitude is at least 1e-6: at most 5 zeros after "0.".
  NumberBounds b;
  b.exclusive_minimum = "0";
  b.maximum = "0.0000001";  // 1e-7: nothing fits
  auto g = MakeGrammar(b);
  ASSERT_NE(g, nullptr);
  Recognizer r(g.get());
  for (char c : kAlphabet) {
    StatusOr<bool> p = r.Probe(std::string(1, c));
    EXPECT_TRUE(p.ok() && !*p) << c;
  }
  b.maximum = "0.000001";  // 1e-6
  g = MakeGrammar(b);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g.get(), *b.maximum));
  EXPECT_TRUE(Accepts(g.get(), "0.0000010"));
  EXPECT_FALSE(Accepts(g.get(), "0.0000005"));
  EXPECT_FALSE(Accepts(g.get(), "0.00000"));  // zero: excluded
  RandomWalks(g.get(), "tiny", 5, kMaxNumberChars, kMaxNumberChars);

  NumberBounds n;
  n.minimum = "0";
  g = MakeGrammar(n);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g.get(), "1." + std::string(16, '5')));
  EXPECT_FALSE(Accepts(g.get(), "1." + std::string(17, '5')));
  EXPECT_TRUE(Accepts(g.get(), "0.00000"));
  EXPECT_FALSE(Accepts(g.get(), "0.000000"));
}

// The shortest round-trip text of `d` in plain decimal (no exponent), as CanonicalJson writes it.
std::string PlainShortest(double d) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  std::string out;
  if (s[0] == '-') {
    out = "-";
    s.erase(0, 1);
  }
  const size_t e = s.find('e');
  const int exp10 = std::stoi(s.substr(e + 1));
  std::string digits = s.substr(0, e);
  if (digits.size() > 1) digits.erase(1, 1);  // the point
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int point = exp10 + 1;  // digits before the point
  if (digits == "0") return "0";
  if (point <= 0) return out + "0." + std::string(static_cast<size_t>(-point), '0') + digits;
  if (point >= static_cast<int>(digits.size()))
    return out + digits + std::string(static_cast<size_t>(point) - digits.size(), '0');
  return out + digits.substr(0, static_cast<size_t>(point)) + "." +
         digits.substr(static_cast<size_t>(point));
}

// Every rule keeps to the limits: 17 significant digits, |x| < 1e21, at most 5 zeros after "0.".
// The plain static rules and the bounded lazy ones agree; a looping model runs out of room.
TEST(JsonNumber, LimitsBoundEveryNumber) {
  const std::vector<std::string> good = {
      "0",
      "-0",
      "0.0",
      "0.00000",
      "12345678901234567",
      "1234567890123456.7",
      "0.12345678901234567",
      "1.5000000000000000",
      "100.25",
      "0.0000012345678901234567",
      "0.000001",
      "123456789012345670000",
      "-1" + std::string(20, '0'),
      "999999999999999990000",
  };
  const std::vector<std::string> bad = {
      "123456789012345678",
      "12345678901234567.0",
      "1234567890123456.78",
      "1.00000000000000000",
      "0.123456789012345678",
      "0.000000",
      "0.0000001",
      "0.00000012",
      "1" + std::string(21, '0'),
      "1234567890123456780",
      "999999999999999999999",
  };
  NumberBounds plain, wide, integer;
  wide.minimum = "-1e400";  // a bounded (lazy) rule; |x| < 1e21 is the tighter bound
  integer.integer = true;
  for (const NumberBounds& bounds : {plain, wide}) {
    auto g = MakeGrammar(bounds);
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->num_templates(), bounds.minimum ? 1u : 0u);
    for (const std::string& t : good) EXPECT_TRUE(Accepts(g.get(), t)) << t;
    for (const std::string& t : bad) EXPECT_FALSE(Accepts(g.get(), t)) << t;
    // How long a run of one character can go on: zeros after "0.", digits of an integer, zeros
    // of a fraction, placeholder zeros.
    auto run = [&](const std::string& prefix, char c) {
      Recognizer r(g.get());
      EXPECT_TRUE(*r.Feed(prefix));
      size_t n = 0;
      while (n < 1000 && *r.Feed(std::string(1, c))) ++n;
      return n;
    };
    EXPECT_EQ(run("0.", '0'), 5u);
    EXPECT_EQ(run("-0.", '0'), 5u);
    EXPECT_EQ(run("1", '1'), 16u);
    EXPECT_EQ(run("1.", '0'), 16u);
    EXPECT_EQ(run("-3", '0'), 20u);
    EXPECT_EQ(run("0.000001", '5'), 16u);
  }
  for (const NumberBounds& bounds : {integer, [] {
                                       NumberBounds b;
                                       b.integer = true;
                                       b.maximum = "1e400";
                                       return b;
                                     }()}) {
    auto g = MakeGrammar(bounds);
    ASSERT_NE(g, nullptr);
    EXPECT_TRUE(Accepts(g.get(), "12345678901234567"));
    EXPECT_TRUE(Accepts(g.get(), "-999999999999999990000"));
    EXPECT_FALSE(Accepts(g.get(), "123456789012345678"));
    EXPECT_FALSE(Accepts(g.get(), "1" + std::string(21, '0')));
    EXPECT_FALSE(Accepts(g.get(), "1.5"));
  }
  // Random doubles of every magnitude around the window: the shortest text of each is accepted
  // exactly when the double lies in it (0, or 1e-6 <= |x| < 1e21).
  auto g_plain = MakeGrammar(plain);
  auto g_wide = MakeGrammar(wide);
  ASSERT_TRUE(g_plain && g_wide);
  std::mt19937_64 rng(99);
  std::uniform_real_distribution<double> mantissa(1.0, 10.0);
  int inside = 0;
  for (int i = 0; i < 3000; ++i) {
    const int e10 = static_cast<int>(rng() % 34) - 10;  // 1e-10 .. 1e23
    double d = mantissa(rng) * std::pow(10.0, e10) * (rng() % 2 ? -1 : 1);
    if (i % 7 == 0) d = std::round(d);  // integers too
    const std::string t = PlainShortest(d);
    const bool want = d == 0 || (std::fabs(d) >= 1e-6 && std::fabs(d) < 1e21);
    inside += want;
    EXPECT_EQ(Accepts(g_plain.get(), t), want) << t;
    if (i % 10 == 0) {
      EXPECT_EQ(Accepts(g_wide.get(), t), want) << t;
    }
  }
  EXPECT_GT(inside, 1500);
  for (double d : {1e-6, -1e-6, 0.1, 9007199254740993.0, 1e20, 999999999999999900000.0,
                   std::nextafter(1e21, 0.0), 0.30000000000000004}) {
    EXPECT_TRUE(Accepts(g_plain.get(), PlainShortest(d))) << PlainShortest(d);
    EXPECT_TRUE(Accepts(g_wide.get(), PlainShortest(d))) << PlainShortest(d);
  }
  for (double d : {1e21, std::nextafter(1e-6, 0.0), 1e-7, 1e308, 5e-324}) {
    EXPECT_FALSE(Accepts(g_plain.get(), PlainShortest(d))) << PlainShortest(d);
    EXPECT_FALSE(Accepts(g_wide.get(), PlainShortest(d))) << PlainShortest(d);
  }
  RandomWalks(g_plain.get(), "plain", 30, kMaxNumberChars, 40);
}

std::optional<NumberConflict> Conflict(const NumberBounds& b) {
  StatusOr<std::optional<NumberConflict>> c = FindNumberConflict(b);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : std::nullopt;
}

// Bounds no number meets are named: the keyword to blame and the bounds involved.
TEST(JsonNumber, ConflictsNameTheBounds) {
  struct Case {
    Spec spec;
    const char* keyword;  // nullptr: no conflict
    const char* reason;
  };
  const Case cases[] = {
      {{"", false, "5", "4", nullptr, nullptr, nullptr},
       "minimum",
       "minimum 5 is greater than maximum 4"},
      {{"", false, nullptr, nullptr, "2", "2", nullptr},
       "exclusiveMinimum",
       "exclusiveMinimum 2 equals exclusiveMaximum 2"},
      {{"", false, "2", nullptr, nullptr, "2", nullptr},
       "exclusiveMaximum",
       "minimum 2 equals exclusiveMaximum 2"},
      {{"", false, "3", "4", "5", nullptr, nullptr},
       "exclusiveMinimum",
       "exclusiveMinimum 5 is greater than maximum 4"},
      {{"", true, "0.2", "0.8", nullptr, nullptr, nullptr},
       "minimum",
       "no integer lies within minimum 0.2 and maximum 0.8"},
      {{"", true, nullptr, nullptr, "1", "2", nullptr},
       "exclusiveMinimum",
       "no integer lies within exclusiveMinimum 1 and exclusiveMaximum 2"},
      {{"", false, "2.5", "3.5", nullptr, nullptr, "2"},
       "multipleOf",
       "no number that is a multiple of 2 lies within minimum 2.5 and maximum 3.5"},
      {{"", true, "0.1", "0.9", nullptr, nullptr, "0.25"},
       "multipleOf",
       "no integer that is a multiple of 0.25 lies within minimum 0.1 and maximum 0.9"},
      {{"", false, "1e21", nullptr, nullptr, nullptr, nullptr},
       "minimum",
       "minimum 1e21 is not below 1e21"},
      {{"", false, nullptr, nullptr, "1000000000000000000000", nullptr, nullptr},
       "exclusiveMinimum",
       "exclusiveMinimum 1000000000000000000000 is not below 1e21"},
      {{"", false, nullptr, nullptr, nullptr, "-1e300", nullptr},
       "exclusiveMaximum",
       "exclusiveMaximum -1e300 is not above -1e21"},
      {{"", false, nullptr, nullptr, "1", "1.000000000000000001", nullptr},
       "exclusiveMinimum",
       "no number pocket writes (17 significant digits, 0 or 1e-6 <= |x|) lies within "
       "exclusiveMinimum 1 and exclusiveMaximum 1.000000000000000001"},
      {{"", false, nullptr, "0.0000001", "0", nullptr, nullptr},
       "exclusiveMinimum",
       "no number pocket writes (17 significant digits, 0 or 1e-6 <= |x|) lies within "
       "exclusiveMinimum 0 and maximum 0.0000001"},
      {{"", false, nullptr, nullptr, "0", "0.000001", nullptr}, "exclusiveMinimum", "no number"},
      {{"", false, "0", "0.0000009", nullptr, nullptr, nullptr}, nullptr, nullptr},  // zero
      {{"", false, "1", "1", nullptr, nullptr, nullptr}, nullptr, nullptr},
      {{"", true, "0.5", "1.5", nullptr, nullptr, nullptr}, nullptr, nullptr},
      {{"", false, nullptr, nullptr, nullptr, nullptr, "0.25"}, nullptr, nullptr},
      {{"", true, nullptr, nullptr, nullptr, nullptr, "0.25"}, nullptr, nullptr},
      {{"", false, "1e20", nullptr, nullptr, nullptr, nullptr}, nullptr, nullptr},
      {{"", false, nullptr, "-999999999999999990000", nullptr, nullptr, nullptr}, nullptr, nullptr},
      {{"", false, nullptr, nullptr, nullptr, nullptr, nullptr}, nullptr, nullptr},
  };
  for (const Case& c : cases) {
    const NumberBounds b = ToBounds(c.spec);
    const std::optional<NumberConflict> got = Conflict(b);
    const std::string what = StrCat(
        "min=", c.spec.min ? c.spec.min : "-", " max=", c.spec.max ? c.spec.max : "-",
        " xmin=", c.spec.xmin ? c.spec.xmin : "-", " xmax=", c.spec.xmax ? c.spec.xmax : "-");
    if (!c.keyword) {
      EXPECT_FALSE(got.has_value()) << what << ": " << got->reason;
      continue;
    }
    ASSERT_TRUE(got.has_value()) << what;
    EXPECT_EQ(got->keyword, c.keyword) << what << ": " << got->reason;
    EXPECT_NE(got->reason.find(c.reason), std::string::npos) << what << ": " << got->reason;
  }
  // Agreement with the rules themselves: a conflict exactly when the rule allows nothing.
  for (const Spec& s : kSpecs) {
    auto g = MakeGrammar(ToBounds(s));
    ASSERT_NE(g, nullptr);
    Recognizer r(g.get());
    bool any = false;
    for (char c : kAlphabet) any = any || *r.Probe(std::string(1, c));
    EXPECT_EQ(Conflict(ToBounds(s)).has_value(), !any) << s.name;
  }
}

TEST(JsonNumber, BadBounds) {
  for (const char* m : {"0", "-1", "0.0", "abc", "1.", ""}) {
    NumberBounds b;
    b.multiple_of = m;
    Grammar g;
    EXPECT_FALSE(AddNumberRule(&g, b).ok()) << m;
  }
  for (const char* v : {"1.", ".5", "--1", "1e", "1x", "+1", "1e5000"}) {
    NumberBounds b;
    b.minimum = v;
    Grammar g;
    EXPECT_FALSE(AddNumberRule(&g, b).ok()) << v;
  }
  NumberBounds e;  // exponents are accepted in bounds
  e.minimum = "1.5e1";
  e.exclusive_maximum = "2E+1";
  Grammar g;
  StatusOr<uint32_t> rule = AddNumberRule(&g, e);
  ASSERT_TRUE(rule.ok());
  g.SetRoot(*rule);
  EXPECT_TRUE(Accepts(&g, "15"));
  EXPECT_TRUE(Accepts(&g, "19.99"));
  EXPECT_FALSE(Accepts(&g, "20"));
  EXPECT_FALSE(Accepts(&g, "14.9"));
}

}  // namespace
}  // namespace pocket
