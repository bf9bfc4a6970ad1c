#include "runtime/block_drafter.h"

#include "runtime/session.h"

namespace pocket {

StatusOr<std::unique_ptr<BlockDrafter>> BlockDrafter::Create(
    std::shared_ptr<const DFlashDrafter> model, int32_t n_ctx, std::shared_ptr<ThreadPool> pool,
    KvType kv_type) {
  if (!model) return InvalidArgumentError("no block drafter");
  if (pool == nullptr) {
    POCKET_ASSIGN_OR_RETURN(pool, MakeThreadPool(0));
  }
  POCKET_ASSIGN_OR_RETURN(DFlashState state,
                          DFlashState::Create(model, n_ctx, pool.get(), kv_type));
  return std::unique_ptr<BlockDrafter>(
      new BlockDrafter(std::move(model), std::move(pool), std::move(state)));
}

Status BlockDrafter::Draft(std::span<const int32_t> context, int32_t max_tokens,
                           std::vector<int32_t>* draft) {
  draft->clear();
  if (context.empty() || max_tokens <= 0) return Status::Ok();
  const size_t held = static_cast<size_t>(state_.context_length());
  if (held != context.size() - 1) {
    return FailedPreconditionError("the block drafter holds the hidden states of ", held,
                                   " positions; a draft after ", context.size(),
                                   " tokens needs those of ", context.size() - 1);
  }
  // Past the drafter's context there is nothing to propose (plain decoding goes on).
  if (held + static_cast<size_t>(model_->block_size()) > static_cast<size_t>(state_.n_ctx())) {
    return Status::Ok();
  }
  return state_.DraftBlock(context.back(), max_tokens, draft);
}

Status BlockDrafter::ObserveHidden(int32_t pos, int32_t n, const float* hidden,
                                   size_t layer_stride) {
  if (pos + n > state_.n_ctx()) {
    // The target's context outgrew the drafter's: keep what fits; drafting stops there.
    n = std::max(0, state_.n_ctx() - pos);
    if (pos > state_.n_ctx()) return Status::Ok();
  }
  return state_.AppendContext(pos, n, hidden, static_cast<int64_t>(layer_stride));
}

}  // namespace pocket
