// The block drafter (DFlash) behind the Drafter interface: the model side (model/dflash.h) turns
// the target's hidden states of the committed tokens into its own context and drafts a whole
// block in one pass; this adapter feeds it what the verifier hands over (ObserveHidden for every
// token that enters the target's cache, cut back on rejection) and asks for a block per draft.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "generate/drafter.h"
#include "model/dflash.h"

namespace pocket {

class BlockDrafter final : public Drafter {
 public:
  // A drafter over `model` with a context of n_ctx positions, computing on `pool` (shared with
  // the target's session: they run in turn).
  static StatusOr<std::unique_ptr<BlockDrafter>> Create(std::shared_ptr<const DFlashDrafter> model,
                                                        int32_t n_ctx,
                                                        std::shared_ptr<ThreadPool> pool,
                                                        KvType kv_type = KvType::kF16);

  // The draft continues context.back() (the pending token); the hidden states of every earlier
  // context position must have been observed.
  Status Draft(std::span<const int32_t> context, int32_t max_tokens,
               std::vector<int32_t>* draft) override;
  std::span<const int32_t> target_layers() const override { return model_->target_layer_ids(); }
  Status ObserveHidden(int32_t pos, int32_t n, const float* hidden, size_t layer_stride) override;
  int32_t n_observed() const override { return state_.context_length(); }

  const DFlashDrafter& model() const { return *model_; }

 private:
  BlockDrafter(std::shared_ptr<const DFlashDrafter> model, std::shared_ptr<ThreadPool> pool,
               DFlashState state)
      : model_(std::move(model)), pool_(std::move(pool)), state_(std::move(state)) {}

  std::shared_ptr<const DFlashDrafter> model_;
  std::shared_ptr<ThreadPool> pool_;
  DFlashState state_;
};

}  // namespace pocket
