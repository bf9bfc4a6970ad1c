// JSON Schema constraints: the conformance driver over the official test suite (draft 2020-12),
// and unit tests of the canonical form, keywords and errors.
#include "generate/json_schema.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace pocket {
namespace {

using Json = nlohmann::json;

std::string SuiteDir() {
  return std::string(POCKET_SHARED_DIR) + "/testdata/json-schema-test-suite/draft2020-12";
}

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  Json j = Json::parse(ss.str(), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << path;
  return j;
}

bool Accepts(Grammar* g, const std::string& text) {
  Recognizer r(g);
  auto ok = r.Matches(text);
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  return ok.ok() && *ok;
}

// The keyword an "unsupported" message names.
std::string UnsupportedKeyword(const std::string& message) {
  const size_t at = message.find(kUnsupportedKeywordPrefix);
  if (at == std::string::npos) return "";
  const size_t begin = at + kUnsupportedKeywordPrefix.size();
  return message.substr(begin, message.find('"', begin) - begin);
}

// Every test case of every file of the suite whose schema compiles: the constraint accepts
// exactly the valid instances (their canonical text fed through the recognizer). Schemas that use
// an unsupported keyword are counted as skipped, by keyword. A schema refused as unsatisfiable
// passes only if every one of its instances is invalid. format.json is left out: there
// `format` is an annotation (the draft's default), while pocket asserts formats.
TEST(JsonSchemaConformance, OfficialSuiteDraft2020_12) {
  int passed = 0, failed = 0, skipped = 0, groups = 0, groups_compiled = 0, unsatisfiable = 0;
  std::map<std::string, int> skipped_by_keyword;
  std::vector<std::string> failures;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(SuiteDir())) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_GT(files.size(), 30u) << SuiteDir();
  for (const auto& path : files) {
    const std::string file = path.filename().string();
    if (file == "format.json") continue;
    const Json groups_json = ReadJson(path.string());
    for (const Json& group : groups_json) {
      ++groups;
      const std::string schema_text = group["schema"].dump();
      auto grammar = CompileJsonSchema(schema_text);
      if (!grammar.ok()) {
        const std::string keyword = UnsupportedKeyword(grammar.status().message());
        if (getenv("POCKET_CONFORMANCE_VERBOSE") != nullptr)
          std::printf("[ conformance ] skip %s / %s: %s\n", file.c_str(),
                      group["description"].get<std::string>().c_str(),
                      grammar.status().message().c_str());
        if (grammar.status().message().starts_with(kUnsatisfiablePrefix)) {
          for (const Json& t : group["tests"]) {
            if (!t["valid"].get<bool>()) {
              ++passed;
              ++unsatisfiable;
              continue;
            }
            ++failed;
            failures.push_back(
                file + " / " + group["description"].get<std::string>() + " / " +
                t["description"].get<std::string>() +
                ": valid, but the schema was refused: " + grammar.status().ToString());
          }
          continue;
        }
        // Anything but "unsupported" (a crash, a malformed-schema error on a valid schema) fails.
        if (keyword.empty()) {
          ++failed;
          failures.push_back(file + " / " + group["description"].get<std::string>() +
                             ": does not compile: " + grammar.status().ToString());
          continue;
        }
        skipped += static_cast<int>(group["tests"].size());
        skipped_by_keyword[keyword] += static_cast<int>(group["tests"].size());
        continue;
      }
      ++groups_compiled;
      for (const Json& t : group["tests"]) {
        const std::string text = CanonicalJson(t["data"]);
        const bool want = t["valid"].get<bool>();
        const bool got = Accepts(grammar->get(), text);
        if (got == want) {
          ++passed;
        } else {
          ++failed;
          failures.push_back(file + " / " + group["description"].get<std::string>() + " / " +
                             t["description"].get<std::string>() + ": " + text + " should be " +
                             (want ? "valid" : "invalid"));
        }
      }
    }
  }
  std::printf(
      "[ conformance ] draft2020-12: %d test cases pass (%d of them refused as unsatisfiable), %d "
      "fail, %d skipped (%d of %d schemas compiled; format.json left out: format asserted "
      "here)\n",
      passed, unsatisfiable, failed, skipped, groups_compiled, groups);
  std::vector<std::pair<int, std::string>> by_count;
  for (const auto& [k, n] : skipped_by_keyword) by_count.emplace_back(n, k);
  std::sort(by_count.rbegin(), by_count.rend());
  std::string line = "[ conformance ] skipped by keyword:";
  for (const auto& [n, k] : by_count) line += " " + k + " " + std::to_string(n) + ",";
  std::printf("%s\n", line.c_str());
  for (const std::string& f : failures) std::printf("[ conformance ] FAIL %s\n", f.c_str());
  EXPECT_EQ(failed, 0);
  EXPECT_GT(passed, 450);  // not vacuous: most of the suite's supported cases
}

// The formats pocket asserts, on the suite's optional format tests: every string the constraint
// accepts is valid (soundness); valid strings it rejects are counted (leap seconds, rare forms).
TEST(JsonSchemaConformance, OptionalFormatsAreSound) {
  for (const char* name : {"date", "time", "date-time", "email", "uuid"}) {
    const Json groups = ReadJson(SuiteDir() + "/optional/format/" + name + ".json");
    int accepted_valid = 0, rejected_valid = 0, rejected_invalid = 0;
    for (const Json& group : groups) {
      auto grammar = CompileJsonSchema(group["schema"].dump());
      ASSERT_TRUE(grammar.ok()) << name << ": " << grammar.status().ToString();
      for (const Json& t : group["tests"]) {
        if (!t["data"].is_string()) continue;
        const bool want = t["valid"].get<bool>();
        const bool got = Accepts(grammar->get(), CanonicalJson(t["data"]));
        EXPECT_FALSE(got && !want) << name << ": accepted invalid " << t["data"].dump() << " ("
                                   << t["description"].get<std::string>() << ")";
        accepted_valid += got && want;
        rejected_valid += !got && want;
        rejected_invalid += !got && !want;
      }
    }
    std::printf(
        "[ conformance ] format %s: %d valid accepted, %d valid rejected, %d invalid "
        "rejected, 0 invalid accepted\n",
        name, accepted_valid, rejected_valid, rejected_invalid);
  }
}

TEST(CanonicalJson, Forms) {
  EXPECT_EQ(CanonicalJson(Json::parse(R"({"b": [1, 2.5, -0.0, 1.0], "a": "x\"\n\u0001é"})")),
            "{\"a\":\"x\\\"\\n\\u0001é\",\"b\":[1,2.5,0,1]}");
  EXPECT_EQ(CanonicalJson(Json::parse("1e-7")), "0.0000001");
  EXPECT_EQ(CanonicalJson(Json::parse("1e308")), "1" + std::string(308, '0'));
  EXPECT_EQ(CanonicalJson(Json::parse("18446744073709551615")), "18446744073709551615");
  EXPECT_EQ(CanonicalJson(Json::parse("-12.50")), "-12.5");
  EXPECT_EQ(CanonicalJson(Json::parse("[true,false,null]")), "[true,false,null]");
}

std::unique_ptr<Grammar> Compile(const std::string& schema, const JsonSchemaOptions& o = {}) {
  auto g = CompileJsonSchema(schema, o);
  EXPECT_TRUE(g.ok()) << schema << ": " << g.status().ToString();
  return g.ok() ? std::move(*g) : nullptr;
}

TEST(JsonSchema, ObjectsAnyOrderEachOnceRequiredSpaces) {
  auto g = Compile(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},
                      "required":["a"],"additionalProperties":false})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(Accepts(g.get(), R"({"a":1})"));
  EXPECT_TRUE(Accepts(g.get(), R"({"a": 1, "b": "x"})"));
  EXPECT_TRUE(Accepts(g.get(), R"({"b":"x","a":-3})"));
  EXPECT_FALSE(Accepts(g.get(), R"({"b":"x"})"));          // a is required
  EXPECT_FALSE(Accepts(g.get(), R"({"a":1,"a":2})"));      // at most once
  EXPECT_FALSE(Accepts(g.get(), R"({"a":1,"c":2})"));      // no additional
  EXPECT_FALSE(Accepts(g.get(), R"({"a":1.5})"));          // integer
  EXPECT_FALSE(Accepts(g.get(), R"({ "a":1})"));           // no other whitespace
  EXPECT_FALSE(Accepts(g.get(), R"({"a":1,  "b":"x"})"));  // one space at most
}

TEST(JsonSchema, AdditionalPropertiesSchemaAndKeysThatAreNotDeclared) {
  auto g =
      Compile(R"({"properties":{"ab":{"type":"null"}},"additionalProperties":{"type":"boolean"}})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(Accepts(g.get(), R"({"ab":null,"a":true,"abc":false,"":true})"));
  EXPECT_FALSE(Accepts(g.get(), R"({"ab":true})"));   // declared: its own schema
  EXPECT_FALSE(Accepts(g.get(), R"({"abc":null})"));  // additional: boolean
  EXPECT_TRUE(Accepts(g.get(), "1"));                 // no type: any non-object too
}

TEST(JsonSchema, ArraysPrefixItemsBounds) {
  auto g = Compile(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],
                      "items":{"type":"boolean"},"minItems":1,"maxItems":4})");
  ASSERT_TRUE(g);
  EXPECT_FALSE(Accepts(g.get(), "[]"));
  EXPECT_TRUE(Accepts(g.get(), R"(["a"])"));
  EXPECT_TRUE(Accepts(g.get(), R"(["a", 2, true, false])"));
  EXPECT_FALSE(Accepts(g.get(), R"(["a",2,true,false,true])"));
  EXPECT_FALSE(Accepts(g.get(), R"([1])"));
  EXPECT_FALSE(Accepts(g.get(), R"(["a",2,3])"));
  auto none = Compile(R"({"prefixItems":[{}],"items":false})");
  ASSERT_TRUE(none);
  EXPECT_TRUE(Accepts(none.get(), "[1]"));
  EXPECT_FALSE(Accepts(none.get(), "[1,2]"));
}

TEST(JsonSchema, StringsLengthsPatternsFormats) {
  auto len = Compile(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(Accepts(len.get(), R"("a")"));
  EXPECT_TRUE(Accepts(len.get(), R"("中文")"));
  EXPECT_TRUE(Accepts(len.get(), R"("a\nb")"));
  EXPECT_FALSE(Accepts(len.get(), R"("abcd")"));
  auto pat = Compile(R"({"type":"string","pattern":"[0-9]{3}"})");
  EXPECT_TRUE(Accepts(pat.get(), R"("ab123cd")"));  // unanchored
  EXPECT_FALSE(Accepts(pat.get(), R"("ab12cd")"));
  auto anchored = Compile(R"({"type":"string","pattern":"^[a-z]+$"})");
  EXPECT_TRUE(Accepts(anchored.get(), R"("abc")"));
  EXPECT_FALSE(Accepts(anchored.get(), R"("abc1")"));
  auto date = Compile(R"({"type":"string","format":"date"})");
  EXPECT_TRUE(Accepts(date.get(), R"("2024-02-29")"));
  EXPECT_FALSE(Accepts(date.get(), R"("2023-02-29")"));
  EXPECT_FALSE(Accepts(date.get(), R"("2023-04-31")"));
  auto uuid = Compile(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(Accepts(uuid.get(), R"("2eb8aa08-aa98-11ea-b4aa-73b441d16380")"));
  EXPECT_FALSE(Accepts(uuid.get(), R"("2eb8aa08-aa98-11ea-b4aa-73b441d1638")"));
}

TEST(JsonSchema, EnumsConstsNullableAnyOfOneOfRefs) {
  auto e = Compile(R"({"type":"string","enum":["a","b",1,null]})");
  EXPECT_TRUE(Accepts(e.get(), R"("a")"));
  EXPECT_FALSE(Accepts(e.get(), "1"));  // filtered out by the type
  auto n = Compile(R"({"type":["string","null"],"maxLength":1})");
  EXPECT_TRUE(Accepts(n.get(), "null"));
  EXPECT_TRUE(Accepts(n.get(), R"("x")"));
  EXPECT_FALSE(Accepts(n.get(), R"("xy")"));
  auto one = Compile(R"({"oneOf":[{"type":"string"},{"type":"integer","minimum":3}]})");
  EXPECT_TRUE(Accepts(one.get(), "4"));
  EXPECT_FALSE(Accepts(one.get(), "2"));
  auto rec =
      Compile(R"({"$defs":{"node":{"type":"object","properties":{"next":{"$ref":"#/$defs/node"},
                          "v":{"const":1}},"additionalProperties":false}},"$ref":"#/$defs/node"})");
  EXPECT_TRUE(Accepts(rec.get(), R"({"v":1,"next":{"next":{}}})"));
  EXPECT_FALSE(Accepts(rec.get(), R"({"next":{"v":2}})"));
}

TEST(JsonSchema, Spans) {
  JsonSchemaOptions o;
  o.span_source = "Battery \"lasts\" long";
  o.has_span_source = true;
  o.span_fields = {"opinion"};
  auto g =
      Compile(R"({"type":"object","properties":{"aspect":{"type":"string","x-pocket-span":true},
                      "opinion":{"type":"string"}},"required":["aspect","opinion"],
                      "additionalProperties":false})",
              o);
  ASSERT_TRUE(g);
  EXPECT_TRUE(Accepts(g.get(), R"({"aspect":"Battery","opinion":"\"lasts\" long"})"));
  EXPECT_TRUE(Accepts(g.get(), R"({"aspect":"","opinion":"s"})"));
  EXPECT_FALSE(Accepts(g.get(), R"({"aspect":"battery","opinion":"long"})"));
  EXPECT_FALSE(Accepts(g.get(), R"({"aspect":"Battery","opinion":"lasts long"})"));
  auto no_source = CompileJsonSchema(R"({"type":"string","x-pocket-span":true})");
  ASSERT_FALSE(no_source.ok());
  EXPECT_NE(no_source.status().message().find("span source"), std::string::npos);
}

// A list of values (JsonList): 1 to max_values values joined by the separator, then the closing
// text or not; each value checked against the schema.
TEST(JsonSchema, ListsOfValues) {
  JsonList list;
  list.separator = "; ";
  list.close = ".";
  list.max_values = 3;
  auto g = CompileJsonSchemaList(R"({"type":"integer","minimum":0})", list);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (const char* ok : {"1", "1.", "1; 2", "1; 2; 3", "1; 2; 3."}) {
    EXPECT_TRUE(Accepts(g->get(), ok)) << ok;
  }
  for (const char* bad : {"", ".", "1; ", "1; -2", "1; 2; 3; 4", "1..", "1.; 2"}) {
    EXPECT_FALSE(Accepts(g->get(), bad)) << bad;
  }
  list.max_values = 0;  // no limit
  auto unbounded = CompileJsonSchemaList(R"({"type":"integer"})", list);
  ASSERT_TRUE(unbounded.ok());
  EXPECT_TRUE(Accepts(unbounded->get(), "1; 2; 3; 4; 5; 6."));
  list.separator.clear();  // no list: the schema alone
  auto one = CompileJsonSchemaList(R"({"type":"integer"})", list);
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(Accepts(one->get(), "7"));
  EXPECT_FALSE(Accepts(one->get(), "7."));
  list.separator = "\xff";
  EXPECT_FALSE(CompileJsonSchemaList(R"({"type":"integer"})", list).ok());
}

// Hostile schemas (issue 43): nesting and groups past the limits are refused before anything
// recurses over them, and a schema whose grammar would grow past kMaxJsonSchemaRules stops there.
TEST(JsonSchema, BombsAreRefusedNamingTheLimit) {
  auto nested = [](int levels) {
    std::string s;
    for (int i = 0; i < levels; ++i) s.append(R"({"type":"array","items":)");
    s.append(R"({"type":"integer"})");
    s.append(static_cast<size_t>(levels), '}');
    return s;
  };
  EXPECT_TRUE(CompileJsonSchema(nested(40)).ok());  // 41 levels: within the limit
  auto deep = CompileJsonSchema(nested(3000));      // ~75 KB, the issue's bomb
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("nests deeper than 64 levels"), std::string::npos)
      << deep.status().message();
  const std::string groups = std::string(100000, '(') + "a" + std::string(100000, ')');
  std::string pattern_schema = R"({"type":"string","pattern":")";
  pattern_schema.append(groups).append(R"("})");
  auto pattern = CompileJsonSchema(pattern_schema);
  ASSERT_FALSE(pattern.ok());
  EXPECT_NE(pattern.status().message().find("groups nested more than 200 deep"), std::string::npos)
      << pattern.status().message().substr(0, 200);
  // Width, not depth: 60 properties, each a $ref with a sibling keyword (merged, so compiled
  // anew each time) to a definition of 2,000 properties: ~4,000 rules each, stopped at the limit.
  nlohmann::json wide = {{"type", "object"}, {"properties", nlohmann::json::object()}};
  nlohmann::json big = {{"type", "object"}, {"properties", nlohmann::json::object()}};
  for (int i = 0; i < 2000; ++i) big["properties"][StrCat("p", i)] = {{"type", "integer"}};
  for (int i = 0; i < 60; ++i) {
    wide["properties"][StrCat("q", i)] = {{"$ref", "#/$defs/big"}, {"type", "object"}};
  }
  wide["$defs"]["big"] = big;
  auto huge = CompileJsonSchema(wide.dump());
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("grows past 100000 rules"), std::string::npos)
      << huge.status().message();
}

TEST(JsonSchema, ErrorsNameKeywordAndPointer) {
  auto bad = CompileJsonSchema(R"({"properties":{"a":{"uniqueItems":true,"type":"array"}}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(UnsupportedKeyword(bad.status().message()), "uniqueItems") << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("#/properties/a"), std::string::npos);
  auto unknown = CompileJsonSchema(R"({"type":"object","frobnicate":1})");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(UnsupportedKeyword(unknown.status().message()), "frobnicate");
  EXPECT_FALSE(CompileJsonSchema("{not json").ok());
  auto missing = CompileJsonSchema(R"({"$ref":"#/$defs/nope"})");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("points nowhere"), std::string::npos);
  auto overlap = CompileJsonSchema(R"({"oneOf":[{"type":"integer"},{"minimum":2}]})");
  ASSERT_FALSE(overlap.ok());
  EXPECT_EQ(UnsupportedKeyword(overlap.status().message()), "oneOf");
  auto fmt = CompileJsonSchema(R"({"format":"ipv4"})");
  ASSERT_FALSE(fmt.ok());
  EXPECT_EQ(UnsupportedKeyword(fmt.status().message()), "format");
}

// What an unsatisfiable-schema error names: the keyword ("" for a false root) and the pointer.
struct Refusal {
  std::string keyword, pointer, message;
};

Refusal Refuse(const std::string& schema, const JsonSchemaOptions& o = {}) {
  auto g = CompileJsonSchema(schema, o);
  EXPECT_FALSE(g.ok()) << schema << " compiles";
  if (g.ok()) return {};
  Refusal r;
  r.message = std::string(g.status().message());
  EXPECT_TRUE(r.message.starts_with(kUnsatisfiablePrefix)) << schema << ": " << r.message;
  std::string_view rest = std::string_view(r.message).substr(kUnsatisfiablePrefix.size());
  if (rest.starts_with(" keyword \"")) {
    rest.remove_prefix(10);
    r.keyword = std::string(rest.substr(0, rest.find('"')));
    rest.remove_prefix(r.keyword.size() + 1);
  }
  if (rest.starts_with(" at ")) r.pointer = std::string(rest.substr(4, rest.find(':') - 4));
  return r;
}

#define EXPECT_REFUSED(schema, kw, ptr, text)                                               \
  do {                                                                                      \
    const Refusal r_ = Refuse(schema);                                                      \
    EXPECT_EQ(r_.keyword, kw) << r_.message;                                                \
    EXPECT_EQ(r_.pointer, ptr) << r_.message;                                               \
    EXPECT_NE(r_.message.find(text), std::string::npos) << r_.message << " lacks " << text; \
  } while (0)

TEST(JsonSchemaUnsatisfiable, ContradictoryBoundsNameKeywordAndPointer) {
  EXPECT_REFUSED(R"({"type":"object","properties":{"name":{"type":"string","minLength":5,
                   "maxLength":3}}})",
                 "minLength", "#/properties/name", "minLength 5 is greater than maxLength 3");
  EXPECT_REFUSED(R"({"properties":{"a/b":{"properties":{"age":{"type":"integer","minimum":5,
                   "maximum":1}}}}})",
                 "minimum", "#/properties/a~1b/properties/age",
                 "minimum 5 is greater than maximum 1");
  EXPECT_REFUSED(R"({"type":"number","exclusiveMinimum":2,"exclusiveMaximum":2})",
                 "exclusiveMinimum", "#", "exclusiveMinimum 2 equals exclusiveMaximum 2");
  EXPECT_REFUSED(R"({"type":"number","minimum":3,"exclusiveMaximum":3})", "exclusiveMaximum", "#",
                 "minimum 3 equals exclusiveMaximum 3");
  EXPECT_REFUSED(R"({"type":"integer","minimum":0.2,"maximum":0.8})", "minimum", "#",
                 "no integer lies within minimum 0.2 and maximum 0.8");
  EXPECT_REFUSED(R"({"type":"integer","exclusiveMinimum":1,"exclusiveMaximum":2})",
                 "exclusiveMinimum", "#", "no integer lies");
  EXPECT_REFUSED(R"({"type":"number","minimum":2.5,"maximum":3.5,"multipleOf":2})", "multipleOf",
                 "#", "no number that is a multiple of 2 lies");
  EXPECT_REFUSED(R"({"type":"array","items":{"type":"array","minItems":3,"maxItems":2}})",
                 "minItems", "#/items", "minItems 3 is greater than maxItems 2");
  EXPECT_REFUSED(R"({"type":"array","prefixItems":[{},{}],"items":false,"minItems":3})", "minItems",
                 "#", "minItems 3 is more than the 2 items prefixItems allows");
  EXPECT_REFUSED(R"({"type":"array","prefixItems":[{},false],"minItems":2})", "minItems", "#",
                 "requires item 1");
  // A contradiction is an error even where another type remains, and without "type".
  EXPECT_REFUSED(R"({"type":["string","null"],"minLength":5,"maxLength":3})", "minLength", "#",
                 "minLength 5");
  EXPECT_REFUSED(R"({"minimum":5,"maximum":1})", "minimum", "#", "minimum 5");
  // Bounds that only apply to a type the schema does not allow are not checked.
  EXPECT_TRUE(CompileJsonSchema(R"({"type":"integer","minLength":5,"maxLength":3})").ok());
}

TEST(JsonSchemaUnsatisfiable, NoValueAtAll) {
  EXPECT_REFUSED(R"({"type":[]})", "type", "#", "the type list is empty");
  EXPECT_REFUSED(R"({"properties":{"x":{"enum":[]}}})", "enum", "#/properties/x",
                 "the enum lists no value");
  EXPECT_REFUSED(R"({"type":"string","enum":[1,2,null]})", "enum", "#",
                 "none of its values satisfies the rest of the schema (type)");
  EXPECT_REFUSED(R"({"type":"string","const":5})", "const", "#",
                 "the value 5 does not satisfy the rest of the schema (type)");
  EXPECT_REFUSED(R"({"const":5,"enum":[1,2]})", "const", "#", "the value 5 is not in the enum");
  EXPECT_REFUSED(R"({"allOf":[{"type":"string"},{"type":["integer","null"]}]})", "type", "#",
                 "no type in common");
  EXPECT_REFUSED(R"({"items":{"allOf":[{"type":"string"},false]}})", "allOf", "#/items",
                 "one of its schemas is false");
  EXPECT_REFUSED(R"({"type":"object","properties":{"a":{}},"required":["a","b"],
                   "additionalProperties":false})",
                 "required", "#", "property \"b\" is required, but additionalProperties is false");
  EXPECT_REFUSED(R"({"type":"object","properties":{"a":false},"required":["a"]})", "required", "#",
                 "property \"a\" is required, but properties makes it false");
  EXPECT_REFUSED(R"({"$defs":{"age":{"type":"integer","minimum":5,"maximum":1}},
                   "properties":{"a":{"$ref":"#/$defs/age"}}})",
                 "minimum", "#/$defs/age", "minimum 5 is greater than maximum 1");
  EXPECT_REFUSED(R"({"$defs":{"no":false},"properties":{"a":{"$ref":"#/$defs/no"}}})", "$ref",
                 "#/properties/a", "\"#/$defs/no\" is false");
  const Refusal root = Refuse("false");
  EXPECT_EQ(root.keyword, "");
  EXPECT_EQ(root.pointer, "#");
  JsonSchemaOptions o;
  o.span_source = "short";
  o.has_span_source = true;
  const Refusal span = Refuse(R"({"type":"string","x-pocket-span":true,"minLength":6})", o);
  EXPECT_EQ(span.keyword, "minLength");
  EXPECT_NE(span.message.find("longer than the span source (5 characters)"), std::string::npos)
      << span.message;
}

TEST(JsonSchemaUnsatisfiable, AnyOfOnlyWhenEveryBranchIs) {
  // One branch unsatisfiable (here by a sibling merged into it): the others remain.
  auto some = Compile(R"({"type":"integer","anyOf":[{"type":"string"},{"minimum":0}]})");
  ASSERT_TRUE(some);
  EXPECT_TRUE(Accepts(some.get(), "3"));
  EXPECT_FALSE(Accepts(some.get(), "-3"));
  auto contradiction =
      Compile(R"({"anyOf":[{"type":"string","minLength":5,"maxLength":3},{"type":"integer"}]})");
  ASSERT_TRUE(contradiction);
  EXPECT_TRUE(Accepts(contradiction.get(), "3"));
  EXPECT_FALSE(Accepts(contradiction.get(), R"("abcd")"));
  auto nullable = Compile(
      R"({"oneOf":[{"type":["string","null"],"minLength":5,"maxLength":3},{"type":"integer"}]})");
  ASSERT_TRUE(nullable);
  EXPECT_TRUE(Accepts(nullable.get(), "null"));  // the branch keeps its other type
  EXPECT_FALSE(Accepts(nullable.get(), R"("abcd")"));
  // Every branch: an error at the anyOf, naming each branch's reason with its pointer.
  const Refusal all = Refuse(R"({"properties":{"x":{"anyOf":[
      {"type":"string","minLength":5,"maxLength":3},{"type":"integer","minimum":3,"maximum":1},
      false]}}})");
  EXPECT_EQ(all.keyword, "anyOf");
  EXPECT_EQ(all.pointer, "#/properties/x");
  for (const char* part : {"keyword \"minLength\" at #/properties/x/anyOf/0",
                           "keyword \"minimum\" at #/properties/x/anyOf/1",
                           "keyword \"anyOf\" at #/properties/x/anyOf/2: the branch is false"}) {
    EXPECT_NE(all.message.find(part), std::string::npos) << all.message << " lacks " << part;
  }
  EXPECT_REFUSED(R"({"type":"string","oneOf":[{"type":"integer"},{"type":"null"}]})", "oneOf", "#",
                 "every branch is unsatisfiable");
}

TEST(JsonSchemaUnsatisfiable, DeliberateFalseAndTrivialSchemasStillCompile) {
  for (const char* schema :
       {"{}", "true", R"({"type":"object"})", R"({"properties":{"x":false}})",
        R"({"type":"array","items":false})", R"({"type":"array","prefixItems":[{},false]})",
        R"({"additionalProperties":false,"required":[]})", R"({"minLength":3,"maxLength":3})",
        R"({"type":"integer","minimum":1,"maximum":1})", R"({"enum":[1,"a"],"type":"string"})",
        R"({"$defs":{"no":false},"properties":{"x":{"type":"string"}}})"}) {
    EXPECT_TRUE(Compile(schema)) << schema;
  }
  auto g = Compile(R"({"type":"object","properties":{"x":false,"y":{}}})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(Accepts(g.get(), R"({"y":1})"));
  EXPECT_FALSE(Accepts(g.get(), R"({"x":1})"));
}

// Numbers under a schema keep to the limits of json_number.h: 17 significant digits, 0 or
// 1e-6 <= |x| < 1e21, so a looping model cannot run on ("-3000000...", "0.0000000...").
TEST(JsonSchema, NumbersKeepToTheLimits) {
  for (const char* schema : {"{}", R"({"type":"number"})", R"({"type":"integer"})",
                             R"({"type":"number","minimum":-1e30})"}) {
    auto g = Compile(schema);
    ASSERT_TRUE(g);
    const bool integer = std::string_view(schema).find("integer") != std::string_view::npos;
    EXPECT_EQ(Accepts(g.get(), "0.12345678901234567"), !integer) << schema;
    EXPECT_FALSE(Accepts(g.get(), "0.123456789012345678")) << schema;
    EXPECT_EQ(Accepts(g.get(), CanonicalJson(Json::parse("1e-6"))), !integer) << schema;
    EXPECT_FALSE(Accepts(g.get(), CanonicalJson(Json::parse("1e-7")))) << schema;
    EXPECT_FALSE(Accepts(g.get(), "0." + std::string(400, '0') + "1")) << schema;
    EXPECT_TRUE(Accepts(g.get(), "-3" + std::string(20, '0'))) << schema;
    EXPECT_FALSE(Accepts(g.get(), "-3" + std::string(21, '0'))) << schema;
    EXPECT_FALSE(Accepts(g.get(), CanonicalJson(Json::parse("1e308")))) << schema;
  }
  // Bounds that leave no number within the limits are refused.
  EXPECT_REFUSED(R"({"type":"number","minimum":1e21})", "minimum", "#",
                 "minimum 1000000000000000000000 is not below 1e21");
  EXPECT_REFUSED(R"({"type":"number","exclusiveMinimum":0,"maximum":1e-7})", "exclusiveMinimum",
                 "#", "no number pocket writes");
}

// enum and const values are exempt from those limits: each is checked against the rest of the
// schema by its exact value (numbers nested in it too) and written as its canonical text.
TEST(JsonSchema, EnumAndConstValuesAreExemptFromTheNumberLimits) {
  const std::string tiny = CanonicalJson(Json::parse("1e-7"));  // 0.0000001
  const std::string huge = CanonicalJson(Json::parse("1e25"));  // 1 and 25 zeros
  auto small = Compile(R"({"type":"number","const":1e-7})");
  ASSERT_TRUE(small);
  EXPECT_TRUE(Accepts(small.get(), tiny));
  EXPECT_FALSE(Accepts(small.get(), "0"));
  auto big = Compile(R"({"type":"integer","const":1e25})");
  ASSERT_TRUE(big);
  EXPECT_TRUE(Accepts(big.get(), huge));
  auto e = Compile(R"({"type":"number","enum":[1e-7,2]})");
  ASSERT_TRUE(e);
  EXPECT_TRUE(Accepts(e.get(), tiny));  // not dropped
  EXPECT_TRUE(Accepts(e.get(), "2"));
  auto longest = Compile(R"({"type":"number","minimum":0,"const":1e308})");
  ASSERT_TRUE(longest);
  EXPECT_TRUE(Accepts(longest.get(), CanonicalJson(Json::parse("1e308"))));
  // Bounds and multipleOf are applied exactly, beyond the limits as well.
  auto bounded = Compile(R"({"type":"number","minimum":1e-8,"maximum":1e-7,
                            "enum":[5e-8,1e-8,2e-7,1e-9,0.5]})");
  ASSERT_TRUE(bounded);
  EXPECT_TRUE(Accepts(bounded.get(), CanonicalJson(Json::parse("5e-8"))));
  EXPECT_TRUE(Accepts(bounded.get(), CanonicalJson(Json::parse("1e-8"))));
  EXPECT_FALSE(Accepts(bounded.get(), CanonicalJson(Json::parse("2e-7"))));
  EXPECT_FALSE(Accepts(bounded.get(), CanonicalJson(Json::parse("1e-9"))));
  EXPECT_FALSE(Accepts(bounded.get(), "0.5"));
  auto above = Compile(R"({"type":"integer","minimum":1e22,"multipleOf":1e20,
                          "enum":[1e25,1.23456789e22,1e21]})");
  ASSERT_TRUE(above);
  EXPECT_TRUE(Accepts(above.get(), huge));
  // 1.23456789e22 is 123.456789 times 1e20.
  EXPECT_FALSE(Accepts(above.get(), CanonicalJson(Json::parse("1.23456789e22"))));
  EXPECT_FALSE(Accepts(above.get(), CanonicalJson(Json::parse("1e21"))));  // below minimum
  auto negative = Compile(R"({"minimum":-1e-7,"exclusiveMaximum":0,"enum":[-1e-7,-5e-8,0,-1e25]})");
  ASSERT_TRUE(negative);
  EXPECT_TRUE(Accepts(negative.get(), "-" + tiny));
  EXPECT_TRUE(Accepts(negative.get(), CanonicalJson(Json::parse("-5e-8"))));
  EXPECT_FALSE(Accepts(negative.get(), "0"));
  EXPECT_FALSE(Accepts(negative.get(), "-" + huge));
  auto below = Compile(R"({"type":"integer","exclusiveMaximum":-1e22,"const":-1e25})");
  ASSERT_TRUE(below);
  EXPECT_TRUE(Accepts(below.get(), "-" + huge));
  // Nested: an enum in a property or in items, and numbers inside a const value.
  auto property = Compile(R"({"type":"object","properties":{"a":{"type":"number",
                             "enum":[1e-7,2]}},"required":["a"],"additionalProperties":false})");
  ASSERT_TRUE(property);
  EXPECT_TRUE(Accepts(property.get(), "{\"a\":" + tiny + "}"));
  EXPECT_TRUE(Accepts(property.get(), R"({"a":2})"));
  EXPECT_FALSE(Accepts(property.get(), R"({"a":3})"));
  auto items = Compile(R"({"type":"array","items":{"type":"integer","enum":[1e25,7]}})");
  ASSERT_TRUE(items);
  EXPECT_TRUE(Accepts(items.get(), "[" + huge + ",7]"));
  auto inside = Compile(R"({"type":"array","items":{"type":"number"},"const":[1e-7,1e25]})");
  ASSERT_TRUE(inside);
  EXPECT_TRUE(Accepts(inside.get(), "[" + tiny + "," + huge + "]"));
  auto any = Compile(R"({"type":"object","const":{"a":[1e-7]}})");
  ASSERT_TRUE(any);
  EXPECT_TRUE(Accepts(any.get(), "{\"a\":[" + tiny + "]}"));
  auto member =
      Compile(R"({"properties":{"a":{"type":"integer","minimum":1e22}},"const":{"a":1e25}})");
  ASSERT_TRUE(member);
  EXPECT_TRUE(Accepts(member.get(), "{\"a\":" + huge + "}"));
  // Values that violate the rest of the schema are still refused, naming the keyword.
  EXPECT_REFUSED(R"({"type":"integer","const":1.5})", "const", "#",
                 "the value 1.5 does not satisfy the rest of the schema (type)");
  EXPECT_REFUSED(R"({"minimum":3,"enum":[1,2]})", "enum", "#",
                 "none of its values satisfies the rest of the schema (minimum)");
  EXPECT_REFUSED(R"({"type":"integer","const":1e-7})", "const", "#",
                 "does not satisfy the rest of the schema (type)");
  EXPECT_REFUSED(R"({"type":"number","maximum":1e-8,"const":1e-7})", "const", "#",
                 "does not satisfy the rest of the schema (maximum, type)");
  EXPECT_REFUSED(R"({"properties":{"a":{"exclusiveMinimum":1e-7,"enum":[1e-7,-1e25]}}})", "enum",
                 "#/properties/a", "none of its values satisfies");
  EXPECT_REFUSED(R"({"type":"array","items":{"type":"integer"},"const":[1e-7]})", "const", "#",
                 "does not satisfy the rest of the schema (items, type)");
  EXPECT_REFUSED(R"({"type":"integer","multipleOf":1e20,"const":1.23456789e22})", "const", "#",
                 "(multipleOf, type)");
  // Bounds that contradict each other are named as before.
  EXPECT_REFUSED(R"({"minimum":5,"maximum":1,"enum":[3]})", "minimum", "#",
                 "minimum 5 is greater than maximum 1");
  EXPECT_REFUSED(R"({"type":"integer","minimum":2.5,"maximum":3.5,"multipleOf":2,"const":3})",
                 "multipleOf", "#", "no integer that is a multiple of 2 lies");
  EXPECT_REFUSED(R"({"type":"integer","minimum":0.2,"maximum":0.8,"enum":[0.5]})", "minimum", "#",
                 "no integer lies within minimum 0.2 and maximum 0.8");
  EXPECT_REFUSED(R"({"type":"integer","minimum":1e-8,"maximum":1e-7,"const":5e-8})", "minimum", "#",
                 "no integer lies within minimum 0.00000001 and maximum 0.0000001");
  EXPECT_REFUSED(R"({"exclusiveMinimum":1e22,"maximum":1e22,"enum":[1e22]})", "exclusiveMinimum",
                 "#", "equals maximum");
}

}  // namespace
}  // namespace pocket
