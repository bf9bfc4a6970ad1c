// Bounded JSON number rules against an independent oracle (values scaled to integers of 10^-9),
// on grids of candidate texts; prefix feeding; random walks that must never reach a dead end.
#include "generate/json_number.h"

#include <gtest/gtest.h>

#include <cstdint>
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

// The oracle: JSON number syntax without exponent, then exact bounds on the scaled value.
bool Oracle(const Spec& s, std::string_view text) {
  static const std::regex kNumber("-?(0|[1-9][0-9]*)(\\.[0-9]+)?");
  if (!std::regex_match(text.begin(), text.end(), kNumber)) return false;
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
    EXPECT_TRUE(Accepts(g.get(), "123456789012345678901234567890"));
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
  const std::string u64max = "18446744073709551615";
  NumberBounds b;
  b.integer = true;
  b.minimum = "0";
  b.maximum = u64max;
  auto g = MakeGrammar(b);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g.get(), u64max));
  EXPECT_TRUE(Accepts(g.get(), "18446744073709551614"));
  EXPECT_TRUE(Accepts(g.get(), "9999999999999999999"));
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
  EXPECT_TRUE(Accepts(g.get(), "18446744073709551610"));
  EXPECT_TRUE(Accepts(g.get(), "18446744073709551610.0"));
  EXPECT_FALSE(Accepts(g.get(), "18446744073709551611"));
  EXPECT_TRUE(Accepts(g.get(), "-18446744073709551615000"));
}

TEST(JsonNumber, HugeBounds) {
  const std::string e308 = "1" + std::string(308, '0');
  NumberBounds b;
  b.minimum = e308;
  auto g = MakeGrammar(b);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g.get(), e308));
  EXPECT_TRUE(Accepts(g.get(), e308 + ".5"));
  EXPECT_TRUE(Accepts(g.get(), "2" + std::string(308, '0')));
  EXPECT_FALSE(Accepts(g.get(), std::string(308, '9')));
  EXPECT_FALSE(Accepts(g.get(), "-" + e308));
  RandomWalks(g.get(), "min1e308", 2, 330, 330, 60);

  NumberBounds eq;
  eq.integer = true;
  eq.minimum = "-" + e308;
  eq.maximum = "-" + e308;
  g = MakeGrammar(eq);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g.get(), "-" + e308));
  EXPECT_FALSE(Accepts(g.get(), e308));
  EXPECT_FALSE(Accepts(g.get(), "-" + e308 + "0"));
  RandomWalks(g.get(), "eq-1e308", 1, 330, 330, 60);

  NumberBounds m;  // multiples of 1.5 at or above 1e308
  m.exclusive_minimum = e308;
  m.multiple_of = "1.5";
  g = MakeGrammar(m);
  ASSERT_NE(g, nullptr);
  EXPECT_FALSE(Accepts(g.get(), e308));
  EXPECT_TRUE(Accepts(g.get(), std::string(308, '0').insert(0, "1").replace(307, 2, "02")));
  EXPECT_FALSE(Accepts(g.get(), std::string(308, '0').insert(0, "1").replace(307, 2, "01")));
  EXPECT_TRUE(Accepts(g.get(), e308 + ".5"));                        // 1e308 = 1 (mod 1.5)
  EXPECT_TRUE(Accepts(g.get(), "2" + std::string(307, '0') + "1"));  // 2e308 = 0.5 (mod 1.5)
  EXPECT_FALSE(Accepts(g.get(), "2" + std::string(308, '0') + ".5"));
}

TEST(JsonNumber, LengthLimit) {
  // Values that need more than kMaxNumberChars characters are out of reach, and so unviable.
  NumberBounds b;
  b.exclusive_minimum = "0";
  b.maximum = "0." + std::string(398, '0') + "1";  // 10^-399: "0." + 399 digits = 401 chars
  auto g = MakeGrammar(b);
  ASSERT_NE(g, nullptr);
  Recognizer r(g.get());
  for (char c : kAlphabet) {
    StatusOr<bool> p = r.Probe(std::string(1, c));
    EXPECT_TRUE(p.ok() && !*p) << c;
  }
  b.maximum = "0." + std::string(397, '0') + "1";  // 10^-398: 400 chars exactly
  g = MakeGrammar(b);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g.get(), *b.maximum));
  RandomWalks(g.get(), "limit", 3, 400, 400, 50);

  NumberBounds n;
  n.minimum = "0";
  g = MakeGrammar(n);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g.get(), "1." + std::string(kMaxNumberChars - 2, '5')));
  EXPECT_FALSE(Accepts(g.get(), "1." + std::string(kMaxNumberChars - 1, '5')));
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
