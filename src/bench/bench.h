// `pocket bench`: prefill and decode speed, load time, memory and CPU time of models, next to this
// machine's own ceilings measured in the same run (memory bandwidth -> the decode roofline; int8
// multiply-add peak -> the prefill compute fraction). In the manner of llama-bench and MNN's
// llm_bench: one warm-up, then r runs, medians with min and max.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "generate/constraint.h"
#include "generate/drafter.h"
#include "kernels/kernel_table.h"
#include "model/model.h"

namespace pocket {

class Model;

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
  // Speculative decoding modes (ParseBenchSpec), each measured against plain decoding of the same
  // prompt in the same run (greedy Generate, interleaved per repetition; the outputs must be
  // identical, else the bench fails), up to draft_max tokens drafted per verification pass. The
  // prompt is the bench's random one, or where its greedy continuation stops (a stop token)
  // within n_gen tokens, the next random prompt whose continuation does not. Any mode also
  // measures the verification cost curve.
  std::vector<std::string> spec;
  int32_t draft_max = 8;
  // The verification cost curve c(k) without speculative modes.
  bool verify_cost = false;
  // LoRA adapters (FILE|DIR[:SCALE], model/adapter.h): each repetition also runs the same
  // prefill and decode with these adapters on the same session, back to back with the bare run
  // (before it in even repetitions, after it in odd ones, so a pair sees the same machine and a
  // drift cancels), and times the switches (Session::SetAdapters).
  std::vector<std::string> lora;
  // --sessions: the shared prefix of the prefix-cache measurement (0: n_prompt tokens).
  int32_t n_prefix = 0;
};

// A `pocket bench --spec` mode: [auto:]DRAFTER, DRAFTER one of
//   lookup     prompt lookup (n-grams of 1 to 3 tokens, as `pocket run --spec lookup`)
//   oracle:P   benchmark-only: the target's own greedy continuation, each drafted token kept with
//              probability P in [0, 1] and otherwise replaced by another token
//   draft:FILE a draft model with the target's vocabulary (as `pocket run --spec draft:FILE`:
//              greedy drafts, guarded by GenerateOptions::spec_guard)
// and the auto: prefix turns GenerateOptions::spec_auto on (speculate only where it pays).
struct BenchSpec {
  std::string mode;  // as given
  bool spec_auto = false;
  std::string drafter;      // "lookup", "oracle", "draft"
  std::string arg;          // after "<drafter>:" (oracle: P; draft: FILE)
  bool spec_guard = false;  // draft:FILE without auto:
  double oracle_p = 1;      // oracle: the probability a drafted token is kept
};
StatusOr<BenchSpec> ParseBenchSpec(std::string_view mode);

// What a bench drafter is made with: the target, the prompt of the speculative runs and the
// target's greedy continuation of it (computed once per model by plain greedy decoding).
struct BenchDrafterContext {
  const Model* model = nullptr;
  std::span<const int32_t> prompt;
  std::span<const int32_t> continuation;
  // A draft model's loading (the bench's kernels) and session (its threads and context).
  LoadOptions load;
  int32_t n_threads = 1;
  int32_t n_ctx = 0;
};
StatusOr<std::unique_ptr<Drafter>> MakeBenchDrafter(const BenchSpec& spec,
                                                    const BenchDrafterContext& context);

// The oracle drafter: after a context that is the prompt followed by the first j tokens of the
// continuation, it proposes continuation[j], continuation[j + 1], ... (up to the end), where the
// token at index i is kept when Keeps(i) (a hash of i and the seed below p) and is otherwise
// replaced by a different token. Deterministic: the same context, the same draft. A context off
// the continuation (its last token differs) gets no draft. Allocates nothing.
class OracleDrafter final : public Drafter {
 public:
  OracleDrafter(int32_t prompt_size, std::vector<int32_t> continuation, double p,
                int32_t vocab_size, uint64_t seed = 0x6f7261636c65ull);
  Status Draft(std::span<const int32_t> context, int32_t max_tokens,
               std::vector<int32_t>* draft) override;
  bool Keeps(size_t index) const;
  // The token drafted at continuation index `index`.
  int32_t Proposal(size_t index) const;

 private:
  uint64_t Hash(size_t index) const;
  int32_t prompt_size_;
  std::vector<int32_t> continuation_;
  double p_;
  int32_t vocab_size_;
  uint64_t seed_;
};

struct Stat {
  double median = 0, min = 0, max = 0;
};

// One speculative mode of a bench result.
struct SpecBenchResult {
  std::string mode;
  bool spec_auto = false;
  int32_t draft_max = 0;
  Stat plain_decode_tokens_per_s;  // Generate without a drafter, interleaved with the spec runs
  Stat spec_decode_tokens_per_s;   // Generate with the drafter
  double spec_speedup = 0;         // median spec / median plain
  int32_t tokens = 0;              // tokens emitted per run (the same with and without)
  int32_t n_verify_passes = 0, n_drafted = 0, n_draft_accepted = 0, n_plain_steps = 0;
  double acceptance_length = 0;  // drafted tokens kept per verification pass
  double tokens_per_pass = 0;    // tokens emitted per target pass (verification or plain step)
  double draft_acceptance = 0;   // drafted tokens kept / drafted
  double draft_share = 0;        // median draft_us / decode_us
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
  // Verification cost curve (empty when not measured): verify_cost[k - 1] = median time of one
  // forward of k tokens with logits for every row after the n_prompt-token prompt / median time
  // of one decode step (one token) there, k = 1..16.
  std::vector<double> verify_cost;
  double decode_step_ms = 0;  // that decode step's median time
  std::vector<SpecBenchResult> spec;
  // With BenchConfig::lora (empty name otherwise).
  std::string adapters;        // AdapterSetName
  uint64_t adapter_bytes = 0;  // the adapters' factors as stored
  Stat lora_prefill_tokens_per_s, lora_decode_tokens_per_s;
  // Throughput with adapters / bare: the median (and range) over the repetitions of each
  // repetition's own pair, measured back to back in alternating order.
  Stat lora_prefill_ratio, lora_decode_ratio;
  Stat lora_switch_us;  // one SetAdapters call (bare <-> adapters)
};

StatusOr<std::vector<BenchResult>> RunBench(const BenchConfig& config);

std::string BenchMarkdownHeader();
std::string BenchMarkdownRow(const BenchResult& r);
// The constrained decode table (when BenchConfig::constraint was set).
std::string ConstrainedMarkdownHeader();
std::string ConstrainedMarkdownRow(const BenchResult& r);
// One JSON object. "measured" lists what was timed ("prefill", "decode", "constrained_decode");
// the prefill fields are null when n_prompt is 0, and the ceilings' fields (bandwidths, rooflines,
// int8 peak, prefill compute fraction) when they were not measured (measure_ceilings off, or a
// kernel table without the prefetched read); the Markdown row shows "-" there.
std::string BenchJson(const BenchResult& r);
// The speculative decoding tables (when modes or the verification cost were measured).
std::string LoraMarkdownHeader();
std::string LoraMarkdownRow(const BenchResult& r);
std::string SpecMarkdownHeader();
std::string SpecMarkdownRow(const BenchResult& r, const SpecBenchResult& s);
std::string VerifyCostMarkdownHeader();
std::string VerifyCostMarkdownRow(const BenchResult& r);
// The JSON lines of a result: BenchJson's object, one per speculative mode when there are any,
// each with "spec" (the mode), "spec_auto", "draft_max", "verify_cost" (c(1..16)),
// "decode_step_ms", "acceptance_length" (drafted tokens kept per verification pass),
// "tokens_per_pass" (tokens emitted per target pass), "draft_acceptance" (kept / drafted),
// "draft_share" (drafter time / decode time), the counts "spec_tokens", "verify_passes",
// "plain_steps", "drafted_tokens", "accepted_draft_tokens", "plain_decode_tokens_per_s" and
// "spec_decode_tokens_per_s" (each with _min and _max) and "spec_speedup"; with the verification
// cost alone, one object with "spec": null, "verify_cost" and "decode_step_ms". "measured" then
// also lists "verify_cost" and "spec_decode".
std::vector<std::string> BenchJsonLines(const BenchResult& r);
// The thread count a requested count runs with: 0 -> the hardware threads (1 to 256).
int32_t BenchThreads(int32_t requested);

// `pocket bench --sessions 1,2,4,8`: N sessions of one model generating together on the engine
// (runtime/engine.h), each with its own random n_prompt-token prompt and n_gen new tokens (stop
// tokens kept, so every session decodes exactly n_gen), on one pool. Per repetition the session
// counts are run in turn (interleaved, so all see the same machine).
struct SessionsBenchRow {
  std::string model;
  std::string kernels;
  int32_t threads = 0;
  int32_t sessions = 0;
  int32_t n_prompt = 0, n_gen = 0, repetitions = 0;
  std::string kv_type;
  // Decode rows evaluated per second over the steps where every session decoded (one row each,
  // no prefill rows), the token steps included; per session: that / sessions.
  Stat aggregate_decode_tokens_per_s;
  double per_session_decode_tokens_per_s = 0;
  // Aggregate decode of this row / that of one session in the same run (0 without a 1 row).
  double decode_speedup = 0;
  // Time to first token: from submitting every session at once to each session's first token
  // (median over the sessions; the median of that over the repetitions).
  Stat ttft_ms;
  // The prefix cache (measured once per thread count, the same in every row): one session's time
  // to first token for n_prefix shared tokens + 16 of its own with an empty cache (it stores the
  // prefix), then another's with the same prefix + 16 others (it copies the prefix's blocks and
  // evaluates the rest); medians over the repetitions.
  int32_t n_prefix = 0;
  Stat ttft_prefix_cold_ms;
  Stat ttft_cached_prefix_ms;
  double prefix_speedup = 0;          // median cold / median cached
  uint64_t kv_bytes_per_session = 0;  // the KV cache each session holds (n_prompt + n_gen)
  int32_t max_batch_rows = 0;         // the largest step's rows
};
StatusOr<std::vector<SessionsBenchRow>> RunSessionsBench(const BenchConfig& config,
                                                         std::span<const int32_t> sessions);
std::string SessionsBenchJson(const SessionsBenchRow& r);
std::string SessionsMarkdownHeader();
std::string SessionsMarkdownRow(const SessionsBenchRow& r);

// `pocket bench --memory N`: N sessions on one engine, each a prompt of n_prompt tokens whose first
// n_prefix are the same (stored once in the prefix cache first) and n_gen generated tokens, under
// an optional KV budget. Reports the KV bytes the sessions held (a shared page once) against the
// bytes of the distinct positions, the swaps, and the process's peak RSS (run it in a fresh
// process to compare with file + budget).
struct MemoryBenchRow {
  std::string model;
  int32_t threads = 0;
  int32_t sessions = 0;
  int32_t n_prompt = 0;
  int32_t n_gen = 0;
  int32_t n_prefix = 0;
  std::string kv_type;
  uint64_t kv_budget_bytes = 0;  // 0: none
  uint64_t page_bytes = 0;       // one KV page (kKvPagePositions positions)
  // Bytes of the distinct positions: the prefix once, each session's own prompt and output.
  uint64_t kv_bytes_tokens = 0;
  // The most KV bytes the engine held after a step (pages shared by sessions counted once).
  uint64_t kv_bytes_peak = 0;
  // (kv_bytes_peak - kv_bytes_tokens) / sessions, without a budget: the rounding to pages.
  double kv_overhead_bytes_per_session = 0;
  uint64_t prefix_cache_bytes = 0;  // the cached prefix's entry
  int64_t swaps_out = 0;
  int64_t swaps_in = 0;
  int32_t completed = 0;     // sessions that generated all n_gen tokens
  uint64_t tokens_hash = 0;  // FNV-1a of every session's tokens, in order (compare two runs)
  uint64_t file_bytes = 0;
  uint64_t peak_rss_bytes = 0;
  double seconds = 0;
};
StatusOr<MemoryBenchRow> RunMemoryBench(const BenchConfig& config, int32_t sessions,
                                        uint64_t kv_budget_bytes, const std::string& swap_dir);
std::string MemoryBenchJson(const MemoryBenchRow& r);
std::string MemoryBenchText(const MemoryBenchRow& r);

}  // namespace pocket
