// Differential test against the real Hugging Face tokenizers (Node binding, tokenizers@0.23.2):
// thousands of random strings and corpus lines must encode to identical ids.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "base/mapped_file.h"
#include "base/rng.h"
#include "base/str.h"
#include "tokenizer/test_fixtures.h"
#include "tokenizer/utf8.h"

namespace pocket {
namespace {

std::string HfPackageDir() {
  return std::string(POCKET_CACHE_DIR) + "/hf-tokenizers/node_modules/tokenizers";
}
std::string OracleScript() {
  return std::string(POCKET_SOURCE_DIR) + "/src/tokenizer/testdata/hf_oracle.js";
}

char32_t RandomIn(Rng& rng, char32_t first, char32_t last) {
  return first + static_cast<char32_t>(rng.NextBelow(last - first + 1));
}

// Any scalar value except surrogates and noncharacters, from all 17 planes.
char32_t RandomCodePoint(Rng& rng) {
  while (true) {
    const auto cp = static_cast<char32_t>(rng.NextBelow(0x110000));
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    if ((cp >= 0xFDD0 && cp <= 0xFDEF) || (cp & 0xFFFE) == 0xFFFE) continue;
    return cp;
  }
}

std::string RandomFragment(Rng& rng) {
  static const char* const kWords[] = {"the", "Hello", "WORLD", "tokenizer", "don",  "x",
                                       "I",   "naïve", "café",  "Straße",    "über", "ÆØÅ"};
  static const char* const kSpecial[] = {
      "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
      "<tool_call>",  "<|im_",      "<think",        "|>",      "<"};
  static const char* const kContractions[] = {"'s", "'t",  "'re", "'ve",     "'m", "'ll", "'d",
                                              "'S", "'Ll", "'RE", "'\u017F", "'x", "'"};
  static const char* const kSpaces[] = {
      " ",  "  ",     "   ",    "\t",     "\n",     "\r\n",   "\n\n",   " \n ",   "\v",
      "\f", "\u00A0", "\u3000", "\u2028", "\u0085", "\u2003", "\u180E", "\u200B", " \t\n\t "};
  static const char32_t kEmoji[] = {0x1F600, 0x1F44D, 0x1F3FD, 0x2764,  0xFE0F,  0x200D,
                                    0x1F525, 0x1F468, 0x1F469, 0x1F467, 0x1F1E8, 0x1F1F3,
                                    0x1F9D1, 0x1F680, 0x2728,  0x1FAE0};
  std::string out;
  switch (rng.NextBelow(14)) {
    case 0: {  // ASCII word, random case
      std::string word = kWords[rng.NextBelow(std::size(kWords))];
      if (rng.NextBelow(3) == 0) {
        word.clear();
        for (int i = 0, n = 1 + int(rng.NextBelow(9)); i < n; ++i) {
          word += static_cast<char>((rng.NextBelow(2) ? 'a' : 'A') + rng.NextBelow(26));
        }
      }
      out = word;
      break;
    }
    case 1:  // punctuation
      for (int i = 0, n = 1 + int(rng.NextBelow(4)); i < n; ++i) {
        out += "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"[rng.NextBelow(32)];
      }
      break;
    case 2:
      out = kSpaces[rng.NextBelow(std::size(kSpaces))];
      break;
    case 3:
      for (int i = 0, n = 1 + int(rng.NextBelow(6)); i < n; ++i)
        out += char('0' + rng.NextBelow(10));
      break;
    case 4:
      for (int i = 0, n = 1 + int(rng.NextBelow(6)); i < n; ++i) {
        utf8::Append(RandomIn(rng, 0x4E00, 0x9FFF), &out);
      }
      break;
    case 5:  // Hangul syllables and conjoining jamo
      for (int i = 0, n = 1 + int(rng.NextBelow(4)); i < n; ++i) {
        utf8::Append(
            rng.NextBelow(3) ? RandomIn(rng, 0xAC00, 0xD7A3) : RandomIn(rng, 0x1100, 0x11FF), &out);
      }
      break;
    case 6:  // Arabic (letters, marks, digits)
      for (int i = 0, n = 1 + int(rng.NextBelow(6)); i < n; ++i) {
        utf8::Append(RandomIn(rng, 0x0600, 0x06FF), &out);
      }
      break;
    case 7:
      for (int i = 0, n = 1 + int(rng.NextBelow(5)); i < n; ++i) {
        utf8::Append(kEmoji[rng.NextBelow(std::size(kEmoji))], &out);
      }
      break;
    case 8:  // a base letter and combining marks
      out = kWords[rng.NextBelow(std::size(kWords))];
      for (int i = 0, n = 1 + int(rng.NextBelow(3)); i < n; ++i) {
        static const char32_t kMarks[] = {0x0300, 0x0301, 0x0308, 0x0327, 0x0345, 0x05B0, 0x0591,
                                          0x093C, 0x0F72, 0x1DF6, 0x07FD, 0x302A, 0x3099, 0x20DD};
        utf8::Append(rng.NextBelow(2) ? kMarks[rng.NextBelow(std::size(kMarks))]
                                      : RandomIn(rng, 0x0300, 0x036F),
                     &out);
      }
      break;
    case 9:
    case 10:
      for (int i = 0, n = 1 + int(rng.NextBelow(3)); i < n; ++i)
        utf8::Append(RandomCodePoint(rng), &out);
      break;
    case 11:
      out = kSpecial[rng.NextBelow(std::size(kSpecial))];
      break;
    case 12:
      out = kContractions[rng.NextBelow(std::size(kContractions))];
      break;
    default:  // Latin-1 and other BMP letters
      utf8::Append(RandomIn(rng, 0x00A0, 0x2FFF), &out);
      break;
  }
  return out;
}

std::vector<std::string> RandomStrings(uint64_t seed, int count) {
  Rng rng(seed);
  std::vector<std::string> texts;
  for (int i = 0; i < count; ++i) {
    std::string text;
    for (int j = 0, n = 1 + int(rng.NextBelow(12)); j < n; ++j) text += RandomFragment(rng);
    texts.push_back(std::move(text));
  }
  return texts;
}

std::string JsonString(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    const auto b = static_cast<uint8_t>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (b < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", b);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::vector<int32_t> ParseIdsLine(const std::string& line) {
  std::vector<int32_t> ids;
  const size_t open = line.find('[');
  int32_t value = 0;
  bool in_number = false;
  for (size_t i = open == std::string::npos ? line.size() : open + 1; i < line.size(); ++i) {
    if (line[i] >= '0' && line[i] <= '9') {
      value = value * 10 + (line[i] - '0');
      in_number = true;
    } else {
      if (in_number) ids.push_back(value);
      value = 0;
      in_number = false;
      if (line[i] == ']') break;
    }
  }
  return ids;
}

// Runs the oracle over `texts`; false (with *error) if it could not run.
bool RunOracle(const std::vector<std::string>& texts, std::vector<std::vector<int32_t>>* ids,
               std::string* error) {
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    *error = "node (Node.js) is not installed; install it and run scripts/fetch_fixtures.sh";
    return false;
  }
  if (!FileExists(HfPackageDir() + "/package.json")) {
    *error = "missing " + HfPackageDir() + "; run scripts/fetch_fixtures.sh";
    return false;
  }
  char input_path[] = "/tmp/pocket_hf_oracle_XXXXXX";
  const int fd = mkstemp(input_path);
  if (fd < 0) {
    *error = "cannot create a temporary file";
    return false;
  }
  close(fd);
  std::string input;
  for (const std::string& text : texts) input += "{\"text\":" + JsonString(text) + "}\n";
  if (!WriteFileAtomically(input_path, input).ok()) {
    *error = "cannot write the oracle input";
    return false;
  }
  const std::string command = "node '" + OracleScript() + "' '" + HfPackageDir() + "' '" +
                              testing::Qwen3TokenizerJsonPath() + "' < " + input_path;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *error = "cannot run: " + command;
    unlink(input_path);
    return false;
  }
  std::string output;
  char buffer[1 << 16];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  const int status = pclose(pipe);
  unlink(input_path);
  if (status != 0) {
    *error = StrCat("the oracle failed (status ", status, "): ", command);
    return false;
  }
  std::vector<std::string> lines = SplitString(output, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  for (const std::string& line : lines) ids->push_back(ParseIdsLine(line));
  if (ids->size() != texts.size()) {
    *error = StrCat("the oracle answered ", ids->size(), " lines for ", texts.size(), " inputs");
    return false;
  }
  return true;
}

std::vector<std::string> CorpusSamples() {
  std::vector<std::string> texts;
  for (const std::string& path : testing::CorpusFiles()) {
    const std::string contents = testing::ReadFileOrEmpty(path);
    EXPECT_FALSE(contents.empty()) << "missing corpus file " << path;
    const std::vector<std::string> lines = SplitString(contents, '\n');
    // Up to 1500 lines per file, evenly spread; every other one keeps its newline.
    const size_t step = lines.size() / 1500 + 1;
    for (size_t i = 0; i < lines.size(); i += step) {
      texts.push_back(lines[i] + ((i / step) % 2 ? "\n" : ""));
    }
    // One long chunk per file, cut at a character boundary.
    size_t end = std::min<size_t>(contents.size(), 60000);
    while (end < contents.size() && (static_cast<uint8_t>(contents[end]) & 0xC0) == 0x80) ++end;
    texts.push_back(contents.substr(0, end));
  }
  return texts;
}

TEST(HfDifferentialTest, IdenticalIdsToHuggingFace) {
  POCKET_QWEN3_OR_FAIL(tokenizer);
  std::vector<std::string> texts = RandomStrings(/*seed=*/20240611, 3000);
  const size_t n_random = texts.size();
  for (std::string& line : CorpusSamples()) texts.push_back(std::move(line));
  std::vector<std::vector<int32_t>> expected;
  std::string error;
  ASSERT_TRUE(RunOracle(texts, &expected, &error)) << error;
  size_t mismatches = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    auto ids = tokenizer->Encode(texts[i]);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    if (*ids == expected[i]) continue;
    if (++mismatches <= 10) {
      ADD_FAILURE() << (i < n_random ? "random" : "corpus") << " string " << i << " "
                    << QuoteBytes(texts[i], 300) << "\n  ours: " << ::testing::PrintToString(*ids)
                    << "\n  HF:   " << ::testing::PrintToString(expected[i]);
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << texts.size() << " strings (" << n_random << " random)";
  std::printf("[ differential ] %zu strings (%zu random, %zu corpus) identical to HF tokenizers\n",
              texts.size() - mismatches, n_random, texts.size() - n_random);
}

TEST(HfDifferentialTest, DecodeOfEncodeIsNfc) {
  POCKET_QWEN3_OR_FAIL(tokenizer);
  for (const std::string& text : RandomStrings(/*seed=*/77, 3000)) {
    auto ids = tokenizer->Encode(text);
    ASSERT_TRUE(ids.ok());
    auto decoded = tokenizer->Decode(*ids);
    ASSERT_TRUE(decoded.ok());
    ASSERT_EQ(*decoded, NormalizeNfc(text)) << QuoteBytes(text, 300);
  }
}

}  // namespace
}  // namespace pocket
