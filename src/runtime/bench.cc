#include "runtime/bench.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <thread>

#include "base/mapped_file.h"
#include "base/memory.h"
#include "base/rng.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "kernels/select.h"
#include "runtime/session.h"

namespace pocket {
namespace {

Stat Summarize(std::vector<double> v) {
  Stat s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return s;
}

// Read bandwidth with n_threads threads, each streaming its own slice of one large buffer with
// `read`; the median of several passes, in GB/s.
double MeasureBandwidth(uint64_t (*read)(const uint8_t*, size_t), int32_t n_threads, size_t bytes) {
  bytes = bytes / (64 * static_cast<size_t>(n_threads)) * 64 * static_cast<size_t>(n_threads);
  // Backed by huge pages where the OS allows, as the weights are: the ceiling is the best this
  // machine streams memory.
  std::unique_ptr<uint8_t[]> raw(new (std::nothrow) uint8_t[bytes + kHugePageBytes]);
  if (!raw) return 0.0;
  uint8_t* buf =
      raw.get() +
      (kHugePageBytes - reinterpret_cast<uintptr_t>(raw.get()) % kHugePageBytes) % kHugePageBytes;
  AdviseHugePages(buf, bytes);
  for (size_t i = 0; i < bytes; i += 4096) buf[i] = static_cast<uint8_t>(i >> 12);  // fault in
  std::memset(buf, 1, bytes);
  ThreadPool pool(n_threads);
  const size_t slice = bytes / static_cast<size_t>(n_threads);
  std::vector<double> gbps;
  uint64_t sink = 0;
  for (int pass = 0; pass < 7; ++pass) {
    std::vector<uint64_t> out(static_cast<size_t>(n_threads));
    Stopwatch w;
    pool.Run([&](int t) { out[static_cast<size_t>(t)] = read(buf + t * slice, slice); });
    const double s = w.elapsed_s();
    for (uint64_t v : out) sink ^= v;
    if (pass > 0) gbps.push_back(static_cast<double>(bytes) / s / 1e9);  // pass 0 warms up
  }
  if (sink == 0x5eed) std::fprintf(stderr, " ");  // keep the reads observable
  return Summarize(gbps).median;
}

double MeasureInt8Peak(const KernelTable& k, int32_t n_threads) {
  ThreadPool pool(n_threads);
  std::vector<double> totals;
  for (int pass = 0; pass < 3; ++pass) {
    std::vector<double> rates(static_cast<size_t>(n_threads));
    pool.Run([&](int t) { rates[static_cast<size_t>(t)] = k.int8_peak(0.2); });
    double total = 0;
    for (double r : rates) total += r;
    totals.push_back(total);
  }
  return Summarize(totals).median;
}

struct Ceilings {
  double bandwidth_gbps = 0;
  double prefetched_bandwidth_gbps = 0;
  double int8_macs = 0;
};

int32_t HardwareThreads() {
  return std::max(1, static_cast<int32_t>(std::thread::hardware_concurrency()));
}

// A number for the JSON output, or null when it was not measured.
std::string JsonNumber(bool measured, const char* format, double value) {
  if (!measured) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

}  // namespace

int32_t BenchThreads(int32_t requested) {
  return requested == 0 ? std::min(HardwareThreads(), 256) : requested;  // a session's maximum
}

StatusOr<std::vector<BenchResult>> RunBench(const BenchConfig& config) {
  if (config.models.empty()) return InvalidArgumentError("no model to benchmark");
  if (config.n_prompt < 0) {
    return InvalidArgumentError("the prompt length must be 0 (decode alone) or more, got ",
                                config.n_prompt);
  }
  if (config.n_gen < 1) {
    return InvalidArgumentError("the generation length must be at least 1, got ", config.n_gen);
  }
  if (config.repetitions < 1) return InvalidArgumentError("repetitions must be at least 1");
  if (config.threads.empty()) return InvalidArgumentError("no thread count to benchmark");
  std::vector<int32_t> threads;
  for (int32_t t : config.threads) {
    if (t < 0 || t > 256) {
      return InvalidArgumentError("thread count ", t, " (expected 0 for all hardware threads, ",
                                  "or 1 to 256)");
    }
    threads.push_back(BenchThreads(t));
  }
  const KernelTable& kernels = config.kernels != nullptr ? *config.kernels : SelectKernels();
  // Steps, for progress: one per ceiling measurement, and per (model, threads) a load and the
  // warm-up and timed runs.
  const int64_t n_steps =
      (config.measure_ceilings ? static_cast<int64_t>(threads.size()) : 0) +
      static_cast<int64_t>(config.models.size() * threads.size()) * (2 + config.repetitions);
  int64_t step = 0;
  auto say = [&](const std::string& line) {
    if (config.progress) config.progress(step, n_steps, line);
    ++step;
  };
  const bool prefill = config.n_prompt > 0;
  const std::string work = prefill ? StrCat("pp", config.n_prompt, " + tg", config.n_gen)
                                   : StrCat("tg", config.n_gen, " (decode alone)");
  std::map<int32_t, Ceilings> ceilings;
  if (config.measure_ceilings) {
    for (int32_t t : threads) {
      if (ceilings.count(t) != 0) {
        say(StrCat("ceilings with ", t, " thread(s): measured"));
        continue;
      }
      say(StrCat("ceilings: memory bandwidth and int8 peak with ", t, " thread(s) (", kernels.name,
                 ")"));
      ceilings[t].bandwidth_gbps =
          MeasureBandwidth(kernels.stream_read, t, config.bandwidth_buffer_bytes);
      if (kernels.stream_read_prefetched != nullptr) {
        ceilings[t].prefetched_bandwidth_gbps =
            MeasureBandwidth(kernels.stream_read_prefetched, t, config.bandwidth_buffer_bytes);
      }
      ceilings[t].int8_macs = MeasureInt8Peak(kernels, t);
    }
  }
  std::vector<BenchResult> results;
  for (const std::string& path : config.models) {
    for (int32_t n_threads : threads) {
      BenchResult r;
      r.model = path;
      r.kernels = std::string(kernels.name);
      r.threads = n_threads;
      r.hardware_threads = HardwareThreads();
      r.n_prompt = config.n_prompt;
      r.n_gen = config.n_gen;
      r.repetitions = config.repetitions;
      r.kv_type = std::string(KvTypeName(config.kv_type));
      ResetPeakRss();
      const ProcessMemory before = ReadProcessMemory();
      LoadOptions lo;
      lo.kernels = &kernels;
      lo.repack = config.repack;
      lo.huge_pages = config.huge_pages;
      r.huge_pages = config.huge_pages;
      say(StrCat(path, ": loading"));
      Stopwatch load_watch;
      POCKET_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, Model::Load(path, lo));
      r.load_ms = static_cast<double>(load_watch.elapsed_us()) / 1000.0;
      const ModelConfig& c = model->config();
      r.file_bytes = model->source().file_bytes();
      r.weight_bytes = model->weights().decode_weight_bytes();
      r.repacked_bytes = model->weights().repacked_bytes;
      SessionOptions so;
      so.n_ctx = std::max(config.n_prompt, 1) + config.n_gen;
      so.n_batch = std::max(1, std::min(config.n_batch, config.n_prompt));
      so.n_threads = n_threads;
      so.kv_type = config.kv_type;
      POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, Session::Create(model, so));
      Rng rng(1234);
      // Without a prompt, decoding starts from one token (the first decode step).
      std::vector<int32_t> prompt(static_cast<size_t>(std::max(config.n_prompt, 1)));
      for (int32_t& id : prompt)
        id = static_cast<int32_t>(rng.NextBelow(static_cast<uint64_t>(c.vocab_size)));
      std::unique_ptr<Constraint> constraint;
      if (!config.constraint.empty()) {
        if (model->tokenizer() == nullptr)
          return FailedPreconditionError(path, ": a constrained bench needs the model's tokenizer");
        POCKET_ASSIGN_OR_RETURN(constraint, MakeConstraint(*model->tokenizer(), config.constraint));
        r.constrained = true;
      }
      std::vector<double> pp, tg, cpu, ctg, mask_us, forced, outputs;
      std::vector<uint64_t> mask;
      for (int32_t run = 0; run <= config.repetitions; ++run) {
        say(StrCat(path, ": ", n_threads, " thread(s), ",
                   run == 0 ? "warm-up" : StrCat("run ", run, "/", config.repetitions), ": ",
                   work));
        session->Reset();
        const double cpu0 = ProcessCpuSeconds();
        Stopwatch w;
        if (prefill) POCKET_RETURN_IF_ERROR(session->Append(prompt));
        const double pp_s = w.elapsed_s();
        w.Reset();
        for (int32_t i = 0; i < config.n_gen; ++i) {
          int32_t next = prompt[0];
          if (prefill || i > 0) {
            std::span<const float> logits = session->last_logits();
            next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                        logits.begin());
          }
          POCKET_RETURN_IF_ERROR(session->Append(std::span<const int32_t>(&next, 1)));
        }
        const double tg_s = w.elapsed_s();
        const double run_cpu = ProcessCpuSeconds() - cpu0;
        if (constraint != nullptr) {
          // The same decode from the same prompt (without one, from the start token), each token
          // chosen among the allowed ones.
          POCKET_RETURN_IF_ERROR(session->SetContext(prompt));
          constraint->Reset();
          int64_t constraint_us = 0;
          int32_t n_forced = 0, n_outputs = 0;
          w.Reset();
          for (int32_t i = 0; i < config.n_gen; ++i) {
            Stopwatch mw;
            size_t n_allowed = constraint->AllowedMask(&mask);
            if (n_allowed == 0 && constraint->Complete()) {
              ++n_outputs;
              constraint->Reset();
              n_allowed = constraint->AllowedMask(&mask);
            }
            if (n_allowed == 0)
              return InternalError("the constraint allows no token and is not complete");
            std::span<const float> logits = session->last_logits();
            int32_t next = -1;
            float best = -INFINITY;
            const size_t words = std::min(mask.size(), (logits.size() + 63) / 64);
            for (size_t wd = 0; wd < words; ++wd) {
              for (uint64_t bits = mask[wd]; bits != 0; bits &= bits - 1) {
                const size_t id = wd * 64 + static_cast<size_t>(std::countr_zero(bits));
                if (id < logits.size() && (next < 0 || logits[id] > best)) {
                  best = logits[id];
                  next = static_cast<int32_t>(id);
                }
              }
            }
            if (n_allowed == 1) ++n_forced;
            POCKET_RETURN_IF_ERROR(constraint->Accept(next));
            if (constraint->Complete() && constraint->AllowedMask(&mask) == 0) {
              ++n_outputs;
              constraint->Reset();
            }
            constraint_us += mw.elapsed_us();
            POCKET_RETURN_IF_ERROR(session->Append(std::span<const int32_t>(&next, 1)));
          }
          const double ctg_s = w.elapsed_s();
          if (run > 0) {
            ctg.push_back(config.n_gen / ctg_s);
            mask_us.push_back(static_cast<double>(constraint_us) / config.n_gen);
            forced.push_back(static_cast<double>(n_forced) / config.n_gen);
            outputs.push_back(n_outputs);
          }
        }
        if (run == 0) continue;
        if (prefill) pp.push_back(config.n_prompt / pp_s);
        tg.push_back(config.n_gen / tg_s);
        cpu.push_back(run_cpu);
      }
      if (constraint != nullptr) {
        r.constrained_decode_tokens_per_s = Summarize(ctg);
        r.mask_us_per_token = Summarize(mask_us);
        r.forced_token_fraction = Summarize(forced).median;
        r.constrained_outputs = static_cast<int32_t>(Summarize(outputs).median);
      }
      r.prefill_tokens_per_s = Summarize(pp);
      r.decode_tokens_per_s = Summarize(tg);
      r.cpu_seconds = Summarize(cpu).median;
      if (constraint != nullptr && r.decode_tokens_per_s.median > 0) {
        r.constrained_decode_ratio =
            r.constrained_decode_tokens_per_s.median / r.decode_tokens_per_s.median;
      }
      const ProcessMemory after = ReadProcessMemory();
      r.peak_rss_increase_bytes =
          static_cast<int64_t>(after.peak_rss_bytes) - static_cast<int64_t>(before.rss_bytes);
      r.session_bytes = session->memory_bytes();
      if (const auto span = model->weights().decode_weight_span(); span.first != nullptr) {
        r.huge_page_weight_fraction =
            std::min(1.0, static_cast<double>(HugePageMappedBytes(span.first, span.second)) /
                              static_cast<double>(span.second - span.first));
      }

      // Bytes one decode step reads: every matrix once, plus the KV cache up to the position
      // (on average, the middle of the generated span).
      const double avg_pos = config.n_prompt + config.n_gen / 2.0;
      const double kv_elem = static_cast<double>(KvElementBytes(config.kv_type)) +
                             (config.kv_type == KvType::kQ8 ? 4.0 / c.head_dim : 0.0);
      r.decode_bytes_per_token = static_cast<double>(r.weight_bytes) +
                                 2.0 * c.n_layers * c.n_kv_heads * avg_pos * c.head_dim * kv_elem;
      // Multiply-adds per prompt token: every matrix but the output (computed for the last token
      // only), plus attention (QK and PV) over on average half the prompt.
      const double matrix_macs = static_cast<double>(c.n_layers) * static_cast<double>(c.d_model) *
                                 static_cast<double>(c.q_dim() * 2 + 2 * c.kv_dim() + 3 * c.d_ff);
      const double attention_macs = 2.0 * c.n_layers * c.q_dim() * (config.n_prompt / 2.0);
      r.prefill_macs_per_token = prefill ? matrix_macs + attention_macs : 0.0;
      if (auto it = ceilings.find(n_threads); it != ceilings.end()) {
        r.memory_bandwidth_gbps = it->second.bandwidth_gbps;
        r.decode_roofline_tokens_per_s = r.memory_bandwidth_gbps * 1e9 / r.decode_bytes_per_token;
        r.decode_roofline_fraction = r.decode_tokens_per_s.median / r.decode_roofline_tokens_per_s;
        r.memory_bandwidth_prefetched_gbps = it->second.prefetched_bandwidth_gbps;
        if (r.memory_bandwidth_prefetched_gbps > 0) {
          r.decode_prefetched_roofline_fraction = r.decode_tokens_per_s.median *
                                                  r.decode_bytes_per_token /
                                                  (r.memory_bandwidth_prefetched_gbps * 1e9);
        }
        r.int8_peak_gmacs = it->second.int8_macs / 1e9;
        if (prefill) {
          r.prefill_compute_fraction =
              r.prefill_tokens_per_s.median * r.prefill_macs_per_token / it->second.int8_macs;
        }
      }
      results.push_back(r);
    }
  }
  if (config.progress) config.progress(n_steps, n_steps, "done");
  return results;
}

std::string BenchMarkdownHeader() {
  return "| model | size | kernels | threads | pp t/s | tg t/s | load ms | peak RSS + | CPU s/run "
         "| bandwidth GB/s | decode roofline t/s | roofline % | prefetched read GB/s (%) "
         "| int8 peak GMAC/s | prefill % | weights in huge pages |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
}

std::string BenchMarkdownRow(const BenchResult& r) {
  char buf[1024];
  const size_t slash = r.model.find_last_of('/');
  const std::string name = slash == std::string::npos ? r.model : r.model.substr(slash + 1);
  char pp[96] = "-", prefill_fraction[32] = "-";  // not measured with n_prompt 0
  if (r.n_prompt > 0) {
    std::snprintf(pp, sizeof pp, "%.1f (%.1f-%.1f)", r.prefill_tokens_per_s.median,
                  r.prefill_tokens_per_s.min, r.prefill_tokens_per_s.max);
    std::snprintf(prefill_fraction, sizeof prefill_fraction, "%.0f%%",
                  100.0 * r.prefill_compute_fraction);
  }
  std::snprintf(
      buf, sizeof(buf),
      "| %s | %s | %s | %d | %s | %.1f (%.1f-%.1f) | %.0f | %s | %.2f | %.1f "
      "| %.1f | %.0f%% | %.1f (%.0f%%) | %.0f | %s | %s |\n",
      name.c_str(), HumanBytes(r.file_bytes).c_str(), r.kernels.c_str(), r.threads, pp,
      r.decode_tokens_per_s.median, r.decode_tokens_per_s.min, r.decode_tokens_per_s.max, r.load_ms,
      HumanBytes(static_cast<uint64_t>(std::max<int64_t>(0, r.peak_rss_increase_bytes))).c_str(),
      r.cpu_seconds, r.memory_bandwidth_gbps, r.decode_roofline_tokens_per_s,
      100.0 * r.decode_roofline_fraction, r.memory_bandwidth_prefetched_gbps,
      100.0 * r.decode_prefetched_roofline_fraction, r.int8_peak_gmacs, prefill_fraction,
      r.huge_page_weight_fraction < 0
          ? "-"
          : StrCat(static_cast<int>(std::lround(100.0 * r.huge_page_weight_fraction)), "%")
                .c_str());
  return buf;
}

std::string ConstrainedMarkdownHeader() {
  return "| model | threads | tg t/s | constrained tg t/s | ratio | mask us/token (max) | forced "
         "| outputs |\n|---|---|---|---|---|---|---|---|\n";
}

std::string ConstrainedMarkdownRow(const BenchResult& r) {
  char buf[512];
  const size_t slash = r.model.find_last_of('/');
  const std::string name = slash == std::string::npos ? r.model : r.model.substr(slash + 1);
  std::snprintf(buf, sizeof buf,
                "| %s | %d | %.1f | %.1f (%.1f-%.1f) | %.0f%% | %.1f (%.1f) | %.0f%% | %d |\n",
                name.c_str(), r.threads, r.decode_tokens_per_s.median,
                r.constrained_decode_tokens_per_s.median, r.constrained_decode_tokens_per_s.min,
                r.constrained_decode_tokens_per_s.max, 100.0 * r.constrained_decode_ratio,
                r.mask_us_per_token.median, r.mask_us_per_token.max,
                100.0 * r.forced_token_fraction, r.constrained_outputs);
  return buf;
}

std::string BenchJson(const BenchResult& r) {
  std::string model;
  for (char ch : r.model) {
    if (ch == '"' || ch == '\\') model += '\\';
    model += ch;
  }
  const bool prefill = r.n_prompt > 0;
  const std::string measured = StrCat("[", prefill ? "\"prefill\", " : "", "\"decode\"",
                                      r.constrained ? ", \"constrained_decode\"" : "", "]");
  char buf[2560];
  std::snprintf(
      buf, sizeof(buf),
      "{\"model\": \"%s\", \"measured\": %s, \"kernels\": \"%s\", \"threads\": %d, "
      "\"hardware_threads\": %d, \"n_prompt\": %d, \"n_gen\": %d, "
      "\"repetitions\": %d, \"kv_type\": \"%s\", \"file_bytes\": %llu, \"weight_bytes\": %llu, "
      "\"repacked_bytes\": %llu, \"huge_pages\": %s, \"huge_page_weight_fraction\": %.3f, "
      "\"load_ms\": %.3f, "
      "\"prefill_tokens_per_s\": %s, \"prefill_tokens_per_s_min\": %s, "
      "\"prefill_tokens_per_s_max\": %s, \"decode_tokens_per_s\": %.3f, "
      "\"decode_tokens_per_s_min\": %.3f, \"decode_tokens_per_s_max\": %.3f, "
      "\"cpu_seconds\": %.4f, \"peak_rss_increase_bytes\": %lld, \"session_bytes\": %llu, "
      "\"memory_bandwidth_gbps\": %.3f, \"decode_bytes_per_token\": %.0f, "
      "\"decode_roofline_tokens_per_s\": %.3f, \"decode_roofline_fraction\": %.4f, "
      "\"memory_bandwidth_prefetched_gbps\": %.3f, \"decode_prefetched_roofline_fraction\": %.4f, "
      "\"int8_peak_gmacs\": %.1f, \"prefill_macs_per_token\": %s, "
      "\"prefill_compute_fraction\": %s}",
      model.c_str(), measured.c_str(), r.kernels.c_str(), r.threads, r.hardware_threads, r.n_prompt,
      r.n_gen, r.repetitions, r.kv_type.c_str(), static_cast<unsigned long long>(r.file_bytes),
      static_cast<unsigned long long>(r.weight_bytes),
      static_cast<unsigned long long>(r.repacked_bytes), r.huge_pages ? "true" : "false",
      r.huge_page_weight_fraction, r.load_ms,
      JsonNumber(prefill, "%.3f", r.prefill_tokens_per_s.median).c_str(),
      JsonNumber(prefill, "%.3f", r.prefill_tokens_per_s.min).c_str(),
      JsonNumber(prefill, "%.3f", r.prefill_tokens_per_s.max).c_str(), r.decode_tokens_per_s.median,
      r.decode_tokens_per_s.min, r.decode_tokens_per_s.max, r.cpu_seconds,
      static_cast<long long>(r.peak_rss_increase_bytes),
      static_cast<unsigned long long>(r.session_bytes), r.memory_bandwidth_gbps,
      r.decode_bytes_per_token, r.decode_roofline_tokens_per_s, r.decode_roofline_fraction,
      r.memory_bandwidth_prefetched_gbps, r.decode_prefetched_roofline_fraction, r.int8_peak_gmacs,
      JsonNumber(prefill, "%.0f", r.prefill_macs_per_token).c_str(),
      JsonNumber(prefill, "%.4f", r.prefill_compute_fraction).c_str());
  std::string out = buf;
  if (r.constrained) {
    out.pop_back();  // the closing brace
    char more[512];
    std::snprintf(
        more, sizeof more,
        ", \"constrained_decode_tokens_per_s\": %.3f, "
        "\"constrained_decode_tokens_per_s_min\": %.3f, "
        "\"constrained_decode_tokens_per_s_max\": %.3f, \"constrained_decode_ratio\": %.4f, "
        "\"mask_us_per_token\": %.2f, \"mask_us_per_token_max\": %.2f, "
        "\"forced_token_fraction\": %.4f, \"constrained_outputs\": %d}",
        r.constrained_decode_tokens_per_s.median, r.constrained_decode_tokens_per_s.min,
        r.constrained_decode_tokens_per_s.max, r.constrained_decode_ratio,
        r.mask_us_per_token.median, r.mask_us_per_token.max, r.forced_token_fraction,
        r.constrained_outputs);
    out += more;
  }
  return out;
}

}  // namespace pocket
