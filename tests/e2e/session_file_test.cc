// Saved sessions (Session::Save / Load): a conversation saved, loaded into a fresh session and
// continued gives the tokens of one never interrupted, reusing the saved keys and values (the
// continuation evaluates only what is new); every KV type; a file of another model, KV type,
// adapter set or context, a truncated or damaged file, are errors that name the file and the
// field and leave the session as it was; DescribeSessionFile reads a file without the model. Uses
// the real stories260K model.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "model/adapter.h"
#include "model/synthetic.h"
#include "runtime/session.h"

namespace pocket {
namespace {

const std::string kStories =
    std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/stories260K.bin";
const std::string kTok = std::string(POCKET_SHARED_DIR) + "/testdata/stories260K/tok512.bin";

std::vector<int32_t> History(const Session& s) {
  return {s.history().begin(), s.history().end()};
}

std::string Dir() {
  const std::string dir = std::string(POCKET_BINARY_DIR) + "/session-file-test";
  std::filesystem::create_directories(dir);
  return dir;
}

std::shared_ptr<const Model> Stories() {
  LoadOptions o;
  o.tokenizer_path = kTok;
  auto m = Model::Load(kStories, o);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

GenerateOptions Greedy(int32_t n) {
  GenerateOptions g;
  g.sampling.temperature = 0.0f;
  g.max_tokens = n;
  return g;
}

std::unique_ptr<Session> NewSession(std::shared_ptr<const Model> model, KvType type,
                                    int32_t n_ctx = 256) {
  SessionOptions so;
  so.kv_type = type;
  so.n_ctx = n_ctx;
  so.n_threads = 2;
  auto s = Session::Create(std::move(model), so);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

const std::vector<int32_t> kFirst = {1, 403, 407, 261, 378, 429, 20, 52};
const std::vector<int32_t> kSecond = {13, 300, 278, 350};

// The second turn's prompt: the first prompt, its reply, then new tokens.
std::vector<int32_t> SecondPrompt(const std::vector<int32_t>& reply) {
  std::vector<int32_t> p = kFirst;
  p.insert(p.end(), reply.begin(), reply.end());
  p.insert(p.end(), kSecond.begin(), kSecond.end());
  return p;
}

TEST(SessionFileTest, SavedLoadedAndContinuedEqualsNeverInterrupted) {
  auto model = Stories();
  ASSERT_TRUE(model);
  for (KvType type : {KvType::kF16, KvType::kF32, KvType::kQ8}) {
    const std::string path = Dir() + "/chat-" + std::string(KvTypeName(type)) + ".session";
    // Never interrupted.
    auto a = NewSession(model, type);
    auto first = a->Generate(kFirst, Greedy(20));
    ASSERT_TRUE(first.ok());
    auto second = a->Generate(SecondPrompt(first->tokens), Greedy(24));
    ASSERT_TRUE(second.ok());
    // Saved after the first turn, loaded into a fresh session, continued.
    auto b = NewSession(model, type);
    auto b_first = b->Generate(kFirst, Greedy(20));
    ASSERT_TRUE(b_first.ok());
    // The same computation on the same table: the same tokens.
    EXPECT_EQ(b_first->tokens, first->tokens);
    ASSERT_TRUE(b->Save(path, "the app's state").ok());
    auto c = NewSession(model, type);
    auto user = c->Load(path);
    ASSERT_TRUE(user.ok()) << user.status().ToString();
    EXPECT_EQ(*user, "the app's state");
    // Load restores the saved KV rows and logits bit for bit, and the same table and KV type run
    // both sides: the uninterrupted session's logits and tokens by design.
    EXPECT_EQ(History(*c), History(*b));
    EXPECT_EQ(std::vector<float>(c->last_logits().begin(), c->last_logits().end()),
              std::vector<float>(b->last_logits().begin(), b->last_logits().end()));
    auto resumed = c->Generate(SecondPrompt(first->tokens), Greedy(24));
    ASSERT_TRUE(resumed.ok());
    EXPECT_EQ(resumed->tokens, second->tokens) << KvTypeName(type);
    // Only the new tokens were evaluated: the saved keys and values were used.
    EXPECT_EQ(resumed->n_reused_tokens, static_cast<int32_t>(b->history().size()))
        << KvTypeName(type);
    EXPECT_EQ(resumed->n_reused_tokens, second->n_reused_tokens);
  }
}

TEST(SessionFileTest, AnEmptySessionRoundTrips) {
  auto model = Stories();
  ASSERT_TRUE(model);
  const std::string path = Dir() + "/empty.session";
  auto a = NewSession(model, KvType::kF16);
  ASSERT_TRUE(a->Save(path).ok());
  auto b = NewSession(model, KvType::kF16);
  ASSERT_TRUE(b->Generate(kFirst, Greedy(4)).ok());
  auto user = b->Load(path);
  ASSERT_TRUE(user.ok()) << user.status().ToString();
  EXPECT_EQ(*user, "");
  EXPECT_TRUE(b->history().empty());
}

TEST(SessionFileTest, DescribeReadsAFileWithoutTheModel) {
  auto model = Stories();
  ASSERT_TRUE(model);
  const std::string path = Dir() + "/describe.session";
  for (KvType type : {KvType::kF16, KvType::kQ8}) {
    auto a = NewSession(model, type);
    ASSERT_TRUE(a->Generate(kFirst, Greedy(5)).ok());
    ASSERT_TRUE(a->Save(path, "user data").ok());
    EXPECT_TRUE(LooksLikeSessionFile(path));
    auto info = DescribeSessionFile(path);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->architecture, "llama");
    EXPECT_EQ(info->kv_type, KvTypeName(type));
    EXPECT_EQ(info->n_tokens, static_cast<int64_t>(a->history().size()));
    EXPECT_EQ(info->n_layers, model->config().n_layers);
    EXPECT_EQ(info->vocab_size, model->config().vocab_size);
    EXPECT_TRUE(info->has_logits);
    EXPECT_EQ(info->user_data, "user data");
    EXPECT_EQ(info->file_bytes, std::filesystem::file_size(path));
    EXPECT_GT(info->kv_bytes, 0u);
  }
  // The checksum is checked.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-40, std::ios::end);
    f.put('\x5a');
  }
  auto damaged = DescribeSessionFile(path);
  ASSERT_FALSE(damaged.ok());
  EXPECT_NE(damaged.status().message().find("checksum"), std::string::npos)
      << damaged.status().ToString();
  EXPECT_FALSE(LooksLikeSessionFile(kStories));
}

// Loads `path` into a session holding a context; expects an error naming every needle, and the
// session's context unchanged.
void ExpectRefused(Session& s, const std::string& path,
                   std::initializer_list<std::string> needles) {
  const std::vector<int32_t> before = History(s);
  auto r = s.Load(path);
  ASSERT_FALSE(r.ok()) << path;
  for (const std::string& needle : needles)
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
  EXPECT_EQ(History(s), before) << r.status().ToString();
}

std::string Bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(SessionFileTest, ErrorsNameTheProblemAndLeaveTheSessionAsItWas) {
  auto model = Stories();
  ASSERT_TRUE(model);
  const std::string path = Dir() + "/good.session";
  auto a = NewSession(model, KvType::kF16);
  GenerateOptions forty = Greedy(40);
  forty.ignore_stop_tokens = true;  // 47 tokens below on every table, whatever the story does
  ASSERT_TRUE(a->Generate(kFirst, forty).ok());
  ASSERT_TRUE(a->Save(path).ok());
  auto s = NewSession(model, KvType::kF16);
  ASSERT_TRUE(s->Generate(kSecond, Greedy(3)).ok());
  // Another KV type, a context too small for it.
  auto q8 = NewSession(model, KvType::kQ8);
  ASSERT_TRUE(q8->Generate(kSecond, Greedy(3)).ok());
  ExpectRefused(*q8, path, {path, "kv_type", "f16"});
  auto small = NewSession(model, KvType::kF16, 32);
  ASSERT_TRUE(small->Generate(kSecond, Greedy(3)).ok());
  ExpectRefused(*small, path, {path, "holds 47 tokens", "context is 32"});
  // Another model of another shape.
  const std::string other_path = Dir() + "/tiny.gguf";
  auto c = PresetConfig("tiny", Architecture::kQwen3);
  ASSERT_TRUE(c.ok());
  SyntheticOptions o;
  o.config = *c;
  ASSERT_TRUE(WriteSyntheticGguf(o, other_path).ok());
  auto other = Model::Load(other_path);
  ASSERT_TRUE(other.ok());
  auto t = NewSession(*other, KvType::kF16);
  ASSERT_TRUE(t->Generate(kSecond, Greedy(3)).ok());
  ExpectRefused(*t, path, {path, "architecture"});
  // The same model with its weights in another form (a Q8_0 file repacked for the int8 kernels,
  // and kept as float blocks: the fingerprint of shapes and norms matches, the weights differ and
  // so do the keys and values), and another adapter set.
  const std::string q8_path = Dir() + "/tiny-q8.gguf";
  o.weight_type = DType::kQ8_0;
  ASSERT_TRUE(WriteSyntheticGguf(o, q8_path).ok());
  LoadOptions dense;
  dense.repack = false;
  auto f32_model = Model::Load(q8_path, dense), q8_model = Model::Load(q8_path);
  ASSERT_TRUE(f32_model.ok() && q8_model.ok());
  auto saver = NewSession(*f32_model, KvType::kF16);
  ASSERT_TRUE(saver->Generate(kFirst, Greedy(4)).ok());
  const std::string tiny_path = Dir() + "/tiny.session";
  ASSERT_TRUE(saver->Save(tiny_path).ok());
  auto q8_session = NewSession(*q8_model, KvType::kF16);
  ExpectRefused(*q8_session, tiny_path, {tiny_path, "weights_digest"});
  const std::string adapter_dir = Dir() + "/adapter";
  std::filesystem::create_directories(adapter_dir);
  SyntheticAdapterOptions ao;
  ao.base = (*f32_model)->config();
  ao.rank = 4;
  ao.targets = {LoraTarget::kV, LoraTarget::kOutput};
  ASSERT_TRUE(WriteSyntheticAdapter(ao, adapter_dir).ok());
  auto adapter = LoraAdapter::Load(adapter_dir, **f32_model);
  ASSERT_TRUE(adapter.ok()) << adapter.status().ToString();
  auto adapted = NewSession(*f32_model, KvType::kF16);
  ASSERT_TRUE(adapted->SetAdapters({{*adapter, 0.5f}}).ok());
  ExpectRefused(*adapted, tiny_path, {tiny_path, "adapters"});
  ASSERT_TRUE(adapted->Generate(kFirst, Greedy(4)).ok());
  const std::string adapted_path = Dir() + "/adapted.session";
  ASSERT_TRUE(adapted->Save(adapted_path).ok());
  auto other_scale = NewSession(*f32_model, KvType::kF16);
  ASSERT_TRUE(other_scale->SetAdapters({{*adapter, 0.25f}}).ok());
  ExpectRefused(*other_scale, adapted_path, {adapted_path, "adapters"});
  ASSERT_TRUE(other_scale->SetAdapters({{*adapter, 0.5f}}).ok());
  EXPECT_TRUE(other_scale->Load(adapted_path).ok());
  // User data larger than the caller takes: refused before anything changes, its size reported.
  const std::string with_data = Dir() + "/with-data.session";
  ASSERT_TRUE(saver->Save(with_data, "0123456789").ok());
  auto reader = NewSession(*f32_model, KvType::kF16);
  ASSERT_TRUE(reader->Generate(kSecond, Greedy(2)).ok());
  const std::vector<int32_t> before = History(*reader);
  uint64_t needed = 0;
  auto small_buffer = reader->Load(with_data, 4, &needed);
  EXPECT_FALSE(small_buffer.ok());
  EXPECT_EQ(needed, 10u);
  EXPECT_EQ(History(*reader), before);
  auto fits = reader->Load(with_data, 10, &needed);
  ASSERT_TRUE(fits.ok());
  EXPECT_EQ(*fits, "0123456789");
  // Truncated, extended, damaged, not a session file.
  const std::string good = Bytes(path);
  const std::string bad = Dir() + "/bad.session";
  WriteBytes(bad, good.substr(0, good.size() / 2));
  ExpectRefused(*s, bad, {bad, "truncated"});
  WriteBytes(bad, good + "x");
  ExpectRefused(*s, bad, {bad, "extended"});
  std::string flipped = good;
  flipped[flipped.size() - 100] ^= 0x10;
  WriteBytes(bad, flipped);
  ExpectRefused(*s, bad, {bad, "checksum"});
  WriteBytes(bad, "not a session");
  ExpectRefused(*s, bad, {bad, "not a pocket session"});
  ExpectRefused(*s, Dir() + "/missing.session", {"missing.session"});
  // Save never leaves a partial file: a directory that does not exist is an error.
  EXPECT_FALSE(s->Save(Dir() + "/no/such/dir/x.session").ok());
}

}  // namespace
}  // namespace pocket
