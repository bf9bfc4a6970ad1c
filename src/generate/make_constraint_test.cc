// MakeConstraint: blank constraints are refused, never read as "no constraint"; unsatisfiable
// JSON Schemas are refused when the constraint is made, not in the middle of generation.
#include <gtest/gtest.h>

#include <string>

#include "generate/constraint.h"
#include "tokenizer/tokenizer.h"

namespace pocket {
namespace {

std::shared_ptr<const Tokenizer> StoriesTokenizer() {
  auto t = Tokenizer::FromLlama2cFile(
      std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/tok512.bin", 512);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? *t : nullptr;
}

// The error MakeConstraint gives for `spec` ("" when it succeeds).
std::string Error(const ConstraintSpec& spec) {
  auto tok = StoriesTokenizer();
  if (!tok) return "no tokenizer";
  auto c = MakeConstraint(*tok, spec);
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(MakeConstraint, EmptyOrBlankChoiceNamesItsIndex) {
  ConstraintSpec spec;
  spec.choices = {"yes", "no", ""};
  EXPECT_EQ(Error(spec), "choice 2 is empty");
  spec.choices = {"yes", " \t", "no"};
  EXPECT_EQ(Error(spec), "choice 1 is blank (only whitespace)");
  spec.choices = {"\n"};
  EXPECT_EQ(Error(spec), "choice 0 is blank (only whitespace)");
  spec.choices = {"yes", " no"};  // whitespace inside a choice is fine
  EXPECT_EQ(Error(spec), "");
}

TEST(MakeConstraint, BlankRegexSchemaGrammarAreErrors) {
  ConstraintSpec regex;
  regex.regex = "  ";
  EXPECT_NE(Error(regex).find("blank regex"), std::string::npos) << Error(regex);
  ConstraintSpec schema;
  schema.json_schema = " \n\t ";
  EXPECT_NE(Error(schema).find("blank JSON Schema"), std::string::npos) << Error(schema);
  ConstraintSpec grammar;
  grammar.grammar = "\n\n";
  EXPECT_NE(Error(grammar).find("blank grammar"), std::string::npos) << Error(grammar);
  // Blank and given next to another constraint: still named as blank.
  ConstraintSpec both;
  both.regex = std::string(1, ' ');  // not = " ": GCC 12 misreports -Wrestrict
  both.grammar = "root ::= \"a\"";
  EXPECT_NE(Error(both).find("blank regex"), std::string::npos) << Error(both);
}

TEST(MakeConstraint, EmptyFieldsMeanNoConstraint) {
  auto tok = StoriesTokenizer();
  ASSERT_TRUE(tok);
  auto none = MakeConstraint(*tok, ConstraintSpec{});
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, nullptr);
}

TEST(MakeConstraint, TrivialSchemasStillWork) {
  auto tok = StoriesTokenizer();
  ASSERT_TRUE(tok);
  for (const char* text : {"{}", " {} ", "true", "{\"type\":\"object\"}", "{\"enum\":[1]}"}) {
    ConstraintSpec spec;
    spec.json_schema = text;
    auto c = MakeConstraint(*tok, spec);
    ASSERT_TRUE(c.ok()) << text << ": " << c.status().ToString();
    ASSERT_NE(*c, nullptr) << text;
    EXPECT_FALSE((*c)->Allowed().empty()) << text;
  }
  ConstraintSpec regex;
  regex.regex = "a|b";
  EXPECT_EQ(Error(regex), "");
}

TEST(MakeConstraint, UnsatisfiableSchemaIsRefusedUpFront) {
  ConstraintSpec spec;
  spec.json_schema =
      R"({"type":"object","properties":{"age":{"type":"integer","minimum":5,"maximum":1}}})";
  const std::string e = Error(spec);
  EXPECT_NE(e.find("unsatisfiable JSON Schema keyword \"minimum\" at #/properties/age"),
            std::string::npos)
      << e;
  spec.json_schema = "false";
  EXPECT_NE(Error(spec).find("unsatisfiable JSON Schema at #"), std::string::npos) << Error(spec);
}

TEST(MakeConstraint, AJsonListNeedsASchemaAndABoundWithinLimits) {
  ConstraintSpec spec;
  spec.json_list = JsonList{",", "", 0};
  EXPECT_EQ(Error(spec), "a JSON list needs a JSON schema for its values");
  spec.json_schema = R"({"type": "integer"})";
  EXPECT_EQ(Error(spec), "");
  spec.json_list.max_values = -1;
  EXPECT_NE(Error(spec).find("max_values"), std::string::npos);
  spec.json_list.max_values = 3;
  EXPECT_EQ(Error(spec), "");
}

}  // namespace
}  // namespace pocket
