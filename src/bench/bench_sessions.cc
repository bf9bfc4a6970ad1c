// `pocket bench --sessions`: aggregate decode of N sessions batched on the engine (bench.h).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>

#include "base/rng.h"
#include "base/timer.h"
#include "bench/bench.h"
#include "kernels/select.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/prefix_cache.h"
#include "runtime/session.h"

namespace pocket {
namespace {

Stat Median(std::vector<double> v) {
  Stat s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return s;
}

}  // namespace

StatusOr<std::vector<SessionsBenchRow>> RunSessionsBench(const BenchConfig& config,
                                                         std::span<const int32_t> sessions) {
  if (sessions.empty()) return InvalidArgumentError("--sessions: no session count");
  for (int32_t n : sessions) {
    if (n < 1 || n > 256) {
      return InvalidArgumentError("--sessions: a count must be 1 to 256, got ", n);
    }
  }
  if (config.n_prompt < 1) return InvalidArgumentError("--sessions needs a prompt (-p >= 1)");
  if (config.n_gen < 2) return InvalidArgumentError("--sessions needs -n >= 2 (decode steps)");
  if (config.repetitions < 1) return InvalidArgumentError("repetitions must be at least 1");
  if (config.n_batch < 1) return InvalidArgumentError("the prefill chunk must be positive");
  const int32_t max_sessions = *std::max_element(sessions.begin(), sessions.end());
  const KernelTable& kernels = config.kernels != nullptr ? *config.kernels : SelectKernels();
  // The prefix-cache measurement: a shared prefix + 16 own tokens. Shorter prefixes are not
  // stored (PrefixCacheOptions::min_tokens), so they are not measured.
  const int32_t n_prefix = config.n_prefix > 0 ? config.n_prefix : config.n_prompt;
  const bool measure_prefix = n_prefix >= PrefixCacheOptions{}.min_tokens;
  // Steps, for progress: per (model, threads) a load, and per run (the warm-up and the timed
  // ones) the prefix-cache measurement and each session count; then "done" at 100%.
  const int64_t n_steps =
      static_cast<int64_t>(config.models.size() * config.threads.size()) *
      (1 + static_cast<int64_t>(config.repetitions + 1) *
               (static_cast<int64_t>(sessions.size()) + (measure_prefix ? 1 : 0)));
  int64_t step = 0;
  auto say = [&](const std::string& line) {
    if (config.progress) config.progress(step, n_steps, line);
    ++step;
  };
  std::vector<SessionsBenchRow> rows;
  for (const std::string& path : config.models) {
    for (int32_t requested : config.threads) {
      if (requested < 0 || requested > 256) {
        return InvalidArgumentError("thread count ", requested,
                                    " (expected 0 for all hardware threads, or 1 to 256)");
      }
      const int32_t n_threads =
          requested > 0 ? requested
                        : std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency()));
      say(StrCat(path, ": loading"));
      LoadOptions lo;
      lo.kernels = &kernels;
      lo.repack = config.repack;
      lo.huge_pages = config.huge_pages;
      POCKET_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, Model::Load(path, lo));
      const int32_t vocab = model->config().vocab_size;
      POCKET_ASSIGN_OR_RETURN(std::shared_ptr<ThreadPool> pool, MakeThreadPool(n_threads));
      SessionOptions so;
      so.n_ctx = config.n_prompt + config.n_gen;
      so.n_batch = std::min(config.n_batch, config.n_prompt);
      so.kv_type = config.kv_type;
      so.pool = pool;
      EngineOptions eo;
      eo.max_requests = max_sessions;
      eo.max_chunk = config.n_batch;  // a step holds several prompts' chunks up to this
      POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, pool, eo));
      std::vector<std::unique_ptr<Session>> pool_sessions;
      std::vector<std::vector<int32_t>> prompts;
      for (int32_t i = 0; i < max_sessions; ++i) {
        POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::Create(model, so));
        pool_sessions.push_back(std::move(s));
        Rng rng(1234 + static_cast<uint64_t>(i));
        std::vector<int32_t> prompt(static_cast<size_t>(config.n_prompt));
        for (int32_t& id : prompt) id = static_cast<int32_t>(rng.NextBelow(vocab));
        prompts.push_back(std::move(prompt));
      }
      // The prefix-cache measurement's sessions and prompts.
      auto cache = std::make_shared<PrefixCache>();
      SessionOptions po = so;
      po.n_ctx = n_prefix + 17;
      po.n_batch = std::min(config.n_batch, po.n_ctx);
      po.prefix_cache = cache;
      POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Session> cold, Session::Create(model, po));
      POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Session> warm, Session::Create(model, po));
      std::vector<int32_t> cold_prompt(static_cast<size_t>(n_prefix) + 16), warm_prompt;
      {
        Rng rng(99);
        for (int32_t& id : cold_prompt) id = static_cast<int32_t>(rng.NextBelow(vocab));
        warm_prompt = cold_prompt;
        for (size_t i = static_cast<size_t>(n_prefix); i < warm_prompt.size(); ++i)
          warm_prompt[i] = static_cast<int32_t>(rng.NextBelow(vocab));
      }
      std::vector<double> cold_ms, warm_ms;
      GenerateOptions g;
      g.sampling.temperature = 0.0f;
      g.max_tokens = config.n_gen;
      g.ignore_stop_tokens = true;
      std::vector<std::vector<double>> decode(sessions.size()), ttft(sessions.size());
      std::vector<int32_t> max_rows(sessions.size(), 0);
      std::vector<int64_t> ids;
      for (int32_t run = 0; run <= config.repetitions; ++run) {
        if (measure_prefix) {
          say(StrCat(path, ": ", n_threads, " thread(s), ",
                     run == 0 ? "warm-up" : StrCat("run ", run, "/", config.repetitions),
                     ": time to first token after a ", n_prefix,
                     "-token prefix, without and with the prefix cache"));
          cache->Clear();
          cold->ResetKeepingPages();
          warm->ResetKeepingPages();
          GenerateOptions one = g;
          one.max_tokens = 1;
          POCKET_ASSIGN_OR_RETURN(GenerateResult a,
                                  cold->Generate(std::span<const int32_t>(cold_prompt), one));
          POCKET_ASSIGN_OR_RETURN(GenerateResult b,
                                  warm->Generate(std::span<const int32_t>(warm_prompt), one));
          if (b.n_cached_tokens != n_prefix / 16 * 16) {
            return InternalError("the prefix cache restored ", b.n_cached_tokens,
                                 " positions, not ", n_prefix / 16 * 16);
          }
          if (run > 0) {
            cold_ms.push_back(static_cast<double>(a.prefill_us) / 1000.0);
            warm_ms.push_back(static_cast<double>(b.prefill_us) / 1000.0);
          }
        }
        for (size_t k = 0; k < sessions.size(); ++k) {
          const int32_t n = sessions[k];
          say(StrCat(path, ": ", n_threads, " thread(s), ",
                     run == 0 ? "warm-up" : StrCat("run ", run, "/", config.repetitions), ": ", n,
                     " session(s) of pp", config.n_prompt, " + tg", config.n_gen));
          ids.clear();
          for (int32_t i = 0; i < n; ++i) {
            Session& s = *pool_sessions[static_cast<size_t>(i)];
            s.ResetKeepingPages();
            POCKET_ASSIGN_OR_RETURN(const int64_t id,
                                    engine->Submit(&s, prompts[static_cast<size_t>(i)], g));
            ids.push_back(id);
          }
          double decode_s = 0;
          int64_t decode_rows = 0;
          while (true) {
            Stopwatch w;
            POCKET_ASSIGN_OR_RETURN(const int32_t active, engine->Step());
            const double s = w.elapsed_s();
            // Only the steps where every session decodes (not those while prompts are still
            // prefilled, nor the tail where some have finished).
            if (engine->last_rows() == n && engine->last_decode_rows() == n) {
              decode_s += s;
              decode_rows += engine->last_rows();
            }
            max_rows[k] = std::max(max_rows[k], engine->last_rows());
            if (active == 0) break;
          }
          std::vector<double> first;
          for (int64_t id : ids) {
            POCKET_ASSIGN_OR_RETURN(GenerateResult r, engine->Take(id));
            if (static_cast<int32_t>(r.tokens.size()) != config.n_gen) {
              return InternalError("session generated ", r.tokens.size(), " tokens, not ",
                                   config.n_gen);
            }
            first.push_back(static_cast<double>(r.prefill_us) / 1000.0);
          }
          if (run > 0) {
            decode[k].push_back(static_cast<double>(decode_rows) / decode_s);
            ttft[k].push_back(Median(first).median);
          }
        }
      }
      double one = 0;
      for (size_t k = 0; k < sessions.size(); ++k) {
        if (sessions[k] == 1) one = Median(decode[k]).median;
      }
      for (size_t k = 0; k < sessions.size(); ++k) {
        SessionsBenchRow r;
        r.model = path;
        r.kernels = std::string(kernels.name);
        r.threads = n_threads;
        r.sessions = sessions[k];
        r.n_prompt = config.n_prompt;
        r.n_gen = config.n_gen;
        r.repetitions = config.repetitions;
        r.kv_type = std::string(KvTypeName(config.kv_type));
        r.aggregate_decode_tokens_per_s = Median(decode[k]);
        r.per_session_decode_tokens_per_s = r.aggregate_decode_tokens_per_s.median / sessions[k];
        r.decode_speedup = one > 0 ? r.aggregate_decode_tokens_per_s.median / one : 0;
        r.ttft_ms = Median(ttft[k]);
        r.kv_bytes_per_session = pool_sessions.front()->kv_bytes();
        r.max_batch_rows = max_rows[k];
        r.n_prefix = n_prefix;
        r.ttft_prefix_cold_ms = Median(cold_ms);
        r.ttft_cached_prefix_ms = Median(warm_ms);
        r.prefix_speedup = r.ttft_cached_prefix_ms.median > 0
                               ? r.ttft_prefix_cold_ms.median / r.ttft_cached_prefix_ms.median
                               : 0;
        rows.push_back(std::move(r));
      }
    }
  }
  if (config.progress) config.progress(n_steps, n_steps, "done");
  return rows;
}

namespace {
// A number, or null when not measured.
std::string Num(double v, bool measured) {
  if (!measured) return "null";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3f", v);
  return buf;
}
}  // namespace

std::string SessionsBenchJson(const SessionsBenchRow& r) {
  std::string model;
  for (char ch : r.model) {
    if (ch == '"' || ch == '\\') model += '\\';
    model += ch;
  }
  const bool m = r.prefix_speedup > 0;
  char buf[1536];
  std::snprintf(
      buf, sizeof(buf),
      "{\"model\": \"%s\", \"measured\": [\"sessions\"], \"kernels\": \"%s\", \"threads\": %d, "
      "\"sessions\": %d, \"n_prompt\": %d, \"n_gen\": %d, \"repetitions\": %d, "
      "\"kv_type\": \"%s\", \"aggregate_decode_tokens_per_s\": %.3f, "
      "\"aggregate_decode_tokens_per_s_min\": %.3f, \"aggregate_decode_tokens_per_s_max\": %.3f, "
      "\"per_session_decode_tokens_per_s\": %.3f, \"decode_speedup\": %.4f, \"ttft_ms\": %.3f, "
      "\"ttft_ms_min\": %.3f, \"ttft_ms_max\": %.3f, \"n_prefix\": %d, "
      "\"ttft_prefix_cold_ms\": %s, \"ttft_cached_prefix_ms\": %s, "
      "\"ttft_cached_prefix_ms_min\": %s, \"ttft_cached_prefix_ms_max\": %s, "
      "\"prefix_speedup\": %s, \"kv_bytes_per_session\": %llu, \"max_batch_rows\": %d}",
      model.c_str(), r.kernels.c_str(), r.threads, r.sessions, r.n_prompt, r.n_gen, r.repetitions,
      r.kv_type.c_str(), r.aggregate_decode_tokens_per_s.median,
      r.aggregate_decode_tokens_per_s.min, r.aggregate_decode_tokens_per_s.max,
      r.per_session_decode_tokens_per_s, r.decode_speedup, r.ttft_ms.median, r.ttft_ms.min,
      r.ttft_ms.max, r.n_prefix, Num(r.ttft_prefix_cold_ms.median, m).c_str(),
      Num(r.ttft_cached_prefix_ms.median, m).c_str(), Num(r.ttft_cached_prefix_ms.min, m).c_str(),
      Num(r.ttft_cached_prefix_ms.max, m).c_str(), Num(r.prefix_speedup, m).c_str(),
      static_cast<unsigned long long>(r.kv_bytes_per_session), r.max_batch_rows);
  return buf;
}

std::string SessionsMarkdownHeader() {
  return "| model | threads | sessions | pp | tg | aggregate decode t/s | per session t/s | "
         "vs 1 session | TTFT ms | prefix | TTFT ms cold / cached prefix | KV MiB/session |\n"
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
}

std::string SessionsMarkdownRow(const SessionsBenchRow& r) {
  char speedup[32] = "-";
  if (r.decode_speedup > 0) std::snprintf(speedup, sizeof(speedup), "%.2fx", r.decode_speedup);
  char prefix[96] = "-";  // not measured (a prefix under 32 tokens)
  if (r.prefix_speedup > 0) {
    std::snprintf(prefix, sizeof(prefix), "%.1f / %.2f (%.0fx)", r.ttft_prefix_cold_ms.median,
                  r.ttft_cached_prefix_ms.median, r.prefix_speedup);
  }
  // The model's file name, as in the main table (the JSON keeps the path).
  const size_t slash = r.model.find_last_of('/');
  const std::string name = slash == std::string::npos ? r.model : r.model.substr(slash + 1);
  char buf[1024];
  std::snprintf(
      buf, sizeof(buf),
      "| %s | %d | %d | %d | %d | %.1f (%.1f-%.1f) | %.1f | %s | %.1f | %d | %s | %.2f |\n",
      name.c_str(), r.threads, r.sessions, r.n_prompt, r.n_gen,
      r.aggregate_decode_tokens_per_s.median, r.aggregate_decode_tokens_per_s.min,
      r.aggregate_decode_tokens_per_s.max, r.per_session_decode_tokens_per_s, speedup,
      r.ttft_ms.median, r.n_prefix, prefix,
      static_cast<double>(r.kv_bytes_per_session) / (1 << 20));
  return buf;
}

}  // namespace pocket
