// The .npy reader: float16 / float32 / float64 arrays of any shape read as float32; every
// malformed header or size is an error naming the file.
#include "format/npy_file.h"

#include <gtest/gtest.h>

#include <cstring>

namespace pocket {
namespace {

std::string Npy(const std::string& dict, const std::string& data, int major = 1) {
  std::string header = dict;
  const size_t prefix = major == 1 ? 10 : 12;  // magic, version, header length
  header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  const uint32_t len = static_cast<uint32_t>(header.size());
  out.append(reinterpret_cast<const char*>(&len), major == 1 ? 2 : 4);
  return out + header + data;
}

template <typename T>
std::string Bytes(std::initializer_list<T> values) {
  std::string s;
  for (T v : values) s.append(reinterpret_cast<const char*>(&v), sizeof(T));
  return s;
}

TEST(NpyTest, ReadsFloatArrays) {
  auto a = ParseNpy(Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                        Bytes<float>({1, 2, 3, 4, 5, 6.5f})),
                    "a.npy");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->data, (std::vector<float>{1, 2, 3, 4, 5, 6.5f}));

  auto d = ParseNpy(Npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }",
                        Bytes<double>({0.25, -3.0}), 2),
                    "d.npy");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(d->data, (std::vector<float>{0.25f, -3.0f}));

  auto h = ParseNpy(Npy("{'descr': '<f2', 'fortran_order': False, 'shape': (1, 1), }",
                        Bytes<uint16_t>({0x3c00})),  // 1.0
                    "h.npy");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->data, (std::vector<float>{1.0f}));
}

TEST(NpyTest, ErrorsNameTheProblem) {
  const std::string f4 = Bytes<float>({1, 2});
  struct Case {
    std::string bytes;
    const char* words;
  };
  const Case cases[] = {
      {"not numpy at all", "not a .npy file"},
      {Npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", f4),
       "\">f4\" is not supported"},
      {Npy("{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }", f4), "not supported"},
      {Npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", f4), "Fortran order"},
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", f4), "needs 12"},
      {Npy("{'descr': '<f4', 'fortran_order': False, }", f4), "no 'shape'"},
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", f4).substr(0, 9),
       "truncated"},
  };
  for (const Case& c : cases) {
    auto r = ParseNpy(c.bytes, "bad.npy");
    ASSERT_FALSE(r.ok()) << c.words;
    EXPECT_NE(r.status().message().find("bad.npy"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.words), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace pocket
