// JSON Schema -> Grammar. One rule per schema location (memoized by JSON pointer, so $ref cycles
// become recursive rules), built from the JSON types the schema allows, each with the keywords
// that apply to it. Objects are a lazy rule family whose payload is the set of declared
// properties already present, so members may come in any order but each at most once; numbers
// with bounds are the lazy family of json_number.h. enum and const are exact: each listed value
// is kept only if the rest of the schema accepts its canonical text (checked with a recognizer
// over the rest compiled alone, its numbers without the limits of json_number.h, so a value is
// judged by the keywords alone: enum and const values are exempt from the limits). Each location's
// compilation also says whether any value matches it (Alts::why when none does), so unsatisfiable
// schemas are refused here, with the keyword and pointer to blame, not discovered as a dead end in
// the middle of generation.
#include "generate/json_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "base/json_nesting.h"
#include "base/str.h"
#include "generate/json_number.h"
#include "generate/regex.h"
#include "tokenizer/utf8.h"

namespace pocket {

using Json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Canonical text.

namespace {

std::string PlainDecimal(double d) {
  if (!std::isfinite(d)) return "null";
  if (d == 0) return "0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d);
  std::string s(buf, res.ptr);
  // Split into sign, digits (without the point) and the decimal exponent of the first digit.
  bool neg = false;
  if (!s.empty() && s[0] == '-') {
    neg = true;
    s.erase(0, 1);
  }
  int exp10 = 0;
  const size_t e = s.find_first_of("eE");
  if (e != std::string::npos) {
    exp10 = std::atoi(s.c_str() + e + 1);
    s.resize(e);
  }
  std::string digits;
  int point = 0;  // digits before the point
  const size_t dot = s.find('.');
  if (dot == std::string::npos) {
    digits = s;
    point = static_cast<int>(s.size());
  } else {
    digits = s.substr(0, dot) + s.substr(dot + 1);
    point = static_cast<int>(dot);
  }
  point += exp10;
  // Strip leading zeros (keeping the point right).
  size_t lead = 0;
  while (lead + 1 < digits.size() && digits[lead] == '0') {
    ++lead;
    --point;
  }
  digits.erase(0, lead);
  while (digits.size() > 1 && digits.back() == '0' && static_cast<int>(digits.size()) > point)
    digits.pop_back();
  std::string out = neg ? "-" : "";
  if (point <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-point), '0');
    out += digits;
  } else if (point >= static_cast<int>(digits.size())) {
    out += digits;
    out.append(static_cast<size_t>(point) - digits.size(), '0');
  } else {
    out += digits.substr(0, static_cast<size_t>(point));
    out += '.';
    out += digits.substr(static_cast<size_t>(point));
  }
  return out;
}

void AppendCanonicalString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\f':
        *out += "\\f";
        break;
      case '\r':
        *out += "\\r";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

void AppendCanonical(const Json& v, std::string* out) {
  switch (v.type()) {
    case Json::value_t::null:
      *out += "null";
      return;
    case Json::value_t::boolean:
      *out += v.get<bool>() ? "true" : "false";
      return;
    case Json::value_t::number_integer:
      *out += std::to_string(v.get<int64_t>());
      return;
    case Json::value_t::number_unsigned:
      *out += std::to_string(v.get<uint64_t>());
      return;
    case Json::value_t::number_float:
      *out += PlainDecimal(v.get<double>());
      return;
    case Json::value_t::string:
      AppendCanonicalString(v.get_ref<const std::string&>(), out);
      return;
    case Json::value_t::array: {
      out->push_back('[');
      bool first = true;
      for (const Json& x : v) {
        if (!first) out->push_back(',');
        first = false;
        AppendCanonical(x, out);
      }
      out->push_back(']');
      return;
    }
    case Json::value_t::object: {
      out->push_back('{');
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out->push_back(',');
        first = false;
        AppendCanonicalString(it.key(), out);
        out->push_back(':');
        AppendCanonical(it.value(), out);
      }
      out->push_back('}');
      return;
    }
    default:
      *out += "null";
      return;
  }
}

}  // namespace

std::string CanonicalJson(const nlohmann::json& value) {
  std::string out;
  AppendCanonical(value, &out);
  return out;
}

// ---------------------------------------------------------------------------------------------
// The compiler.

namespace {

enum TypeBit : uint8_t {
  kNull = 1,
  kBoolean = 2,
  kObject = 4,
  kArray = 8,
  kNumber = 16,   // any number
  kInteger = 32,  // only integers (when kNumber is not set)
  kString = 64,
};
constexpr uint8_t kAllTypes = kNull | kBoolean | kObject | kArray | kNumber | kString;
// Marks a merged schema that can match nothing (a merge with `false`, disjoint types).
constexpr const char* kNever = "$pocket-never";

Status Unsupported(std::string_view keyword, const std::string& pointer, std::string_view why) {
  return InvalidArgumentError(kUnsupportedKeywordPrefix, keyword, "\" at #", pointer, ": ", why);
}

std::string UnsatisfiableMessage(std::string_view keyword, const std::string& pointer,
                                 std::string_view why) {
  return StrCat(kUnsatisfiablePrefix, " keyword \"", keyword, "\" at #", pointer, ": ", why);
}
Status Unsatisfiable(std::string_view keyword, const std::string& pointer, std::string_view why) {
  return InvalidArgumentError(UnsatisfiableMessage(keyword, pointer, why));
}

std::string EscapePointerToken(const std::string& t) {
  std::string out;
  for (char c : t) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

const std::set<std::string>& AnnotationKeywords() {
  static const std::set<std::string> k = {
      "$schema",          "$comment",   "title",      "description", "default",
      "examples",         "deprecated", "readOnly",   "writeOnly",   "contentEncoding",
      "contentMediaType", "$defs",      "definitions"};
  return k;
}

// The keywords this compiler understands (beyond annotations).
const std::set<std::string>& KnownKeywords() {
  static const std::set<std::string> k = {"type",
                                          "enum",
                                          "const",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "multipleOf",
                                          "minLength",
                                          "maxLength",
                                          "pattern",
                                          "format",
                                          "items",
                                          "prefixItems",
                                          "minItems",
                                          "maxItems",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "anyOf",
                                          "allOf",
                                          "oneOf",
                                          "$ref",
                                          "uniqueItems",
                                          "minContains",
                                          "maxContains",
                                          "x-pocket-span",
                                          "$id"};
  return k;
}

class ObjectTemplate;

// A schema location compiled: its alternatives, and when there are none (no value matches it),
// why, as an unsatisfiable-schema error.
struct Alts {
  std::vector<GrammarSeq> seqs;
  Status why;
};

class Compiler {
 public:
  // `numbers`: kNone compiles a grammar that checks given texts (enum and const values), whose
  // numbers are bounded by the schema's keywords alone.
  Compiler(const Json& root, const JsonSchemaOptions& options, Grammar* g,
           NumberLimits numbers = NumberLimits::kGenerate)
      : root_(root), options_(options), g_(g), numbers_(numbers) {}

  // The rule for the schema at `pointer` (memoized; recursion through $ref is fine). A schema
  // that matches no value is an error, except the boolean `false` where `allow_false` (then the
  // rule is Empty). A rule still being compiled (a recursive reference) counts as not empty.
  StatusOr<uint32_t> RuleAt(const std::string& pointer, const Json& schema, bool span = false,
                            bool allow_false = true) {
    const std::string key = pointer + (span ? "#span" : "");
    auto it = rules_.find(key);
    if (it != rules_.end()) return it->second;
    const uint32_t rule = g_->AddRule("schema#" + pointer);
    rules_.emplace(key, rule);
    POCKET_ASSIGN_OR_RETURN(Alts alts, Compile(pointer, schema, span, 0, /*branch=*/false));
    if (alts.seqs.empty()) {
      if (!(allow_false && schema.is_boolean())) return alts.why;
      empty_rules_.insert(rule);
    }
    for (GrammarSeq& a : alts.seqs) g_->AddAlt(rule, std::move(a));
    return rule;
  }
  bool Empty(uint32_t rule) const { return empty_rules_.count(rule) > 0; }

  // Optional ' ' after ':' and ','.
  uint32_t OptSpace() {
    if (opt_space_ == kNone) opt_space_ = g_->AddRule("sp?", {{g_->Char(' ')}, {}});
    return opt_space_;
  }
  void AppendSep(GrammarSeq* seq) {
    seq->push_back(g_->Char(','));
    seq->push_back(Grammar::Ref(OptSpace()));
  }
  void AppendColon(GrammarSeq* seq) {
    seq->push_back(g_->Char(':'));
    seq->push_back(Grammar::Ref(OptSpace()));
  }

  uint32_t AnyCharRule() {
    if (any_char_ == kNone) any_char_ = JsonStringCharRule(g_, {{0, 0x10FFFF}});
    return any_char_;
  }
  uint32_t AnyStringBody() {
    if (any_body_ == kNone) any_body_ = g_->Repeat({Grammar::Ref(AnyCharRule())}, 0, -1, "chars");
    return any_body_;
  }
  uint32_t AnyString() {
    if (any_string_ == kNone) {
      any_string_ =
          g_->AddRule("string", {{g_->Char('"'), Grammar::Ref(AnyStringBody()), g_->Char('"')}});
    }
    return any_string_;
  }
  uint32_t PlainNumber(bool integer) {
    uint32_t& slot = integer ? any_integer_ : any_number_;
    if (slot == kNone) {
      NumberBounds plain;
      plain.integer = integer;
      auto r = AddNumberRule(g_, plain, numbers_);
      slot = r.ok() ? *r : g_->AddRule("never");
    }
    return slot;
  }
  // Any JSON value (the schema `true`).
  uint32_t AnyValue() {
    if (any_value_ != kNone) return any_value_;
    any_value_ = g_->AddRule("any");
    const uint32_t v = any_value_;
    // Arrays and objects of anything.
    GrammarSeq more_items;
    AppendSep(&more_items);
    more_items.push_back(Grammar::Ref(v));
    const uint32_t items_tail = g_->Repeat(more_items, 0, -1, "items");
    const uint32_t array = g_->AddRule(
        "array", {{g_->Char('['), g_->Char(']')},
                  {g_->Char('['), Grammar::Ref(v), Grammar::Ref(items_tail), g_->Char(']')}});
    GrammarSeq member = {Grammar::Ref(AnyString())};
    AppendColon(&member);
    member.push_back(Grammar::Ref(v));
    GrammarSeq more_members;
    AppendSep(&more_members);
    more_members.insert(more_members.end(), member.begin(), member.end());
    const uint32_t members_tail = g_->Repeat(more_members, 0, -1, "members");
    GrammarSeq full = {g_->Char('{')};
    full.insert(full.end(), member.begin(), member.end());
    full.push_back(Grammar::Ref(members_tail));
    full.push_back(g_->Char('}'));
    const uint32_t object = g_->AddRule("object", {{g_->Char('{'), g_->Char('}')}, full});
    g_->AddAlt(v, g_->Literal("null"));
    g_->AddAlt(v, g_->Literal("true"));
    g_->AddAlt(v, g_->Literal("false"));
    g_->AddAlt(v, {Grammar::Ref(PlainNumber(false))});
    g_->AddAlt(v, {Grammar::Ref(AnyString())});
    g_->AddAlt(v, {Grammar::Ref(array)});
    g_->AddAlt(v, {Grammar::Ref(object)});
    return v;
  }

  // The alternatives of the schema at `pointer`. Keywords that contradict each other for a type
  // are an error, except in a `branch` of anyOf / oneOf, where they only drop that type.
  StatusOr<Alts> Compile(const std::string& pointer, const Json& schema, bool span, int depth,
                         bool branch);

  const JsonSchemaOptions& options() const { return options_; }
  Grammar* grammar() { return g_; }

 private:
  static constexpr uint32_t kNone = ~0u;

  StatusOr<const Json*> Resolve(const std::string& ref, const std::string& at) {
    if (ref.empty() || ref[0] != '#')
      return Unsupported("$ref", at, "only references into this document (\"#...\") are supported");
    std::string pointer;
    // Percent-decoding of the fragment.
    for (size_t i = 1; i < ref.size(); ++i) {
      if (ref[i] == '%' && i + 2 < ref.size() &&
          std::isxdigit(static_cast<unsigned char>(ref[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(ref[i + 2]))) {
        pointer += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        pointer += ref[i];
      }
    }
    if (!pointer.empty() && pointer[0] != '/')
      return Unsupported("$ref", at, "anchors (\"#name\") are not supported");
    const Json* node = &root_;
    size_t i = 0;
    while (i < pointer.size()) {
      size_t j = pointer.find('/', i + 1);
      if (j == std::string::npos) j = pointer.size();
      std::string token;
      for (size_t k = i + 1; k < j; ++k) {
        if (pointer[k] == '~' && k + 1 < j && (pointer[k + 1] == '0' || pointer[k + 1] == '1')) {
          token += pointer[k + 1] == '0' ? '~' : '/';
          ++k;
        } else {
          token += pointer[k];
        }
      }
      if (node->is_object()) {
        auto it = node->find(token);
        if (it == node->end())
          return InvalidArgumentError("JSON Schema: $ref \"", ref, "\" at #", at,
                                      " points nowhere");
        node = &*it;
      } else if (node->is_array()) {
        char* end = nullptr;
        const unsigned long idx = std::strtoul(token.c_str(), &end, 10);
        if (token.empty() || *end != '\0' || idx >= node->size())
          return InvalidArgumentError("JSON Schema: $ref \"", ref, "\" at #", at,
                                      " points nowhere");
        node = &(*node)[idx];
      } else {
        return InvalidArgumentError("JSON Schema: $ref \"", ref, "\" at #", at, " points nowhere");
      }
      i = j;
    }
    return node;
  }

  // The rules of one type with the keywords that apply to it. When those keywords admit no value,
  // *unsat says why (naming the keyword) and the rule returned is meaningless.
  // Strings: lengths, pattern, format, span.
  StatusOr<uint32_t> StringRule(const std::string& pointer, const Json& s, bool span,
                                Status* unsat);
  StatusOr<uint32_t> ArrayRule(const std::string& pointer, const Json& s, Status* unsat);
  StatusOr<uint32_t> ObjectRule(const std::string& pointer, const Json& s, Status* unsat);
  StatusOr<uint32_t> NumberRule(const std::string& pointer, const Json& s, bool integer,
                                Status* unsat);
  // Merges `extra` keywords into `base` (an object); unsupported when both have a keyword or
  // when the merge would change what properties/items mean.
  Status Merge(Json* base, const Json& extra, const std::string& pointer, std::string_view what);

  const Json& root_;
  const JsonSchemaOptions& options_;
  Grammar* g_;
  const NumberLimits numbers_;
  std::map<std::string, uint32_t> rules_;
  std::set<uint32_t> empty_rules_;  // rules of `false` schemas
  uint32_t opt_space_ = kNone, any_char_ = kNone, any_body_ = kNone, any_string_ = kNone,
           any_number_ = kNone, any_integer_ = kNone, any_value_ = kNone;
  std::map<std::string, std::vector<std::string>> merged_pointers_;
  int merge_count_ = 0;
  friend class ObjectTemplate;
};

int AsCount(const Json& v) {
  if (v.is_number_unsigned())
    return static_cast<int>(std::min<uint64_t>(v.get<uint64_t>(), 1u << 30));
  if (v.is_number_integer())
    return static_cast<int>(std::clamp<int64_t>(v.get<int64_t>(), -1, 1 << 30));
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d == std::floor(d) && d >= 0) return static_cast<int>(std::min(d, 1073741824.0));
  }
  return -1;
}

// Objects: the payload is the set of declared properties present (and whether a member was
// written yet).
struct ObjectSpec {
  std::vector<std::string> names;     // declared properties, in schema order
  std::vector<uint32_t> value_rules;  // their schemas (kNever for false)
  std::vector<bool> required;
  bool additional = true;        // additional members allowed
  uint32_t additional_rule = 0;  // their values
  uint32_t other_key_rule = 0;   // a string body that is none of the names
  uint32_t opt_space = 0;
};

class ObjectTemplate final : public GrammarTemplate {
 public:
  explicit ObjectTemplate(ObjectSpec spec) : spec_(std::move(spec)) {}
  void set_self(uint32_t id) { self_ = id; }

  StatusOr<std::vector<GrammarSeq>> Expand(Grammar* g, uint32_t payload) override {
    const std::string seen = payloads_[payload];  // one char per property, '1' = present; + first
    const bool first = seen.back() == 'f';
    std::vector<GrammarSeq> alts;
    bool all_required = true;
    for (size_t i = 0; i < spec_.names.size(); ++i) {
      if (spec_.required[i] && seen[i] != '1') all_required = false;
    }
    if (all_required) alts.push_back({g->Char('}')});
    auto lead = [&](GrammarSeq* seq) {
      if (!first) {
        seq->push_back(g->Char(','));
        seq->push_back(Grammar::Ref(spec_.opt_space));
      }
    };
    auto colon = [&](GrammarSeq* seq) {
      seq->push_back(g->Char(':'));
      seq->push_back(Grammar::Ref(spec_.opt_space));
    };
    for (size_t i = 0; i < spec_.names.size(); ++i) {
      if (seen[i] == '1' || spec_.value_rules[i] == kNever) continue;
      GrammarSeq seq;
      lead(&seq);
      std::string key;
      AppendKey(spec_.names[i], &key);
      g->AppendLiteral(&seq, key);
      colon(&seq);
      seq.push_back(Grammar::Ref(spec_.value_rules[i]));
      std::string next = seen;
      next[i] = '1';
      next.back() = 'n';
      seq.push_back(Grammar::Lazy(self_, Intern(next)));
      alts.push_back(std::move(seq));
    }
    if (spec_.additional) {
      GrammarSeq seq;
      lead(&seq);
      seq.push_back(g->Char('"'));
      seq.push_back(Grammar::Ref(spec_.other_key_rule));
      seq.push_back(g->Char('"'));
      colon(&seq);
      seq.push_back(Grammar::Ref(spec_.additional_rule));
      std::string next = seen;
      next.back() = 'n';
      seq.push_back(Grammar::Lazy(self_, Intern(next)));
      alts.push_back(std::move(seq));
    }
    return alts;
  }

  std::string Describe(uint32_t payload) const override {
    return "object{" + payloads_[payload] + "}";
  }

  uint32_t Start() { return Intern(std::string(spec_.names.size(), '0') + "f"); }

  static constexpr uint32_t kNever = ~0u;

 private:
  static void AppendKey(const std::string& name, std::string* out) {
    *out += CanonicalJson(Json(name));
  }
  uint32_t Intern(const std::string& s) {
    auto it = index_.find(s);
    if (it != index_.end()) return it->second;
    payloads_.push_back(s);
    const uint32_t id = static_cast<uint32_t>(payloads_.size() - 1);
    index_.emplace(s, id);
    return id;
  }
  ObjectSpec spec_;
  uint32_t self_ = 0;
  std::vector<std::string> payloads_;
  std::map<std::string, uint32_t> index_;
};

// Grammar elements one node of OtherKeyRule's trie costs (measured: ~200, most of them the
// string-character rule of the characters that leave the trie there).
constexpr size_t kOtherKeyElementsPerNode = 256;

// A string body (between the quotes) that is not one of `names`: a trie over their code points.
// Its size is checked against kMaxJsonSchemaElements before it is built: at most one node per
// byte of the names past their common prefixes (the sorted names' neighbours).
StatusOr<uint32_t> OtherKeyRule(Grammar* g, const std::vector<std::string>& names,
                                uint32_t any_char, uint32_t any_body, const std::string& pointer) {
  std::vector<std::string_view> sorted(names.begin(), names.end());
  std::sort(sorted.begin(), sorted.end());
  size_t trie_nodes = 1;
  for (size_t i = 0; i < sorted.size(); ++i) {
    size_t common = 0;
    if (i > 0) {
      const std::string_view a = sorted[i - 1], b = sorted[i];
      while (common < a.size() && common < b.size() && a[common] == b[common]) ++common;
    }
    trie_nodes += sorted[i].size() - common;
  }
  if (g->num_elements() + trie_nodes * kOtherKeyElementsPerNode > kMaxJsonSchemaElements) {
    return InvalidArgumentError("JSON Schema: the grammar for it grows past ", kMaxJsonSchemaRules,
                                " rules or ", kMaxJsonSchemaElements, " elements at #", pointer,
                                " (the limit: ", names.size(), " property names in one object)");
  }
  struct Node {
    bool terminal = false;
    std::map<char32_t, int> next;
  };
  std::vector<Node> nodes(1);
  for (const std::string& name : names) {
    int n = 0;
    size_t at = 0;
    while (at < name.size()) {
      const char32_t c = utf8::DecodeAt(name, &at);
      auto it = nodes[static_cast<size_t>(n)].next.find(c);
      if (it == nodes[static_cast<size_t>(n)].next.end()) {
        nodes.emplace_back();
        const int child = static_cast<int>(nodes.size()) - 1;
        nodes[static_cast<size_t>(n)].next[c] = child;
        n = child;
      } else {
        n = it->second;
      }
    }
    nodes[static_cast<size_t>(n)].terminal = true;
  }
  (void)any_char;
  std::vector<uint32_t> rules(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) rules[i] = g->AddRule("key!");
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (!n.terminal) g->AddAlt(rules[i], {});
    std::vector<CharRange> others;
    char32_t from = 0;
    for (const auto& [c, child] : n.next) {
      GrammarSeq seq;
      AppendJsonStringChar(g, &seq, c);
      seq.push_back(Grammar::Ref(rules[static_cast<size_t>(child)]));
      g->AddAlt(rules[i], std::move(seq));
      if (c > from) others.push_back({from, c - 1});
      from = c + 1;
    }
    if (from <= 0x10FFFF) others.push_back({from, 0x10FFFF});
    if (!others.empty())
      g->AddAlt(rules[i], {Grammar::Ref(JsonStringCharRule(g, others)), Grammar::Ref(any_body)});
  }
  return rules[0];
}

std::string NumberText(const Json& v) {
  return CanonicalJson(v);
}

// Regular expressions for the formats, in the subset of regex.h.
StatusOr<std::string> FormatRegex(const std::string& format) {
  // Years 0001-9999 (RFC 3339 allows 0000, but common validators, Python's among them, refuse
  // it), days checked against the month, February 29 in leap years only.
  const std::string year = "([0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)";
  const std::string date =
      "(" + year + "-(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|" + year +
      "-(0[469]|11)-(0[1-9]|[12][0-9]|30)|" + year +
      "-02-(0[1-9]|1[0-9]|2[0-8])|([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|"
      "[13579][26])00)-02-29)";
  const std::string time =
      "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?([Zz]|[+\\-]([01][0-9]|2[0-3]):[0-5]["
      "0-9])";
  if (format == "date") return date;
  if (format == "time") return time;
  if (format == "date-time") return date + "[Tt]" + time;
  if (format == "uuid")
    return std::string(
        "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}");
  if (format == "email") {
    const std::string atom = "[A-Za-z0-9!#$%&'*+/=?\\^_\\u0060{|}~\\-]+";
    const std::string label = "[A-Za-z0-9]([A-Za-z0-9\\-]{0,61}[A-Za-z0-9])?";
    return atom + "(\\." + atom + ")*@" + label + "(\\." + label + ")*";
  }
  return UnimplementedError(format);
}

StatusOr<uint32_t> Compiler::StringRule(const std::string& pointer, const Json& s, bool span,
                                        Status* unsat) {
  int min_len = 0, max_len = -1;
  if (auto it = s.find("minLength"); it != s.end()) {
    min_len = AsCount(*it);
    if (min_len < 0)
      return InvalidArgumentError("JSON Schema: minLength at #", pointer, " is not a count");
  }
  if (auto it = s.find("maxLength"); it != s.end()) {
    max_len = AsCount(*it);
    if (max_len < 0)
      return InvalidArgumentError("JSON Schema: maxLength at #", pointer, " is not a count");
  }
  if (max_len >= 0 && max_len < min_len) {
    *unsat = Unsatisfiable("minLength", pointer,
                           StrCat("minLength ", min_len, " is greater than maxLength ", max_len));
    return 0u;
  }
  if (auto it = s.find("x-pocket-span"); it != s.end()) {
    if (!it->is_boolean())
      return InvalidArgumentError("JSON Schema: x-pocket-span at #", pointer,
                                  " must be true or false");
    span = span || it->get<bool>();
  }
  const bool has_pattern = s.contains("pattern"), has_format = s.contains("format");
  GrammarSeq body;
  if (span) {
    if (!options_.has_span_source)
      return InvalidArgumentError("JSON Schema: a span field at #", pointer,
                                  " needs a span source (--span-source)");
    if (has_pattern || has_format)
      return Unsupported(has_pattern ? "pattern" : "format", pointer, "not together with a span");
    int source_chars = 0;
    for (size_t at = 0; at < options_.span_source.size(); ++source_chars)
      utf8::DecodeAt(options_.span_source, &at);
    if (min_len > source_chars) {
      *unsat = Unsatisfiable("minLength", pointer,
                             StrCat("minLength ", min_len, " is longer than the span source (",
                                    source_chars, " characters)"));
      return 0u;
    }
    POCKET_ASSIGN_OR_RETURN(uint32_t r, AddSpanRule(g_, options_.span_source,
                                                    SpanEscaping::kJsonString, min_len, max_len));
    body.push_back(Grammar::Ref(r));
  } else if (has_pattern || has_format) {
    if (has_pattern && has_format)
      return Unsupported("format", pointer, "not together with pattern");
    if (min_len > 0 || max_len >= 0)
      return Unsupported(has_pattern ? "pattern" : "format", pointer,
                         "not together with minLength/maxLength");
    std::string regex;
    bool anchored_start = false, anchored_end = false;
    if (has_pattern) {
      const Json& p = s["pattern"];
      if (!p.is_string())
        return InvalidArgumentError("JSON Schema: pattern at #", pointer, " is not a string");
      regex = p.get<std::string>();
      if (!regex.empty() && regex[0] == '^') {
        anchored_start = true;
        regex.erase(0, 1);
      }
      if (!regex.empty() && regex.back() == '$' &&
          (regex.size() < 2 || regex[regex.size() - 2] != '\\')) {
        anchored_end = true;
        regex.pop_back();
      }
    } else {
      const Json& f = s["format"];
      if (!f.is_string())
        return InvalidArgumentError("JSON Schema: format at #", pointer, " is not a string");
      auto fr = FormatRegex(f.get<std::string>());
      if (!fr.ok())
        return Unsupported("format", pointer,
                           "format \"" + f.get<std::string>() +
                               "\" is not supported (date, time, date-time, email, uuid are)");
      regex = *fr;
      anchored_start = anchored_end = true;
    }
    auto nfa = CompileRegexNfa(regex);
    if (!nfa.ok()) return Unsupported("pattern", pointer, nfa.status().message());
    if (!anchored_start) body.push_back(Grammar::Ref(AnyStringBody()));
    body.push_back(Grammar::Ref(g_->FromRegex(*nfa, "pattern", /*json_string=*/true)));
    if (!anchored_end) body.push_back(Grammar::Ref(AnyStringBody()));
  } else if (min_len == 0 && max_len < 0) {
    body.push_back(Grammar::Ref(AnyStringBody()));
  } else {
    if (min_len > 100000 || max_len > 100000)
      return Unsupported(min_len > 100000 ? "minLength" : "maxLength", pointer, "over 100000");
    body.push_back(
        Grammar::Ref(g_->Repeat({Grammar::Ref(AnyCharRule())}, min_len, max_len, "chars")));
  }
  GrammarSeq seq = {g_->Char('"')};
  seq.insert(seq.end(), body.begin(), body.end());
  seq.push_back(g_->Char('"'));
  return g_->AddRule("string", {seq});
}

StatusOr<uint32_t> Compiler::NumberRule(const std::string& pointer, const Json& s, bool integer,
                                        Status* unsat) {
  NumberBounds b;
  b.integer = integer;
  auto take = [&](const char* k, std::optional<std::string>* out) -> Status {
    auto it = s.find(k);
    if (it == s.end()) return Status::Ok();
    if (!it->is_number())
      return InvalidArgumentError("JSON Schema: ", k, " at #", pointer, " is not a number");
    *out = NumberText(*it);
    return Status::Ok();
  };
  POCKET_RETURN_IF_ERROR(take("minimum", &b.minimum));
  POCKET_RETURN_IF_ERROR(take("maximum", &b.maximum));
  POCKET_RETURN_IF_ERROR(take("exclusiveMinimum", &b.exclusive_minimum));
  POCKET_RETURN_IF_ERROR(take("exclusiveMaximum", &b.exclusive_maximum));
  POCKET_RETURN_IF_ERROR(take("multipleOf", &b.multiple_of));
  if (b.multiple_of &&
      (b.multiple_of->empty() || (*b.multiple_of)[0] == '-' || *b.multiple_of == "0"))
    return InvalidArgumentError("JSON Schema: multipleOf at #", pointer, " must be positive");
  if (!b.minimum && !b.maximum && !b.exclusive_minimum && !b.exclusive_maximum && !b.multiple_of)
    return PlainNumber(integer);
  POCKET_ASSIGN_OR_RETURN(std::optional<NumberConflict> conflict, FindNumberConflict(b, numbers_));
  if (conflict) {
    *unsat = Unsatisfiable(conflict->keyword, pointer, conflict->reason);
    return 0u;
  }
  return AddNumberRule(g_, b, numbers_);
}

StatusOr<uint32_t> Compiler::ArrayRule(const std::string& pointer, const Json& s, Status* unsat) {
  if (auto it = s.find("uniqueItems"); it != s.end() && !(it->is_boolean() && !it->get<bool>()))
    return Unsupported("uniqueItems", pointer, "uniqueness of items is not context-free");
  int min_items = 0, max_items = -1;
  if (auto it = s.find("minItems"); it != s.end()) {
    min_items = AsCount(*it);
    if (min_items < 0)
      return InvalidArgumentError("JSON Schema: minItems at #", pointer, " is not a count");
  }
  if (auto it = s.find("maxItems"); it != s.end()) {
    max_items = AsCount(*it);
    if (max_items < 0)
      return InvalidArgumentError("JSON Schema: maxItems at #", pointer, " is not a count");
  }
  if (max_items >= 0 && min_items > max_items) {
    *unsat = Unsatisfiable("minItems", pointer,
                           StrCat("minItems ", min_items, " is greater than maxItems ", max_items));
    return 0u;
  }
  if (min_items > 10000 || max_items > 10000)
    return Unsupported(min_items > 10000 ? "minItems" : "maxItems", pointer, "over 10000");
  std::vector<uint32_t> prefix;
  if (auto it = s.find("prefixItems"); it != s.end()) {
    if (!it->is_array())
      return InvalidArgumentError("JSON Schema: prefixItems at #", pointer, " is not an array");
    for (size_t i = 0; i < it->size(); ++i) {
      POCKET_ASSIGN_OR_RETURN(uint32_t r,
                              RuleAt(pointer + "/prefixItems/" + std::to_string(i), (*it)[i]));
      prefix.push_back(r);
    }
  }
  uint32_t rest = AnyValue();
  bool rest_allowed = true;
  if (auto it = s.find("items"); it != s.end()) {
    if (it->is_boolean() && !it->get<bool>()) {
      rest_allowed = false;
    } else {
      POCKET_ASSIGN_OR_RETURN(rest, RuleAt(pointer + "/items", *it));
    }
  }
  const size_t np = prefix.size();
  for (size_t i = 0; i < np && static_cast<int>(i) < min_items; ++i) {
    if (!Empty(prefix[i])) continue;
    *unsat = Unsatisfiable("minItems", pointer,
                           StrCat("minItems ", min_items, " requires item ", i,
                                  ", which prefixItems/", i, " makes false"));
    return 0u;
  }
  if (!rest_allowed && static_cast<size_t>(min_items) > np) {
    *unsat = Unsatisfiable("minItems", pointer,
                           StrCat("minItems ", min_items, " is more than the ", np,
                                  " items prefixItems allows (items is false)"));
    return 0u;
  }
  // A_i: the elements from index i on. A_i ::= "]" (i >= min) | sep elem_i A_{i+1}.
  const int limit = max_items >= 0 ? max_items : -1;
  // Past the prefix and the minimum, the tail repeats: one star rule (or a bounded chain).
  const int steady = std::max(static_cast<int>(np), min_items);
  std::map<int, uint32_t> rules;
  std::function<uint32_t(int)> at = [&](int i) -> uint32_t {
    if (auto f = rules.find(i); f != rules.end()) return f->second;
    const uint32_t r = g_->AddRule("items@" + std::to_string(i));
    rules.emplace(i, r);
    if (i >= min_items) g_->AddAlt(r, {g_->Char(']')});
    const bool more = (limit < 0 || i < limit) && (static_cast<size_t>(i) < np || rest_allowed);
    if (more) {
      GrammarSeq seq;
      if (i > 0) AppendSep(&seq);
      seq.push_back(
          Grammar::Ref(static_cast<size_t>(i) < np ? prefix[static_cast<size_t>(i)] : rest));
      // The steady state loops on itself when unbounded.
      const int next = (limit < 0 && i >= steady && i > 0) ? i : i + 1;
      seq.push_back(Grammar::Ref(at(next)));
      g_->AddAlt(r, std::move(seq));
    }
    return r;
  };
  const uint32_t first = at(0);
  return g_->AddRule("array", {{g_->Char('['), Grammar::Ref(first)}});
}

StatusOr<uint32_t> Compiler::ObjectRule(const std::string& pointer, const Json& s, Status* unsat) {
  for (const char* k : {"patternProperties", "propertyNames", "minProperties", "maxProperties",
                        "dependentRequired", "dependentSchemas", "unevaluatedProperties"}) {
    if (s.contains(k)) return Unsupported(k, pointer, "not supported");
  }
  ObjectSpec spec;
  spec.opt_space = OptSpace();
  std::set<std::string> required;
  if (auto it = s.find("required"); it != s.end()) {
    if (!it->is_array())
      return InvalidArgumentError("JSON Schema: required at #", pointer, " is not an array");
    for (const Json& r : *it) {
      if (!r.is_string())
        return InvalidArgumentError("JSON Schema: required at #", pointer, " lists a non-string");
      required.insert(r.get<std::string>());
    }
  }
  if (auto it = s.find("properties"); it != s.end()) {
    if (!it->is_object())
      return InvalidArgumentError("JSON Schema: properties at #", pointer, " is not an object");
    for (auto p = it->begin(); p != it->end(); ++p) {
      spec.names.push_back(p.key());
      spec.required.push_back(required.count(p.key()) > 0);
      if (p.value().is_boolean() && !p.value().get<bool>()) {
        spec.value_rules.push_back(ObjectTemplate::kNever);
        continue;
      }
      const bool span = std::find(options_.span_fields.begin(), options_.span_fields.end(),
                                  p.key()) != options_.span_fields.end();
      POCKET_ASSIGN_OR_RETURN(
          uint32_t r,
          RuleAt(pointer + "/properties/" + EscapePointerToken(p.key()), p.value(), span));
      spec.value_rules.push_back(r);
    }
  }
  // A required property that is not declared: it must come as an additional member. Declare it
  // with the additional schema so the payload can track it.
  uint32_t additional_rule = AnyValue();
  bool additional = true;
  if (auto it = s.find("additionalProperties"); it != s.end()) {
    if (it->is_boolean() && !it->get<bool>()) {
      additional = false;
    } else {
      POCKET_ASSIGN_OR_RETURN(additional_rule, RuleAt(pointer + "/additionalProperties", *it));
    }
  }
  for (const std::string& r : required) {
    const auto declared = std::find(spec.names.begin(), spec.names.end(), r);
    if (declared != spec.names.end()) {
      if (spec.value_rules[static_cast<size_t>(declared - spec.names.begin())] !=
          ObjectTemplate::kNever)
        continue;
      *unsat = Unsatisfiable("required", pointer,
                             StrCat("property ", CanonicalJson(Json(r)),
                                    " is required, but properties makes it false"));
      return 0u;
    }
    if (!additional) {
      *unsat = Unsatisfiable("required", pointer,
                             StrCat("property ", CanonicalJson(Json(r)),
                                    " is required, but additionalProperties is false and "
                                    "properties does not declare it"));
      return 0u;
    }
    spec.names.push_back(r);
    spec.required.push_back(true);
    spec.value_rules.push_back(additional_rule);
  }
  spec.additional = additional;
  spec.additional_rule = additional_rule;
  POCKET_ASSIGN_OR_RETURN(spec.other_key_rule,
                          OtherKeyRule(g_, spec.names, AnyCharRule(), AnyStringBody(), pointer));
  auto t = std::make_unique<ObjectTemplate>(std::move(spec));
  ObjectTemplate* raw = t.get();
  const uint32_t id = g_->AddTemplate(std::move(t));
  raw->set_self(id);
  return g_->AddRule("object", {{g_->Char('{'), Grammar::Lazy(id, raw->Start())}});
}

Status Compiler::Merge(Json* base, const Json& extra, const std::string& pointer,
                       std::string_view what) {
  if (++merge_count_ > 10000) return Unsupported(what, pointer, "too many merges");
  if (extra.is_boolean()) {
    if (!extra.get<bool>() && !base->contains(kNever)) {
      (*base)[kNever] = UnsatisfiableMessage(what, pointer,
                                             what == "allOf"  ? "one of its schemas is false"
                                             : what == "$ref" ? "it refers to the schema false"
                                                              : "the branch is false");
    }
    return Status::Ok();
  }
  if (!extra.is_object())
    return InvalidArgumentError("JSON Schema: ", what, " at #", pointer, " holds a non-schema");
  // Keywords whose meaning depends on a sibling: merging would change it.
  for (auto [dependent, on] :
       {std::pair{"additionalProperties", "properties"}, std::pair{"items", "prefixItems"}}) {
    const bool a_dep = base->contains(dependent), b_dep = extra.contains(dependent);
    const bool a_on = base->contains(on), b_on = extra.contains(on);
    if ((a_dep && b_on && !a_on) || (b_dep && a_on && !b_on) || (a_dep && b_dep && a_on != b_on))
      return Unsupported(
          what, pointer,
          std::string("merging \"") + dependent + "\" with \"" + on + "\" of another schema");
  }
  for (auto it = extra.begin(); it != extra.end(); ++it) {
    const std::string& k = it.key();
    if (AnnotationKeywords().count(k) || k == "$id") continue;
    if (!base->contains(k) || (*base)[k] == it.value()) {
      (*base)[k] = it.value();
      continue;
    }
    if (k == "required" && it->is_array() && (*base)[k].is_array()) {
      for (const Json& r : *it) (*base)[k].push_back(r);  // both apply: the union
      continue;
    }
    if (k == "type") {
      // Both apply: the intersection (integer within number).
      auto names = [](const Json& t) {
        std::set<std::string> out;
        if (t.is_array()) {
          for (const Json& n : t) {
            if (n.is_string()) out.insert(n.get<std::string>());
          }
        } else if (t.is_string()) {
          out.insert(t.get<std::string>());
        }
        return out;
      };
      const std::set<std::string> a = names((*base)[k]), b = names(*it);
      Json both = Json::array();
      for (const std::string& n : a) {
        if (b.count(n) || (n == "integer" && b.count("number"))) {
          both.push_back(n);
        } else if (n == "number" && b.count("integer")) {
          both.push_back("integer");
        }
      }
      if (both.empty() && !base->contains(kNever)) {
        (*base)[kNever] = UnsatisfiableMessage(
            "type", pointer,
            StrCat("the ", what, " schemas have no type in common: ", (*base)[k].dump(), " and ",
                   it->dump()));
      }
      (*base)[k] = both;
      continue;
    }
    // Both apply: the stricter bound, or both subschemas (allOf) per property / for items.
    if (it->is_number() && (*base)[k].is_number()) {
      if (k == "minimum" || k == "exclusiveMinimum" || k == "minLength" || k == "minItems") {
        if ((*base)[k] < *it) (*base)[k] = *it;
        continue;
      }
      if (k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" || k == "maxItems") {
        if (*it < (*base)[k]) (*base)[k] = *it;
        continue;
      }
    }
    if (k == "properties" && it->is_object() && (*base)[k].is_object()) {
      for (auto p = it->begin(); p != it->end(); ++p) {
        Json& mine = (*base)[k];
        if (mine.contains(p.key()) && mine[p.key()] != p.value()) {
          mine[p.key()] = Json{{"allOf", Json::array({mine[p.key()], p.value()})}};
        } else {
          mine[p.key()] = p.value();
        }
      }
      continue;
    }
    if (k == "items" || k == "additionalProperties") {
      (*base)[k] = Json{{"allOf", Json::array({(*base)[k], *it})}};
      continue;
    }
    return Unsupported(what, pointer, "merging two schemas that both use \"" + k + "\"");
  }
  return Status::Ok();
}

StatusOr<Alts> Compiler::Compile(const std::string& pointer, const Json& schema, bool span,
                                 int depth, bool branch) {
  if (depth > 64) return Unsupported("$ref", pointer, "references nest too deeply");
  // The grammar grows with what the schema says, and $ref / allOf can multiply it: bounded here,
  // checked as each subschema starts, so a hostile schema stops before it costs memory.
  if (g_->num_rules() > kMaxJsonSchemaRules || g_->num_elements() > kMaxJsonSchemaElements) {
    return InvalidArgumentError("JSON Schema: the grammar for it grows past ", kMaxJsonSchemaRules,
                                " rules or ", kMaxJsonSchemaElements, " elements at #", pointer,
                                " (the limit)");
  }
  if (schema.is_boolean()) {
    if (!schema.get<bool>()) {
      return Alts{{},
                  InvalidArgumentError(kUnsatisfiablePrefix, " at #", pointer,
                                       ": the schema is false (it matches no value)")};
    }
    return Alts{{{Grammar::Ref(AnyValue())}}, Status::Ok()};
  }
  if (!schema.is_object())
    return InvalidArgumentError("JSON Schema: the schema at #", pointer,
                                " is not an object or boolean");
  if (auto it = schema.find(kNever); it != schema.end() && it->is_string())
    return Alts{{}, InvalidArgumentError(it->get<std::string>())};  // merged with `false`, ...
  for (auto it = schema.begin(); it != schema.end(); ++it) {
    const std::string& k = it.key();
    if (AnnotationKeywords().count(k)) continue;
    if (!KnownKeywords().count(k)) {
      return Unsupported(k, pointer, "not supported");
    }
    if (k == "$id" && !pointer.empty())
      return Unsupported("$id", pointer, "$id below the root (a new base URI) is not supported");
  }
  if (auto it = schema.find("$schema"); it != schema.end() && pointer.empty()) {
    const std::string v = it->is_string() ? it->get<std::string>() : "";
    if (v != "https://json-schema.org/draft/2020-12/schema" &&
        v != "https://json-schema.org/draft/2020-12/schema#")
      return Unsupported("$schema", pointer, "only draft 2020-12 is supported");
  }
  // Composition: $ref, allOf, anyOf, oneOf with siblings are merged into one schema per branch.
  Json rest = schema;
  for (const char* k :
       {"$schema", "$id", "$comment", "title", "description", "default", "examples", "deprecated",
        "readOnly", "writeOnly", "contentEncoding", "contentMediaType", "$defs", "definitions"}) {
    rest.erase(k);
  }
  if (auto it = rest.find("$ref"); it != rest.end()) {
    if (!it->is_string())
      return InvalidArgumentError("JSON Schema: $ref at #", pointer, " is not a string");
    const std::string ref = it->get<std::string>();
    rest.erase("$ref");
    POCKET_ASSIGN_OR_RETURN(const Json* target, Resolve(ref, pointer));
    std::string target_pointer = ref.substr(1);
    if (rest.empty() && !span) {
      POCKET_ASSIGN_OR_RETURN(uint32_t r, RuleAt(target_pointer, *target));
      if (Empty(r))
        return Alts{{}, Unsatisfiable("$ref", pointer, StrCat(Json(ref).dump(), " is false"))};
      return Alts{{{Grammar::Ref(r)}}, Status::Ok()};
    }
    Json merged = rest;
    POCKET_RETURN_IF_ERROR(Merge(&merged, *target, pointer, "$ref"));
    if (merged.contains("$ref") && merged["$ref"] == Json(ref))
      return Unsupported("$ref", pointer, "a recursive reference next to other keywords");
    return Compile(pointer, merged, span, depth + 1, branch);
  }
  if (auto it = rest.find("allOf"); it != rest.end()) {
    if (!it->is_array() || it->empty())
      return InvalidArgumentError("JSON Schema: allOf at #", pointer, " must be a non-empty array");
    Json merged = rest;
    merged.erase("allOf");
    for (const Json& sub : *it) POCKET_RETURN_IF_ERROR(Merge(&merged, sub, pointer, "allOf"));
    return Compile(pointer, merged, span, depth + 1, branch);
  }
  for (const char* comb : {"anyOf", "oneOf"}) {
    auto it = rest.find(comb);
    if (it == rest.end()) continue;
    if (!it->is_array() || it->empty())
      return InvalidArgumentError("JSON Schema: ", comb, " at #", pointer,
                                  " must be a non-empty array");
    Json siblings = rest;
    siblings.erase(comb);
    const bool one = std::string_view(comb) == "oneOf";
    if (one && rest.contains("anyOf")) return Unsupported("oneOf", pointer, "together with anyOf");
    // Branches as merged schemas.
    std::vector<Json> branches;
    for (const Json& b : *it) {
      Json m = siblings;
      POCKET_RETURN_IF_ERROR(
          Merge(&m, b, pointer + "/" + comb + "/" + std::to_string(branches.size()), comb));
      branches.push_back(std::move(m));
    }
    if (one) {
      // Exactly one: supported when the branches match disjoint sets of values, shown by their
      // types or by their const/enum values.
      auto types_of = [](const Json& b) -> uint8_t {
        if (b.contains(kNever)) return 0;
        if (b.contains("const") || b.contains("enum")) {
          uint8_t t = 0;
          std::vector<Json> vals;
          if (b.contains("const")) vals.push_back(b["const"]);
          if (b.contains("enum") && b["enum"].is_array())
            for (const Json& v : b["enum"]) vals.push_back(v);
          for (const Json& v : vals) {
            if (v.is_null())
              t |= kNull;
            else if (v.is_boolean())
              t |= kBoolean;
            else if (v.is_object())
              t |= kObject;
            else if (v.is_array())
              t |= kArray;
            else if (v.is_number())
              t |= kNumber;
            else if (v.is_string())
              t |= kString;
          }
          return t;
        }
        if (!b.contains("type")) return kAllTypes;
        uint8_t t = 0;
        std::vector<Json> names;
        if (b["type"].is_array()) {
          for (const Json& n : b["type"]) names.push_back(n);
        } else {
          names.push_back(b["type"]);
        }
        for (const Json& n : names) {
          const std::string s = n.is_string() ? n.get<std::string>() : "";
          if (s == "null")
            t |= kNull;
          else if (s == "boolean")
            t |= kBoolean;
          else if (s == "object")
            t |= kObject;
          else if (s == "array")
            t |= kArray;
          else if (s == "number" || s == "integer")
            t |= kNumber;
          else if (s == "string")
            t |= kString;
        }
        return t;
      };
      auto const_values = [](const Json& b, std::vector<std::string>* out) {
        if (b.contains("const")) {
          out->push_back(CanonicalJson(b["const"]));
          return true;
        }
        if (b.contains("enum") && b["enum"].is_array()) {
          for (const Json& v : b["enum"]) out->push_back(CanonicalJson(v));
          return true;
        }
        return false;
      };
      for (size_t i = 0; i < branches.size(); ++i) {
        for (size_t j = i + 1; j < branches.size(); ++j) {
          if ((types_of(branches[i]) & types_of(branches[j])) == 0) continue;
          std::vector<std::string> a, b;
          if (const_values(branches[i], &a) && const_values(branches[j], &b)) {
            std::sort(a.begin(), a.end());
            std::sort(b.begin(), b.end());
            std::vector<std::string> common;
            std::set_intersection(a.begin(), a.end(), b.begin(), b.end(),
                                  std::back_inserter(common));
            if (common.empty()) continue;
          }
          return Unsupported("oneOf", pointer,
                             "branches " + std::to_string(i) + " and " + std::to_string(j) +
                                 " may both match (exactly-one is supported for branches of "
                                 "different types or different const/enum values)");
        }
      }
    }
    // A branch may be unsatisfiable (siblings merged into it can contradict it); all of them
    // may not.
    Alts alts;
    std::string whys;
    for (size_t i = 0; i < branches.size(); ++i) {
      POCKET_ASSIGN_OR_RETURN(Alts b, Compile(pointer + "/" + comb + "/" + std::to_string(i),
                                              branches[i], span, depth + 1, /*branch=*/true));
      if (b.seqs.empty()) {
        std::string_view why = b.why.message();
        if (why.starts_with(kUnsatisfiablePrefix))
          why.remove_prefix(kUnsatisfiablePrefix.size() + 1);
        whys += StrCat(whys.empty() ? "" : "; ", why);
      }
      for (GrammarSeq& a : b.seqs) alts.seqs.push_back(std::move(a));
    }
    if (alts.seqs.empty())
      alts.why = Unsatisfiable(comb, pointer, "every branch is unsatisfiable (" + whys + ")");
    return alts;
  }

  // enum / const: each value kept if the rest of the schema accepts it.
  if (rest.contains("enum") || rest.contains("const")) {
    const char* keyword = rest.contains("const") ? "const" : "enum";
    std::vector<Json> values;
    if (auto it = rest.find("const"); it != rest.end()) values.push_back(*it);
    if (auto it = rest.find("enum"); it != rest.end()) {
      if (!it->is_array())
        return InvalidArgumentError("JSON Schema: enum at #", pointer, " is not an array");
      if (it->empty()) return Alts{{}, Unsatisfiable("enum", pointer, "the enum lists no value")};
      if (rest.contains("const")) {
        if (std::find(it->begin(), it->end(), values[0]) == it->end()) {
          return Alts{
              {},
              Unsatisfiable("const", pointer,
                            StrCat("the value ", CanonicalJson(values[0]), " is not in the enum"))};
        }
      } else {
        values.assign(it->begin(), it->end());
      }
    }
    Json others = rest;
    others.erase("enum");
    others.erase("const");
    // The rest of the schema compiled alone, to check each value's canonical text against. The
    // value is written as that text, so its numbers (nested ones too) are held to the keywords
    // only, not to the limits that keep generated numbers short: 1e-7 is a fine const.
    Grammar check;
    Compiler sub(root_, options_, &check, NumberLimits::kNone);
    std::optional<Recognizer> rec;
    std::string other_names;
    if (!others.empty()) {
      POCKET_ASSIGN_OR_RETURN(Alts r, sub.Compile(pointer, others, span, depth + 1, branch));
      if (r.seqs.empty()) return r;
      check.SetRoot(check.AddRule("rest", std::move(r.seqs)));
      rec.emplace(&check);
      for (auto it = others.begin(); it != others.end(); ++it)
        other_names += StrCat(other_names.empty() ? "" : ", ", it.key());
    }
    Alts alts;
    std::set<std::string> texts;
    for (const Json& v : values) {
      const std::string text = CanonicalJson(v);
      if (!texts.insert(text).second) continue;
      if (rec) {
        POCKET_ASSIGN_OR_RETURN(bool ok, rec->Matches(text));
        if (!ok) continue;
      }
      alts.seqs.push_back(g_->Literal(text));
    }
    if (alts.seqs.empty()) {
      alts.why = Unsatisfiable(
          keyword, pointer,
          StrCat(values.size() == 1 ? "the value " + CanonicalJson(values[0]) + " does not satisfy"
                                    : std::string("none of its values satisfies"),
                 " the rest of the schema (", other_names, ")"));
    }
    return alts;
  }

  // Types.
  uint8_t types = kAllTypes;
  if (auto it = rest.find("type"); it != rest.end()) {
    std::vector<Json> names;
    if (it->is_array()) {
      names.assign(it->begin(), it->end());
    } else {
      names.push_back(*it);
    }
    if (names.empty()) return Alts{{}, Unsatisfiable("type", pointer, "the type list is empty")};
    types = 0;
    for (const Json& n : names) {
      const std::string t = n.is_string() ? n.get<std::string>() : "";
      if (t == "null")
        types |= kNull;
      else if (t == "boolean")
        types |= kBoolean;
      else if (t == "object")
        types |= kObject;
      else if (t == "array")
        types |= kArray;
      else if (t == "number")
        types |= kNumber;
      else if (t == "integer")
        types |= kInteger;
      else if (t == "string")
        types |= kString;
      else
        return InvalidArgumentError("JSON Schema: unknown type ", n.dump(), " at #", pointer);
    }
    if (types & kNumber) types &= static_cast<uint8_t>(~kInteger);
  }
  Alts alts;
  if (types & kNull) alts.seqs.push_back(g_->Literal("null"));
  if (types & kBoolean) {
    alts.seqs.push_back(g_->Literal("true"));
    alts.seqs.push_back(g_->Literal("false"));
  }
  // A type whose keywords admit no value: an error, or in a branch, that type dropped.
  Status dropped;
  auto keep = [&](uint32_t rule, const Status& unsat) -> Status {
    if (unsat.ok()) {
      alts.seqs.push_back({Grammar::Ref(rule)});
    } else if (!branch) {
      return unsat;
    } else if (dropped.ok()) {
      dropped = unsat;
    }
    return Status::Ok();
  };
  if (types & (kNumber | kInteger)) {
    Status unsat;
    POCKET_ASSIGN_OR_RETURN(uint32_t r, NumberRule(pointer, rest, (types & kNumber) == 0, &unsat));
    POCKET_RETURN_IF_ERROR(keep(r, unsat));
  }
  if (types & kString) {
    Status unsat;
    POCKET_ASSIGN_OR_RETURN(uint32_t r, StringRule(pointer, rest, span, &unsat));
    POCKET_RETURN_IF_ERROR(keep(r, unsat));
  }
  if (types & kArray) {
    Status unsat;
    POCKET_ASSIGN_OR_RETURN(uint32_t r, ArrayRule(pointer, rest, &unsat));
    POCKET_RETURN_IF_ERROR(keep(r, unsat));
  }
  if (types & kObject) {
    Status unsat;
    POCKET_ASSIGN_OR_RETURN(uint32_t r, ObjectRule(pointer, rest, &unsat));
    POCKET_RETURN_IF_ERROR(keep(r, unsat));
  }
  if (alts.seqs.empty()) alts.why = dropped;
  return alts;
}
}  // namespace

StatusOr<std::unique_ptr<Grammar>> CompileJsonSchema(std::string_view schema_json,
                                                     const JsonSchemaOptions& options) {
  // Refused before parsing: compiling recurses once per level of the schema.
  POCKET_RETURN_IF_ERROR(CheckJsonNesting(schema_json, "JSON Schema"));
  const Json root = Json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return InvalidArgumentError("JSON Schema: not valid JSON");
  if (!root.is_object() && !root.is_boolean())
    return InvalidArgumentError("JSON Schema: the schema must be an object or a boolean");
  if (options.has_span_source) POCKET_RETURN_IF_ERROR(utf8::Validate(options.span_source));
  auto g = std::make_unique<Grammar>();
  Compiler c(root, options, g.get());
  POCKET_ASSIGN_OR_RETURN(uint32_t r, c.RuleAt("", root, /*span=*/false, /*allow_false=*/false));
  g->SetRoot(r);
  POCKET_RETURN_IF_ERROR(g->Check());
  return g;
}

StatusOr<std::unique_ptr<Grammar>> CompileJsonSchemaList(std::string_view schema_json,
                                                         const JsonList& list,
                                                         const JsonSchemaOptions& options) {
  if (list.empty()) return CompileJsonSchema(schema_json, options);
  if (list.max_values < 0 || list.max_values > kMaxJsonListValues) {
    return InvalidArgumentError("JSON list: max_values must be from 0 (no limit) to ",
                                kMaxJsonListValues, ", got ", list.max_values);
  }
  POCKET_RETURN_IF_ERROR(utf8::Validate(list.separator));
  POCKET_RETURN_IF_ERROR(utf8::Validate(list.close));
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Grammar> g, CompileJsonSchema(schema_json, options));
  // root ::= value (separator value){0, max - 1} close?
  const uint32_t value = g->root();
  GrammarSeq next = g->Literal(list.separator);
  next.push_back(Grammar::Ref(value));
  const uint32_t more =
      g->Repeat(next, 0, list.max_values == 0 ? -1 : list.max_values - 1, "list-more");
  const uint32_t close = g->Alternatives({{}, g->Literal(list.close)}, "list-close");
  g->SetRoot(g->AddRule("list", {{Grammar::Ref(value), Grammar::Ref(more), Grammar::Ref(close)}}));
  POCKET_RETURN_IF_ERROR(g->Check());
  return g;
}

}  // namespace pocket
