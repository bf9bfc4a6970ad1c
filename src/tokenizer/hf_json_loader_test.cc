// FromHfJsonFile: the real Qwen3 file, and clear errors for what we do not implement.
#include <gtest/gtest.h>
#include <unistd.h>

#include "base/mapped_file.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/test_fixtures.h"
#include "tokenizer/tokenizer.h"

namespace pocket {
namespace {

constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+)";

// A minimal tokenizer.json: the 256 byte tokens, "ab" from one merge, and one added token.
std::string MiniJson(const std::string& model_type = "BPE", const std::string& regex = kQwen2Regex,
                     const std::string& extra_model = "", const std::string& added_flags = "") {
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    std::string stored = byte_level::EncodeBytes(std::string(1, static_cast<char>(b)));
    if (stored == "\"" || stored == "\\") stored = "\\" + stored;
    vocab += StrCat(b ? "," : "", "\"", stored, "\":", b);
  }
  vocab += ",\"ab\":256";
  return StrCat(
      R"({"version":"1.0","added_tokens":[{"id":257,"content":"<|end|>","special":true)",
      added_flags, R"(}],"normalizer":{"type":"NFC"},)",
      R"("pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":")",
      regex,
      R"("},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}]},)",
      R"("decoder":{"type":"ByteLevel"},"model":{"type":")", model_type, "\"", extra_model,
      R"(,"vocab":{)", vocab, R"(},"merges":[["a","b"]]}})");
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/pocket_tokenizer_test_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() {
    for (const std::string& file : files_) unlink(file.c_str());
    rmdir(path_.c_str());
  }
  std::string Write(const std::string& name, const std::string& contents) {
    const std::string file = path_ + "/" + name;
    EXPECT_TRUE(WriteFileAtomically(file, contents).ok());
    files_.push_back(file);
    return file;
  }

 private:
  std::string path_;
  std::vector<std::string> files_;
};

Status LoadError(const std::string& json, const std::string& config = "") {
  TempDir dir;
  const std::string path = dir.Write("tokenizer.json", json);
  if (!config.empty()) dir.Write("tokenizer_config.json", config);
  auto tokenizer = Tokenizer::FromHfJsonFile(path);
  return tokenizer.ok() ? Status::Ok() : tokenizer.status();
}

TEST(HfJsonLoaderTest, Qwen3File) {
  POCKET_QWEN3_OR_FAIL(tokenizer);
  const TokenizerSpec spec = tokenizer->FullSpec();
  EXPECT_TRUE(tokenizer->spec().merges.empty());  // kept compactly inside the tokenizer
  EXPECT_EQ(spec.tokens.size(), 151669u);
  EXPECT_EQ(spec.merges.size(), 151387u);
  EXPECT_EQ(spec.merges[0], (std::pair<std::string, std::string>{"Ġ", "Ġ"}));
  EXPECT_EQ(spec.types[151643], TokenType::kControl);
  EXPECT_EQ(spec.types[151667], TokenType::kUserDefined);  // <think>: added, not special
  EXPECT_EQ(spec.types[0], TokenType::kNormal);
  EXPECT_TRUE(spec.normalize_nfc);
  EXPECT_EQ(spec.eos_id, 151645);
  EXPECT_EQ(spec.pad_id, 151643);
  EXPECT_FALSE(spec.add_bos);
  EXPECT_NE(spec.chat_template.find("enable_thinking"), std::string::npos);
}

TEST(HfJsonLoaderTest, MiniFileLoads) {
  TempDir dir;
  const std::string path = dir.Write("tokenizer.json", MiniJson());
  dir.Write(
      "tokenizer_config.json",
      R"({"eos_token":{"content":"<|end|>"},"bos_token":null,"pad_token":"ab",)"
      R"("chat_template":[{"name":"tool_use","template":"x"},{"name":"default","template":"<|im_start|>"}]})");
  auto tokenizer = Tokenizer::FromHfJsonFile(path);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  // Byte b has id b in this file; "ab" is 256 and <|end|> 257.
  EXPECT_EQ(*(*tokenizer)->Encode("xab<|end|>"), (std::vector<int32_t>{'x', 256, 257}));
  EXPECT_EQ((*tokenizer)->spec().eos_id, 257);
  EXPECT_EQ((*tokenizer)->spec().pad_id, 256);
  EXPECT_EQ((*tokenizer)->spec().bos_id, -1);
  EXPECT_EQ((*tokenizer)->spec().chat_template, "<|im_start|>");
}

TEST(HfJsonLoaderTest, UnsupportedConfigurationsNameTheField) {
  struct Case {
    std::string json;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {MiniJson("WordPiece"), "model.type is \"WordPiece\""},
      {MiniJson("Unigram"), "model.type is \"Unigram\""},
      {MiniJson("BPE", kQwen2Regex, ",\"byte_fallback\":true"), "model.byte_fallback"},
      {MiniJson("BPE", kQwen2Regex, ",\"ignore_merges\":true"), "model.ignore_merges"},
      {MiniJson("BPE", "\\\\s+|\\\\S+"), "pre_tokenizer.pretokenizers[0].pattern.Regex"},
      {MiniJson("BPE", kQwen2Regex, "", ",\"lstrip\":true"), "added_tokens[0]"},
      {MiniJson("BPE", kQwen2Regex, "", ",\"normalized\":true"), "normalized = true"},
  };
  for (const Case& c : cases) {
    const Status status = LoadError(c.json);
    EXPECT_EQ(status.code(), StatusCode::kUnimplemented) << status.ToString();
    EXPECT_NE(status.message().find(c.expected), std::string::npos) << status.ToString();
    EXPECT_NE(status.message().find("tokenizer.json"), std::string::npos) << status.ToString();
  }
  std::string metaspace = MiniJson();
  metaspace.replace(metaspace.find("\"pre_tokenizer\":{"), 17,
                    "\"pre_tokenizer\":{\"type\":\"Metaspace\"},\"unused\":{");
  Status status = LoadError(metaspace);
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented);
  EXPECT_NE(status.message().find("pre_tokenizer.type is \"Metaspace\""), std::string::npos)
      << status.ToString();
}

TEST(HfJsonLoaderTest, SyntaxErrorsNameFileAndByte) {
  std::string json = MiniJson();
  json.insert(100, "}");
  Status status = LoadError(json);
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("tokenizer.json: JSON syntax error at byte 101"),
            std::string::npos)
      << status.ToString();
  status = LoadError(MiniJson(), "{\"eos_token\": ");
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("tokenizer_config.json: JSON syntax error at byte"),
            std::string::npos)
      << status.ToString();
  status = LoadError(MiniJson(), R"({"eos_token":"<nope>"})");
  EXPECT_NE(status.message().find("eos_token \"<nope>\" is not in the vocabulary"),
            std::string::npos)
      << status.ToString();
  // Merges that name unknown tokens.
  std::string bad_merge = MiniJson();
  bad_merge.replace(bad_merge.find("[[\"a\",\"b\"]]"), 11, "[[\"a\",\"q\"],[\"x\"]]");
  status = LoadError(bad_merge);
  EXPECT_EQ(status.code(), StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("merge 1 has 1 parts"), std::string::npos) << status.ToString();
  EXPECT_FALSE(Tokenizer::FromHfJsonFile("/nonexistent/tokenizer.json").ok());
}

}  // namespace
}  // namespace pocket
