// The converter: codes kept exactly from quantized inputs (the QAT Q4_1 g64 case bit for bit),
// INT4 g64 quality against plain Q4_1, the fallback for widths the group does not divide, and no
// partial output when a conversion fails.
#include "convert/convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "base/mapped_file.h"
#include "model/synthetic.h"
#include "quant/quantize.h"
#include "runtime/session.h"
#include "tokenizer/byte_level.h"

namespace pocket {
namespace {

namespace fs = std::filesystem;

std::string WorkDir() {
  const std::string dir = std::string(POCKET_BINARY_DIR) + "/convert-test";
  fs::create_directories(dir);
  return dir;
}

std::string MakeGguf(const std::string& name, ModelConfig c, DType type, int32_t grid = 32,
                     uint64_t seed = 7) {
  const std::string path = WorkDir() + "/" + name;
  SyntheticOptions o;
  o.config = c;
  o.seed = seed;
  o.weight_type = type;
  o.q4_1_grid = grid;
  const Status s = WriteSyntheticGguf(o, path);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return path;
}

ModelConfig Tiny() {
  auto c = PresetConfig("tiny", Architecture::kQwen3);
  EXPECT_TRUE(c.ok());
  return *c;
}

std::shared_ptr<const Model> Load(const std::string& path, bool repack = true) {
  LoadOptions o;
  o.repack = repack;
  auto m = Model::Load(path, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

ConvertReport Convert(const std::string& in, const std::string& out, const std::string& weights,
                      int32_t group) {
  ConvertOptions o;
  o.weights = weights;
  o.group = group;
  o.n_threads = 2;
  auto r = ConvertModel(in, out, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : ConvertReport{};
}

// Row r of a logical matrix as floats: a packed matrix (.pocket) or, from the GGUF, the
// concatenation (or panel interleave, for gate/up) of its parts, decoded by the GGUF block
// decoder.
void Row(const Linear& l, int64_t r, float* out) {
  if (l.packed) {
    DequantizePackedRow(l.p, r, out);
  } else {
    DequantizeRow(l.w.type, l.w.row(r), out, l.w.cols);
  }
}

// bitwise: the float bits must match; otherwise the values (Q4_0 with a negative scale decodes
// a zero code as -0.0, the packed form as +0.0).
void ExpectSameValues(const std::vector<const Linear*>& gguf_parts, bool interleave,
                      const Linear& packed, const std::string& what, bool bitwise) {
  ASSERT_TRUE(packed.packed) << what;
  const int64_t cols = packed.cols();
  std::vector<float> a(static_cast<size_t>(cols)), b(a.size());
  int64_t rows = 0;
  for (const Linear* p : gguf_parts) rows += p->rows();
  ASSERT_EQ(rows, packed.rows()) << what;
  for (int64_t r = 0; r < rows; ++r) {
    const Linear* part = gguf_parts[0];
    int64_t local = r;
    if (interleave) {
      part = gguf_parts[static_cast<size_t>((r / kPanelRows) % 2)];
      local = (r / kPanelRows / 2) * kPanelRows + r % kPanelRows;
    } else {
      for (const Linear* p : gguf_parts) {
        if (local < p->rows()) {
          part = p;
          break;
        }
        local -= p->rows();
      }
    }
    Row(*part, local, a.data());
    Row(packed, r, b.data());
    if (bitwise) {
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
          << what << " row " << r << " differs";
    } else {
      ASSERT_TRUE(a == b) << what << " row " << r << " differs";
    }
  }
}

// Every matrix of the .pocket file dequantizes to exactly the GGUF's values.
void ExpectLossless(const Model& gguf, const Model& pocket, bool bitwise) {
  const ModelWeights& g = gguf.weights();
  const ModelWeights& p = pocket.weights();
  ExpectSameValues({&g.token_embd}, false, p.token_embd, "token_embd", bitwise);
  if (!gguf.config().tied_output) {
    ExpectSameValues({&g.output}, false, p.output, "output", bitwise);
  }
  for (size_t i = 0; i < g.layers.size(); ++i) {
    const LayerWeights& gl = g.layers[i];
    const LayerWeights& pl = p.layers[i];
    const std::string n = "blk." + std::to_string(i) + ".";
    ExpectSameValues({&gl.wq, &gl.wk, &gl.wv}, false, pl.qkv, n + "attn_qkv", bitwise);
    ExpectSameValues({&gl.wo}, false, pl.wo, n + "attn_output", bitwise);
    ExpectSameValues({&gl.w_gate, &gl.w_up}, true, pl.gate_up, n + "ffn_gate_up", bitwise);
    ExpectSameValues({&gl.w_down}, false, pl.w_down, n + "ffn_down", bitwise);
  }
}

std::vector<int32_t> RandomIds(int32_t vocab, int32_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = pick(rng);
  return ids;
}

// Greedy continuation of `prompt` by n tokens, and the logits it saw at every step.
std::vector<int32_t> Greedy(std::shared_ptr<const Model> model, std::vector<int32_t> prompt,
                            int32_t n, std::vector<float>* logits) {
  SessionOptions so;
  so.n_ctx = 256;
  so.n_threads = 2;
  auto s = Session::Create(std::move(model), so);
  EXPECT_TRUE(s.ok());
  std::vector<int32_t> out;
  EXPECT_TRUE((*s)->SetContext(prompt).ok());
  for (int32_t i = 0; i < n; ++i) {
    std::span<const float> l = (*s)->last_logits();
    logits->insert(logits->end(), l.begin(), l.end());
    const int32_t next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    out.push_back(next);
    const int32_t one[1] = {next};
    EXPECT_TRUE((*s)->Append(one).ok());
  }
  return out;
}

int64_t Kept(const ConvertReport& r) {
  int64_t kept = 0;
  for (const ConvertGroupReport& g : r.groups) kept += g.kept_weights;
  return kept;
}

int64_t Matrices(const ConvertReport& r) {
  int64_t n = 0;
  for (const ConvertGroupReport& g : r.groups) {
    if (g.group != "norms") n += g.n_weights;
  }
  return n;
}

TEST(ConvertTest, QatQ4_1OnAG64GridConvertsLosslessly) {
  const std::string gguf = MakeGguf("qat-q4_1.gguf", Tiny(), DType::kQ4_1, /*grid=*/64);
  const std::string out = WorkDir() + "/qat-q4_1.pocket";
  const ConvertReport report = Convert(gguf, out, "int4", 64);
  EXPECT_EQ(Kept(report), Matrices(report)) << "every matrix keeps its codes";
  auto from_gguf = Load(gguf, /*repack=*/false);
  auto from_pocket = Load(out);
  ASSERT_TRUE(from_gguf && from_pocket);
  ExpectLossless(*from_gguf, *from_pocket, /*bitwise=*/true);
  // Greedy generation (and every logit on the way) is identical to running the GGUF itself,
  // which loads onto the same g64 layout.
  auto gguf_model = Load(gguf);
  ASSERT_TRUE(gguf_model);
  EXPECT_EQ(gguf_model->weights().layers[0].qkv.p.layout.group, 64);
  const std::vector<int32_t> prompt = RandomIds(Tiny().vocab_size, 40, 3);
  std::vector<float> la, lb;
  const std::vector<int32_t> a = Greedy(gguf_model, prompt, 24, &la);
  const std::vector<int32_t> b = Greedy(from_pocket, prompt, 24, &lb);
  // The same packed bytes on the same table, in the same forms (40 rows): bit-identical by design.
  EXPECT_EQ(a, b);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)));
}

// A package is an input too: its fused Q/K/V and gate/up matrices are read back, fused again
// (int8 -> int8) or split into their parts (int8 -> f32, exactly the package's values).
TEST(ConvertTest, APackageReadBackConvertsAgain) {
  const std::string gguf = MakeGguf("reconvert.gguf", Tiny(), DType::kF32);
  const std::string a_path = WorkDir() + "/reconvert-int8.pocket";
  const std::string b_path = WorkDir() + "/reconvert-f32.pocket";
  const std::string c_path = WorkDir() + "/reconvert-int8-again.pocket";
  Convert(gguf, a_path, "int8", 64);
  Convert(a_path, b_path, "f32", 64);
  Convert(a_path, c_path, "int8", 64);
  auto a = Load(a_path);
  auto b = Load(b_path);
  auto c = Load(c_path);
  ASSERT_TRUE(a && b && c);
  const ModelConfig& cfg = a->config();
  const int64_t qd = cfg.q_dim(), kvd = cfg.kv_dim();
  std::vector<float> x(static_cast<size_t>(std::max(cfg.d_model, cfg.d_ff))), y(x.size());
  for (size_t i = 0; i < a->weights().layers.size(); ++i) {
    const LayerWeights& la = a->weights().layers[i];
    const LayerWeights& lb = b->weights().layers[i];
    ASSERT_TRUE(la.qkv.present() && la.gate_up.present());
    ASSERT_FALSE(lb.qkv.present() || lb.gate_up.present());
    auto same = [&](const Linear& fused, int64_t fused_row, const Linear& part, int64_t row,
                    const char* what) {
      Row(fused, fused_row, x.data());
      Row(part, row, y.data());
      ASSERT_EQ(0, std::memcmp(x.data(), y.data(), static_cast<size_t>(part.cols()) * 4))
          << "layer " << i << " " << what << " row " << row;
    };
    for (int64_t r = 0; r < qd; ++r) same(la.qkv, r, lb.wq, r, "q");
    for (int64_t r = 0; r < kvd; ++r) same(la.qkv, qd + r, lb.wk, r, "k");
    for (int64_t r = 0; r < kvd; ++r) same(la.qkv, qd + kvd + r, lb.wv, r, "v");
    for (int64_t r = 0; r < cfg.d_ff; ++r) {
      const int64_t fused = ((r / kPanelRows) * 2) * kPanelRows + r % kPanelRows;
      same(la.gate_up, fused, lb.w_gate, r, "gate");
      same(la.gate_up, fused + kPanelRows, lb.w_up, r, "up");
    }
  }
  // Fused again: the package runs and its logits stay close to the first package's.
  const std::vector<int32_t> prompt = RandomIds(cfg.vocab_size, 12, 5);
  std::vector<float> la, lc;
  Greedy(a, prompt, 1, &la);
  Greedy(c, prompt, 1, &lc);
  ASSERT_EQ(la.size(), lc.size());
  float max_abs = 0.0f, max_diff = 0.0f;
  for (size_t i = 0; i < la.size(); ++i) {
    max_abs = std::max(max_abs, std::fabs(la[i]));
    max_diff = std::max(max_diff, std::fabs(la[i] - lc[i]));
  }
  EXPECT_LT(max_diff, 0.05f * max_abs);
}

TEST(ConvertTest, QuantizedInputsKeepTheirCodesWhereTheLayoutAllows) {
  struct Case {
    DType type;
    const char* weights;
    int32_t group;
    bool kept;
  };
  const Case cases[] = {
      {DType::kQ4_1, "int4", 32, true},  {DType::kQ4_1, "int4", 64, false},
      {DType::kQ4_0, "int4", 32, true},  {DType::kQ8_0, "int8", 32, true},
      {DType::kQ8_0, "int4", 32, false}, {DType::kQ4_0, "int8", 32, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(DTypeName(c.type)) + " -> " + c.weights + " g" +
                 std::to_string(c.group));
    const std::string gguf =
        MakeGguf(std::string("plain-") + std::string(DTypeName(c.type)) + ".gguf", Tiny(), c.type);
    const std::string out = WorkDir() + "/plain.pocket";
    const ConvertReport report = Convert(gguf, out, c.weights, c.group);
    EXPECT_EQ(Kept(report), c.kept ? Matrices(report) : 0);
    if (c.kept) {
      auto from_gguf = Load(gguf, /*repack=*/false);
      auto from_pocket = Load(out);
      ASSERT_TRUE(from_gguf && from_pocket);
      ExpectLossless(*from_gguf, *from_pocket, /*bitwise=*/c.type == DType::kQ4_1);
    }
  }
}

// Mean over positions of KL(p_ref || p_q) of the next-token distributions.
double MeanKl(const std::vector<float>& ref, const std::vector<float>& q, int64_t vocab) {
  const int64_t n = static_cast<int64_t>(ref.size()) / vocab;
  double total = 0;
  for (int64_t t = 0; t < n; ++t) {
    const float* a = &ref[static_cast<size_t>(t * vocab)];
    const float* b = &q[static_cast<size_t>(t * vocab)];
    const double ma = *std::max_element(a, a + vocab), mb = *std::max_element(b, b + vocab);
    double za = 0, zb = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      za += std::exp(a[i] - ma);
      zb += std::exp(b[i] - mb);
    }
    double kl = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      const double la = a[i] - ma - std::log(za), lb = b[i] - mb - std::log(zb);
      kl += std::exp(la) * (la - lb);
    }
    total += kl;
  }
  return total / static_cast<double>(n);
}

std::vector<float> AllLogits(std::shared_ptr<const Model> model, const std::vector<int32_t>& ids) {
  SessionOptions so;
  so.n_ctx = static_cast<int32_t>(ids.size());
  so.n_threads = 2;
  auto s = Session::Create(std::move(model), so);
  EXPECT_TRUE(s.ok());
  std::vector<float> logits(ids.size() * static_cast<size_t>((*s)->model().config().vocab_size));
  const Status st = (*s)->Append(ids, logits.data());
  EXPECT_TRUE(st.ok()) << st.ToString();
  return logits;
}

TEST(ConvertTest, Int4G64LosesNoMoreThanRoundToNearestQ4_1G32) {
  // The MNN-Pocket-0.3B widths (896, 2560) with fewer layers and a smaller vocabulary, so the
  // test stays quick under the sanitizers.
  auto c = PresetConfig("pocket-0.3b", Architecture::kQwen3);
  ASSERT_TRUE(c.ok());
  c->n_layers = 2;
  c->vocab_size = 2048;
  const std::string bf16 = MakeGguf("kl-bf16.gguf", *c, DType::kBF16);
  const std::string q4_1 = MakeGguf("kl-q4_1.gguf", *c, DType::kQ4_1);
  const std::string int4 = WorkDir() + "/kl-int4.pocket";
  Convert(bf16, int4, "int4", 64);
  const std::vector<int32_t> ids = RandomIds(c->vocab_size, 512, 11);
  auto m_bf16 = Load(bf16), m_q4_1 = Load(q4_1), m_int4 = Load(int4);
  ASSERT_TRUE(m_bf16 && m_q4_1 && m_int4);
  const std::vector<float> ref = AllLogits(m_bf16, ids);
  const double kl_q4_1 = MeanKl(ref, AllLogits(m_q4_1, ids), c->vocab_size);
  const double kl_int4 = MeanKl(ref, AllLogits(m_int4, ids), c->vocab_size);
  std::printf("mean KL vs BF16 over %zu positions: pocket INT4 g64 %.3e, Q4_1 g32 (RTN) %.3e\n",
              ids.size(), kl_int4, kl_q4_1);
  EXPECT_GT(kl_q4_1, 0.0);
  EXPECT_LE(kl_int4, kl_q4_1);
}

// The thread pool splits work so that every output element is computed by one thread in the same
// order whatever the thread count: logits are bit-identical for 1, 2 and 3 threads, on the packed
// integer path (.pocket INT4 g64, and a GGUF Q4_0 repacked at load) and on the dense float path.
TEST(ConvertTest, LogitsAreBitIdenticalForAnyThreadCount) {
  auto c = PresetConfig("pocket-0.3b", Architecture::kQwen3);
  ASSERT_TRUE(c.ok());
  c->n_layers = 2;
  c->vocab_size = 2048;
  const std::string bf16 = MakeGguf("threads-bf16.gguf", *c, DType::kBF16);
  const std::string q4_0 = MakeGguf("threads-q4_0.gguf", *c, DType::kQ4_0);
  const std::string int4 = WorkDir() + "/threads-int4.pocket";
  Convert(bf16, int4, "int4", 64);
  const std::vector<int32_t> ids = RandomIds(c->vocab_size, 100, 17);
  auto logits_of = [&](const std::shared_ptr<const Model>& model, int32_t threads) {
    SessionOptions so;
    so.n_ctx = 128;
    so.n_batch = 64;  // two prefill chunks: 64 tokens, then 36
    so.n_threads = threads;
    auto s = Session::Create(model, so);
    EXPECT_TRUE(s.ok());
    std::vector<float> logits(ids.size() * static_cast<size_t>(c->vocab_size));
    EXPECT_TRUE((*s)->Append(ids, logits.data()).ok());
    for (int i = 0; i < 4; ++i) {  // and single-token decode steps
      const int32_t next[1] = {ids[static_cast<size_t>(i)]};
      EXPECT_TRUE((*s)->Append(next).ok());
      std::span<const float> l = (*s)->last_logits();
      logits.insert(logits.end(), l.begin(), l.end());
    }
    return logits;
  };
  for (const std::string& path : {int4, q4_0, bf16}) {
    SCOPED_TRACE(path);
    auto model = Load(path);
    ASSERT_TRUE(model);
    const std::vector<float> one = logits_of(model, 1);
    for (int32_t threads : {2, 3}) {
      const std::vector<float> logits = logits_of(model, threads);
      ASSERT_EQ(one.size(), logits.size());
      EXPECT_EQ(0, std::memcmp(one.data(), logits.data(), one.size() * sizeof(float)))
          << threads << " threads differ from 1";
    }
    // Huge pages (on by default) change where the weights live, never what they are.
    LoadOptions small_pages;
    small_pages.huge_pages = false;
    auto plain = Model::Load(path, small_pages);
    ASSERT_TRUE(plain.ok());
    const std::vector<float> logits = logits_of(*plain, 1);
    ASSERT_EQ(one.size(), logits.size());
    EXPECT_EQ(0, std::memcmp(one.data(), logits.data(), one.size() * sizeof(float)))
        << "huge pages off differ";
    if (model->weights().repacked_bytes > 0) {  // the repacked buffer starts on a huge page
      EXPECT_EQ(
          reinterpret_cast<uintptr_t>(model->weights().decode_weight_span().first) % kHugePageBytes,
          0u);
    }
  }
}

TEST(ConvertTest, AFailedConversionLeavesNoFile) {
  const std::string gguf = MakeGguf("cancel.gguf", Tiny(), DType::kF32);
  const std::string dir = WorkDir() + "/cancel-out";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string out = dir + "/model.pocket";
  ConvertOptions o;
  int polls = 0;
  o.cancelled = [&polls] { return ++polls > 3; };  // fail in the middle of the tensor data
  auto r = ConvertModel(gguf, out, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled) << r.status().ToString();
  EXPECT_TRUE(fs::is_empty(dir)) << "a partial or temporary file was left behind";
  // An earlier output at that path survives a failed conversion untouched.
  {
    std::FILE* f = std::fopen(out.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fputs("previous", f);
    std::fclose(f);
  }
  polls = 0;
  ASSERT_FALSE(ConvertModel(gguf, out, o).ok());
  EXPECT_EQ(fs::file_size(out), 8u);
  // The input is never the output.
  auto same = ConvertModel(gguf, gguf, ConvertOptions{});
  EXPECT_FALSE(same.ok());
}

// Every value of the dense f16 matrix `stored` is the source's value rounded to f16: the fallback
// encoding is exact at f16 precision.
void ExpectF16Of(const Linear& source, const Linear& stored, const std::string& what) {
  ASSERT_FALSE(stored.packed) << what;
  ASSERT_EQ(stored.w.type, DType::kF16) << what;
  ASSERT_EQ(source.rows(), stored.rows()) << what;
  ASSERT_EQ(source.cols(), stored.cols()) << what;
  std::vector<float> a(static_cast<size_t>(source.cols())), b(a.size());
  std::vector<uint8_t> f16(RowBytes(DType::kF16, source.cols()));
  for (int64_t r = 0; r < source.rows(); ++r) {
    Row(source, r, a.data());
    QuantizeRow(DType::kF16, a.data(), f16.data(), source.cols());
    DequantizeRow(DType::kF16, f16.data(), a.data(), source.cols());
    Row(stored, r, b.data());
    ASSERT_TRUE(a == b) << what << " row " << r;
  }
}

const ConvertGroupReport* GroupOf(const ConvertReport& r, const std::string& group) {
  for (const ConvertGroupReport& g : r.groups) {
    if (g.group == group) return &g;
  }
  return nullptr;
}

// A width the requested group does not divide but a smaller one does (d_ff 96 at group 64 or 128)
// is stored at that smaller group, and named in the report; every other matrix keeps the group.
TEST(ConvertTest, AWidthTheGroupDoesNotDivideFallsBackToASmallerGroup) {
  ModelConfig c = Tiny();
  c.d_ff = 96;
  const std::string gguf = MakeGguf("ff96.gguf", c, DType::kF32);
  for (int32_t group : {64, 128}) {
    SCOPED_TRACE(group);
    const std::string out = WorkDir() + "/ff96.pocket";
    const ConvertReport report = Convert(gguf, out, "int4", group);
    ASSERT_EQ(report.fallbacks.size(), static_cast<size_t>(c.n_layers));
    for (int32_t i = 0; i < c.n_layers; ++i) {
      const ConvertFallback& f = report.fallbacks[static_cast<size_t>(i)];
      EXPECT_EQ(f.tensor, "blk." + std::to_string(i) + ".ffn_down.weight");
      EXPECT_EQ(f.group, "ffn");
      EXPECT_EQ(f.requested, "int4 g" + std::to_string(group));
      EXPECT_EQ(f.stored, "int4 g32");
      EXPECT_NE(f.reason.find("96 columns"), std::string::npos) << f.reason;
    }
    auto model = Load(out);
    ASSERT_TRUE(model);
    for (const LayerWeights& l : model->weights().layers) {
      ASSERT_TRUE(l.w_down.packed && l.qkv.packed && l.gate_up.packed);
      EXPECT_EQ(l.w_down.p.layout.group, 32);
      EXPECT_EQ(l.qkv.p.layout.group, group);
      EXPECT_EQ(l.gate_up.p.layout.group, group);
    }
    std::vector<float> logits;
    EXPECT_EQ(Greedy(model, RandomIds(c.vocab_size, 8, 5), 4, &logits).size(), 4u);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  }
}

// A width no supported group divides (stories260K's d_ff of 172) has no packed layout, and no int8
// one the kernels run: the matrix is stored as f16 (exactly the source's values at f16 precision),
// named in the report with the reason, and the package loads and runs.
TEST(ConvertTest, AWidthNoGroupDividesIsStoredAsF16) {
  ModelConfig c = Tiny();
  c.d_ff = 172;
  const std::string gguf = MakeGguf("ff172.gguf", c, DType::kF32);
  for (const char* weights : {"int4", "int8"}) {
    SCOPED_TRACE(weights);
    const std::string out = WorkDir() + "/ff172.pocket";
    const ConvertReport report = Convert(gguf, out, weights, 64);
    ASSERT_EQ(report.fallbacks.size(), static_cast<size_t>(c.n_layers));
    for (const ConvertFallback& f : report.fallbacks) {
      EXPECT_NE(f.tensor.find("ffn_down.weight"), std::string::npos) << f.tensor;
      EXPECT_EQ(f.stored, "f16");
      EXPECT_NE(f.reason.find("172 columns are not a multiple of 32"), std::string::npos)
          << f.reason;
    }
    const ConvertGroupReport* ffn = GroupOf(report, "ffn");
    ASSERT_NE(ffn, nullptr);
    EXPECT_EQ(ffn->encoding, std::string(weights) + "+f16");
    auto source = Load(gguf, /*repack=*/false);
    auto model = Load(out);
    ASSERT_TRUE(source && model);
    for (int32_t i = 0; i < c.n_layers; ++i) {
      const LayerWeights& l = model->weights().layers[static_cast<size_t>(i)];
      EXPECT_TRUE(l.qkv.packed && l.wo.packed && l.w_gate.packed && l.w_up.packed);
      ExpectF16Of(source->weights().layers[static_cast<size_t>(i)].w_down, l.w_down,
                  "blk." + std::to_string(i) + ".ffn_down");
    }
    std::vector<float> logits;
    EXPECT_EQ(Greedy(model, RandomIds(c.vocab_size, 8, 5), 4, &logits).size(), 4u);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  }
}

// A d_model no group divides: every matrix reading d_model columns is f16, so Q/K/V and gate/up
// are stored unfused (a fused matrix must be packed), and the package still runs, with logits
// near the source's (only ffn_down, 128 columns wide, is int4).
TEST(ConvertTest, ADModelNoGroupDividesKeepsMatricesUnfused) {
  ModelConfig c = Tiny();
  c.d_model = 48, c.n_heads = 3, c.n_kv_heads = 1, c.head_dim = 16, c.d_ff = 128;
  const std::string gguf = MakeGguf("d48.gguf", c, DType::kF32);
  const std::string out = WorkDir() + "/d48.pocket";
  const ConvertReport report = Convert(gguf, out, "int4", 64);
  // Per layer q, k, v, o, gate, up; and the embedding and output.
  EXPECT_EQ(report.fallbacks.size(), static_cast<size_t>(6 * c.n_layers + 2));
  for (const ConvertFallback& f : report.fallbacks) {
    EXPECT_EQ(f.stored, "f16") << f.tensor;
    EXPECT_EQ(f.tensor.find("ffn_down"), std::string::npos) << f.tensor;
  }
  auto source = Load(gguf, /*repack=*/false);
  auto model = Load(out);
  ASSERT_TRUE(source && model);
  const ModelWeights& w = model->weights();
  ExpectF16Of(source->weights().token_embd, w.token_embd, "token_embd");
  for (int32_t i = 0; i < c.n_layers; ++i) {
    const LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const LayerWeights& s = source->weights().layers[static_cast<size_t>(i)];
    EXPECT_FALSE(l.qkv.present() || l.gate_up.present());
    ExpectF16Of(s.wq, l.wq, "attn_q");
    ExpectF16Of(s.wk, l.wk, "attn_k");
    ExpectF16Of(s.wv, l.wv, "attn_v");
    ExpectF16Of(s.w_gate, l.w_gate, "ffn_gate");
    ASSERT_TRUE(l.w_down.packed);
    EXPECT_EQ(l.w_down.p.layout.group, 64);
  }
  const std::vector<int32_t> ids = RandomIds(c.vocab_size, 32, 9);
  const double kl = MeanKl(AllLogits(Load(gguf), ids), AllLogits(model, ids), c.vocab_size);
  std::printf("d_model 48 package against its f32 source: mean KL %.3e\n", kl);
  EXPECT_LT(kl, 1e-2);
}

// The package's tokenizer tables are used in place from the mapping: the tokenizer encodes as the
// source's does, and keeps the mapping alive when the model is gone.
TEST(ConvertTest, PackageTokenizerIsMappedAndOutlivesTheModel) {
  TokenizerSpec spec;
  for (int b = 0; b < 256; ++b)
    spec.tokens.push_back(byte_level::EncodeBytes(std::string(1, static_cast<char>(b))));
  for (const char* t : {"he", "ll", "hell", "hello", " w", " wor", " world"})
    spec.tokens.push_back(byte_level::EncodeBytes(t));
  spec.merges = {{"h", "e"}, {"l", "l"},   {"he", "ll"},  {"hell", "o"},
                 {"Ġ", "w"}, {"Ġw", "or"}, {"Ġwor", "ld"}};
  spec.tokens.push_back("or");
  spec.tokens.push_back("ld");
  spec.merges.insert(spec.merges.begin() + 4, {{"o", "r"}, {"l", "d"}});
  spec.tokens.push_back("<|im_end|>");
  spec.types.assign(spec.tokens.size(), TokenType::kNormal);
  spec.types.back() = TokenType::kControl;
  spec.eos_id = static_cast<int32_t>(spec.tokens.size() - 1);
  auto tok = Tokenizer::FromSpec(spec);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::string gguf = WorkDir() + "/tokenized.gguf";
  SyntheticOptions o;
  o.config = Tiny();
  o.seed = 3;
  o.weight_type = DType::kF32;
  o.tokenizer = *tok;
  ASSERT_TRUE(WriteSyntheticGguf(o, gguf).ok());
  const std::string out = WorkDir() + "/tokenized.pocket";
  Convert(gguf, out, "int8", 32);
  std::shared_ptr<const Model> source = Load(gguf);
  std::shared_ptr<const Model> package = Load(out);
  ASSERT_TRUE(source && package && source->tokenizer() && package->tokenizer());
  const std::string text = "hello world<|im_end|>hello wor";
  const std::vector<int32_t> expected = *source->tokenizer()->Encode(text);
  EXPECT_EQ(*package->tokenizer()->Encode(text), expected);
  EXPECT_EQ(package->tokenizer()->FullSpec().tokens, source->tokenizer()->FullSpec().tokens);
  EXPECT_EQ(package->stop_token_ids(), source->stop_token_ids());
  std::shared_ptr<const Tokenizer> kept = package->shared_tokenizer();
  package.reset();
  EXPECT_EQ(*kept->Encode(text), expected);  // the mapping is still there
  EXPECT_EQ(kept->TokenBytes(expected[0]), "hello");
}

}  // namespace
}  // namespace pocket
