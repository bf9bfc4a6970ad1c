#include "bench/bench.h"

#include "model/adapter.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string_view>
#include <thread>

#include "base/mapped_file.h"
#include "base/memory.h"
#include "base/rng.h"
#include "base/thread_pool.h"
#include "base/timer.h"
#include "kernels/select.h"
#include "runtime/draft_model.h"
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

int32_t Argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

bool IsStopToken(const Model& model, int32_t id) {
  const std::vector<int32_t>& stop = model.stop_token_ids();
  return std::find(stop.begin(), stop.end(), id) != stop.end();
}

// The target's greedy continuation of `prompt`: n tokens by plain decoding, one step per token.
Status GreedyContinuation(Session& session, std::span<const int32_t> prompt, int32_t n,
                          std::vector<int32_t>* out) {
  out->clear();
  POCKET_RETURN_IF_ERROR(session.SetContext(prompt));
  for (int32_t i = 0; i < n; ++i) {
    const int32_t next = Argmax(session.last_logits());
    out->push_back(next);
    if (i + 1 < n) POCKET_RETURN_IF_ERROR(session.Append(std::span<const int32_t>(&next, 1)));
  }
  return Status::Ok();
}

// The verification cost curve on `session`: after `prompt`, one decode step (a token, the last
// row's logits) against forwards of k = 1..kVerifyCostMax tokens of `tokens` with logits for every
// row, as a verification pass computes them. The context is cut back to the prompt between
// measurements (untimed).
constexpr int32_t kVerifyCostMax = 16;

struct VerifyCost {
  std::vector<double> cost;  // [kVerifyCostMax]
  double step_ms = 0;
};

StatusOr<VerifyCost> MeasureVerifyCost(Session& session, std::span<const int32_t> prompt,
                                       std::span<const int32_t> tokens, int32_t samples,
                                       const std::function<void(int32_t sample)>& on_sample) {
  if (static_cast<int32_t>(tokens.size()) < kVerifyCostMax)
    return InternalError("the verification cost needs ", kVerifyCostMax, " continuation tokens");
  const size_t vocab = static_cast<size_t>(session.model().config().vocab_size);
  std::vector<float> rows(static_cast<size_t>(kVerifyCostMax) * vocab);
  // times[0]: the decode step; times[k]: a forward of k tokens with every row's logits.
  std::vector<std::vector<double>> times(kVerifyCostMax + 1);
  for (int32_t sample = 0; sample <= samples; ++sample) {  // sample 0 warms up
    on_sample(sample);
    for (int32_t k = 0; k <= kVerifyCostMax; ++k) {
      POCKET_RETURN_IF_ERROR(session.SetContext(prompt));
      const std::span<const int32_t> in = tokens.first(static_cast<size_t>(std::max(k, 1)));
      Stopwatch w;
      POCKET_RETURN_IF_ERROR(session.Append(in, k == 0 ? nullptr : rows.data()));
      const double s = w.elapsed_s();
      if (sample > 0) times[static_cast<size_t>(k)].push_back(s);
    }
  }
  POCKET_RETURN_IF_ERROR(session.SetContext(prompt));
  VerifyCost out;
  const double step = Summarize(times[0]).median;
  out.step_ms = step * 1e3;
  for (int32_t k = 1; k <= kVerifyCostMax; ++k)
    out.cost.push_back(step > 0 ? Summarize(times[static_cast<size_t>(k)]).median / step : 0.0);
  return out;
}

// A "[a, b, ...]" JSON array.
std::string JsonArray(const std::vector<double>& values, const char* format) {
  std::string out = "[";
  char buf[64];
  for (size_t i = 0; i < values.size(); ++i) {
    std::snprintf(buf, sizeof buf, format, values[i]);
    if (i > 0) out += ", ";
    out += buf;
  }
  return out + "]";
}

std::string JsonString(std::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(ch));
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string ModelName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

StatusOr<BenchSpec> ParseBenchSpec(std::string_view mode) {
  BenchSpec spec;
  spec.mode = std::string(mode);
  std::string_view rest = mode;
  if (rest.substr(0, 5) == "auto:") {
    spec.spec_auto = true;
    rest.remove_prefix(5);
  }
  const size_t colon = rest.find(':');
  spec.drafter = std::string(rest.substr(0, colon));
  spec.arg = colon == std::string_view::npos ? "" : std::string(rest.substr(colon + 1));
  const std::string expected =
      "expected lookup, oracle:P with P in [0, 1], draft:FILE, or one of them after auto: "
      "(auto:lookup, auto:oracle:P, auto:draft:FILE)";
  if (spec.drafter == "auto" || (spec.spec_auto && spec.drafter.empty())) {
    return InvalidArgumentError("--spec ", QuoteBytes(mode),
                                ": auto needs a drafter to speculate with (auto:lookup or "
                                "auto:oracle:P)");
  }
  if (spec.drafter == "lookup") {
    if (colon != std::string_view::npos) {
      return InvalidArgumentError("--spec ", QuoteBytes(mode), ": lookup takes no argument (",
                                  expected, ")");
    }
    return spec;
  }
  if (spec.drafter == "draft") {
    if (spec.arg.empty()) {
      return InvalidArgumentError("--spec ", QuoteBytes(mode),
                                  ": draft needs the draft model's file, as draft:FILE");
    }
    spec.spec_guard = !spec.spec_auto;
    return spec;
  }
  if (spec.drafter == "oracle") {
    const std::string& a = spec.arg;
    char* end = nullptr;
    const double p = a.empty() ? NAN : std::strtod(a.c_str(), &end);
    if (a.empty() || end != a.c_str() + a.size() || !std::isfinite(p) || p < 0.0 || p > 1.0) {
      return InvalidArgumentError("--spec ", QuoteBytes(mode), ": oracle needs P in [0, 1] (",
                                  colon == std::string_view::npos ? "none" : QuoteBytes(a),
                                  " given), as oracle:0.7");
    }
    spec.oracle_p = p;
    return spec;
  }
  return InvalidArgumentError("--spec ", QuoteBytes(mode), ": unknown speculative mode (", expected,
                              ")");
}

StatusOr<std::unique_ptr<Drafter>> MakeBenchDrafter(const BenchSpec& spec,
                                                    const BenchDrafterContext& context) {
  if (context.model == nullptr) return InvalidArgumentError("a bench drafter needs the model");
  if (spec.drafter == "lookup") {
    PromptLookupOptions lookup;  // as `pocket run --spec lookup` (--lookup-min 1, --lookup-max 3)
    lookup.min_ngram = 1;
    lookup.max_ngram = 3;
    POCKET_RETURN_IF_ERROR(lookup.Validate());
    return std::unique_ptr<Drafter>(std::make_unique<PromptLookupDrafter>(lookup));
  }
  if (spec.drafter == "draft") {
    auto draft = Model::Load(spec.arg, context.load);
    if (!draft.ok()) {
      return Status(draft.status().code(),
                    StrCat("draft model ", spec.arg, ": ", draft.status().message()));
    }
    DraftModelOptions o;  // greedy drafts, as `pocket run --spec draft:FILE --temp 0`
    o.session.n_threads = context.n_threads;
    o.session.n_ctx = context.n_ctx;
    auto made = DraftModelDrafter::Create(std::move(*draft), *context.model, o);
    if (!made.ok()) {
      return Status(made.status().code(),
                    StrCat("draft model ", spec.arg, ": ", made.status().message()));
    }
    return std::unique_ptr<Drafter>(std::move(*made));
  }
  if (spec.drafter == "oracle") {
    const int32_t vocab = context.model->config().vocab_size;
    if (vocab < 2)
      return InvalidArgumentError("the oracle drafter needs a vocabulary of 2 or more");
    return std::unique_ptr<Drafter>(std::make_unique<OracleDrafter>(
        static_cast<int32_t>(context.prompt.size()),
        std::vector<int32_t>(context.continuation.begin(), context.continuation.end()),
        spec.oracle_p, vocab));
  }
  return InvalidArgumentError("--spec ", QuoteBytes(spec.mode), ": unknown drafter ",
                              QuoteBytes(spec.drafter));
}

OracleDrafter::OracleDrafter(int32_t prompt_size, std::vector<int32_t> continuation, double p,
                             int32_t vocab_size, uint64_t seed)
    : prompt_size_(prompt_size),
      continuation_(std::move(continuation)),
      p_(p),
      vocab_size_(vocab_size),
      seed_(seed) {}

uint64_t OracleDrafter::Hash(size_t index) const {
  uint64_t state = seed_ ^ (static_cast<uint64_t>(index) * 0xd1342543de82ef95ull);
  return SplitMix64(state);
}

bool OracleDrafter::Keeps(size_t index) const {
  // 53 uniform bits below p: p = 1 keeps every token, p = 0 none.
  return static_cast<double>(Hash(index) >> 11) * (1.0 / 9007199254740992.0) < p_;
}

int32_t OracleDrafter::Proposal(size_t index) const {
  const int32_t token = continuation_[index];
  if (Keeps(index)) return token;
  uint64_t state = Hash(index);
  const uint64_t offset = 1 + SplitMix64(state) % static_cast<uint64_t>(vocab_size_ - 1);
  return static_cast<int32_t>((static_cast<uint64_t>(token) + offset) %
                              static_cast<uint64_t>(vocab_size_));
}

Status OracleDrafter::Draft(std::span<const int32_t> context, int32_t max_tokens,
                            std::vector<int32_t>* draft) {
  draft->clear();
  if (context.size() < static_cast<size_t>(prompt_size_) || max_tokens < 1) return Status::Ok();
  const size_t at = context.size() - static_cast<size_t>(prompt_size_);
  if (at > continuation_.size()) return Status::Ok();
  if (at > 0 && context.back() != continuation_[at - 1]) return Status::Ok();  // off the track
  const size_t end = std::min(continuation_.size(), at + static_cast<size_t>(max_tokens));
  for (size_t i = at; i < end; ++i) draft->push_back(Proposal(i));
  return Status::Ok();
}

int32_t BenchThreads(int32_t requested) {
  return requested == 0 ? std::min(HardwareThreads(), 256) : requested;  // a session's maximum
}

namespace {

constexpr int32_t kMaxBenchDraft = 256;

// Tokens of the greedy continuation: the decode budget, and at least the cost curve's forwards.
int32_t ContinuationLength(const BenchConfig& config) {
  return std::max(config.n_gen, kVerifyCostMax);
}

// The speculative part of one (model, threads) result: on the first call for a model, a prompt
// whose greedy continuation does not stop within n_gen tokens and that continuation; then the
// verification cost curve, and per repetition a plain greedy Generate and one per mode, whose
// tokens must be the plain ones.
Status RunSpecBench(const BenchConfig& config, const std::vector<BenchSpec>& specs,
                    int32_t verify_samples, const Model& model, const LoadOptions& load,
                    Session& session, std::span<const int32_t> bench_prompt,
                    std::vector<int32_t>* spec_prompt, std::vector<int32_t>* continuation,
                    BenchResult* r, const std::function<void(const std::string&)>& say) {
  const std::string name = StrCat(r->model, ": ", r->threads, " thread(s), ");
  if (continuation->empty()) {
    say(StrCat(r->model, ": greedy continuation of the prompt (drafts and cost curve)"));
    // Random prompts whose greedy continuation ends early (a stop token within the budget) would
    // measure a shorter decode; the next random prompts are tried instead.
    constexpr int kTries = 16;
    spec_prompt->assign(bench_prompt.begin(), bench_prompt.end());
    Rng rng(4321);
    for (int attempt = 0;; ++attempt) {
      POCKET_RETURN_IF_ERROR(
          GreedyContinuation(session, *spec_prompt, ContinuationLength(config), continuation));
      const auto stop = std::find_if(continuation->begin(), continuation->begin() + config.n_gen,
                                     [&](int32_t id) { return IsStopToken(model, id); });
      if (stop == continuation->begin() + config.n_gen) break;
      if (attempt + 1 == kTries) {
        return FailedPreconditionError(
            r->model, ": the greedy continuations of ", kTries,
            " random prompts all stop within --n-gen ", config.n_gen,
            " tokens (an end-of-text token); a smaller --n-gen measures speculative decoding");
      }
      for (int32_t& id : *spec_prompt)
        id = static_cast<int32_t>(rng.NextBelow(static_cast<uint64_t>(model.config().vocab_size)));
    }
  }

  POCKET_ASSIGN_OR_RETURN(
      VerifyCost cost,
      MeasureVerifyCost(session, *spec_prompt, *continuation, verify_samples, [&](int32_t sample) {
        say(StrCat(name, "verification cost c(1..", kVerifyCostMax, "), ",
                   sample == 0 ? "warm-up" : StrCat("sweep ", sample, "/", verify_samples)));
      }));
  r->verify_cost = std::move(cost.cost);
  r->decode_step_ms = cost.step_ms;
  if (specs.empty()) return Status::Ok();

  BenchDrafterContext context;
  context.model = &model;
  context.prompt = *spec_prompt;
  context.continuation = *continuation;
  context.load = load;
  context.n_threads = session.n_threads();
  context.n_ctx = session.n_ctx();
  std::vector<std::unique_ptr<Drafter>> drafters;
  std::vector<GenerateOptions> options;
  GenerateOptions plain;
  plain.sampling.temperature = 0.0f;  // greedy: speculation must emit the same tokens
  plain.max_tokens = config.n_gen;
  for (const BenchSpec& spec : specs) {
    POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Drafter> drafter, MakeBenchDrafter(spec, context));
    GenerateOptions o = plain;
    o.drafter = drafter.get();
    o.draft_max = config.draft_max;
    o.spec_auto = spec.spec_auto;
    o.spec_guard = spec.spec_guard;
    options.push_back(o);
    drafters.push_back(std::move(drafter));
  }
  // Plain and speculative runs interleaved per repetition, so drift of the machine's speed hits
  // both alike.
  std::vector<double> plain_tps;
  std::vector<std::vector<double>> spec_tps(specs.size()), share(specs.size());
  std::vector<int32_t> reference;
  r->spec.resize(specs.size());
  for (int32_t run = 0; run <= config.repetitions; ++run) {
    const std::string which = run == 0 ? "warm-up" : StrCat("run ", run, "/", config.repetitions);
    say(StrCat(name, which, ": plain greedy decode tg", config.n_gen));
    POCKET_ASSIGN_OR_RETURN(GenerateResult base, session.Generate(*spec_prompt, plain));
    if (base.tokens.empty() || base.decode_us <= 0)
      return InternalError(r->model, ": plain greedy decoding emitted no tokens");
    if (run == 0) {
      reference = base.tokens;
    } else if (base.tokens != reference) {
      return InternalError(r->model, ": plain greedy decoding is not deterministic (run ", run,
                           " differs from the warm-up)");
    }
    if (run > 0)
      plain_tps.push_back(1e6 * static_cast<double>(base.tokens.size()) /
                          static_cast<double>(base.decode_us));
    for (size_t m = 0; m < specs.size(); ++m) {
      say(StrCat(name, which, ": speculative decode, --spec ", specs[m].mode));
      POCKET_ASSIGN_OR_RETURN(GenerateResult got, session.Generate(*spec_prompt, options[m]));
      if (got.tokens != reference) {
        size_t i = 0;
        while (i < got.tokens.size() && i < reference.size() && got.tokens[i] == reference[i]) ++i;
        return InternalError(
            r->model, ", ", r->threads, " thread(s): speculative decoding with --spec ",
            specs[m].mode, " emitted other tokens than plain greedy decoding (", got.tokens.size(),
            " tokens against ", reference.size(), "; first difference at ", i, ": ",
            i < got.tokens.size() ? StrCat(got.tokens[i]) : std::string("none"), " against ",
            i < reference.size() ? StrCat(reference[i]) : std::string("none"),
            "): verification is not lossless");
      }
      if (run == 0 || got.decode_us <= 0) continue;
      spec_tps[m].push_back(1e6 * static_cast<double>(got.tokens.size()) /
                            static_cast<double>(got.decode_us));
      share[m].push_back(static_cast<double>(got.draft_us) / static_cast<double>(got.decode_us));
      SpecBenchResult& s = r->spec[m];  // the counts are those of the last run
      s.tokens = static_cast<int32_t>(got.tokens.size());
      s.n_verify_passes = got.n_verify_passes;
      s.n_drafted = got.n_drafted;
      s.n_draft_accepted = got.n_draft_accepted;
      s.n_plain_steps = got.n_plain_steps;
    }
  }
  const Stat plain_stat = Summarize(plain_tps);
  for (size_t m = 0; m < specs.size(); ++m) {
    SpecBenchResult& s = r->spec[m];
    s.mode = specs[m].mode;
    s.spec_auto = specs[m].spec_auto;
    s.draft_max = config.draft_max;
    s.plain_decode_tokens_per_s = plain_stat;
    s.spec_decode_tokens_per_s = Summarize(spec_tps[m]);
    s.spec_speedup =
        plain_stat.median > 0 ? s.spec_decode_tokens_per_s.median / plain_stat.median : 0.0;
    s.acceptance_length =
        s.n_verify_passes > 0 ? static_cast<double>(s.n_draft_accepted) / s.n_verify_passes : 0.0;
    // Target passes: verifications and plain steps; the budget's last token needs none.
    const int32_t passes = s.n_verify_passes + s.n_plain_steps;
    s.tokens_per_pass = passes > 0 ? static_cast<double>(s.tokens) / passes : 0.0;
    s.draft_acceptance =
        s.n_drafted > 0 ? static_cast<double>(s.n_draft_accepted) / s.n_drafted : 0.0;
    s.draft_share = Summarize(share[m]).median;
  }
  return Status::Ok();
}

}  // namespace

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
  std::vector<BenchSpec> specs;
  for (const std::string& mode : config.spec) {
    POCKET_ASSIGN_OR_RETURN(BenchSpec spec, ParseBenchSpec(mode));
    specs.push_back(std::move(spec));
  }
  if (config.draft_max < 1 || config.draft_max > kMaxBenchDraft) {
    return InvalidArgumentError("--draft-max must be 1 to ", kMaxBenchDraft, ", got ",
                                config.draft_max);
  }
  // The greedy continuation and the verification cost curve: with --spec or --verify-cost.
  const bool speculative = config.verify_cost || !specs.empty();
  // Verification cost samples per k (after a warm-up sweep): single forward passes, so more than
  // the repetitions of whole runs.
  const int32_t verify_samples = std::max(3 * config.repetitions, 9);
  const KernelTable& kernels = config.kernels != nullptr ? *config.kernels : SelectKernels();
  // Steps, for progress: one per ceiling measurement, and per (model, threads) a load and the
  // warm-up and timed runs; with speculative modes or the verification cost, per model the greedy
  // continuation, and per (model, threads) the cost sweeps and each plain and speculative run.
  const int64_t per_model_threads =
      2 + config.repetitions +
      (speculative
           ? (1 + verify_samples) +
                 (specs.empty() ? 0
                                : static_cast<int64_t>(1 + specs.size()) * (1 + config.repetitions))
           : 0);
  const int64_t n_steps =
      (config.measure_ceilings ? static_cast<int64_t>(threads.size()) : 0) +
      static_cast<int64_t>(config.models.size() * threads.size()) * per_model_threads +
      (speculative ? static_cast<int64_t>(config.models.size()) : 0);
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
    // Speculative runs: their prompt and its greedy continuation, once per model.
    std::vector<int32_t> spec_prompt, continuation;
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
      if (speculative) {
        // Room for the continuation and the cost curve's forwards, and a chunk that holds a
        // whole verification pass.
        so.n_ctx = std::max(config.n_prompt, 1) + ContinuationLength(config) + 1;
        so.n_batch = std::max({so.n_batch, kVerifyCostMax, config.draft_max + 1});
      }
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
      AdapterSet adapters;
      for (const std::string& arg : config.lora) {
        std::string adapter_path;
        float scale = 1.0f;
        POCKET_RETURN_IF_ERROR(ParseAdapterArg(arg, &adapter_path, &scale));
        POCKET_ASSIGN_OR_RETURN(std::shared_ptr<const LoraAdapter> a,
                                LoraAdapter::Load(adapter_path, *model));
        r.adapter_bytes += a->bytes();
        adapters.push_back({std::move(a), scale});
      }
      r.adapters = AdapterSetName(adapters);
      std::vector<double> pp, tg, cpu, ctg, mask_us, forced, outputs, lpp, ltg, switch_us;
      std::vector<uint64_t> mask;
      // One prefill of the prompt and n_gen greedy decode steps: seconds of each.
      auto prefill_and_decode = [&](double* pp_s, double* tg_s) -> Status {
        session->ResetKeepingPages();
        Stopwatch w;
        if (prefill) POCKET_RETURN_IF_ERROR(session->Append(prompt));
        *pp_s = w.elapsed_s();
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
        *tg_s = w.elapsed_s();
        return Status::Ok();
      };
      // With adapters, each repetition is a pair (bare, adapters) whose two halves run back to
      // back, the order alternating from one repetition to the next, and the ratio is the
      // median of the pairs' own ratios: this machine's speed drifts over seconds (other
      // tenants), and a pair measured a second apart sees nearly the same machine while
      // alternating cancels a steady drift within the pairs.
      std::vector<double> pp_ratio, tg_ratio;
      for (int32_t run = 0; run <= config.repetitions; ++run) {
        const bool adapters_first = !adapters.empty() && run % 2 == 0;
        say(StrCat(path, ": ", n_threads, " thread(s), ",
                   run == 0 ? "warm-up" : StrCat("run ", run, "/", config.repetitions), ": ", work,
                   adapters.empty() ? ""
                   : adapters_first ? " (with the adapters, then bare)"
                                    : " (bare, then with the adapters)"));
        double lpp_s = 0, ltg_s = 0;
        auto with_adapters = [&]() -> Status {
          Stopwatch sw;
          POCKET_RETURN_IF_ERROR(session->SetAdapters(adapters));
          const double on_us = static_cast<double>(sw.elapsed_us());
          POCKET_RETURN_IF_ERROR(prefill_and_decode(&lpp_s, &ltg_s));
          sw.Reset();
          POCKET_RETURN_IF_ERROR(session->SetAdapters({}));
          const double off_us = static_cast<double>(sw.elapsed_us());
          if (run > 0) {
            if (prefill) lpp.push_back(config.n_prompt / lpp_s);
            ltg.push_back(config.n_gen / ltg_s);
            switch_us.push_back(on_us);
            switch_us.push_back(off_us);
          }
          return Status::Ok();
        };
        if (adapters_first) POCKET_RETURN_IF_ERROR(with_adapters());
        const double cpu0 = ProcessCpuSeconds();
        double pp_s = 0, tg_s = 0;
        POCKET_RETURN_IF_ERROR(prefill_and_decode(&pp_s, &tg_s));
        const double run_cpu = ProcessCpuSeconds() - cpu0;
        if (!adapters.empty() && !adapters_first) POCKET_RETURN_IF_ERROR(with_adapters());
        if (!adapters.empty() && run > 0) {
          if (prefill) pp_ratio.push_back(pp_s / lpp_s);  // (n / lpp_s) / (n / pp_s)
          tg_ratio.push_back(tg_s / ltg_s);
        }
        if (constraint != nullptr) {
          // The same decode from the same prompt (without one, from the start token), each token
          // chosen among the allowed ones.
          POCKET_RETURN_IF_ERROR(session->SetContext(prompt));
          constraint->Reset();
          int64_t constraint_us = 0;
          int32_t n_forced = 0, n_outputs = 0;
          Stopwatch w;
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
      if (!adapters.empty()) {
        r.lora_prefill_tokens_per_s = Summarize(lpp);
        r.lora_decode_tokens_per_s = Summarize(ltg);
        r.lora_switch_us = Summarize(switch_us);
        if (prefill) r.lora_prefill_ratio = Summarize(pp_ratio);
        r.lora_decode_ratio = Summarize(tg_ratio);
      }
      r.cpu_seconds = Summarize(cpu).median;
      if (constraint != nullptr && r.decode_tokens_per_s.median > 0) {
        r.constrained_decode_ratio =
            r.constrained_decode_tokens_per_s.median / r.decode_tokens_per_s.median;
      }
      if (speculative) {
        POCKET_RETURN_IF_ERROR(RunSpecBench(config, specs, verify_samples, *model, lo, *session,
                                            prompt, &spec_prompt, &continuation, &r, say));
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
  char pp[96] = "-";  // not measured with n_prompt 0
  if (r.n_prompt > 0) {
    std::snprintf(pp, sizeof pp, "%.1f (%.1f-%.1f)", r.prefill_tokens_per_s.median,
                  r.prefill_tokens_per_s.min, r.prefill_tokens_per_s.max);
  }
  // The ceilings' columns: "-" where they were not measured (--no-ceilings; the prefetched read
  // where the kernel table has none; the prefill fraction without a prefill).
  char bandwidth[32] = "-", roofline[32] = "-", roofline_fraction[32] = "-", prefetched[64] = "-",
       int8_peak[32] = "-", prefill_fraction[32] = "-";
  if (r.memory_bandwidth_gbps > 0) {
    std::snprintf(bandwidth, sizeof bandwidth, "%.1f", r.memory_bandwidth_gbps);
    std::snprintf(roofline, sizeof roofline, "%.1f", r.decode_roofline_tokens_per_s);
    std::snprintf(roofline_fraction, sizeof roofline_fraction, "%.0f%%",
                  100.0 * r.decode_roofline_fraction);
  }
  if (r.memory_bandwidth_prefetched_gbps > 0) {
    std::snprintf(prefetched, sizeof prefetched, "%.1f (%.0f%%)",
                  r.memory_bandwidth_prefetched_gbps,
                  100.0 * r.decode_prefetched_roofline_fraction);
  }
  if (r.int8_peak_gmacs > 0) {
    std::snprintf(int8_peak, sizeof int8_peak, "%.0f", r.int8_peak_gmacs);
    if (r.n_prompt > 0) {
      std::snprintf(prefill_fraction, sizeof prefill_fraction, "%.0f%%",
                    100.0 * r.prefill_compute_fraction);
    }
  }
  std::snprintf(
      buf, sizeof(buf),
      "| %s | %s | %s | %d | %s | %.1f (%.1f-%.1f) | %.0f | %s | %.2f | %s | %s | %s | %s | %s "
      "| %s | %s |\n",
      name.c_str(), HumanBytes(r.file_bytes).c_str(), r.kernels.c_str(), r.threads, pp,
      r.decode_tokens_per_s.median, r.decode_tokens_per_s.min, r.decode_tokens_per_s.max, r.load_ms,
      HumanBytes(static_cast<uint64_t>(std::max<int64_t>(0, r.peak_rss_increase_bytes))).c_str(),
      r.cpu_seconds, bandwidth, roofline, roofline_fraction, prefetched, int8_peak,
      prefill_fraction,
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
  // The ceilings (null where not measured: --no-ceilings, or a kernel table without the
  // prefetched read).
  const bool bandwidth = r.memory_bandwidth_gbps > 0;
  const bool prefetched = r.memory_bandwidth_prefetched_gbps > 0;
  const bool int8_peak = r.int8_peak_gmacs > 0;
  const std::string measured = StrCat("[", prefill ? "\"prefill\", " : "", "\"decode\"",
                                      r.constrained ? ", \"constrained_decode\"" : "",
                                      r.verify_cost.empty() ? "" : ", \"verify_cost\"",
                                      r.spec.empty() ? "" : ", \"spec_decode\"", "]");
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
      "\"memory_bandwidth_gbps\": %s, \"decode_bytes_per_token\": %.0f, "
      "\"decode_roofline_tokens_per_s\": %s, \"decode_roofline_fraction\": %s, "
      "\"memory_bandwidth_prefetched_gbps\": %s, \"decode_prefetched_roofline_fraction\": %s, "
      "\"int8_peak_gmacs\": %s, \"prefill_macs_per_token\": %s, "
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
      static_cast<unsigned long long>(r.session_bytes),
      JsonNumber(bandwidth, "%.3f", r.memory_bandwidth_gbps).c_str(), r.decode_bytes_per_token,
      JsonNumber(bandwidth, "%.3f", r.decode_roofline_tokens_per_s).c_str(),
      JsonNumber(bandwidth, "%.4f", r.decode_roofline_fraction).c_str(),
      JsonNumber(prefetched, "%.3f", r.memory_bandwidth_prefetched_gbps).c_str(),
      JsonNumber(prefetched, "%.4f", r.decode_prefetched_roofline_fraction).c_str(),
      JsonNumber(int8_peak, "%.1f", r.int8_peak_gmacs).c_str(),
      JsonNumber(prefill, "%.0f", r.prefill_macs_per_token).c_str(),
      JsonNumber(prefill && int8_peak, "%.4f", r.prefill_compute_fraction).c_str());
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
  if (!r.adapters.empty()) {
    out.pop_back();
    char more[768];
    std::snprintf(more, sizeof more,
                  ", \"adapters\": %s, \"adapter_bytes\": %llu, "
                  "\"lora_prefill_tokens_per_s\": %s, \"lora_decode_tokens_per_s\": %.3f, "
                  "\"lora_prefill_ratio\": %s, \"lora_prefill_ratio_min\": %s, "
                  "\"lora_prefill_ratio_max\": %s, \"lora_decode_ratio\": %.4f, "
                  "\"lora_decode_ratio_min\": %.4f, \"lora_decode_ratio_max\": %.4f, "
                  "\"lora_switch_us\": %.1f, \"lora_switch_us_max\": %.1f}",
                  JsonString(r.adapters).c_str(), static_cast<unsigned long long>(r.adapter_bytes),
                  JsonNumber(prefill, "%.3f", r.lora_prefill_tokens_per_s.median).c_str(),
                  r.lora_decode_tokens_per_s.median,
                  JsonNumber(prefill, "%.4f", r.lora_prefill_ratio.median).c_str(),
                  JsonNumber(prefill, "%.4f", r.lora_prefill_ratio.min).c_str(),
                  JsonNumber(prefill, "%.4f", r.lora_prefill_ratio.max).c_str(),
                  r.lora_decode_ratio.median, r.lora_decode_ratio.min, r.lora_decode_ratio.max,
                  r.lora_switch_us.median, r.lora_switch_us.max);
    out += more;
  }
  return out;
}

std::string LoraMarkdownHeader() {
  return "| model | threads | adapters | adapter bytes | pp t/s bare | pp t/s adapters "
         "| pp ratio (pairs' range) | tg t/s bare | tg t/s adapters | tg ratio (pairs' range) "
         "| switch us (max) |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|\n";
}

std::string LoraMarkdownRow(const BenchResult& r) {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "| %s | %d | %s | %s | %.1f | %.1f | %.3f (%.3f-%.3f) | %.1f | %.1f | %.3f "
                "(%.3f-%.3f) | %.0f (%.0f) |\n",
                ModelName(r.model).c_str(), r.threads, r.adapters.c_str(),
                HumanBytes(r.adapter_bytes).c_str(), r.prefill_tokens_per_s.median,
                r.lora_prefill_tokens_per_s.median, r.lora_prefill_ratio.median,
                r.lora_prefill_ratio.min, r.lora_prefill_ratio.max, r.decode_tokens_per_s.median,
                r.lora_decode_tokens_per_s.median, r.lora_decode_ratio.median,
                r.lora_decode_ratio.min, r.lora_decode_ratio.max, r.lora_switch_us.median,
                r.lora_switch_us.max);
  return buf;
}

std::string SpecMarkdownHeader() {
  return "| model | threads | spec | draft max | plain tg t/s | spec tg t/s | speedup "
         "| accepted/pass | tokens/pass | drafts kept | drafter share |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|\n";
}

std::string SpecMarkdownRow(const BenchResult& r, const SpecBenchResult& s) {
  char buf[768];
  std::snprintf(buf, sizeof buf,
                "| %s | %d | %s | %d | %.1f (%.1f-%.1f) | %.1f (%.1f-%.1f) | %.2fx | %.2f | %.2f "
                "| %.0f%% (%d/%d) | %.1f%% |\n",
                ModelName(r.model).c_str(), r.threads, s.mode.c_str(), s.draft_max,
                s.plain_decode_tokens_per_s.median, s.plain_decode_tokens_per_s.min,
                s.plain_decode_tokens_per_s.max, s.spec_decode_tokens_per_s.median,
                s.spec_decode_tokens_per_s.min, s.spec_decode_tokens_per_s.max, s.spec_speedup,
                s.acceptance_length, s.tokens_per_pass, 100.0 * s.draft_acceptance,
                s.n_draft_accepted, s.n_drafted, 100.0 * s.draft_share);
  return buf;
}

std::string VerifyCostMarkdownHeader() {
  std::string head = "| model | threads | context | decode step ms |";
  std::string rule = "|---|---|---|---|";
  for (int32_t k = 1; k <= kVerifyCostMax; ++k) {
    head += StrCat(" c(", k, ") |");
    rule += "---|";
  }
  return head + "\n" + rule + "\n";
}

std::string VerifyCostMarkdownRow(const BenchResult& r) {
  std::string row =
      StrCat("| ", ModelName(r.model), " | ", r.threads, " | ", std::max(r.n_prompt, 1), " | ");
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f |", r.decode_step_ms);
  row += buf;
  for (double c : r.verify_cost) {
    std::snprintf(buf, sizeof buf, " %.2f |", c);
    row += buf;
  }
  return row + "\n";
}

std::vector<std::string> BenchJsonLines(const BenchResult& r) {
  const std::string base = BenchJson(r);
  if (r.verify_cost.empty() && r.spec.empty()) return {base};
  // The base object without its closing brace, then the speculative fields.
  const std::string head = base.substr(0, base.size() - 1);
  char buf[128];
  std::snprintf(buf, sizeof buf, ", \"decode_step_ms\": %.4f", r.decode_step_ms);
  const std::string cost = StrCat(", \"verify_cost\": ", JsonArray(r.verify_cost, "%.4f"), buf);
  if (r.spec.empty()) return {StrCat(head, ", \"spec\": null", cost, "}")};
  std::vector<std::string> lines;
  for (const SpecBenchResult& s : r.spec) {
    char more[1536];
    std::snprintf(more, sizeof more,
                  ", \"spec_auto\": %s, \"draft_max\": %d, \"acceptance_length\": %.4f, "
                  "\"tokens_per_pass\": %.4f, \"draft_acceptance\": %.4f, \"draft_share\": %.4f, "
                  "\"spec_tokens\": %d, \"verify_passes\": %d, \"plain_steps\": %d, "
                  "\"drafted_tokens\": %d, \"accepted_draft_tokens\": %d, "
                  "\"plain_decode_tokens_per_s\": %.3f, \"plain_decode_tokens_per_s_min\": %.3f, "
                  "\"plain_decode_tokens_per_s_max\": %.3f, \"spec_decode_tokens_per_s\": %.3f, "
                  "\"spec_decode_tokens_per_s_min\": %.3f, \"spec_decode_tokens_per_s_max\": %.3f, "
                  "\"spec_speedup\": %.4f}",
                  s.spec_auto ? "true" : "false", s.draft_max, s.acceptance_length,
                  s.tokens_per_pass, s.draft_acceptance, s.draft_share, s.tokens, s.n_verify_passes,
                  s.n_plain_steps, s.n_drafted, s.n_draft_accepted,
                  s.plain_decode_tokens_per_s.median, s.plain_decode_tokens_per_s.min,
                  s.plain_decode_tokens_per_s.max, s.spec_decode_tokens_per_s.median,
                  s.spec_decode_tokens_per_s.min, s.spec_decode_tokens_per_s.max, s.spec_speedup);
    lines.push_back(StrCat(head, ", \"spec\": ", JsonString(s.mode), cost, more));
  }
  return lines;
}

}  // namespace pocket
