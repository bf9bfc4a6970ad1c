// `pocket bench`: prefill and decode speed, load time, memory and CPU time of models, next to this
// machine's own ceilings measured in the same run (memory bandwidth -> the decode roofline; int8
// multiply-add peak -> the prefill compute fraction). In the manner of llama-bench and MNN's
// llm_bench: one warm-up, then r runs, medians with min and max.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "generate/constraint.h"
#include "kernels/kernel_table.h"

namespace pocket {

struct BenchConfig {
  std::vector<std::string> models;
  int32_t n_prompt = 512;  // 0: decode alone (from one start token, no prefill measured)
  int32_t n_gen = 128;
  std::vector<int32_t> threads = {1, 2};  // 0: one per hardware thread
  int32_t repetitions = 5;
  int32_t n_batch = 512;  // prefill chunk
  KvType kv_type = KvType::kF16;
  const KernelTable* kernels = nullptr;  // null: the best for this CPU
  bool repack = true;
  bool huge_pages = true;  // LoadOptions::huge_pages (the stream ceiling always uses them)
  bool measure_ceilings = true;
  size_t bandwidth_buffer_bytes = size_t{1} << 30;  // larger than any cache
  // Called at the start of each step (a ceiling measurement, a model load, a timed or warm-up run)
  // with the steps done so far and their total, and once more at the end (done == total).
  std::function<void(int64_t done, int64_t total, const std::string& step)> progress;
  // When set (a JSON schema, grammar, regex or choices), each run also decodes n_gen tokens under
  // this constraint from the same prompt (greedy over the allowed tokens; a complete output
  // starts the constraint over, as in a JSONL stream), reported next to the free decode.
  ConstraintSpec constraint;
};

struct Stat {
  double median = 0, min = 0, max = 0;
};

struct BenchResult {
  std::string model;
  std::string kernels;
  int32_t threads = 0;           // as run (a requested 0 resolved to hardware_threads)
  int32_t hardware_threads = 0;  // this machine's hardware threads
  int32_t n_prompt = 0, n_gen = 0, repetitions = 0;  // n_prompt 0: no prefill measured
  std::string kv_type;
  uint64_t file_bytes = 0;
  uint64_t weight_bytes = 0;  // matrices as the kernels read them
  uint64_t repacked_bytes = 0;
  bool huge_pages = true;
  // Of the matrices a decode step reads, the share the OS maps with huge pages (after the runs;
  // from /proc/self/smaps, by mapping; -1 where unknown).
  double huge_page_weight_fraction = -1;
  double load_ms = 0;
  Stat prefill_tokens_per_s, decode_tokens_per_s;
  double cpu_seconds = 0;  // median CPU time (all threads) of one pp + tg run
  int64_t peak_rss_increase_bytes = 0;
  uint64_t session_bytes = 0;  // the session's KV cache and scratch (allocated once)
  // Ceilings measured in the same run (0 when not measured).
  double memory_bandwidth_gbps = 0;
  double decode_bytes_per_token = 0;
  double decode_roofline_tokens_per_s = 0;
  double decode_roofline_fraction = 0;
  // The same with the bandwidth of the prefetched two-stream read (KernelTable::
  // stream_read_prefetched, the x86 decode kernels' pattern; 0 where the table has none): the
  // tighter bound where it reads more than the plain stream.
  double memory_bandwidth_prefetched_gbps = 0;
  double decode_prefetched_roofline_fraction = 0;
  double int8_peak_gmacs = 0;
  double prefill_macs_per_token = 0;
  double prefill_compute_fraction = 0;
  // With a constraint (zero otherwise).
  bool constrained = false;
  Stat constrained_decode_tokens_per_s;
  double constrained_decode_ratio = 0;  // median constrained / median free decode
  Stat mask_us_per_token;               // mask + accept time per decoded token
  double forced_token_fraction = 0;     // tokens that were the only continuation
  int32_t constrained_outputs = 0;      // complete outputs in the median run
};

StatusOr<std::vector<BenchResult>> RunBench(const BenchConfig& config);

std::string BenchMarkdownHeader();
std::string BenchMarkdownRow(const BenchResult& r);
// The constrained decode table (when BenchConfig::constraint was set).
std::string ConstrainedMarkdownHeader();
std::string ConstrainedMarkdownRow(const BenchResult& r);
// One JSON object. "measured" lists what was timed ("prefill", "decode", "constrained_decode");
// the prefill fields are null when n_prompt is 0.
std::string BenchJson(const BenchResult& r);
// The thread count a requested count runs with: 0 -> the hardware threads (1 to 256).
int32_t BenchThreads(int32_t requested);

}  // namespace pocket
