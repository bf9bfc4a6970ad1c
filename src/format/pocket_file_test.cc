#include "format/pocket_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "base/crc32c.h"
#include "base/mapped_file.h"

namespace pocket {
namespace {

std::string WriteSample(const std::string& path) {
  PocketWriter w;
  w.SetMetadataJson(R"({"format": "pocket", "architecture": "qwen3", "n_layers": 1})");
  w.AddSection("tokenizer", "tokenizer-bytes");
  w.AddSection("chat_template", "{{ messages }}");
  w.AddSection("future_optional", "skip me");
  EXPECT_TRUE(w.AddDenseTensor("norm", DType::kF32, {5}, [](uint8_t* out, size_t n) {
                 for (size_t i = 0; i < n / 4; ++i) reinterpret_cast<float*>(out)[i] = float(i);
                 return Status::Ok();
               }).ok());
  PackedLayout l{PackedCodes::kU4, 64, 20, 128, true};
  EXPECT_TRUE(w.AddPackedTensor("m", l, [](uint8_t* out, size_t n) {
                 for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(i * 7);
                 return Status::Ok();
               }).ok());
  EXPECT_TRUE(w.Write(path).ok());
  auto bytes = ReadFileToString(path);
  EXPECT_TRUE(bytes.ok());
  return *bytes;
}

StatusOr<std::unique_ptr<PocketFile>> ParseBytes(const std::string& b) {
  return PocketFile::Parse(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "x.pocket");
}

TEST(PocketFileTest, RoundTrip) {
  const std::string path = ::testing::TempDir() + "/pocket_file_test.pocket";
  const std::string bytes = WriteSample(path);
  auto f = PocketFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->Section("chat_template"), "{{ messages }}");
  EXPECT_EQ((*f)->Section("tokenizer"), "tokenizer-bytes");
  EXPECT_EQ((*f)->Find("architecture")->s, "qwen3");
  ASSERT_EQ((*f)->tensors().size(), 2u);
  const TensorInfo& norm = (*f)->tensors()[0];
  EXPECT_EQ(norm.shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(reinterpret_cast<const float*>(norm.data)[4], 4.0f);
  const TensorInfo& m = (*f)->tensors()[1];
  EXPECT_TRUE(m.packed);
  EXPECT_EQ(m.layout.rows, 20);
  EXPECT_EQ(m.n_bytes, m.layout.total_bytes());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m.data) % 64, 0u);  // mapped page + 64-aligned offset
  EXPECT_EQ(m.data[3], static_cast<uint8_t>(21));
  EXPECT_TRUE((*f)->Verify().ok());
  std::remove(path.c_str());
}

TEST(PocketFileTest, CorruptionIsNamed) {
  const std::string path = ::testing::TempDir() + "/pocket_file_test2.pocket";
  const std::string good = WriteSample(path);
  std::remove(path.c_str());
  // Every truncation is refused (the header records the file size).
  for (size_t cut : {size_t{0}, size_t{10}, size_t{63}, size_t{64}, size_t{200}, good.size() - 1}) {
    EXPECT_FALSE(ParseBytes(good.substr(0, cut)).ok()) << cut;
  }
  std::string b = good;
  b[8] = 2;  // major version 2
  auto v2 = ParseBytes(b);
  EXPECT_EQ(v2.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(v2.status().message().find("version 2"), std::string::npos);
  b = good;
  b[40] = 1;  // inside the header: checksum
  EXPECT_NE(ParseBytes(b).status().message().find("header checksum"), std::string::npos);
  // Flip a byte of the meta section: its checksum fails at load.
  auto f = ParseBytes(good);
  ASSERT_TRUE(f.ok());
  const PocketSection& meta = (*f)->sections()[0];
  b = good;
  b[meta.offset + 3] ^= 1;
  EXPECT_NE(ParseBytes(b).status().message().find("meta"), std::string::npos);
  // Flip a tensor byte: loading (no data checksum) succeeds, Verify names the data section.
  const PocketSection* data = nullptr;
  for (const PocketSection& s : (*f)->sections()) data = s.name == "data" ? &s : data;
  ASSERT_NE(data, nullptr);
  b = good;
  b[data->offset + 100] ^= 1;
  auto flipped = ParseBytes(b);
  ASSERT_TRUE(flipped.ok());
  Status verify = (*flipped)->Verify();
  EXPECT_EQ(verify.code(), StatusCode::kDataLoss);
  EXPECT_NE(verify.message().find("data"), std::string::npos);
}

TEST(PocketFileTest, RequiredUnknownSectionIsRefused) {
  PocketWriter w;
  w.AddSection("future_required", "x", /*required=*/true);
  const std::string path = ::testing::TempDir() + "/pocket_file_test3.pocket";
  ASSERT_TRUE(w.Write(path).ok());
  auto f = PocketFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("future_required"), std::string::npos);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace pocket
