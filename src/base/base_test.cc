#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "base/byte_reader.h"
#include "base/crc32c.h"
#include "base/float16.h"
#include "base/json_nesting.h"
#include "base/mapped_file.h"
#include "base/output_file.h"
#include "base/rng.h"
#include "base/status.h"

namespace pocket {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd value ", x);
  return x / 2;
}

Status UseHalf(int x, int* out) {
  POCKET_ASSIGN_OR_RETURN(*out, Half(x));
  return Status::Ok();
}

TEST(StatusTest, ValuesAndMessages) {
  int v = 0;
  EXPECT_TRUE(UseHalf(4, &v).ok());
  EXPECT_EQ(v, 2);
  Status s = UseHalf(3, &v);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "InvalidArgument: odd value 3");
  EXPECT_EQ(s.WithContext("file.gguf").message(), "file.gguf: odd value 3");
}

TEST(JsonNestingTest, CountsBracketsOutsideStringsAndStopsAtTheLimit) {
  EXPECT_EQ(JsonNestingDepth("1"), 0);
  EXPECT_EQ(JsonNestingDepth(R"({"a": [1, {"b": []}]})"), 4);
  // Brackets in strings, escaped quotes included, are text.
  EXPECT_EQ(JsonNestingDepth(R"({"a": "[[[{{\"[[[", "b": ["]]]\\"]})"), 2);
  EXPECT_EQ(JsonNestingDepth(R"(["\\", [[]]])"), 3);  // an escaped backslash ends at the quote
  // A bomb: 200,000 levels stop counting past the limit and never recurse.
  const std::string bomb = std::string(200000, '[') + std::string(200000, ']');
  EXPECT_EQ(JsonNestingDepth(bomb), kMaxJsonNesting + 1);
  const std::string ok = std::string(64, '[') + std::string(64, ']');
  EXPECT_TRUE(CheckJsonNesting(ok, "the body").ok());
  const Status deep = CheckJsonNesting("[" + ok + "]", "the body");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.message(),
            "the body nests deeper than 64 levels of arrays and objects (the limit)");
}

// Files that hold a user's conversation are private whatever the umask (issue 43).
TEST(OutputFileTest, PrivateFilesAndDirectoriesIgnoreTheUmask) {
  const mode_t saved = ::umask(022);
  const std::string root = ::testing::TempDir() + "/private-" + std::to_string(::getpid());
  const std::string dir = root + "/a/b";
  ASSERT_TRUE(CreatePrivateDirectories(dir).ok());
  for (const std::string& d : {root, root + "/a", dir}) {
    struct stat st {};
    ASSERT_EQ(::stat(d.c_str(), &st), 0) << d;
    EXPECT_EQ(st.st_mode & 0777, 0700u) << d;
  }
  auto f = OutputFile::Create(dir + "/x.session", {}, kPrivateFileMode);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(f->Write("x", 1).ok());
  ASSERT_TRUE(f->Commit().ok());
  struct stat st {};
  ASSERT_EQ(::stat((dir + "/x.session").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto plain = OutputFile::Create(dir + "/y.bin");  // tools' outputs stay 0644
  ASSERT_TRUE(plain.ok());
  ASSERT_TRUE(plain->Commit().ok());
  ASSERT_EQ(::stat((dir + "/y.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  auto tmp = MakePrivateTempDirectory("pocket-test-");
  ASSERT_TRUE(tmp.ok()) << tmp.status().ToString();
  ASSERT_EQ(::stat(tmp->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ::rmdir(tmp->c_str());
  std::remove((dir + "/x.session").c_str());
  std::remove((dir + "/y.bin").c_str());
  ::rmdir(dir.c_str());
  ::rmdir((root + "/a").c_str());
  ::rmdir(root.c_str());
  ::umask(saved);
}

TEST(Crc32cTest, KnownVectorsAndChaining) {
  // RFC 3720 test vectors.
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);
  const uint8_t zeros[32] = {};
  EXPECT_EQ(Crc32c(zeros, 32), 0x8a9136aau);
  uint8_t ones[32];
  for (uint8_t& b : ones) b = 0xff;
  EXPECT_EQ(Crc32c(ones, 32), 0x62a8ab43u);
  const char* text = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(Crc32c(text + 10, 33, Crc32c(text, 10)), Crc32c(text, 43));
}

TEST(Float16Test, RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = Fp16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(f))));
      continue;
    }
    EXPECT_EQ(FloatToFp16(f), h) << "half bits " << h;
  }
}

TEST(Float16Test, RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and the next half (1 + 2^-10): ties to even (1).
  EXPECT_EQ(FloatToFp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // Just above halfway rounds up.
  EXPECT_EQ(FloatToFp16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);
  EXPECT_EQ(FloatToFp16(70000.0f), 0x7c00);
  EXPECT_EQ(FloatToFp16(-70000.0f), 0xfc00);
  EXPECT_EQ(FloatToFp16(65504.0f), 0x7bff);
  // Smallest subnormal and its half (ties to even: zero).
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(FloatToFp16(std::ldexp(1.5f, -25)), 0x0001);
}

TEST(Bfloat16Test, RoundTripAndRounding) {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = Bf16ToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToBf16(f), b);
  }
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie to even
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(3.0f, -8)), 0x3f82);  // tie to even (up)
}

TEST(RngTest, DeterministicPerSeed) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.NextU64();
    EXPECT_EQ(x, b.NextU64());
    differs |= x != c.NextU64();
  }
  EXPECT_TRUE(differs);
  Rng d(7);
  for (int i = 0; i < 1000; ++i) {
    float f = d.NextFloat();
    EXPECT_GE(f, 0.0f);
    EXPECT_LT(f, 1.0f);
  }
}

TEST(ByteReaderTest, TruncationIsAnError) {
  const uint8_t bytes[6] = {1, 0, 0, 0, 2, 0};
  ByteReader r(bytes, sizeof(bytes), "test.bin");
  uint32_t a = 0;
  ASSERT_TRUE(r.Read(&a, "a").ok());
  EXPECT_EQ(a, 1u);
  uint32_t b = 0;
  Status s = r.Read(&b, "field b");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("field b"), std::string::npos);
  EXPECT_NE(s.message().find("offset 4"), std::string::npos);
}

TEST(OutputFileTest, CommitRenamesAndAbandonRemoves) {
  std::string dir = ::testing::TempDir();
  std::string path = dir + "/pocket_output_test.txt";
  std::remove(path.c_str());
  {
    auto out = OutputFile::Create(path);
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(out->Write("abc", 3).ok());
    // Not committed: the file must not appear.
  }
  EXPECT_FALSE(FileExists(path));
  ASSERT_TRUE(WriteFileAtomically(path, "hello").ok());
  auto text = ReadFileToString(path);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "hello");
  // Refuses to write over an input.
  auto again = OutputFile::Create(path, {path});
  EXPECT_FALSE(again.ok());
  EXPECT_EQ(*ReadFileToString(path), "hello");
  std::remove(path.c_str());
}

TEST(MappedFileTest, MissingFileNamesThePath) {
  auto f = MappedFile::Open("/nonexistent/pocket.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("/nonexistent/pocket.gguf"), std::string::npos);
}

}  // namespace
}  // namespace pocket
