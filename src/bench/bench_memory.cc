// `pocket bench --memory N`: the KV memory of N sessions sharing a prompt prefix on one engine,
// with and without a KV budget (bench.h).
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>

#include "base/memory.h"
#include "base/rng.h"
#include "base/timer.h"
#include "bench/bench.h"
#include "kernels/select.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/prefix_cache.h"
#include "runtime/session.h"

namespace pocket {

StatusOr<MemoryBenchRow> RunMemoryBench(const BenchConfig& config, int32_t sessions,
                                        uint64_t kv_budget_bytes, const std::string& swap_dir) {
  if (sessions < 1 || sessions > 256) {
    return InvalidArgumentError("--memory: the session count must be 1 to 256, got ", sessions);
  }
  if (config.models.size() != 1 || config.threads.size() != 1) {
    return InvalidArgumentError("--memory measures one model at one thread count");
  }
  const int32_t n_prefix = config.n_prefix;
  if (n_prefix < 32 || n_prefix >= config.n_prompt) {
    return InvalidArgumentError("--memory needs --prefix-tokens of 32 or more, less than -p (",
                                config.n_prompt, "), got ", n_prefix);
  }
  if (config.n_gen < 1) return InvalidArgumentError("--memory needs -n >= 1");
  const std::string& path = config.models.front();
  const int32_t n_threads =
      config.threads.front() > 0
          ? config.threads.front()
          : std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency()));
  const int64_t n_steps = 3;
  auto say = [&](int64_t step, const std::string& line) {
    if (config.progress) config.progress(step, n_steps, line);
  };
  say(0, StrCat(path, ": loading"));
  const KernelTable& kernels = config.kernels != nullptr ? *config.kernels : SelectKernels();
  LoadOptions lo;
  lo.kernels = &kernels;
  lo.repack = config.repack;
  lo.huge_pages = config.huge_pages;
  POCKET_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, Model::Load(path, lo));
  const int32_t vocab = model->config().vocab_size;
  POCKET_ASSIGN_OR_RETURN(std::shared_ptr<ThreadPool> pool, MakeThreadPool(n_threads));
  // The prefix cache holds the shared prefix and nothing more (the sessions' own contexts, stored
  // after their outputs, would keep their pages in memory outside the KV budget). An entry holds
  // the 16-position blocks its tokens reach, the last one whole.
  PrefixCacheOptions pco;
  {
    POCKET_ASSIGN_OR_RETURN(
        KvCache probe, KvCache::Create(model->config(), (n_prefix + 15) / 16 * 16, config.kv_type));
    pco.max_bytes = probe.context_bytes() + static_cast<size_t>(n_prefix) * sizeof(int32_t);
  }
  auto cache = std::make_shared<PrefixCache>(pco);
  SessionOptions so;
  so.n_ctx = config.n_prompt + config.n_gen;
  so.n_batch = std::min(config.n_batch, config.n_prompt);
  so.kv_type = config.kv_type;
  so.pool = pool;
  so.prefix_cache = cache;
  EngineOptions eo;
  eo.max_requests = sessions;
  eo.max_chunk = config.n_batch;
  eo.kv_budget_bytes = kv_budget_bytes;
  eo.swap_dir = swap_dir;
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, pool, eo));
  GenerateOptions g;
  g.sampling.temperature = 0.0f;
  g.max_tokens = config.n_gen;
  g.ignore_stop_tokens = true;

  // The prompts: one prefix, then each session's own tokens.
  std::vector<int32_t> prefix(static_cast<size_t>(n_prefix));
  Rng rng(4321);
  for (int32_t& id : prefix) id = static_cast<int32_t>(rng.NextBelow(vocab));
  std::vector<std::vector<int32_t>> prompts;
  for (int32_t i = 0; i < sessions; ++i) {
    std::vector<int32_t> p = prefix;
    p.resize(static_cast<size_t>(config.n_prompt));
    for (size_t k = prefix.size(); k < p.size(); ++k)
      p[k] = static_cast<int32_t>(rng.NextBelow(vocab));
    prompts.push_back(std::move(p));
  }
  Stopwatch clock;
  // The prefix, evaluated once and stored in the cache (by a session that then lets its pages go:
  // the cache's entry holds them).
  say(1, StrCat(path, ": ", n_threads, " thread(s): the ", n_prefix, "-token shared prefix"));
  {
    POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Session> first, Session::Create(model, so));
    GenerateOptions one = g;
    one.max_tokens = 1;
    POCKET_ASSIGN_OR_RETURN(const int64_t id, engine->Submit(first.get(), prefix, one));
    POCKET_RETURN_IF_ERROR(engine->Run());
    POCKET_RETURN_IF_ERROR(engine->Take(id).status());
  }
  say(2, StrCat(path, ": ", n_threads, " thread(s): ", sessions, " sessions of pp", config.n_prompt,
                " + tg", config.n_gen,
                kv_budget_bytes > 0 ? StrCat(" under a KV budget of ", HumanBytes(kv_budget_bytes))
                                    : std::string()));
  std::vector<std::unique_ptr<Session>> all;
  std::vector<int64_t> ids;
  for (int32_t i = 0; i < sessions; ++i) {
    POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::Create(model, so));
    POCKET_ASSIGN_OR_RETURN(const int64_t id,
                            engine->Submit(s.get(), prompts[static_cast<size_t>(i)], g));
    all.push_back(std::move(s));
    ids.push_back(id);
  }
  // The KV held after every step (the engine tracks its peak itself only under a budget).
  size_t sampled_peak = 0;
  while (true) {
    POCKET_ASSIGN_OR_RETURN(const int32_t active, engine->Step());
    sampled_peak = std::max(sampled_peak, engine->stats().kv_bytes);
    if (active == 0) break;
  }
  MemoryBenchRow r;
  uint64_t hash = 1469598103934665603ull;
  const size_t page_bytes = all.front()->kv_page_bytes();
  for (size_t i = 0; i < ids.size(); ++i) {
    // Taking a swapped request loads its session back; the app is done with it: it goes, with its
    // pages, before the next one comes back.
    POCKET_ASSIGN_OR_RETURN(GenerateResult out, engine->Take(ids[i]));
    all[i].reset();
    if (static_cast<int32_t>(out.tokens.size()) == config.n_gen) ++r.completed;
    for (int32_t t : out.tokens) {
      for (int k = 0; k < 4; ++k) {
        hash ^= (static_cast<uint32_t>(t) >> (8 * k)) & 0xffu;
        hash *= 1099511628211ull;
      }
    }
  }
  r.seconds = clock.elapsed_s();
  const EngineStats st = engine->stats();  // after the Takes: their restores count in the peak
  say(3, "done");
  r.model = path;
  r.threads = n_threads;
  r.sessions = sessions;
  r.n_prompt = config.n_prompt;
  r.n_gen = config.n_gen;
  r.n_prefix = n_prefix;
  r.kv_type = std::string(KvTypeName(config.kv_type));
  r.kv_budget_bytes = kv_budget_bytes;
  r.page_bytes = page_bytes;
  const uint64_t per_position = r.page_bytes / kKvPagePositions;
  // Positions: the prefix once, then each session's own (the last generated token's keys and
  // values are never computed: it is sampled, not evaluated).
  const uint64_t own = static_cast<uint64_t>(config.n_prompt - n_prefix + config.n_gen - 1);
  r.kv_bytes_tokens =
      (static_cast<uint64_t>(n_prefix) + static_cast<uint64_t>(sessions) * own) * per_position;
  r.kv_bytes_peak = std::max(sampled_peak, st.peak_kv_bytes);
  r.kv_overhead_bytes_per_session =
      (static_cast<double>(r.kv_bytes_peak) - static_cast<double>(r.kv_bytes_tokens)) / sessions;
  r.prefix_cache_bytes = cache->stats().bytes;
  r.swaps_out = st.swaps_out;
  r.swaps_in = st.swaps_in;
  r.tokens_hash = hash;
  struct stat file_stat;
  if (::stat(path.c_str(), &file_stat) == 0)
    r.file_bytes = static_cast<uint64_t>(file_stat.st_size);
  r.peak_rss_bytes = ReadProcessMemory().peak_rss_bytes;
  return r;
}

std::string MemoryBenchJson(const MemoryBenchRow& r) {
  std::string model = "\"";
  for (char ch : r.model) {
    if (ch == '"' || ch == '\\') model += '\\';
    model += ch;
  }
  model += '"';
  char buf[1536];
  std::snprintf(
      buf, sizeof buf,
      "{\"bench\": \"memory\", \"model\": %s, \"threads\": %d, \"sessions\": %d, \"n_prompt\": %d, "
      "\"n_gen\": %d, \"n_prefix\": %d, \"kv_type\": \"%s\", \"kv_budget_bytes\": %llu, "
      "\"page_bytes\": %llu, \"kv_bytes_tokens\": %llu, \"kv_bytes_peak\": %llu, "
      "\"kv_overhead_bytes_per_session\": %.0f, \"prefix_cache_bytes\": %llu, \"swaps_out\": "
      "%lld, \"swaps_in\": %lld, \"completed\": %d, \"tokens_hash\": \"%016llx\", "
      "\"file_bytes\": %llu, \"peak_rss_bytes\": %llu, \"seconds\": %.2f}",
      model.c_str(), r.threads, r.sessions, r.n_prompt, r.n_gen, r.n_prefix, r.kv_type.c_str(),
      static_cast<unsigned long long>(r.kv_budget_bytes),
      static_cast<unsigned long long>(r.page_bytes),
      static_cast<unsigned long long>(r.kv_bytes_tokens),
      static_cast<unsigned long long>(r.kv_bytes_peak), r.kv_overhead_bytes_per_session,
      static_cast<unsigned long long>(r.prefix_cache_bytes), static_cast<long long>(r.swaps_out),
      static_cast<long long>(r.swaps_in), r.completed,
      static_cast<unsigned long long>(r.tokens_hash), static_cast<unsigned long long>(r.file_bytes),
      static_cast<unsigned long long>(r.peak_rss_bytes), r.seconds);
  return buf;
}

std::string MemoryBenchText(const MemoryBenchRow& r) {
  const double mib = 1024.0 * 1024.0;
  char buf[1536];
  std::snprintf(
      buf, sizeof buf,
      "%d sessions of pp%d + tg%d sharing a %d-token prefix (%s KV, %d thread(s)), KV budget %s\n"
      "  KV held at the peak:        %8.1f MiB (pages of %.0f KiB; shared pages once)\n"
      "  KV of the distinct tokens:  %8.1f MiB (overhead %.1f KiB per session)\n"
      "  prefix cache entry:         %8.1f MiB\n"
      "  swaps out / in:             %lld / %lld\n"
      "  completed:                  %d of %d (tokens %016llx)\n"
      "  peak RSS:                   %8.1f MiB (file %.1f MiB)\n"
      "  time:                       %8.2f s\n",
      r.sessions, r.n_prompt, r.n_gen, r.n_prefix, r.kv_type.c_str(), r.threads,
      r.kv_budget_bytes > 0 ? HumanBytes(r.kv_budget_bytes).c_str() : "none",
      static_cast<double>(r.kv_bytes_peak) / mib, static_cast<double>(r.page_bytes) / 1024.0,
      static_cast<double>(r.kv_bytes_tokens) / mib, r.kv_overhead_bytes_per_session / 1024.0,
      static_cast<double>(r.prefix_cache_bytes) / mib, static_cast<long long>(r.swaps_out),
      static_cast<long long>(r.swaps_in), r.completed, r.sessions,
      static_cast<unsigned long long>(r.tokens_hash), static_cast<double>(r.peak_rss_bytes) / mib,
      static_cast<double>(r.file_bytes) / mib, r.seconds);
  return buf;
}

}  // namespace pocket
