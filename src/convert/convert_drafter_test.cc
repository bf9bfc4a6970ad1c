// `pocket convert --drafter DIR`: the DFlash block drafter stored in the model's .pocket package.
// The packaged drafter's logits equal the directory-loaded drafter's bit for bit (f32, int8, int4);
// a package without one says so; a drafter for another target leaves no output; a corrupt
// drafter part of a package (meta or tensors) is an error naming the key or tensor, and odd meta
// values load or fail cleanly.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "base/thread_pool.h"
#include "convert/convert.h"
#include "format/pocket_file.h"
#include "model/dflash.h"
#include "model/forward.h"
#include "model/kv_cache.h"
#include "model/scratch.h"
#include "model/synthetic.h"

namespace pocket {
namespace {

namespace fs = std::filesystem;

std::string WorkDir() {
  const std::string dir = std::string(POCKET_BINARY_DIR) + "/convert-drafter-test";
  fs::create_directories(dir);
  return dir;
}

ModelConfig Target(int32_t n_layers = 4) {
  auto c = PresetConfig("tiny", Architecture::kQwen3);
  EXPECT_TRUE(c.ok());
  c->n_layers = n_layers;
  return *c;
}

std::string MakeTarget(const std::string& name, const ModelConfig& c) {
  const std::string path = WorkDir() + "/" + name;
  SyntheticOptions o;
  o.config = c;
  o.seed = 7;
  const Status s = WriteSyntheticGguf(o, path);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return path;
}

std::string MakeDrafter(const std::string& name, const ModelConfig& target,
                        DType type = DType::kF32) {
  const std::string dir = WorkDir() + "/" + name;
  fs::create_directories(dir);
  DFlashSyntheticOptions o;
  o.target = target;
  o.seed = 11;
  o.weight_type = type;
  const Status s = WriteSyntheticDFlashDrafter(o, dir);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return dir;
}

StatusOr<ConvertReport> Convert(const std::string& in, const std::string& out,
                                const std::string& drafter, const std::string& weights = "int8",
                                const std::string& target_weights = "int8") {
  ConvertOptions o;
  o.weights = target_weights;
  o.group = 32;
  o.n_threads = 2;
  o.drafter_dir = drafter;
  o.drafter_weights = weights;
  return ConvertModel(in, out, o);
}

std::shared_ptr<const Model> Load(const std::string& path) {
  auto m = Model::Load(path);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

// Every row's logits of two blocks: after 20 context tokens, then cut back to 9 (rollback).
std::vector<float> BlockLogits(const std::shared_ptr<const Model>& target,
                               const std::shared_ptr<const DFlashDrafter>& drafter) {
  constexpr int32_t kTokens = 24;
  const ModelConfig& c = target->config();
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < kTokens; ++i) ids.push_back((i * 37 + 5) % c.vocab_size);
  ThreadPool pool(2);
  auto scratch = ForwardScratch::Create(*target, kTokens, pool.n_threads());
  EXPECT_TRUE(scratch.ok());
  auto kv = KvCache::Create(c, kTokens, KvType::kF32);
  EXPECT_TRUE(kv.ok());
  const int64_t d = c.d_model;
  std::vector<float> hidden(drafter->target_layer_ids().size() * kTokens * static_cast<size_t>(d));
  const BatchSegment seg{&*kv, 0, kTokens, 0};
  ForwardBatch b;
  b.tokens = ids;
  b.segments = std::span<const BatchSegment>(&seg, 1);
  b.output_rows = scratch->rows(0, kTokens);
  b.hidden_layers = drafter->target_layer_ids();
  b.layer_hidden = hidden.data();
  const Status fs = Forward(*target, *scratch, pool, b);
  EXPECT_TRUE(fs.ok()) << fs.ToString();
  auto st = DFlashState::Create(drafter, kTokens, &pool, KvType::kF32);
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  const int32_t B = drafter->block_size();
  std::vector<float> logits(2 * static_cast<size_t>(B) * c.vocab_size);
  std::vector<int32_t> draft;
  EXPECT_TRUE(st->AppendContext(0, 20, hidden.data(), int64_t{kTokens} * d).ok());
  EXPECT_TRUE(st->DraftBlock(ids[20], B - 1, &draft, logits.data()).ok());
  EXPECT_TRUE(st->AppendContext(9, 0, nullptr, 0).ok());
  EXPECT_TRUE(
      st->DraftBlock(ids[9], B - 1, &draft, logits.data() + static_cast<size_t>(B) * c.vocab_size)
          .ok());
  return logits;
}

TEST(ConvertDrafterTest, PackagedDrafterEqualsTheDirectoryLoadedOne) {
  const ModelConfig c = Target();
  const std::string target = MakeTarget("target.gguf", c);
  const std::string dir = MakeDrafter("drafter", c);
  const std::string dir_bf16 = MakeDrafter("drafter-bf16", c, DType::kBF16);
  for (const auto& [weights, drafter] : {std::pair<std::string, std::string>{"int8", dir},
                                         {"int4", dir},
                                         {"f32", dir},
                                         {"f32", dir_bf16}}) {
    SCOPED_TRACE(weights + " from " + drafter);
    const std::string out = WorkDir() + "/with-drafter-" + weights + ".pocket";
    auto report = Convert(target, out, drafter, weights);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    bool reported = false;
    for (const ConvertGroupReport& g : report->groups) {
      if (g.group != "drafter") continue;
      reported = true;
      EXPECT_GT(g.n_weights, 0);
      EXPECT_NE(g.encoding.find(weights == "f32" ? (drafter == dir ? "f32" : "bf16") : weights),
                std::string::npos)
          << g.encoding;
    }
    EXPECT_TRUE(reported);
    auto model = Load(out);
    ASSERT_TRUE(model);
    ASSERT_TRUE(HasPackagedDrafter(*model));
    auto packaged = DFlashDrafter::LoadFromModel(model);
    ASSERT_TRUE(packaged.ok()) << packaged.status().ToString();
    DFlashWeights kind;
    ASSERT_TRUE(ParseDFlashWeights(weights, &kind));
    auto loaded = DFlashDrafter::Load(drafter, model, {kind});
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    const DFlashDrafter &p = **packaged, &l = **loaded;
    EXPECT_EQ(p.weights_kind(), kind);
    EXPECT_EQ(p.block_size(), l.block_size());
    EXPECT_EQ(p.mask_token_id(), l.mask_token_id());
    EXPECT_EQ(p.config().target_layer_ids, l.config().target_layer_ids);
    EXPECT_EQ(p.config().layers.rms_eps, l.config().layers.rms_eps);
    EXPECT_EQ(p.config().layers.rope_base, l.config().layers.rope_base);
    EXPECT_EQ(p.weight_bytes(), l.weight_bytes());
    EXPECT_EQ(p.rope_inv_freq(), l.rope_inv_freq());
    // The packaged matrices are views into the model's mapping, not copies.
    const std::string_view data = model->source().pocket()->Section("data");
    const uint8_t* fc = p.fc().packed ? p.fc().p.data : p.fc().w.data;
    EXPECT_GE(reinterpret_cast<const char*>(fc), data.data());
    EXPECT_LT(reinterpret_cast<const char*>(fc), data.data() + data.size());
    // Here and below: both drafters hold the same values (one scalar quantizer) and draft on one
    // table in passes under 32 rows: the same bits by design.
    const std::vector<float> a = BlockLogits(model, *packaged), b = BlockLogits(model, *loaded);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << "packaged and directory-loaded drafters differ";

    // Converting the package again keeps its drafter, unchanged. (From a package whose target
    // matrices are dense: the converter does not read fused packed matrices back yet.)
    const std::string dense = WorkDir() + "/dense-target-" + weights + ".pocket";
    ASSERT_TRUE(Convert(target, dense, drafter, weights, "f32").ok());
    const std::string again = WorkDir() + "/again-" + weights + ".pocket";
    auto r2 = Convert(dense, again, "", "int8", "f32");
    ASSERT_TRUE(r2.ok()) << r2.status().ToString();
    auto model2 = Load(again);
    ASSERT_TRUE(model2);
    auto kept = DFlashDrafter::LoadFromModel(model2);
    ASSERT_TRUE(kept.ok()) << kept.status().ToString();
    EXPECT_EQ((*kept)->weights_kind(), kind);
    const std::vector<float> k = BlockLogits(model2, *kept);
    const std::vector<float> k2 =
        BlockLogits(model2, *DFlashDrafter::Load(drafter, model2, {kind}));
    EXPECT_EQ(std::memcmp(k.data(), k2.data(), k.size() * sizeof(float)), 0);
  }
}

TEST(ConvertDrafterTest, PackageWithoutDrafter) {
  const ModelConfig c = Target();
  const std::string target = MakeTarget("target.gguf", c);
  const std::string out = WorkDir() + "/no-drafter.pocket";
  auto report = Convert(target, out, "");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  for (const ConvertGroupReport& g : report->groups) EXPECT_NE(g.group, "drafter");
  auto model = Load(out);
  ASSERT_TRUE(model);
  EXPECT_FALSE(HasPackagedDrafter(*model));
  auto d = DFlashDrafter::LoadFromModel(model);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("holds no block drafter"), std::string::npos)
      << d.status().message();
  // Not a package at all.
  auto gguf = Load(target);
  ASSERT_TRUE(gguf);
  EXPECT_FALSE(HasPackagedDrafter(*gguf));
  EXPECT_EQ(DFlashDrafter::LoadFromModel(gguf).status().code(), StatusCode::kNotFound);
}

TEST(ConvertDrafterTest, DrafterForAnotherTargetLeavesNoOutput) {
  const ModelConfig c = Target();
  const std::string target = MakeTarget("target.gguf", c);
  ModelConfig wide = c;
  wide.d_model *= 2;
  wide.head_dim = wide.d_model / wide.n_heads;
  struct Case {
    std::string tag, drafter, weights;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"hidden", MakeDrafter("drafter-wide", wide), "int8", {"--drafter", "hidden_size"}},
      // A drafter made for an 8-layer target reads layers 1, 4 and 6: past this one's depth.
      {"depth", MakeDrafter("drafter-deep", Target(8)), "int8", {"target_layer_ids"}},
      {"missing", WorkDir() + "/no-such-drafter", "int8", {"no-such-drafter"}},
      {"weights", MakeDrafter("drafter", c), "int3", {"--drafter-weights", "int3"}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.tag);
    const std::string out = WorkDir() + "/bad-" + k.tag + ".pocket";
    fs::remove(out);
    auto r = Convert(target, out, k.drafter, k.weights);
    ASSERT_FALSE(r.ok());
    for (const std::string& n : k.needles) {
      EXPECT_NE(r.status().message().find(n), std::string::npos) << r.status().message();
    }
    EXPECT_FALSE(fs::exists(out));
  }
}

// A copy of the package at `in` with its meta edited by `meta`, its tensors filtered by `keep`, and
// the dense tensor `shrink` cut to half its last dimension.
Status Rewrite(const std::string& in, const std::string& out,
               const std::function<void(nlohmann::json&)>& meta,
               const std::function<bool(const std::string&)>& keep,
               const std::string& shrink = "") {
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<PocketFile> f, PocketFile::Open(in));
  const PocketFile& file = *f;
  nlohmann::json j = nlohmann::json::parse(file.Section("meta"));
  meta(j);
  PocketWriter w;
  w.SetMetadataJson(j.dump());
  for (const char* s : {"tokenizer", "chat_template"}) {
    if (!file.Section(s).empty()) w.AddSection(s, std::string(file.Section(s)));
  }
  for (const TensorInfo& t : file.tensors()) {
    if (!keep(t.name)) continue;
    const uint8_t* data = t.data;
    if (t.packed) {
      POCKET_RETURN_IF_ERROR(w.AddPackedTensor(t.name, t.layout, [data](uint8_t* o, size_t n) {
        std::memcpy(o, data, n);
        return Status::Ok();
      }));
    } else if (t.name == shrink) {
      std::vector<int64_t> shape = t.shape;
      shape.back() /= 2;
      POCKET_RETURN_IF_ERROR(w.AddDenseTensor(t.name, t.type, shape, [data](uint8_t* o, size_t n) {
        std::memcpy(o, data, n);
        return Status::Ok();
      }));
    } else {
      POCKET_RETURN_IF_ERROR(
          w.AddDenseTensor(t.name, t.type, t.shape, [data](uint8_t* o, size_t n) {
            std::memcpy(o, data, n);
            return Status::Ok();
          }));
    }
  }
  return w.Write(out, {in});
}

TEST(ConvertDrafterTest, CorruptPackagedDrafterIsAnErrorNamingIt) {
  const ModelConfig c = Target();
  const std::string target = MakeTarget("target.gguf", c);
  const std::string good = WorkDir() + "/corrupt-base.pocket";
  auto report = Convert(target, good, MakeDrafter("drafter", c), "int8", "f32");
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  auto all = [](const std::string&) { return true; };
  auto same = [](nlohmann::json&) {};
  struct Case {
    std::string tag;
    std::function<void(nlohmann::json&)> meta;
    std::function<bool(const std::string&)> keep;
    std::string shrink;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"not-object", [](nlohmann::json& j) { j["drafter"] = 3; }, all, "", {"meta drafter"}},
      {"layer-past",
       [](nlohmann::json& j) {
         j["drafter"]["dflash_config"]["target_layer_ids"] = {1, 4};
       },
       all,
       "",
       {"meta drafter", "target_layer_ids", "4"}},
      {"mask",
       [](nlohmann::json& j) { j["drafter"]["dflash_config"]["mask_token_id"] = 1 << 20; },
       all,
       "",
       {"mask_token_id"}},
      {"hidden",
       [](nlohmann::json& j) { j["drafter"]["hidden_size"] = 3; },
       all,
       "",
       {"hidden_size"}},
      {"no-block",
       [](nlohmann::json& j) { j["drafter"].erase("block_size"); },
       all,
       "",
       {"block_size", "missing"}},
      {"layers",
       [](nlohmann::json& j) { j["drafter"]["num_hidden_layers"] = 3; },
       all,
       "",
       {"drafter.layers.2."}},
      {"weights",
       [](nlohmann::json& j) { j["drafter"]["weights"] = "int2"; },
       all,
       "",
       {"weights", "int2"}},
      {"missing-tensor",
       same,
       [](const std::string& n) { return n != "drafter.layers.1.mlp.up_proj.weight"; },
       "",
       {"drafter.layers.1.mlp.up_proj.weight", "missing"}},
      {"short-norm", same, all, "drafter.hidden_norm.weight", {"drafter.hidden_norm.weight"}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.tag);
    const std::string path = WorkDir() + "/corrupt-" + k.tag + ".pocket";
    const Status w = Rewrite(good, path, k.meta, k.keep, k.shrink);
    ASSERT_TRUE(w.ok()) << w.ToString();
    auto model = Model::Load(path);  // the target itself still loads
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    EXPECT_TRUE(HasPackagedDrafter(**model));
    auto d = DFlashDrafter::LoadFromModel(*model);
    ASSERT_FALSE(d.ok());
    for (const std::string& n : k.needles) {
      EXPECT_NE(d.status().message().find(n), std::string::npos) << d.status().message();
    }
    // Converting it again (keeping the drafter) fails the same way, writing nothing.
    const std::string again = WorkDir() + "/corrupt-again.pocket";
    fs::remove(again);
    auto r = Convert(path, again, "", "int8", "f32");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(k.needles[0]), std::string::npos) << r.status().message();
    EXPECT_FALSE(fs::exists(again));
  }
}

// Every field of the meta object set to odd values: loading succeeds (and then a block runs) or
// fails with an error; it never reads outside the package.
TEST(ConvertDrafterTest, OddMetaValuesLoadOrFailCleanly) {
  const ModelConfig c = Target();
  const std::string target = MakeTarget("target.gguf", c);
  const std::string good = WorkDir() + "/odd-base.pocket";
  ASSERT_TRUE(Convert(target, good, MakeDrafter("drafter", c), "int4").ok());
  const nlohmann::json base = nlohmann::json::parse(
      std::string((*PocketFile::Open(good))->Section("meta")))[kPocketDrafterKey];
  const std::vector<nlohmann::json> values = {-1,
                                              0,
                                              1,
                                              2,
                                              3,
                                              9,
                                              63,
                                              1 << 30,
                                              1e-30,
                                              1e30,
                                              "x",
                                              nullptr,
                                              nlohmann::json::array(),
                                              nlohmann::json::object(),
                                              nlohmann::json::array({1, 1, 1}),
                                              nlohmann::json::array({3, 2, 1})};
  std::vector<std::vector<std::string>> paths;
  for (const auto& [key, v] : base.items()) {
    if (key == "dflash_config") {
      for (const auto& [inner, w] : v.items()) paths.push_back({key, inner});
    } else {
      paths.push_back({key});
    }
  }
  ThreadPool pool(2);
  int loaded = 0, failed = 0;
  for (const auto& path : paths) {
    for (const nlohmann::json& value : values) {
      auto edit = [&](nlohmann::json& j) {
        nlohmann::json* at = &j[kPocketDrafterKey];
        for (const std::string& k : path) at = &(*at)[k];
        *at = value;
      };
      const std::string out = WorkDir() + "/odd.pocket";
      ASSERT_TRUE(Rewrite(good, out, edit, [](const std::string&) { return true; }).ok());
      auto model = Model::Load(out);
      ASSERT_TRUE(model.ok()) << model.status().ToString();
      auto d = DFlashDrafter::LoadFromModel(*model);
      if (!d.ok()) {
        ++failed;
        EXPECT_FALSE(d.status().message().empty());
        continue;
      }
      ++loaded;
      auto st = DFlashState::Create(*d, 16, &pool, KvType::kF32);
      ASSERT_TRUE(st.ok()) << st.status().ToString();
      std::vector<float> hidden((*d)->target_layer_ids().size() * 4 * c.d_model, 0.5f);
      std::vector<int32_t> draft;
      EXPECT_TRUE(st->AppendContext(0, 4, hidden.data(), 4 * c.d_model).ok());
      EXPECT_TRUE(st->DraftBlock(1, (*d)->block_size() - 1, &draft).ok());
    }
  }
  EXPECT_GT(loaded, 0);
  EXPECT_GT(failed, 0);
}

}  // namespace
}  // namespace pocket
