// Test fixtures shared by the tokenizer tests. A missing fixture fails the test (with the command
// that fetches it) rather than skipping it, so a green run always means the checks ran.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pocket::testing {

// cache/tokenizer-qwen3/package/models/tokenizer.json (scripts/fetch_fixtures.sh).
std::string Qwen3TokenizerJsonPath();
// ../shared/testdata/<relative>.
std::string SharedTestdataPath(std::string_view relative);
// A file's contents, or "" when it cannot be read.
std::string ReadFileOrEmpty(const std::string& path);

// The Qwen3 tokenizer, loaded once per test binary (immutable, shared); nullptr if it fails.
std::shared_ptr<const Tokenizer> Qwen3();
// Why Qwen3() returned nullptr.
std::string Qwen3LoadError();

// Lines of the corpus files (English and Chinese), for differential and speed tests.
std::vector<std::string> CorpusFiles();

}  // namespace pocket::testing

// Declares `name` as the Qwen3 tokenizer or fails the current test.
#define POCKET_QWEN3_OR_FAIL(name)              \
  const auto name = ::pocket::testing::Qwen3(); \
  ASSERT_NE(name, nullptr) << ::pocket::testing::Qwen3LoadError()
