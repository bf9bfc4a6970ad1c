// Exactness of byte-level BPE against Hugging Face tokenizers with the real Qwen3 tokenizer.
#include "tokenizer/byte_level_bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "base/str.h"
#include "tokenizer/test_fixtures.h"

namespace pocket {
namespace {

std::vector<int32_t> ParseIds(std::string_view line) {
  std::vector<int32_t> ids;
  for (const std::string& part : SplitString(line, ' ')) {
    if (!part.empty()) ids.push_back(std::stoi(part));
  }
  return ids;
}

// llama.cpp's Qwen2 vectors (ggml-vocab-qwen2.gguf.inp/.out; format in their README.md).
TEST(ByteLevelBpeTest, LlamaCppQwen2Vectors) {
  POCKET_QWEN3_OR_FAIL(tokenizer);
  const std::string inp =
      testing::ReadFileOrEmpty(testing::SharedTestdataPath("tokenizer/ggml-vocab-qwen2.gguf.inp"));
  const std::string out =
      testing::ReadFileOrEmpty(testing::SharedTestdataPath("tokenizer/ggml-vocab-qwen2.gguf.out"));
  ASSERT_FALSE(inp.empty() || out.empty()) << "missing ../shared/testdata/tokenizer vectors";
  const std::string separator = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t end = inp.find(separator, pos);
    ASSERT_NE(end, std::string::npos) << "unterminated case at byte " << pos;
    texts.push_back(inp.substr(pos, end - pos));
    pos = end + separator.size();
  }
  std::vector<std::string> lines = SplitString(out, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  ASSERT_EQ(texts.size(), 46u);
  ASSERT_EQ(lines.size(), texts.size());
  EncodeOptions options;
  options.parse_special = false;  // as llama.cpp's test-tokenizer-0
  for (size_t i = 0; i < texts.size(); ++i) {
    auto ids = tokenizer->Encode(texts[i], options);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(*ids, ParseIds(lines[i])) << "case " << i << ": " << QuoteBytes(texts[i]);
  }
}

struct Case {
  const char* text;
  std::vector<int32_t> ids;
};

// Expected ids from HF tokenizers 0.23.2 (testdata/hf_oracle.js) with the Qwen3 tokenizer.json.
const std::vector<Case>& OwnCases() {
  static const std::vector<Case> cases = {
      {"Hello world", {9707, 1879}},
      {" Hello world", {21927, 1879}},
      {"  leading spaces", {220, 6388, 12621}},
      {"trailing spaces   ", {376, 14277, 12621, 262}},
      {"\t\ttabs\tand spaces \t mixed", {197, 3244, 3435, 52477, 12621, 7018, 9519}},
      {" \t \n \t ", {7018, 715, 65497}},
      {"a  b", {64, 220, 293}},
      {"a   b", {64, 256, 293}},
      {"line1\nline2\r\nline3\r\n\r\n\n", {1056, 16, 198, 1056, 17, 319, 1056, 18, 319, 80823}},
      {"\n", {198}},
      {"\r\n", {319}},
      {"  \n\n  x", {18611, 220, 856}},
      {"x \n", {87, 715}},
      {"end with spaces \n  ", {408, 448, 12621, 715, 256}},
      {"1234567890", {16, 17, 18, 19, 20, 21, 22, 23, 24, 15}},
      {"3.14159 and 2,718", {18, 13, 16, 19, 16, 20, 24, 323, 220, 17, 11, 22, 16, 23}},
      {"x2y3z", {87, 17, 88, 18, 89}},
      {"٣٤٥ Arabic-Indic digits", {149, 96, 149, 97, 149, 98, 34117, 12, 1425, 292, 18509}},
      {"①②③ Ⅻ", {48312, 254, 48312, 94, 48312, 95, 220, 70467, 104}},
      {"你好，世界！这是一个测试。", {108386, 3837, 99489, 6313, 105464, 81705, 1773}},
      {"中文English混合123", {104811, 22574, 105063, 16, 17, 18}},
      {"日本語のテキスト、カタカナ",
       {101059, 102819, 15767, 56833, 61803, 70534, 5373, 70393, 46207, 70393, 95352}},
      {"한국어 텍스트입니다", {23573, 124785, 31079, 10764, 44104, 53189, 78952}},
      {"مرحبا بالعالم", {124122, 29825, 124671, 124476, 129634}},
      {"Привет, мир!", {53645, 26991, 8178, 11, 137144, 0}},
      {"emoji 😀👍\U0001F3FD and family 👨\u200D👩\u200D👧\u200D👦 and flag 🇨🇳",
       {37523, 90316,  144349, 145375, 323,    2997, 61804, 101,   378, 235, 145233, 378,
        235,   145665, 378,    235,    145988, 323,  5181,  11162, 229, 101, 145754}},
      {"❤\uFE0F\u200D🔥 ✨", {141390, 30543, 378, 235, 144670, 25521, 101}},
      {"🧑🏿\u200D🚀", {148738, 146530, 378, 235, 145836}},
      {"I'S he'Ll they'RE we'VE I'M it'D don'T",
       {40, 13272, 566, 91426, 75, 807, 94153, 582, 6, 4491, 358, 27603, 432, 27705, 1513, 17323}},
      {"'s 't 're 've 'm 'll 'd", {594, 364, 83, 364, 265, 364, 586, 364, 76, 364, 654, 364, 67}},
      {"'ſ x'ſx", {6, 144815, 856, 6, 144815, 87}},
      {"''s", {4605, 82}},
      {"rock'n'roll", {20521, 43786, 6, 1100}},
      {"<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
       {151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198}},
      {"a<think>b</think>c", {64, 151667, 65, 151668, 66}},
      {"<|im_end|><|im_end|>", {151645, 151645}},
      {"<|endoftext|x", {27, 91, 8691, 723, 427, 62827}},
      {"<<|im_end|>>", {27, 151645, 29}},
      {"e\u0301 cafe\u0301 A\u030A \u1100\u1161\u11A8 \u212B \u0958",
       {963, 51950, 79252, 126804, 79252, 47809, 5502, 120}},
      {"א\u0591\u05B0", {58510, 146, 108, 146, 239}},
      {"a\u0345\u0301", {1953, 137, 227}},
      {"\U00011935\U00011930", {128240, 97, 113, 128240, 97, 108}},
      {"\u3000b \u00A0c \u0085d \u2028e \u200Bf \u180Eg",
       {22441, 65, 220, 4102, 66, 220, 126, 227, 67, 220, 378, 101, 68, 29748, 69, 86089, 254, 236,
        70}},
      {"a\013b\014c", {64, 199, 65, 200, 66}},
      {"x\034y", {87, 216, 88}},
      {"def f(x):\n    return x ** 2  # comment\n\n\tpass",
       {750, 282, 2075, 982, 262, 470, 856, 3070, 220, 17, 220, 671, 3980, 271, 41431}},
      {"https://example.com/path?q=1&r=2",
       {2428, 1110, 8687, 905, 50976, 43782, 28, 16, 60617, 28, 17}},
      {"email@example.com", {2332, 35487, 905}},
      {"$$$ !!! ...", {74573, 32870, 2503}},
      {"—–-‐", {2293, 4142, 12, 29921}},
      {"“quoted” ‘single’", {2073, 63725, 854, 3369, 15338, 527}},
  };
  return cases;
}

TEST(ByteLevelBpeTest, OwnCasesMatchHuggingFace) {
  POCKET_QWEN3_OR_FAIL(tokenizer);
  for (const Case& c : OwnCases()) {
    auto ids = tokenizer->Encode(c.text);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(*ids, c.ids) << QuoteBytes(c.text, 200);
    // Decoding gives back the NFC text.
    auto text = tokenizer->Decode(*ids);
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(*text, NormalizeNfc(c.text)) << QuoteBytes(c.text, 200);
  }
}

TEST(ByteLevelBpeTest, SpecialTokensAsPlainText) {
  POCKET_QWEN3_OR_FAIL(tokenizer);
  EncodeOptions plain;
  plain.parse_special = false;
  // <|im_end|> is special: split into ordinary pieces. <think> is not special: still one token.
  auto ids = tokenizer->Encode("x<|im_end|><think>", plain);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 151645), 0);
  EXPECT_EQ(ids->back(), 151667);
  auto text = tokenizer->Decode(*ids);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "x<|im_end|><think>");
  EXPECT_TRUE(tokenizer->IsSpecial(151645));
  EXPECT_FALSE(tokenizer->IsSpecial(151667));
  EXPECT_FALSE(tokenizer->IsSpecial(9707));
}

TEST(ByteLevelBpeTest, InvalidUtf8IsRejectedWithOffset) {
  POCKET_QWEN3_OR_FAIL(tokenizer);
  auto bad = tokenizer->Encode("abc\xC3(def");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("offset 3"), std::string::npos) << bad.status().message();
  auto truncated = tokenizer->Encode("hello \xF0\x9F\x98");
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("offset 6"), std::string::npos);
  auto surrogate = tokenizer->Encode("\xED\xA0\x80");
  ASSERT_FALSE(surrogate.ok());
  EXPECT_NE(surrogate.status().message().find("offset 0"), std::string::npos);
}

TEST(ByteLevelBpeTest, TokensAndLookups) {
  POCKET_QWEN3_OR_FAIL(tokenizer);
  EXPECT_EQ(tokenizer->vocab_size(), 151669);
  EXPECT_EQ(tokenizer->FindToken("<|im_end|>"), 151645);
  EXPECT_EQ(tokenizer->FindToken("<think>"), 151667);
  EXPECT_EQ(tokenizer->FindToken("Ġworld"), 1879);
  EXPECT_EQ(tokenizer->FindToken("no such token at all"), -1);
  EXPECT_EQ(tokenizer->TokenBytes(1879), " world");
  EXPECT_EQ(tokenizer->TokenBytes(198), "\n");
  EXPECT_EQ(tokenizer->TokenBytes(151645), "<|im_end|>");
  EXPECT_EQ(tokenizer->TokenBytes(-1), "");
  EXPECT_EQ(tokenizer->TokenBytes(151669), "");
  const std::vector<int32_t> out_of_range = {9707, 151669};
  auto decoded = tokenizer->Decode(out_of_range);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("position 1"), std::string::npos);
  EXPECT_EQ(tokenizer->spec().eos_id, 151645);
  EXPECT_EQ(tokenizer->spec().pad_id, 151643);
  EXPECT_EQ(tokenizer->spec().bos_id, -1);
  EncodeOptions with_bos;
  with_bos.add_bos = true;  // Qwen has no BOS: nothing is added
  EXPECT_EQ(*tokenizer->Encode("Hello", with_bos), std::vector<int32_t>{9707});
  EXPECT_TRUE(tokenizer->Encode("")->empty());
}

TEST(ByteLevelBpeTest, SharedAcrossThreads) {
  POCKET_QWEN3_OR_FAIL(tokenizer);
  std::vector<std::string> texts;
  std::string long_text;  // long enough for the per-call caches
  for (const Case& c : OwnCases()) {
    texts.push_back(c.text);
    long_text += c.text;
  }
  while (long_text.size() < 20000) long_text += long_text;
  texts.push_back(long_text);
  std::vector<std::vector<int32_t>> expected;
  for (const std::string& text : texts) expected.push_back(*tokenizer->Encode(text));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          auto ids = tokenizer->Encode(texts[i]);
          if (!ids.ok() || *ids != expected[i]) ++mismatches[t];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace pocket
