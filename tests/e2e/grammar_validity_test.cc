// Grammar and JSON Schema constraints with models that would otherwise produce garbage (random
// weights with the Qwen3 vocabulary, the tiny stories260K): every output that generation returns
// as finished is checked by an independent acceptor (nlohmann's JSON parser, std::regex, a
// hand-written checker; for schemas also Python's jsonschema, in test_constraint_validity.py,
// which reads the outputs this test writes), and every span field is a substring of its source.
// A token budget that cuts an output must be an error (ResourceExhausted), never a result.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "base/mapped_file.h"
#include "generate/constraint.h"
#include "generate/gbnf.h"
#include "generate/grammar.h"
#include "model/synthetic.h"
#include "runtime/session.h"
#include "tokenizer/utf8.h"

namespace pocket {
namespace {

#ifdef NDEBUG
constexpr int kScale = 1;
#else
constexpr int kScale = 4;  // sanitizer builds: a quarter of the generations (same code paths)
#endif

std::string WorkDir() {
  const std::string dir = std::string(POCKET_BINARY_DIR) + "/e2e-work/grammar-validity";
  std::filesystem::create_directories(dir);
  return dir;
}

std::shared_ptr<const Model> Stories() {
  LoadOptions o;
  o.tokenizer_path = std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/tok512.bin";
  auto m = Model::Load(std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/stories260K.bin", o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

std::shared_ptr<const Model> RandomQwen() {
  const std::string tok_path =
      std::string(POCKET_CACHE_DIR) + "/tokenizer-qwen3/package/models/tokenizer.json";
  auto tok = Tokenizer::FromHfJsonFile(tok_path);
  EXPECT_TRUE(tok.ok()) << tok.status().ToString() << " (run scripts/fetch_fixtures.sh)";
  if (!tok.ok()) return nullptr;
  SyntheticOptions o;
  auto c = PresetConfig("tiny", Architecture::kQwen3);
  EXPECT_TRUE(c.ok());
  o.config = *c;
  o.seed = 11;
  o.weight_type = DType::kQ8_0;
  o.tokenizer = *tok;
  const std::string path = WorkDir() + "/tiny-qwen3-tok.gguf";
  EXPECT_TRUE(WriteSyntheticGguf(o, path).ok());
  auto m = Model::Load(path);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

struct Outcome {
  std::vector<std::string> outputs;  // finished generations
  int budget_errors = 0;             // cut by the token budget (reported as errors)
};

// n generations under `constraint` with varied sampling.
Outcome Generate(const std::shared_ptr<const Model>& model, Constraint* constraint,
                 const std::string& prompt, int n, int max_tokens) {
  Outcome out;
  auto s = Session::Create(model, SessionOptions{.n_ctx = 512, .n_batch = 64, .n_threads = 1});
  EXPECT_TRUE(s.ok());
  if (!s.ok()) return out;
  for (int i = 0; i < n; ++i) {
    GenerateOptions g;
    g.constraint = constraint;
    g.max_tokens = max_tokens;
    g.sampling.temperature = i % 4 == 0 ? 0.0f : 0.7f + 0.3f * static_cast<float>(i % 3);
    g.sampling.top_k = i % 2 ? 0 : 40;
    g.sampling.top_p = 1.0f;
    g.sampling.min_p = 0.0f;
    g.sampling.seed = static_cast<uint64_t>(i) + 1;
    auto r = (*s)->Generate(std::string_view(prompt), g);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
      ++out.budget_errors;
      continue;
    }
    EXPECT_TRUE(constraint->Complete());
    out.outputs.push_back(r->text);
  }
  return out;
}

std::string Gbnf(const std::string& name) {
  auto text = ReadFileToString(std::string(POCKET_SHARED_DIR) + "/testdata/gbnf/" + name);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return text.ok() ? *text : std::string();
}

// RFC 8259 syntax, by recursive descent (nlohmann's parser refuses numbers beyond a double's
// range, such as 1E737, which the grammar and the RFC allow). Returns the top-level kind ('{',
// '[', or 0 when the text is not JSON).
class JsonSyntax {
 public:
  explicit JsonSyntax(const std::string& t) : t_(t) {}
  char Check() {
    Ws();
    const char kind = i_ < t_.size() ? t_[i_] : 0;
    if (!Value()) return 0;
    Ws();
    return i_ == t_.size() ? kind : 0;
  }

 private:
  bool Eat(char c) {
    if (i_ < t_.size() && t_[i_] == c) return ++i_, true;
    return false;
  }
  void Ws() {
    while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r'))
      ++i_;
  }
  bool Digits() {
    const size_t s = i_;
    while (i_ < t_.size() && std::isdigit(static_cast<unsigned char>(t_[i_]))) ++i_;
    return i_ > s;
  }
  bool Value() {
    if (i_ >= t_.size() || ++depth_ > 200) return false;
    const char c = t_[i_];
    bool ok;
    if (c == '{') {
      ++i_;
      Ws();
      ok = true;
      if (!Eat('}')) {
        do {
          Ws();
          if (!String()) return false;
          Ws();
          if (!Eat(':')) return false;
          Ws();
          if (!Value()) return false;
          Ws();
        } while (Eat(','));
        ok = Eat('}');
      }
    } else if (c == '[') {
      ++i_;
      Ws();
      ok = true;
      if (!Eat(']')) {
        do {
          Ws();
          if (!Value()) return false;
          Ws();
        } while (Eat(','));
        ok = Eat(']');
      }
    } else if (c == '"') {
      ok = String();
    } else if (t_.compare(i_, 4, "true") == 0 || t_.compare(i_, 4, "null") == 0) {
      i_ += 4;
      ok = true;
    } else if (t_.compare(i_, 5, "false") == 0) {
      i_ += 5;
      ok = true;
    } else {
      Eat('-');
      if (Eat('0')) {
        ok = true;
      } else {
        ok = i_ < t_.size() && t_[i_] >= '1' && t_[i_] <= '9' && Digits();
      }
      if (ok && Eat('.')) ok = Digits();
      if (ok && (Eat('e') || Eat('E'))) {
        if (!Eat('+')) Eat('-');
        ok = Digits();
      }
    }
    --depth_;
    return ok;
  }
  bool String() {
    if (!Eat('"')) return false;
    while (i_ < t_.size()) {
      const unsigned char c = static_cast<unsigned char>(t_[i_++]);
      if (c == '"') return true;
      if (c < 0x20) return false;
      if (c == '\\') {
        if (i_ >= t_.size()) return false;
        const char e = t_[i_++];
        if (e == 'u') {
          for (int k = 0; k < 4; ++k) {
            if (i_ >= t_.size() || !std::isxdigit(static_cast<unsigned char>(t_[i_++])))
              return false;
          }
        } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
          return false;
        }
      }
    }
    return false;
  }
  const std::string& t_;
  size_t i_ = 0;
  int depth_ = 0;
};

// The languages of four llama.cpp grammars, written independently of the grammar engine.
bool IndependentlyValid(const std::string& grammar, const std::string& text) {
  if (grammar == "json.gbnf" || grammar == "json_arr.gbnf") {
    if (utf8::Validate(text).ok() == false) return false;
    return JsonSyntax(text).Check() == (grammar == "json.gbnf" ? '{' : '[');
  }
  if (grammar == "list.gbnf") {
    // Items: "- " and at least one character that is not a line break, then "\n".
    static const std::regex item("(- [^\\r\\n\\x0b\\x0c]+\\n)+");
    if (!std::regex_match(text, item)) return false;
    for (const char* bad : {"\xC2\x85", "\xE2\x80\xA8", "\xE2\x80\xA9"}) {
      if (text.find(bad) != std::string::npos) return false;
    }
    return true;
  }
  if (grammar == "chess.gbnf") {
    const std::string pawn = "([a-h]x)?[a-h][1-8](=[NBKQR])?";
    const std::string nonpawn = "[NBKQR][a-h]?[1-8]?x?[a-h][1-8]";
    const std::string move = "(" + pawn + "|" + nonpawn + "|O-O(-O)?)[+#]?";
    const std::regex re("1\\. " + move + " " + move + "\\n([1-9][0-9]?\\. " + move + " " + move +
                        "\\n)+");
    return std::regex_match(text, re);
  }
  ADD_FAILURE() << "no independent checker for " << grammar;
  return false;
}

int RunGbnf(const std::shared_ptr<const Model>& model, const std::string& prompt, int n,
            const std::vector<const char*>& grammars) {
  int total = 0;
  for (const char* name : grammars) {
    ConstraintSpec spec;
    spec.grammar = Gbnf(name);
    auto c = MakeConstraint(*model->tokenizer(), spec);
    EXPECT_TRUE(c.ok()) << name << ": " << c.status().ToString();
    if (!c.ok()) continue;
    const Outcome o = Generate(model, c->get(), prompt, n, 400);
    std::set<std::string> distinct;
    for (const std::string& text : o.outputs) {
      EXPECT_TRUE(IndependentlyValid(name, text)) << name << " produced " << QuoteBytes(text, 400);
      distinct.insert(text);
    }
    std::printf("[ validity ] %s: %zu outputs valid (%zu distinct), %d cut by the budget\n", name,
                o.outputs.size(), distinct.size(), o.budget_errors);
    EXPECT_GE(o.outputs.size(), static_cast<size_t>(n) / 2) << name;
    total += static_cast<int>(o.outputs.size());
  }
  return total;
}

TEST(GrammarValidity, GbnfStories260K) {
  auto model = Stories();
  ASSERT_TRUE(model);
  // (stories260K almost never closes json.gbnf's unbounded objects within a budget: JSON runs
  // with the random model below.)
  const int total = RunGbnf(model, "Once upon a time", 80 / kScale, {"list.gbnf", "chess.gbnf"});
  std::printf("[ validity ] stories260K: %d GBNF generations, all valid\n", total);
}

TEST(GrammarValidity, GbnfRandomWeights) {
  auto model = RandomQwen();
  ASSERT_TRUE(model);
  const int total = RunGbnf(model, "Output:", 60 / kScale,
                            {"json.gbnf", "json_arr.gbnf", "list.gbnf", "chess.gbnf"});
  std::printf("[ validity ] random weights: %d GBNF generations, all valid\n", total);
}

TEST(GrammarValidity, GbnfSpanRule) {
  auto model = RandomQwen();
  ASSERT_TRUE(model);
  const std::string source = "The screen is bright, but the battery 电池 drains fast.";
  ConstraintSpec spec;
  spec.grammar = "root ::= \"aspect=\" span \"; opinion=\" span \"\\n\"\n";
  spec.span_source = source;
  spec.has_span_source = true;
  auto c = MakeConstraint(*model->tokenizer(), spec);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Outcome o = Generate(model, c->get(), "Extract:", 60 / kScale, 120);
  static const std::regex shape("aspect=([^;]*); opinion=([^\\n]*)\\n");
  for (const std::string& text : o.outputs) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(text, m, shape)) << QuoteBytes(text);
    EXPECT_NE(source.find(m[1].str()), std::string::npos) << QuoteBytes(text);
    EXPECT_NE(source.find(m[2].str()), std::string::npos) << QuoteBytes(text);
  }
  EXPECT_GE(o.outputs.size(), 10u / static_cast<size_t>(kScale));
  std::printf("[ validity ] GBNF span rule: %zu outputs, every span a substring of its source\n",
              o.outputs.size());
}

}  // namespace
}  // namespace pocket
