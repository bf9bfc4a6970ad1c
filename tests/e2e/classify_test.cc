// The classification-head form of scoring: a head [n_labels, d_model] stored with its labels
// (GGUF or .pocket) scores the labels from one forward pass of the prompt.
//
// - Session::Classify equals an independent computation: a head whose rows are copies of rows of
//   the output matrix must give exactly those tokens' logits of the language-model path (the same
//   dot products, there through the dense f32 output kernel, here accumulated in double):
//   within 1e-4 on an F32 model, for prompts of 1 to 100 tokens (several prefill chunks), with
//   and without KV rows reused from the previous call.
// - Probabilities sum to 1, log-probabilities are a log-softmax, labels are ranked.
// - Errors are clear: no head; a head whose shape or label count does not fit, at load time
//   (GGUF and .pocket) and at convert time (no output file left).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <set>

#include "base/mapped_file.h"
#include "base/output_file.h"
#include "convert/convert.h"
#include "format/gguf_writer.h"
#include "format/pocket_file.h"
#include "model/synthetic.h"
#include "quant/quantize.h"
#include "runtime/engine.h"
#include "runtime/session.h"

namespace pocket {
namespace {

namespace fs = std::filesystem;

std::string WorkDir() {
  const std::string dir = std::string(POCKET_BINARY_DIR) + "/classify-test";
  fs::create_directories(dir);
  return dir;
}

std::string Path(const std::string& name) {
  return WorkDir() + "/" + name;
}

constexpr int64_t kDModel = 256;  // the tiny preset

std::string MakeGguf(const std::string& name, uint64_t seed, std::vector<std::string> labels = {}) {
  const std::string path = Path(name);
  auto c = PresetConfig("tiny", Architecture::kQwen3);
  EXPECT_TRUE(c.ok());
  SyntheticOptions o;
  o.config = *c;
  o.seed = seed;
  o.classifier_labels = std::move(labels);
  const Status s = WriteSyntheticGguf(o, path);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return path;
}

// Copies a GGUF file, leaving out the metadata keys and tensors named in `drop`, then lets `add`
// put in more: how the tests make files whose heads are wrong in one way each.
void RewriteGguf(const std::string& in, const std::string& out, const std::set<std::string>& drop,
                 const std::function<void(GgufWriter&)>& add) {
  auto src = GgufFile::Open(in);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  GgufWriter w;
  for (const auto& [key, value] : (*src)->metadata()) {
    if (!drop.count(std::string(key))) w.SetValue(std::string(key), value);
  }
  for (const TensorInfo& t : (*src)->tensors()) {
    if (drop.count(t.name)) continue;
    const uint8_t* data = t.data;
    ASSERT_TRUE(w.AddTensor(t.name, t.type, t.shape, [data](uint8_t* dst, size_t n) {
                   std::memcpy(dst, data, n);
                   return Status::Ok();
                 }).ok());
  }
  add(w);
  const Status s = w.Write(out);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

void AddF32Tensor(GgufWriter& w, const std::string& name, std::vector<int64_t> shape,
                  std::vector<float> values) {
  auto data = std::make_shared<std::vector<float>>(std::move(values));
  ASSERT_TRUE(w.AddTensor(name, DType::kF32, std::move(shape), [data](uint8_t* dst, size_t n) {
                 std::memcpy(dst, data->data(), n);
                 return Status::Ok();
               }).ok());
}

std::vector<float> RandomMatrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(cols)));
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (float& x : v) x = normal(rng);
  return v;
}

// A NumPy .npy (format 1.0, <f4, C order).
void WriteNpy(const std::string& path, const std::vector<int64_t>& shape,
              const std::vector<float>& data) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  for (int64_t d : shape) dict += std::to_string(d) + ", ";
  dict += "), }";
  dict.append(63 - (10 + dict.size()) % 64, ' ');
  dict += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes.push_back(static_cast<char>(dict.size() & 0xff));
  bytes.push_back(static_cast<char>(dict.size() >> 8));
  bytes += dict;
  bytes.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  ASSERT_TRUE(WriteFileAtomically(path, bytes).ok());
}

std::shared_ptr<const Model> Load(const std::string& path) {
  auto m = Model::Load(path);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

std::string LoadError(const std::string& path) {
  auto m = Model::Load(path);
  EXPECT_FALSE(m.ok()) << path << " loaded";
  return m.ok() ? "" : m.status().message();
}

std::unique_ptr<Session> MakeSession(std::shared_ptr<const Model> model) {
  SessionOptions so;
  so.n_ctx = 256;
  so.n_batch = 64;  // a 100-token prompt takes two chunks
  so.n_threads = 2;
  so.kv_type = KvType::kF32;
  auto s = Session::Create(std::move(model), so);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

std::vector<int32_t> RandomPrompt(std::mt19937& rng, size_t n) {
  std::vector<int32_t> p(n);
  for (int32_t& t : p) t = static_cast<int32_t>(rng() % 1024);
  return p;
}

void ExpectNormalized(const std::vector<LabelScore>& scores) {
  double total = 0.0, max_logit = -INFINITY;
  for (const LabelScore& s : scores) max_logit = std::max(max_logit, s.logit);
  double z = 0.0;
  for (const LabelScore& s : scores) z += std::exp(s.logit - max_logit);
  for (size_t i = 0; i < scores.size(); ++i) {
    if (i > 0) {
      EXPECT_GE(scores[i - 1].logit, scores[i].logit) << "ranked best first";
    }
    EXPECT_NEAR(scores[i].logprob, scores[i].logit - max_logit - std::log(z), 1e-12);
    EXPECT_NEAR(scores[i].probability, std::exp(scores[i].logprob), 1e-15);
    total += scores[i].probability;
  }
  EXPECT_NEAR(total, 1.0, 1e-12);
}

// Label logits by label index.
std::vector<double> ByIndex(const std::vector<LabelScore>& scores) {
  std::vector<double> out(scores.size());
  for (const LabelScore& s : scores) out[static_cast<size_t>(s.index)] = s.logit;
  return out;
}

TEST(ClassifyTest, HeadRowsCopiedFromTheOutputMatrixGiveThoseTokensLogits) {
  const std::string base = MakeGguf("rows-base.gguf", 31);
  auto base_model = Load(base);
  ASSERT_TRUE(base_model);
  const Linear& output = base_model->weights().output;
  ASSERT_FALSE(output.packed);
  const std::vector<int32_t> tokens = {7, 100, 511, 1000, 3};
  std::vector<float> rows(tokens.size() * kDModel);
  std::vector<std::string> labels;
  for (size_t i = 0; i < tokens.size(); ++i) {
    DequantizeRow(output.w.type, output.w.row(tokens[i]), rows.data() + i * kDModel, kDModel);
    labels.push_back("token " + std::to_string(tokens[i]));
  }
  const std::string path = Path("rows-head.gguf");
  RewriteGguf(base, path, {}, [&](GgufWriter& w) {
    w.SetStringArray(kGgufClassifierLabelsKey, labels);
    AddF32Tensor(w, kClassifierTensor, {static_cast<int64_t>(tokens.size()), kDModel}, rows);
  });
  auto model = Load(path);
  ASSERT_TRUE(model);
  ASSERT_EQ(model->classifier().labels, labels);
  auto session = MakeSession(model);
  auto lm = MakeSession(model);  // the language-model path, for the expected values
  ASSERT_TRUE(session && lm);
  std::mt19937 rng(5);
  double worst = 0.0;
  std::vector<int32_t> previous;
  for (size_t n : {1, 5, 40, 100, 17}) {
    // Odd sizes extend the previous prompt by n tokens, so its KV rows are reused.
    std::vector<int32_t> prompt = n % 2 == 0 ? std::vector<int32_t>() : previous;
    const std::vector<int32_t> more = RandomPrompt(rng, n);
    prompt.insert(prompt.end(), more.begin(), more.end());
    previous = prompt;
    auto scores = session->Classify(prompt);
    ASSERT_TRUE(scores.ok()) << scores.status().ToString();
    ASSERT_EQ(scores->size(), tokens.size());
    ExpectNormalized(*scores);
    EXPECT_EQ(std::vector<int32_t>(session->history().begin(), session->history().end()), prompt);
    lm->Reset();
    ASSERT_TRUE(lm->SetContext(prompt).ok());
    const std::vector<double> logits = ByIndex(*scores);
    for (size_t i = 0; i < tokens.size(); ++i) {
      EXPECT_EQ((*scores)[i].label, labels[static_cast<size_t>((*scores)[i].index)]);
      const double expected = lm->last_logits()[static_cast<size_t>(tokens[i])];
      worst = std::max(worst, std::fabs(logits[i] - expected));
    }
  }
  EXPECT_LE(worst, 1e-4) << "head logits against the output matrix's logits";
  std::printf("max |head logit - output logit| = %.3g\n", worst);
}

TEST(ClassifyTest, RepeatedCallsAndTheLanguageModelPathStayConsistent) {
  auto model = Load(MakeGguf("labels.gguf", 32, {"a", "b", "c"}));
  ASSERT_TRUE(model);
  auto s = MakeSession(model);
  auto fresh = MakeSession(model);
  ASSERT_TRUE(s && fresh);
  std::mt19937 rng(8);
  const std::vector<int32_t> prompt = RandomPrompt(rng, 30);
  auto first = s->Classify(prompt);
  auto again = s->Classify(prompt);  // every KV row reused, the last token evaluated again
  ASSERT_TRUE(first.ok() && again.ok());
  const std::vector<double> a = ByIndex(*first), b = ByIndex(*again);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5);
  // Classify computes no vocabulary logits: the next SetContext must evaluate them.
  ASSERT_TRUE(s->SetContext(prompt).ok());
  ASSERT_TRUE(fresh->SetContext(prompt).ok());
  double worst = 0.0;
  for (size_t v = 0; v < s->last_logits().size(); ++v) {
    worst = std::max(worst,
                     static_cast<double>(std::fabs(s->last_logits()[v] - fresh->last_logits()[v])));
  }
  EXPECT_LE(worst, 1e-4);
}

// The engine classifies as engine work (Engine::SubmitClassify: pocket serve's /v1/classify),
// its prompt in 8-row chunks beside another session's generation in the same forward passes: the
// labels within 1e-5 of Session::Classify alone (other rows in a pass round differently in the
// last bits), ranked the same; the generation token for token what it gives alone; the same
// prompt again (every KV row reused, the last token evaluated again) the same labels.
TEST(ClassifyTest, TheEngineClassifiesBesideGenerationAsClassifyDoes) {
  auto model = Load(MakeGguf("labels.gguf", 32, {"a", "b", "c"}));
  ASSERT_TRUE(model);
  auto pool = MakeThreadPool(2);
  ASSERT_TRUE(pool.ok());
  auto session = [&]() -> std::unique_ptr<Session> {
    SessionOptions so;
    so.n_ctx = 256;
    so.n_batch = 64;
    so.pool = *pool;
    so.kv_type = KvType::kF32;
    auto s = Session::Create(model, so);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  };
  std::mt19937 rng(9);
  const std::vector<int32_t> prompt = RandomPrompt(rng, 45);
  const std::vector<int32_t> other = RandomPrompt(rng, 20);
  GenerateOptions greedy;
  greedy.sampling.temperature = 0.0f;
  greedy.max_tokens = 24;
  auto alone = session()->GenerateUnbatched(other, greedy);
  auto want = session()->Classify(prompt);
  ASSERT_TRUE(alone.ok() && want.ok());

  EngineOptions eo;
  eo.max_requests = 4;
  eo.max_chunk = 64;
  auto engine = Engine::Create(model, *pool, eo);
  ASSERT_TRUE(engine.ok());
  auto gen = session(), cls = session();
  auto g = (*engine)->Submit(gen.get(), other, greedy);
  auto c = (*engine)->SubmitClassify(cls.get(), prompt, /*chunk=*/8);
  ASSERT_TRUE(g.ok() && c.ok());
  int32_t steps = 0, shared = 0;
  while (!(*engine)->done(*c)) {
    ASSERT_TRUE((*engine)->Step().ok());
    ++steps;
    shared +=
        (*engine)->last_rows() > (*engine)->last_decode_rows() && (*engine)->last_decode_rows() > 0
            ? 1
            : 0;
  }
  EXPECT_EQ(steps, 6);  // 45 rows in chunks of 8
  EXPECT_GT(shared, 0) << "no step held both requests' rows";
  EXPECT_EQ((*engine)->TakeScores(*c).status().code(), StatusCode::kFailedPrecondition);
  auto got = (*engine)->TakeLabels(*c);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectNormalized(*got);
  ASSERT_EQ(got->size(), want->size());
  for (size_t i = 0; i < got->size(); ++i) {
    EXPECT_EQ((*got)[i].index, (*want)[i].index);
    EXPECT_NEAR((*got)[i].logit, (*want)[i].logit, 1e-5);
  }
  EXPECT_EQ(std::vector<int32_t>(cls->history().begin(), cls->history().end()), prompt);
  // Again on the same session: the whole prompt reused but its last token.
  auto again = (*engine)->SubmitClassify(cls.get(), prompt, 8);
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE((*engine)->Run().ok());
  auto second = (*engine)->TakeLabels(*again);
  ASSERT_TRUE(second.ok());
  for (size_t i = 0; i < got->size(); ++i) {
    EXPECT_NEAR((*second)[i].logit, (*want)[i].logit, 1e-5);
  }
  auto r = (*engine)->Take(*g);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens, alone->tokens);
  // No head: Classify's error.
  auto plain = Load(MakeGguf("plain.gguf", 33));
  ASSERT_TRUE(plain);
  SessionOptions so;
  so.pool = *pool;
  auto ps = Session::Create(plain, so);
  auto pe = Engine::Create(plain, *pool, eo);
  ASSERT_TRUE(ps.ok() && pe.ok());
  auto refused = (*pe)->SubmitClassify(ps->get(), std::vector<int32_t>{1, 2, 3});
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("no classification head"), std::string::npos);
}

TEST(ClassifyTest, ErrorsAreClear) {
  auto plain = Load(MakeGguf("plain.gguf", 33));
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->classifier().present());
  auto s = MakeSession(plain);
  ASSERT_TRUE(s);
  auto r = s->Classify(std::vector<int32_t>{1, 2, 3});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("no classification head"), std::string::npos)
      << r.status().message();

  auto model = Load(MakeGguf("labels.gguf", 32, {"a", "b", "c"}));
  ASSERT_TRUE(model);
  auto hs = MakeSession(model);
  ASSERT_TRUE(hs);
  EXPECT_EQ(hs->Classify({}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(hs->Classify(std::vector<int32_t>(300, 1)).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(hs->Classify(std::vector<int32_t>{1, 5000}).status().code(), StatusCode::kOutOfRange);
}

TEST(ClassifyTest, LoadingRefusesHeadsThatDoNotFit) {
  const std::string base = MakeGguf("bad-base.gguf", 34);
  const std::set<std::string> none;
  struct Case {
    const char* name;
    std::function<void(GgufWriter&)> add;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases = {
      {"count.gguf",
       [](GgufWriter& w) {
         w.SetStringArray(kGgufClassifierLabelsKey, {"a", "b"});
         AddF32Tensor(w, kClassifierTensor, {3, kDModel}, RandomMatrix(3, kDModel, 1));
       },
       {"cls_head.weight has 3 rows", "pocket.classifier.labels names 2 labels"}},
      {"width.gguf",
       [](GgufWriter& w) {
         w.SetStringArray(kGgufClassifierLabelsKey, {"a", "b", "c"});
         AddF32Tensor(w, kClassifierTensor, {3, 128}, RandomMatrix(3, 128, 2));
       },
       {"cls_head.weight", "expected [n_labels, 256]", "[3, 128]"}},
      {"1d.gguf",
       [](GgufWriter& w) {
         w.SetStringArray(kGgufClassifierLabelsKey, {"a"});
         AddF32Tensor(w, kClassifierTensor, {kDModel}, RandomMatrix(1, kDModel, 3));
       },
       {"cls_head.weight", "expected [n_labels, 256]", "[256]"}},
      {"no-labels.gguf",
       [](GgufWriter& w) {
         AddF32Tensor(w, kClassifierTensor, {3, kDModel}, RandomMatrix(3, kDModel, 4));
       },
       {"cls_head.weight is present", "pocket.classifier.labels", "missing"}},
      {"no-tensor.gguf",
       [](GgufWriter& w) {
         w.SetStringArray(kGgufClassifierLabelsKey, {"a", "b"});
       },
       {"pocket.classifier.labels is set", "no tensor cls_head.weight"}},
      {"int-labels.gguf",
       [](GgufWriter& w) {
         w.SetInt32Array(kGgufClassifierLabelsKey, {1, 2, 3});
         AddF32Tensor(w, kClassifierTensor, {3, kDModel}, RandomMatrix(3, kDModel, 5));
       },
       {"pocket.classifier.labels must be an array of strings"}},
      {"twice.gguf",
       [](GgufWriter& w) {
         w.SetStringArray(kGgufClassifierLabelsKey, {"yes", "no", "yes"});
         AddF32Tensor(w, kClassifierTensor, {3, kDModel}, RandomMatrix(3, kDModel, 6));
       },
       {"label \"yes\" appears twice"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = Path(c.name);
    RewriteGguf(base, path, none, c.add);
    const std::string message = LoadError(path);
    EXPECT_NE(message.find(path), std::string::npos) << message;
    for (const std::string& w : c.words) {
      EXPECT_NE(message.find(w), std::string::npos) << "missing '" << w << "' in: " << message;
    }
  }

  // A .pocket whose meta names one label fewer than the head has rows.
  const std::string npy = Path("head3.npy");
  WriteNpy(npy, {3, kDModel}, RandomMatrix(3, kDModel, 7));
  ConvertOptions o;
  o.weights = "f32";
  o.n_threads = 2;
  o.classifier_head_path = npy;
  o.classifier_labels = {"a", "b", "c"};
  const std::string good = Path("head3.pocket");
  fs::remove(good);
  auto report = ConvertModel(base, good, o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  auto pf = PocketFile::Open(good);
  ASSERT_TRUE(pf.ok());
  std::string meta((*pf)->Section("meta"));
  const std::string labels = "\"classifier_labels\": [\n    \"a\",\n    \"b\",\n    \"c\"\n  ]";
  ASSERT_NE(meta.find(labels), std::string::npos) << meta;
  meta.replace(meta.find(labels), labels.size(), "\"classifier_labels\": [\"a\", \"b\"]");
  PocketWriter w;
  w.SetMetadataJson(meta);
  for (const TensorInfo& t : (*pf)->tensors()) {
    ASSERT_FALSE(t.packed);
    const uint8_t* data = t.data;
    ASSERT_TRUE(w.AddDenseTensor(t.name, t.type, t.shape, [data](uint8_t* dst, size_t n) {
                   std::memcpy(dst, data, n);
                   return Status::Ok();
                 }).ok());
  }
  const std::string bad = Path("head3-2labels.pocket");
  ASSERT_TRUE(w.Write(bad).ok());
  const std::string message = LoadError(bad);
  for (const char* word : {"cls_head.weight has 3 rows", "classifier_labels names 2 labels"}) {
    EXPECT_NE(message.find(word), std::string::npos) << message;
  }
}

TEST(ClassifyTest, ConvertStoresTheHeadExactly) {
  const std::string base = MakeGguf("convert-base.gguf", 35);
  const std::vector<float> head = RandomMatrix(4, kDModel, 9);
  const std::string npy = Path("head4.npy");
  WriteNpy(npy, {4, kDModel}, head);
  ConvertOptions o;
  o.n_threads = 2;  // int4 body; the head stays f32
  o.classifier_head_path = npy;
  o.classifier_labels = {"w", "x", "y", "z"};
  const std::string out = Path("head4.pocket");
  fs::remove(out);
  auto report = ConvertModel(base, out, o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(report->groups.back().group, "classifier");
  auto model = Load(out);
  ASSERT_TRUE(model);
  EXPECT_EQ(model->classifier().labels, o.classifier_labels);
  EXPECT_EQ(model->classifier().weight, head);

  // A head the input carries goes along unchanged.
  const std::string with_head = MakeGguf("convert-labels.gguf", 36, {"p", "q"});
  auto gguf = Load(with_head);
  ASSERT_TRUE(gguf);
  ConvertOptions keep;
  keep.n_threads = 2;
  const std::string kept = Path("kept.pocket");
  fs::remove(kept);
  ASSERT_TRUE(ConvertModel(with_head, kept, keep).ok());
  auto converted = Load(kept);
  ASSERT_TRUE(converted);
  EXPECT_EQ(converted->classifier().labels, gguf->classifier().labels);
  EXPECT_EQ(converted->classifier().weight, gguf->classifier().weight);
}

TEST(ClassifyTest, ConvertRefusesHeadsThatDoNotFitAndLeavesNoFile) {
  const std::string base = MakeGguf("refuse-base.gguf", 37);
  const std::string narrow = Path("narrow.npy"), flat = Path("flat.npy"), good = Path("good.npy");
  WriteNpy(narrow, {2, kDModel - 64}, RandomMatrix(2, kDModel - 64, 1));
  WriteNpy(flat, {kDModel}, RandomMatrix(1, kDModel, 2));
  WriteNpy(good, {2, kDModel}, RandomMatrix(2, kDModel, 3));
  const std::string text = Path("not-a-head.txt");
  ASSERT_TRUE(WriteFileAtomically(text, "hello").ok());
  struct Case {
    std::string head;
    std::vector<std::string> labels;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases = {
      {narrow, {"a", "b"}, {"narrow.npy (--classifier-head)", "expected [n_labels, 256]"}},
      {flat, {"a"}, {"flat.npy", "[256]"}},
      {good, {"a", "b", "c"}, {"has 2 rows", "--classifier-labels names 3 labels"}},
      {good, {"a", ""}, {"--classifier-labels: label 1 is empty"}},
      {good, {}, {"--classifier-head needs --classifier-labels"}},
      {"", {"a", "b"}, {"--classifier-labels needs --classifier-head"}},
      {text, {"a", "b"}, {"not-a-head.txt", "expected a .npy or safetensors file"}},
  };
  const std::string out = Path("refused.pocket");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.words[0]);
    fs::remove(out);
    ConvertOptions o;
    o.n_threads = 2;
    o.classifier_head_path = c.head;
    o.classifier_labels = c.labels;
    auto r = ConvertModel(base, out, o);
    ASSERT_FALSE(r.ok());
    for (const std::string& w : c.words) {
      EXPECT_NE(r.status().message().find(w), std::string::npos)
          << "missing '" << w << "' in: " << r.status().message();
    }
    EXPECT_FALSE(fs::exists(out));
  }
  for (const auto& e : fs::directory_iterator(WorkDir())) {
    EXPECT_EQ(e.path().filename().string().find("refused.pocket.tmp"), std::string::npos);
  }
}

}  // namespace
}  // namespace pocket
