// Kernel micro-benchmarks, per kernel table this CPU runs:
//   build/bin/kernels_bench [--benchmark_filter=...] [--benchmark_format=json]
// PackedGemm/<table>/<bits>/<group>/<tokens>: a [2560 x 896] packed matrix (an FFN's gate+up
// shape) times <tokens> quantized rows; counters: GMAC/s and weight GB/s. Attention/<table>/
// <positions>/<tokens>: 7 query heads over one f16 KV head of 64. PackedGemmStream/<table>/u4/g64/
// <tokens>: the same shape streamed from memory (verification of a draft). LoraA/<table>/q8_0/
// <tokens> and LoraB/...: a rank-16 adapter's two steps (from cache), counter GMAC/s.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "base/float16.h"
#include "base/rng.h"
#include "kernels/kernel_table.h"
#include "kernels/select.h"

namespace pocket {
namespace {

struct Packed {
  std::vector<uint8_t> bytes;
  PackedMatrix m;
};

Packed MakePacked(PackedCodes codes, int32_t group, int64_t rows, int64_t cols) {
  PackedLayout l{codes, group, rows, cols, codes == PackedCodes::kU4};
  Packed p;
  p.bytes.resize(l.total_bytes() + 64);
  Rng rng(1);
  for (uint8_t& b : p.bytes) b = static_cast<uint8_t>(rng.NextU64());
  // Keep scales finite and small: overwrite every group's scale block with 0.01 (fp16).
  uint8_t* base = p.bytes.data() + (64 - reinterpret_cast<uintptr_t>(p.bytes.data()) % 64) % 64;
  for (int64_t panel = 0; panel < l.n_panels(); ++panel) {
    for (int64_t g = 0; g < l.n_groups(); ++g) {
      uint16_t* s = reinterpret_cast<uint16_t*>(base + panel * l.panel_bytes() +
                                                g * l.group_bytes() + l.code_bytes_per_group());
      for (size_t i = 0; i < l.scale_bytes_per_group() / 2; ++i) s[i] = FloatToFp16(0.01f);
    }
  }
  p.m = PackedMatrix{l, base};
  return p;
}

void BM_PackedGemm(benchmark::State& state, const KernelTable* k, PackedCodes codes, int32_t group,
                   int64_t n_tokens) {
  const int64_t rows = 2560, cols = 896;
  Packed w = MakePacked(codes, group, rows, cols);
  std::vector<int8_t> q(static_cast<size_t>(n_tokens * cols), 3);
  std::vector<float> scale(static_cast<size_t>(n_tokens * cols / group), 0.01f),
      sum(scale.size(), 5.0f);
  QuantizedRows a{q.data(), scale.data(), sum.data(), n_tokens, cols, group};
  std::vector<float> y(static_cast<size_t>(n_tokens * rows));
  for (auto _ : state) {
    k->packed_gemm(w.m, a, 0, w.m.layout.n_panels(), {y.data(), rows, Epilogue::kStore});
    benchmark::DoNotOptimize(y.data());
  }
  const double macs = static_cast<double>(rows) * cols * n_tokens;
  state.counters["GMAC/s"] =
      benchmark::Counter(macs * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight_GB/s"] =
      benchmark::Counter(static_cast<double>(w.m.layout.total_bytes()) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}

// The verification shape: n tokens (1: a decode step; 2-16: a draft being verified) times
// matrices streamed from memory, as in a forward pass (512 distinct matrices, 690 MB at u4 g64,
// larger than the last-level cache). The ratio of n tokens' time to 1 token's is the cost a
// verification pass adds per matrix.
void BM_PackedGemmStream(benchmark::State& state, const KernelTable* k, int64_t n_tokens) {
  const int64_t rows = 2560, cols = 896;
  constexpr int kMatrices = 512;
  std::vector<Packed> ws;
  ws.reserve(kMatrices);
  for (int i = 0; i < kMatrices; ++i) ws.push_back(MakePacked(PackedCodes::kU4, 64, rows, cols));
  std::vector<int8_t> q(static_cast<size_t>(n_tokens * cols), 3);
  std::vector<float> scale(static_cast<size_t>(n_tokens * cols / 64), 0.01f),
      sum(scale.size(), 5.0f);
  QuantizedRows a{q.data(), scale.data(), sum.data(), n_tokens, cols, 64};
  std::vector<float> y(static_cast<size_t>(n_tokens * rows));
  size_t i = 0;
  for (auto _ : state) {
    const Packed& w = ws[i++ % kMatrices];
    k->packed_gemm(w.m, a, 0, w.m.layout.n_panels(), {y.data(), rows, Epilogue::kStore});
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_GB/s"] =
      benchmark::Counter(static_cast<double>(ws[0].m.layout.total_bytes()) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}

void BM_PrefillGemm(benchmark::State& state, const KernelTable* k, int32_t block,
                    int64_t n_tokens) {
  const int64_t rows = 2560, cols = 896;
  Packed w = MakePacked(PackedCodes::kU4, 64, rows, cols);
  std::vector<int8_t> q(static_cast<size_t>(n_tokens * cols), 3);
  std::vector<float> scale(static_cast<size_t>(n_tokens * cols / block), 0.01f),
      sum(scale.size(), 5.0f);
  QuantizedRows a{q.data(), scale.data(), sum.data(), n_tokens, cols, block};
  std::vector<float> y(static_cast<size_t>(n_tokens * rows));
  for (auto _ : state) {
    k->prefill_gemm(w.m, a, 0, w.m.layout.n_panels(), {y.data(), rows, Epilogue::kStore});
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GMAC/s"] = benchmark::Counter(static_cast<double>(rows) * cols * n_tokens * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Attention(benchmark::State& state, const KernelTable* k, int64_t n_pos, int64_t n_tokens) {
  const int32_t hd = 64, heads = 7;
  const int64_t n_ctx = (n_pos + 15) / 16 * 16;
  std::vector<uint16_t> kb(static_cast<size_t>(n_ctx * hd), FloatToFp16(0.1f)),
      vb(kb.size(), FloatToFp16(0.2f));
  KvHeadView kv{KvType::kF16, hd, kb.data(), vb.data(), nullptr, nullptr};
  const int64_t ld = heads * hd;
  std::vector<float> q(static_cast<size_t>(n_tokens * ld), 0.05f), out(q.size());
  std::vector<float> scratch(static_cast<size_t>(AttentionScratchFloats(heads, hd)));
  for (auto _ : state) {
    AttentionTask task{q.data(),         ld, out.data(), ld,    kv, heads,
                       n_pos - n_tokens, 0,  n_tokens,   0.125f};
    k->attention(task, scratch.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(n_tokens),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}

// A LoRA factor in an int8 adapter package (Q8_0, f16 scale per 32), values in +-0.05.
std::vector<uint8_t> MakeQ8Rows(int64_t rows, int64_t cols) {
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols / 32 * 34));
  Rng rng(2);
  for (size_t b = 0; b < bytes.size(); b += 34) {
    const uint16_t h = FloatToFp16(0.05f / 127);
    bytes[b] = static_cast<uint8_t>(h & 0xff);
    bytes[b + 1] = static_cast<uint8_t>(h >> 8);
    for (size_t i = 2; i < 34; ++i) bytes[b + i] = static_cast<uint8_t>(rng.NextU64());
  }
  return bytes;
}

// The LoRA intermediates: rank-16 A [16 x 896] (Q8_0) times n float rows (dense_gemm).
void BM_LoraA(benchmark::State& state, const KernelTable* k, int64_t n_tokens) {
  const int64_t rows = 16, cols = 896;
  const std::vector<uint8_t> a = MakeQ8Rows(rows, cols);
  const WeightMatrix w{DType::kQ8_0, rows, cols, a.data(), static_cast<size_t>(cols / 32 * 34)};
  std::vector<float> x(static_cast<size_t>(n_tokens * cols), 0.5f),
      y(static_cast<size_t>(n_tokens * rows));
  std::vector<float> scratch(static_cast<size_t>(KernelTable::DenseGemmScratchFloats(cols)));
  for (auto _ : state) {
    k->dense_gemm(w, x.data(), cols, n_tokens, 0, rows, {y.data(), rows, Epilogue::kStore},
                  scratch.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GMAC/s"] = benchmark::Counter(static_cast<double>(rows * cols * n_tokens) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// The LoRA outputs: B stored transposed [16 x 2560] (Q8_0, an FFN gate+up width) times n rows of
// 16 intermediates added to n output rows (lora_expand).
void BM_LoraB(benchmark::State& state, const KernelTable* k, int64_t n_tokens) {
  const int64_t rank = 16, cols = 2560;
  const std::vector<uint8_t> b = MakeQ8Rows(rank, cols);
  const WeightMatrix bt{DType::kQ8_0, rank, cols, b.data(), static_cast<size_t>(cols / 32 * 34)};
  std::vector<float> m(static_cast<size_t>(n_tokens * rank), 0.25f),
      y(static_cast<size_t>(n_tokens * cols), 0.0f);
  for (auto _ : state) {
    k->lora_expand(bt, m.data(), rank, n_tokens, 0, cols, y.data(), cols, true);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GMAC/s"] = benchmark::Counter(static_cast<double>(rank * cols * n_tokens) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

void Register() {
  for (const KernelTable* k : AvailableKernelTables()) {
    if (k->name == "reference") continue;
    const std::string t(k->name);
    for (PackedCodes codes : {PackedCodes::kU4, PackedCodes::kU8}) {
      for (int32_t group : {32, 64}) {
        for (int64_t n : {1, 16, 128}) {
          const std::string name = "PackedGemm/" + t + "/" +
                                   (codes == PackedCodes::kU4 ? "u4" : "u8") + "/g" +
                                   std::to_string(group) + "/" + std::to_string(n);
          benchmark::RegisterBenchmark(name.c_str(), BM_PackedGemm, k, codes, group, n)
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
    for (int64_t n : {1, 2, 4, 5, 8, 9, 12, 16}) {
      const std::string name = "PackedGemmStream/" + t + "/u4/g64/" + std::to_string(n);
      benchmark::RegisterBenchmark(name.c_str(), BM_PackedGemmStream, k, n)
          ->Unit(benchmark::kMicrosecond);
    }
    if (k->prefill_gemm != nullptr) {
      for (int32_t block : {128, 448, 896}) {
        for (int64_t n : {128, 512}) {
          const std::string name =
              "PrefillGemm/" + t + "/u4g64/block" + std::to_string(block) + "/" + std::to_string(n);
          benchmark::RegisterBenchmark(name.c_str(), BM_PrefillGemm, k, block, n)
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
    for (int64_t n : {1, 64}) {
      benchmark::RegisterBenchmark(("LoraA/" + t + "/q8_0/" + std::to_string(n)).c_str(), BM_LoraA,
                                   k, n)
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(("LoraB/" + t + "/q8_0/" + std::to_string(n)).c_str(), BM_LoraB,
                                   k, n)
          ->Unit(benchmark::kMicrosecond);
    }
    for (int64_t pos : {128, 512}) {
      for (int64_t n : {1, 16}) {
        const std::string name =
            "Attention/" + t + "/" + std::to_string(pos) + "/" + std::to_string(n);
        benchmark::RegisterBenchmark(name.c_str(), BM_Attention, k, pos, n)
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace
}  // namespace pocket

int main(int argc, char** argv) {
  pocket::Register();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
