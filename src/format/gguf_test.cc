#include <gtest/gtest.h>

#include <cstring>

#include "format/gguf.h"
#include "format/gguf_writer.h"
#include "format/llama2c.h"
#include "quant/quantize.h"

namespace pocket {
namespace {

GgufWriter::TensorFiller Iota(float start) {
  return [start](uint8_t* out, size_t n_bytes) {
    float* f = reinterpret_cast<float*>(out);
    for (size_t i = 0; i < n_bytes / 4; ++i) f[i] = start + static_cast<float>(i);
    return Status::Ok();
  };
}

std::string SampleFile(uint32_t alignment = 32) {
  GgufWriter w;
  w.set_alignment(alignment);
  w.SetString("general.architecture", "qwen3");
  w.SetUint32("qwen3.block_count", 2);
  w.SetInt32("some.int", -5);
  w.SetUint64("some.u64", 1ull << 40);
  w.SetFloat32("qwen3.rope.freq_base", 1e6f);
  w.SetBool("some.flag", true);
  w.SetStringArray("tokenizer.ggml.tokens", {"a", "b", "", "\xe4\xb8\xad"});
  w.SetInt32Array("tokenizer.ggml.token_type", {1, 1, 3, 1});
  w.SetFloat32Array("tokenizer.ggml.scores", {0.5f, -1.0f, 0.0f, 2.0f});
  // A nested array of arrays of uint8, encoded by hand: [[1, 2], [3]].
  std::string nested;
  auto put32 = [&](uint32_t v) { nested.append(reinterpret_cast<const char*>(&v), 4); };
  auto put64 = [&](uint64_t v) { nested.append(reinterpret_cast<const char*>(&v), 8); };
  put32(static_cast<uint32_t>(GgufType::kArray));
  put64(2);
  put32(static_cast<uint32_t>(GgufType::kUint8));
  put64(2);
  nested += "\x01\x02";
  put32(static_cast<uint32_t>(GgufType::kUint8));
  put64(1);
  nested += "\x03";
  w.SetRaw("some.nested", GgufType::kArray, nested);
  EXPECT_TRUE(w.AddTensor("t.f32", DType::kF32, {3, 4}, Iota(1.0f)).ok());
  EXPECT_TRUE(w.AddTensor("t.q8", DType::kQ8_0, {2, 32}, [](uint8_t* out, size_t n) {
                 std::vector<float> x(64);
                 for (int i = 0; i < 64; ++i) x[i] = static_cast<float>(i) / 8.0f;
                 QuantizeRow(DType::kQ8_0, x.data(), out, 64);
                 EXPECT_EQ(n, RowBytes(DType::kQ8_0, 64));
                 return Status::Ok();
               }).ok());
  auto bytes = w.WriteToString();
  EXPECT_TRUE(bytes.ok());
  return *bytes;
}

TEST(GgufTest, RoundTripsEveryValueType) {
  for (uint32_t alignment : {32u, 64u, 8u}) {
    const std::string bytes = SampleFile(alignment);
    auto g = GgufFile::Parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "mem");
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    const GgufFile& f = **g;
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), alignment);
    EXPECT_EQ(*f.GetString("general.architecture"), "qwen3");
    EXPECT_EQ(*f.GetInt("qwen3.block_count"), 2);
    EXPECT_EQ(*f.GetInt("some.int"), -5);
    EXPECT_EQ(*f.GetInt("some.u64"), int64_t{1} << 40);
    EXPECT_EQ(*f.GetFloat("qwen3.rope.freq_base"), 1e6);
    EXPECT_TRUE(*f.GetBool("some.flag"));
    auto tokens = f.GetArray("tokenizer.ggml.tokens", GgufType::kString);
    ASSERT_TRUE(tokens.ok());
    ASSERT_EQ((*tokens)->strings.size(), 4u);
    EXPECT_EQ((*tokens)->strings[3], "\xe4\xb8\xad");
    EXPECT_EQ((*tokens)->strings[2], "");
    auto types = f.GetArray("tokenizer.ggml.token_type", GgufType::kInt32);
    ASSERT_TRUE(types.ok());
    EXPECT_EQ((*types)->ArrayInt(2), 3);
    auto scores = f.GetArray("tokenizer.ggml.scores", GgufType::kFloat32);
    EXPECT_EQ((*scores)->ArrayFloat(3), 2.0);
    const GgufValue* nested = f.Find("some.nested");
    ASSERT_NE(nested, nullptr);
    ASSERT_EQ(nested->children.size(), 2u);
    EXPECT_EQ(nested->children[0].ArrayInt(1), 2);
    EXPECT_EQ(nested->children[1].ArrayInt(0), 3);
    // Wrong-type access names the key.
    auto bad = f.GetInt("general.architecture");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("general.architecture"), std::string::npos);
    EXPECT_EQ(f.GetInt("missing.key").status().code(), StatusCode::kNotFound);

    ASSERT_EQ(f.tensors().size(), 2u);
    const TensorInfo& t = f.tensors()[0];
    EXPECT_EQ(t.name, "t.f32");
    EXPECT_EQ(t.shape, (std::vector<int64_t>{3, 4}));
    EXPECT_EQ(
        static_cast<size_t>(t.data - reinterpret_cast<const uint8_t*>(bytes.data())) % alignment,
        0u);
    float v[12];
    std::memcpy(v, t.data, sizeof(v));
    EXPECT_EQ(v[0], 1.0f);
    EXPECT_EQ(v[11], 12.0f);
    const TensorInfo& q = f.tensors()[1];
    EXPECT_EQ(q.type, DType::kQ8_0);
    EXPECT_EQ(q.n_bytes, 2 * RowBytes(DType::kQ8_0, 32));
  }
}

// Every truncation of a valid file is an error, never a crash (ASan checks the "never").
TEST(GgufTest, ReadsVersion2) {
  std::string bytes = SampleFile();
  bytes[4] = 2;  // v2 has the same layout as v3 (64-bit counts, little-endian)
  auto g = GgufFile::Parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "v2");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ((*g)->version(), 2u);
  EXPECT_EQ((*g)->tensors().size(), 2u);
}

TEST(GgufTest, EveryTruncationIsAClearError) {
  const std::string bytes = SampleFile();
  // Padding after the last tensor's data is optional; everything before its end is required.
  auto whole = GgufFile::Parse(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "x");
  ASSERT_TRUE(whole.ok());
  const TensorInfo& last = (*whole)->tensors().back();
  const size_t required = static_cast<size_t>(last.data + last.n_bytes -
                                              reinterpret_cast<const uint8_t*>(bytes.data()));
  for (size_t n = 0; n < required; ++n) {
    auto g = GgufFile::Parse(reinterpret_cast<const uint8_t*>(bytes.data()), n, "cut.gguf");
    EXPECT_FALSE(g.ok()) << "truncated to " << n << " bytes was accepted";
    if (!g.ok()) {
      EXPECT_NE(g.status().message().find("cut.gguf"), std::string::npos) << g.status().message();
    }
  }
}

TEST(GgufTest, CorruptFieldsAreNamed) {
  const std::string good = SampleFile();
  auto parse = [](const std::string& b) {
    return GgufFile::Parse(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "bad.gguf");
  };
  std::string b = good;
  b[0] = 'X';
  EXPECT_NE(parse(b).status().message().find("not a GGUF file"), std::string::npos);
  b = good;
  b[4] = 1;  // version 1
  EXPECT_EQ(parse(b).status().code(), StatusCode::kUnimplemented);
  b = good;
  b[4] = 7;
  EXPECT_NE(parse(b).status().message().find("version 7"), std::string::npos);
  b = good;
  const uint64_t huge = 1ull << 60;
  std::memcpy(&b[8], &huge, 8);  // tensor count
  EXPECT_NE(parse(b).status().message().find("tensor count"), std::string::npos);
  b = good;
  std::memcpy(&b[16], &huge, 8);  // kv count
  EXPECT_NE(parse(b).status().message().find("metadata count"), std::string::npos);
  // Change the first tensor's type to q5_K (13): still parses (info can list it), unsupported.
  const size_t name_pos = good.find("t.f32");
  ASSERT_NE(name_pos, std::string::npos);
  b = good;
  const size_t type_pos = name_pos + 5 + 4 + 2 * 8;
  uint32_t q5k = 13;
  std::memcpy(&b[type_pos], &q5k, 4);
  auto g = parse(b);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_FALSE((*g)->tensors()[0].type_supported);
  EXPECT_EQ((*g)->tensors()[0].type_name, "q5_K");
  // A tensor offset past the end of the file.
  b = good;
  const uint64_t far = 1ull << 32;
  std::memcpy(&b[type_pos + 4], &far, 8);
  auto g2 = parse(b);
  ASSERT_FALSE(g2.ok());
  EXPECT_NE(g2.status().message().find("t.f32"), std::string::npos);
  // Zero dimension.
  b = good;
  const uint64_t zero = 0;
  std::memcpy(&b[name_pos + 5 + 4], &zero, 8);
  EXPECT_NE(parse(b).status().message().find("dimension"), std::string::npos);
}

TEST(Llama2cTest, HeaderAndTruncation) {
  // dim 8, hidden 16, 1 layer, 2 heads, 1 kv head, vocab 4, seq_len 4.
  const int32_t h[7] = {8, 16, 1, 2, 1, 4, 4};
  const int64_t floats = 4 * 8 + 8 + 8 * 8 + 2 * 4 * 8 + 8 * 8 + 8 + 3 * 16 * 8 + 8 + 2 * 4 * 2;
  std::string b(28 + floats * 4, '\0');
  std::memcpy(b.data(), h, 28);
  auto c = Llama2cCheckpoint::Parse(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "m.bin");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE((*c)->header().shared_classifier);
  EXPECT_EQ((*c)->tensors().size(), 1u + 9u + 1u);
  auto cut =
      Llama2cCheckpoint::Parse(reinterpret_cast<const uint8_t*>(b.data()), b.size() - 4, "m.bin");
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("m.bin"), std::string::npos);
}

}  // namespace
}  // namespace pocket
