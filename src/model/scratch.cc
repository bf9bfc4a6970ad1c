#include "model/scratch.h"

#include <algorithm>
#include <new>
#include <numeric>
#include <string>

namespace pocket {
namespace {
size_t Aligned(size_t bytes) {
  return (bytes + 63) / 64 * 64;
}
}  // namespace

void ScratchPlan::Add(std::string_view name, size_t bytes, void** out) {
  placed_.push_back({{name, bytes, out}, size_});
  size_ += Aligned(bytes);
}

void ScratchPlan::Overlay(std::initializer_list<Region> first,
                          std::initializer_list<Region> second) {
  const size_t start = size_;
  size_t end = start;
  for (const std::initializer_list<Region>& group : {first, second}) {
    size_t offset = start;
    for (const Region& r : group) {
      placed_.push_back({r, offset});
      offset += Aligned(r.bytes);
    }
    end = std::max(end, offset);
  }
  size_ = end;
}

StatusOr<std::unique_ptr<uint8_t[]>> ScratchPlan::Allocate(size_t* total_bytes) {
  std::unique_ptr<uint8_t[]> buffer(new (std::nothrow) uint8_t[size_ + 64]);
  if (!buffer) {
    std::string regions;
    for (const Placed& p : placed_) {
      if (p.region.bytes == 0) continue;
      if (!regions.empty()) regions += ", ";
      regions += std::string(p.region.name) + " " + HumanBytes(p.region.bytes);
    }
    return ResourceExhaustedError("cannot allocate forward scratch (", HumanBytes(size_), ": ",
                                  regions, ")");
  }
  uint8_t* base = buffer.get();
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  for (const Placed& p : placed_) {
    *p.region.out = p.region.bytes == 0 ? nullptr : base + p.offset;
  }
  *total_bytes = size_;
  return buffer;
}

StatusOr<ForwardScratch> ForwardScratch::Create(const Model& model, int32_t max_batch,
                                                int32_t n_threads) {
  const ModelConfig& c = model.config();
  bool dense = !model.weights().output.packed;
  for (const LayerWeights& l : model.weights().layers) {
    dense |= !l.qkv.present() || !l.gate_up.present() || !l.wo.packed || !l.w_down.packed;
  }
  if (max_batch <= 0) return InvalidArgumentError("batch size must be positive, got ", max_batch);
  if (n_threads <= 0) return InvalidArgumentError("thread count must be positive, got ", n_threads);
  ForwardScratch s;
  s.max_batch_ = max_batch;
  s.n_threads_ = n_threads;
  const size_t b = static_cast<size_t>(max_batch), f = sizeof(float);
  const size_t d = static_cast<size_t>(c.d_model), qd = static_cast<size_t>(c.q_dim()),
               kvd = static_cast<size_t>(c.kv_dim()), ff = static_cast<size_t>(c.d_ff),
               half = static_cast<size_t>(c.head_dim / 2);
  const size_t max_cols = std::max({d, qd, ff});
  s.per_thread_floats = static_cast<int64_t>(std::max<size_t>(
      static_cast<size_t>(KernelTable::DenseGemmScratchFloats(static_cast<int64_t>(max_cols))),
      static_cast<size_t>(AttentionScratchFloats(c.gqa_group(), c.head_dim))));
  s.per_thread_floats = (s.per_thread_floats + 15) / 16 * 16;

  ScratchPlan plan;
  auto at = [](auto** p) { return reinterpret_cast<void**>(p); };
  plan.Add("residual", b * d * f, at(&s.x));
  plan.Add("normalized input", dense ? b * std::max(d, qd) * f : 0, at(&s.xn));
  // The attention block's q|k|v and output are dead once its output matrix has run; the
  // feed-forward block's gate and up start after that.
  plan.Overlay(
      {{"qkv", b * (qd + 2 * kvd) * f, at(&s.qkv)}, {"attention out", b * qd * f, at(&s.attn)}},
      {{"gate", b * ff * f, at(&s.gate)}, {"up", dense ? b * ff * f : 0, at(&s.up)}});
  plan.Add("int8 activations", b * max_cols, at(&s.quant.q));
  plan.Add("activation scales", b * (max_cols / 32) * f, at(&s.quant.scale));
  plan.Add("activation sums", b * (max_cols / 32) * f, at(&s.quant.sum));
  plan.Add("rope cos", b * half * f, at(&s.rope_cos));
  plan.Add("rope sin", b * half * f, at(&s.rope_sin));
  plan.Add("per-thread",
           static_cast<size_t>(n_threads) * static_cast<size_t>(s.per_thread_floats) * f,
           at(&s.thread_scratch));
  // f32 elements (the widest KV type), K and V, then the scales.
  s.tree_tail_bytes = static_cast<size_t>(kTreeTailBlocks) * kKvBlockPositions *
                      (2 * static_cast<size_t>(c.head_dim) * sizeof(float) + 2 * sizeof(float));
  s.tree_tail_bytes = (s.tree_tail_bytes + 63) / 64 * 64;
  plan.Add("tree tails", static_cast<size_t>(n_threads) * s.tree_tail_bytes, at(&s.tree_tail));
  POCKET_ASSIGN_OR_RETURN(s.buffer_, plan.Allocate(&s.bytes_));
  s.row_ids_.resize(b);
  std::iota(s.row_ids_.begin(), s.row_ids_.end(), 0);
  s.runs.reserve(b);
  s.task_begin.reserve(b + 1);
  s.row_adapters.resize(b, nullptr);
  return s;
}

Status ForwardScratch::ReserveAdapters(const Model& model, int64_t mid_floats) {
  if (mid_floats <= lora_mid_floats) return Status::Ok();
  const ModelConfig& c = model.config();
  const int64_t max_cols = std::max({int64_t{c.d_model}, c.q_dim(), int64_t{c.d_ff}});
  const int64_t width =
      std::max({c.q_dim() + 2 * c.kv_dim(), 2 * int64_t{c.d_ff}, c.q_dim(), int64_t{c.d_model}});
  // dense scratch, one input row
  const int64_t dense = KernelTable::DenseGemmScratchFloats(max_cols);
  const int64_t per_thread = (dense + max_cols + 15) / 16 * 16;
  const int64_t delta = int64_t{kLoraChunkRows} * width;
  const int64_t xn = int64_t{kLoraChunkRows} * max_cols;
  // Intermediates of every row of a pass: a prefill computes them for all its rows in one region.
  const int64_t mid = (int64_t{std::max(max_batch_, kLoraChunkRows)} * mid_floats + 15) / 16 * 16;
  const int64_t total = delta + xn + mid + n_threads_ * per_thread;
  std::unique_ptr<float[]> buffer(new (std::nothrow) float[static_cast<size_t>(total)]);
  if (buffer == nullptr) {
    return ResourceExhaustedError("cannot allocate ", total * 4, " bytes for adapter buffers");
  }
  lora_buffer_ = std::move(buffer);
  lora_bytes_ = static_cast<size_t>(total) * sizeof(float);
  lora_delta = lora_buffer_.get();
  lora_width = width;
  lora_xn = lora_delta + delta;
  lora_mid = lora_xn + xn;
  lora_thread = lora_mid + mid;
  lora_thread_floats = per_thread;
  lora_mid_floats = mid_floats;
  lora_cols = max_cols;
  lora_dense_floats = dense;
  return Status::Ok();
}

}  // namespace pocket
