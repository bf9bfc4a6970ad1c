#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>

#include "base/byte_reader.h"
#include "base/crc32c.h"
#include "base/float16.h"
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
