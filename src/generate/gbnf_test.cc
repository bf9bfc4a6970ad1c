#include "generate/gbnf.h"

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "generate/grammar.h"

namespace pocket {
namespace {

std::string ReadGrammarFile(const std::string& name) {
  std::ifstream in(std::string(POCKET_SHARED_DIR) + "/testdata/gbnf/" + name, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::unique_ptr<Grammar> Parse(std::string_view text, const GbnfOptions& options = {}) {
  auto grammar = ParseGbnf(text, options);
  EXPECT_TRUE(grammar.ok()) << grammar.status().ToString() << "\nin:\n" << text;
  if (!grammar.ok()) return nullptr;
  return std::move(grammar).value();
}

// Whole-text matching of each sample, with the grammar dumped on a failure.
void ExpectLanguage(Grammar* grammar, const std::vector<std::string>& accepted,
                    const std::vector<std::string>& rejected) {
  ASSERT_NE(grammar, nullptr);
  Recognizer recognizer(grammar);
  for (const std::string& text : accepted) {
    auto match = recognizer.Matches(text);
    ASSERT_TRUE(match.ok()) << match.status().ToString();
    EXPECT_TRUE(*match) << "should accept: " << text << "\ngrammar:\n" << grammar->ToString();
  }
  for (const std::string& text : rejected) {
    auto match = recognizer.Matches(text);
    ASSERT_TRUE(match.ok()) << match.status().ToString();
    EXPECT_FALSE(*match) << "should reject: " << text << "\ngrammar:\n" << grammar->ToString();
  }
}

void ExpectLanguage(std::string_view gbnf, const std::vector<std::string>& accepted,
                    const std::vector<std::string>& rejected, const GbnfOptions& options = {}) {
  SCOPED_TRACE(std::string(gbnf));
  std::unique_ptr<Grammar> grammar = Parse(gbnf, options);
  ExpectLanguage(grammar.get(), accepted, rejected);
}

// `prefix` can be extended to a sentence but is not one; `bad` cannot follow it.
void ExpectPrefix(Grammar* grammar, std::string_view prefix, std::string_view bad) {
  ASSERT_NE(grammar, nullptr);
  Recognizer recognizer(grammar);
  ASSERT_TRUE(recognizer.Reset().ok());
  auto fed = recognizer.Feed(prefix);
  ASSERT_TRUE(fed.ok()) << fed.status().ToString();
  EXPECT_TRUE(*fed) << "prefix refused: " << prefix;
  EXPECT_FALSE(recognizer.Complete()) << "prefix taken as complete: " << prefix;
  EXPECT_TRUE(recognizer.CanContinue());
  auto more = recognizer.Feed(bad);
  ASSERT_TRUE(more.ok()) << more.status().ToString();
  EXPECT_FALSE(*more) << "accepted " << bad << " after " << prefix;
  EXPECT_FALSE(recognizer.Complete());  // a refused feed leaves the state as it was
}

// The parse fails with a message containing `where` ("line:column: ") and `what`.
void ExpectError(std::string_view gbnf, std::string_view where, std::string_view what,
                 const GbnfOptions& options = {}) {
  auto grammar = ParseGbnf(gbnf, options);
  ASSERT_FALSE(grammar.ok()) << "parsed: " << gbnf;
  EXPECT_EQ(grammar.status().code(), StatusCode::kInvalidArgument);
  const std::string& message = grammar.status().message();
  // "3:" checks the line only.
  std::string prefix = where.back() == ':' ? std::string(where) : std::string(where) + ": ";
  EXPECT_EQ(message.rfind(prefix, 0), 0u)
      << "message: " << message << "\nexpected at " << where << "\nin:\n"
      << gbnf;
  EXPECT_NE(message.find(what), std::string::npos)
      << "message: " << message << "\nexpected: " << what << "\nin:\n"
      << gbnf;
}

// ---- llama.cpp's example grammars (../shared/testdata/gbnf)

TEST(GbnfFiles, AllParse) {
  for (const char* name : {"arithmetic.gbnf", "c.gbnf", "chess.gbnf", "english.gbnf",
                           "japanese.gbnf", "json.gbnf", "json_arr.gbnf", "list.gbnf"}) {
    std::string text = ReadGrammarFile(name);
    ASSERT_FALSE(text.empty()) << name;
    auto grammar = ParseGbnf(text);
    EXPECT_TRUE(grammar.ok()) << name << ": " << grammar.status().ToString();
  }
}

TEST(GbnfFiles, Arithmetic) {
  auto g = Parse(ReadGrammarFile("arithmetic.gbnf"));
  ExpectLanguage(
      g.get(),
      {"1+2=3\n", "x = 42\n", "(a +b)*c = d\n", "1+2=3\nx*y = z\n", "foo_1/(2-bar) =\n7\n"},
      {"", "1+=3\n", "1+2=3", "1 + 2=3\n", "X=1\n", "1+2=3\n=\n"});
  ExpectPrefix(g.get(), "1+2=3", "=");
}

TEST(GbnfFiles, C) {
  auto g = Parse(ReadGrammarFile("c.gbnf"));
  ExpectLanguage(g.get(),
                 {"", "int main(){return 0;}", "int add(int a){int b = a+1;return b;}",
                  "float f(){while(x<10){x = x+1;}}int g(){}",
                  "char c(){// a comment\nif(a==b){return -a;}else{print (a, b);}}",
                  "int h(){/* many\n* lines */for(int i = 0; i<n; i = i+1){s = s+i*2;}}"},
                 {"int main(){return 0}", "intmain(){}", "int main(){return 0;", "void f(){}",
                  "int f(){x=1;}"});
  ExpectPrefix(g.get(), "int main(){return", ")");
}

TEST(GbnfFiles, Chess) {
  auto g = Parse(ReadGrammarFile("chess.gbnf"));
  ExpectLanguage(g.get(),
                 {"1. e4 e5\n2. Nf3 Nc6\n3. Bb5 a6\n", "1. d4 d5\n2. c4 dxc4\n10. O-O-O Qxd8+\n",
                  "1. e4 e5\n2. exd5 e1=Q#\n"},
                 {"1. e4 e5\n", "1. e9 e5\n2. Nf3 Nc6\n", "1. Zf3 e5\n2. Nf3 Nc6\n",
                  "1. e4 e5\n0. Nf3 Nc6\n", "1.e4 e5\n2. Nf3 Nc6\n"});
  ExpectPrefix(g.get(), "1. e4 e5\n", "x");
}

TEST(GbnfFiles, English) {
  auto g = Parse(ReadGrammarFile("english.gbnf"));
  ExpectLanguage(g.get(),
                 {"Hello, world! This is a test.", "It costs $5 (or ~4.50)\tright?\nYes: [ok]",
                  "a\\b \"quoted\" {x|y}"},
                 {"", "Hello  world", "h\xC3\xA9llo", "trailing "});
  ExpectPrefix(g.get(), "Hello ", " ");
}

TEST(GbnfFiles, Japanese) {
  auto g = Parse(ReadGrammarFile("japanese.gbnf"));
  ExpectLanguage(g.get(), {"私は日本語を話します。", "カタカナ テスト", "東京、大阪\nこんにちは"},
                 {"", "Hello", "日本 語abc", "日本  語"});
  ExpectPrefix(g.get(), "日本語 ", "a");
}

TEST(GbnfFiles, Json) {
  auto g = Parse(ReadGrammarFile("json.gbnf"));
  ExpectLanguage(
      g.get(),
      {R"({})", R"({"a": 1})", R"({"a": 1, "b": [true, false, null], "c": {"d": "e\"\\\n\u00e9"}})",
       R"({"x": {"y": [1, [2, {"z": []}]]}, "s": "tab\there", "n": -12.5e+3, "m": 0.25})",
       "{\n  \"a\": 1,\n  \"b\": \"caf\xC3\xA9\"\n}", R"({"deep": [[[[{}]]]]})"},
      {R"([1, 2])", R"({"a": 1,})", R"({'a': 1})", R"({"a": 01})", R"({"a": "\x"})",
       "{\"a\": \"line\nbreak\"}", R"({"a" 1})", R"({"a": tru})"});
  ExpectPrefix(g.get(), R"({"a": [1, 2)", "}");
}

TEST(GbnfFiles, JsonArr) {
  auto g = Parse(ReadGrammarFile("json_arr.gbnf"));
  ExpectLanguage(g.get(), {"[\n]", "[\n{\"a\": 1},\n{\"b\": [2, 3]}]", "[\n\"s\",\n-1.5e+10]"},
                 {"[]", "[{\"a\": 1}]", "[\n1]\n", "[\n1, 2]"});
  ExpectPrefix(g.get(), "[\n{\"a\": 1},\n", "]");
}

TEST(GbnfFiles, List) {
  auto g = Parse(ReadGrammarFile("list.gbnf"));
  ExpectLanguage(g.get(), {"- milk\n", "- milk\n- eggs\n- bread \xF0\x9F\x8D\x9E\n"},
                 {"", "- \n", "milk\n", "- a\rb\n",
                  "- a\xE2\x80\xA8"
                  "b\n",
                  "- milk"});
  ExpectPrefix(g.get(), "- milk", "\r");
}

// ---- the syntax, construct by construct

TEST(GbnfSyntax, LiteralEscapes) {
  ExpectLanguage(R"(root ::= "a\n\t\r\\\"\x41\u00e9\U0001F600\[\]\-")",
                 {"a\n\t\r\\\"A\xC3\xA9\xF0\x9F\x98\x80[]-"}, {"a", "a\\n"});
  ExpectLanguage(R"(root ::= "" "x" "")", {"x"}, {""});
  ExpectLanguage("root ::= \"caf\xC3\xA9 \xE6\x97\xA5\"", {"caf\xC3\xA9 \xE6\x97\xA5"},
                 {"cafe \xE6\x97\xA5"});
  ExpectLanguage(R"(root ::= "#not a comment" "|")", {"#not a comment|"}, {""});
}

TEST(GbnfSyntax, Classes) {
  ExpectLanguage("root ::= [a-c0-9_]+", {"abc_09", "b"}, {"", "d", "A", "-"});
  ExpectLanguage("root ::= [^a-z\\n]+", {"ABC 123", "\xC3\xA9", "\xF0\x9F\x98\x80"},
                 {"", "a", "\n", "Xy"});
  // Ranges of code points beyond ASCII, in both raw and escaped form.
  ExpectLanguage("root ::= [\xCE\xB1-\xCF\x89] [\\u0400-\\u04FF]", {"\xCE\xBB\xD0\x96"},
                 {"\xCE\x91\xD0\x96",
                  "\xCE\xBB"
                  "a"});
  // '-' first or last is itself, so are escaped brackets and a '^' not first.
  ExpectLanguage(R"(root ::= [-+] [a-] [\]\[] [a^] [^^] [\-])", {"-a]^x-", "+-[ay-"},
                 {"-a]^^-", "*a]^x-", "-b]^x-"});
  // Escapes as range ends.
  ExpectLanguage(R"(root ::= [\x00-\x1F]+ [\u00C0-\u00FF])", {"\x01\t\xC3\x80"}, {" \xC3\x80"});
  ExpectLanguage(R"(root ::= [\U0001F600-\U0001F64F])", {"\xF0\x9F\x98\x80"}, {"\xF0\x9F\x99\x90"});
}

TEST(GbnfSyntax, AnyCharacter) {
  ExpectLanguage(R"(root ::= "<" . . ">")",
                 {"<ab>", "<\n\xE6\x97\xA5>", "<>>>", "<\xF0\x9F\x98\x80\x01>"},
                 {"<a>", "<abc>", "<>"});
}

TEST(GbnfSyntax, Repetitions) {
  ExpectLanguage(R"(root ::= "a"{3})", {"aaa"}, {"aa", "aaaa", ""});
  ExpectLanguage(R"(root ::= "a"{2,})", {"aa", "aaaaa"}, {"a", ""});
  ExpectLanguage(R"(root ::= "a"{0,2})", {"", "a", "aa"}, {"aaa"});
  ExpectLanguage(R"(root ::= "a"{2,4})", {"aa", "aaa", "aaaa"}, {"a", "aaaaa"});
  ExpectLanguage(R"(root ::= "a"{ 1 , 2 } "b"{1})", {"ab", "aab"}, {"b", "aaab", "a"});
  ExpectLanguage(R"(root ::= "x" "a"{0} "y" "b"{0,0})", {"xy"}, {"xay", "xyb"});
  ExpectLanguage(R"(root ::= "ab"{2})", {"abab"}, {"ab", "aba", "ababab"});
  ExpectLanguage(R"(root ::= "ab"* "c"+ "d"?)", {"c", "ababccd", "abcc"},
                 {"", "abd", "acd", "cdd"});
  ExpectLanguage("root ::= digit{2,3} \"-\" digit{4}\ndigit ::= [0-9]", {"12-3456", "123-4567"},
                 {"1-2345", "1234-5678", "12-345"});
  ExpectLanguage(R"(root ::= [0-9]{1000})", {std::string(1000, '7')},
                 {std::string(999, '7'), std::string(1001, '7')});
  // A repetition of a repetition applies to the repeated whole.
  ExpectLanguage(R"(root ::= "a"+?)", {"", "a", "aaa"}, {"b"});
  ExpectLanguage(R"(root ::= ("a"{2}){2})", {"aaaa"}, {"aa", "aaaaaa"});
  EXPECT_TRUE(ParseGbnf(R"(root ::= "a"{10000})").ok());
}

TEST(GbnfSyntax, GroupsAndAlternatives) {
  ExpectLanguage(R"(root ::= ("a" ("b" | "c")* "d")+ | "e")", {"ad", "abcbd", "adacd", "e"},
                 {"", "a", "abd e", "ae", "ee"});
  ExpectLanguage(R"(root ::= ("ab")+ (("x")) ("y" | ))", {"abx", "ababxy"}, {"x", "abyx"});
  ExpectLanguage(R"(root ::= "a" ( | "b") ws
ws ::= | " ")",
                 {"a", "ab", "a ", "ab "}, {"abb", "a  "});
  ExpectLanguage(R"(root ::= ((((("deep")))))|(("a"|"b")("c"|"d")))", {"deep", "ac", "bd"},
                 {"ab", "cd"});
}

TEST(GbnfSyntax, RulesAndReferences) {
  // Forward references, names with digits, '-' and '_', another start rule.
  ExpectLanguage("root ::= my-rule_2 other\nmy-rule_2 ::= \"x\"\nother ::= \"y\" | \"z\"",
                 {"xy", "xz"}, {"x", "xyz"});
  GbnfOptions options;
  options.root = "start";
  ExpectLanguage("start ::= a \"!\"\na ::= \"hi\" | \"ho\"", {"hi!", "ho!"}, {"hi", "!"}, options);
  // Right recursion is fine.
  ExpectLanguage("root ::= \"(\" root \")\" | \"x\"", {"x", "((x))"}, {"(x", "()"});
}

TEST(GbnfSyntax, CommentsAndLayout) {
  ExpectLanguage(R"(# a leading comment

root ::= "a" b # trailing comment
   # an indented comment line
b ::= "b" | # after a bar
      "c" # and after the last alternative
)",
                 {"ab", "ac"}, {"a", "abc"});
  // Line breaks after '::=', after '|', inside parentheses; a line starting with '|'
  // continues the rule (an extension).
  ExpectLanguage(R"(root ::=
  "a" (
      "b" |
      "c"   # a comment inside parentheses
      "d"
    )
  | "e"
  # a comment between continuation lines

  | "f"
other ::= "z"
)",
                 {"ab", "acd", "e", "f"}, {"ac", "z", "a"});
  // CRLF line endings, tabs as blanks, no final newline.
  ExpectLanguage("root ::=\t\"a\" rest\r\n\r\nrest ::= \"b\" |\r\n  \"c\"", {"ab", "ac"},
                 {"a", "a\r\nb"});
}

TEST(GbnfSyntax, Prefixes) {
  auto g = Parse(R"(root ::= "abc" [0-9]+ "!")");
  ExpectPrefix(g.get(), "ab", "d");
  ExpectPrefix(g.get(), "abc12", "x");
  Recognizer r(g.get());
  ASSERT_TRUE(r.Reset().ok());
  auto fed = r.Feed("abc1!");
  ASSERT_TRUE(fed.ok());
  EXPECT_TRUE(*fed);
  EXPECT_TRUE(r.Complete());
  // A character split across feeds.
  auto u = Parse("root ::= \"\xE6\x97\xA5\"+");
  Recognizer ru(u.get());
  ASSERT_TRUE(ru.Reset().ok());
  auto first = ru.Feed("\xE6\x97");
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(*first);
  EXPECT_FALSE(ru.Complete());
  auto second = ru.Feed("\xA5");
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(*second);
  EXPECT_TRUE(ru.Complete());
}

// ---- errors name line:column

TEST(GbnfErrors, EmptyAndMissingRules) {
  ExpectError("", "1:1", "empty grammar");
  ExpectError("  # only a comment\n\n", "3:1", "empty grammar");
  ExpectError("root ::= foo\n", "1:10", "undefined rule 'foo'");
  ExpectError("root ::= a\na ::= \"x\" b c\nc ::= \"c\"", "2:11", "undefined rule 'b'");
  ExpectError("start ::= \"a\"\n", "1:1", "start rule 'root'");
  ExpectError("root ::= a\na ::= \"x\"\na ::= \"y\"\n", "3:1",
              "rule 'a' is defined twice (first at 2:1)");
}

TEST(GbnfErrors, LiteralsAndClasses) {
  ExpectError("root ::= \"abc\n", "1:10", "unterminated literal");
  ExpectError("root ::= \"abc", "1:10", "unterminated literal");
  ExpectError("root ::= \"\xC3\xA9\" \"x", "1:14",
              "unterminated literal");  // columns in characters
  ExpectError("root ::=\n  [a-z\n", "2:3", "unterminated character class");
  ExpectError("root ::= [^", "1:10", "unterminated character class");
  ExpectError("root ::= []", "1:10", "empty character class");
  ExpectError(R"(root ::= [^\x00-\U0010FFFF])", "1:10", "matches no character");
  ExpectError("root ::= [z-a]", "1:11", "reversed range");
  ExpectError(R"(root ::= "a\qb")", "1:12", "unknown escape");
  ExpectError(R"(root ::= [\d])", "1:11", "unknown escape");
  ExpectError(R"(root ::= "\xZZ")", "1:11", "needs 2 hex digits");
  ExpectError(R"(root ::= "\u12")", "1:11", "needs 4 hex digits");
  ExpectError(R"(root ::= "\U00110000")", "1:11", "past U+10FFFF");
  ExpectError(R"(root ::= "\uD800")", "1:11", "surrogate");
  ExpectError("root ::= \"a\xFF\"", "1:12", "invalid UTF-8");
  ExpectError("# \xC3\x28\nroot ::= \"a\"", "1:3", "invalid UTF-8");
}

TEST(GbnfErrors, Repetitions) {
  ExpectError(R"(root ::= "a"{3,2})", "1:13", "minimum is above the maximum");
  ExpectError(R"(root ::= "a"{20000})", "1:14", "above the limit of 10000");
  ExpectError(R"(root ::= "a"{1,99999999999999999999})", "1:16", "above the limit");
  ExpectError(R"(root ::= "a"{})", "1:14", "expected a number");
  ExpectError(R"(root ::= "a"{2;})", "1:15", "expected ',' or '}'");
  ExpectError(R"(root ::= "a"{2,3)", "1:17", "expected '}'");
  ExpectError(R"(root ::= *"a")", "1:10", "must follow what it repeats");
  ExpectError(R"(root ::= ""+)", "1:12", "repeats nothing");
  ExpectError("root ::= (\"a\"?)*", "1:16", "empty string");
  ExpectError("root ::= \"x\" ws*\nws ::= | \" \"", "1:16", "empty string");
  std::string many = "root ::= ";
  for (int i = 0; i < 25; ++i) many += "[a]{10000} ";
  ExpectError(many, "1:", "add up to more than");
}

TEST(GbnfErrors, Structure) {
  ExpectError("root = \"a\"", "1:6", "expected '::='");
  ExpectError("root ::= \"a\"\n  \"b\"\n", "2:3", "expected a rule name");
  ExpectError("root ::= \"a\"\n  b c\nb ::= \"b\"\nc ::= \"c\"", "2:5",
              "expected '::=' after the rule name 'b' (a line break ends a rule");
  ExpectError("root ::= \"a\" |\nb ::= \"b\"\n", "2:1",
              "rule 'b' starts before rule 'root' has ended");
  ExpectError("root ::= \"a\" b ::= \"b\"\n", "1:14", "rule 'b' starts before rule 'root'");
  ExpectError("root ::= \"a\")", "1:13", "')' without a matching '('");
  ExpectError("root ::= (\"a\"\n", "1:10", "unclosed '('");
  ExpectError("root ::= (\"a\"\nb ::= \"b\"", "1:10", "unclosed '(' (the next rule starts at 2:1)");
  ExpectError("root ::= (\"a\" ]", "1:15", "unexpected ']'");
  ExpectError("root ::= \"a\" @", "1:14", "unexpected '@'");
  ExpectError("root ::= <think> \"a\"", "1:10", "token references");
  ExpectError("root ::= std::string", "1:13", "unexpected ':'");
  ExpectError(std::string("root ::= ") + std::string(300, '(') + "\"a\"" + std::string(300, ')'),
              "1:", "nested more than");
}

TEST(GbnfErrors, LeftRecursion) {
  ExpectError("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]\n", "2:1",
              "left recursion");
  ExpectError("root ::= a\na ::= b \"x\"\nb ::= ws a | \"y\"\nws ::= \" \"?\n", "2:1",
              "left recursion");
}

// ---- the span extension

TEST(GbnfSpan, RawSubstringsOfTheSource) {
  GbnfOptions options;
  options.span_rule = "span";
  options.span_source = "the quick brown fox";
  ExpectLanguage(R"(root ::= "[" span "]")",
                 {"[quick]", "[]", "[the quick brown fox]", "[k b]", "[x]"},
                 {"[fox the]", "[quack]", "[the quick brown fox ]", "[Quick]", "quick"}, options);
  ExpectLanguage("root ::= item (\",\" item)*\nitem ::= \"<\" span \">\"",
                 {"<the>,<fox>", "<own f>"}, {"<the>,<dog>"}, options);
  ExpectError("root ::= span\nspan ::= \"x\"\n", "2:1", "span rule", options);
  // Without the option, `span` is an ordinary (here undefined) rule.
  ExpectError("root ::= span\n", "1:10", "undefined rule 'span'");
}

}  // namespace
}  // namespace pocket
