#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "base/mapped_file.h"
#include "format/safetensors.h"

namespace pocket {
namespace {

std::string MakeFile(const std::string& header, size_t data_bytes) {
  std::string b(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  b += header;
  b.append(data_bytes, '\x01');
  return b;
}

StatusOr<std::unique_ptr<SafetensorsFile>> ParseString(const std::string& b) {
  return SafetensorsFile::Parse(reinterpret_cast<const uint8_t*>(b.data()), b.size(),
                                "x.safetensors");
}

TEST(SafetensorsTest, ParsesAndValidates) {
  auto ok = ParseString(MakeFile(
      R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},"__metadata__":{"format":"pt"}})",
      24));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)->tensors()[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ((*ok)->metadata().at("format"), "pt");

  auto wrong_size =
      ParseString(MakeFile(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 24));
  ASSERT_FALSE(wrong_size.ok());
  EXPECT_NE(wrong_size.status().message().find("tensor a"), std::string::npos);

  auto past_end =
      ParseString(MakeFile(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})", 20));
  EXPECT_FALSE(past_end.ok());

  auto bad_json = ParseString(MakeFile(R"({"a":)", 0));
  EXPECT_EQ(bad_json.status().code(), StatusCode::kDataLoss);

  auto unknown =
      ParseString(MakeFile(R"({"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8));
  ASSERT_TRUE(unknown.ok());
  EXPECT_FALSE((*unknown)->tensors()[0].type_supported);

  std::string huge(8, '\xff');
  EXPECT_FALSE(ParseString(huge).ok());
}

TEST(SafetensorsTest, WriterRoundTrip) {
  const std::string path = ::testing::TempDir() + "/pocket_st_test.safetensors";
  SafetensorsWriter w;
  ASSERT_TRUE(w.AddTensor("x", DType::kBF16, {4}, [](uint8_t* out, size_t n) {
                 for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(i);
                 return Status::Ok();
               }).ok());
  ASSERT_TRUE(w.AddTensor("y", DType::kF32, {1, 2}, [](uint8_t* out, size_t n) {
                 std::memset(out, 0, n);
                 return Status::Ok();
               }).ok());
  EXPECT_FALSE(w.AddTensor("z", DType::kQ4_0, {32}, nullptr).ok());
  ASSERT_TRUE(w.Write(path).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ((*f)->tensors().size(), 2u);
  EXPECT_EQ((*f)->tensors()[0].name, "x");
  EXPECT_EQ((*f)->tensors()[0].data[3], 3);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace pocket
