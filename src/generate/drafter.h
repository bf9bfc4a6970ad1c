// Drafters for speculative decoding: cheap guesses of the next few tokens, which the target model
// then verifies in one forward pass (runtime/speculative.h). A drafter never changes the output:
// verification keeps a drafted token only where the target's own sampler chain picks it, so a bad
// drafter costs speed, never correctness.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace pocket {

// The most branches a draft tree has (a verification pass has a few more rows than a chain's).
inline constexpr int32_t kMaxDraftBranches = 8;

// A node of a draft tree: a token and its parent (the index of an earlier node, or -1 for a child
// of the root, the context's last token).
struct DraftNode {
  int32_t token = 0;
  int32_t parent = -1;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to max_tokens tokens that may follow `context` (the prompt and the output so far), written
  // to `draft` (cleared first; empty: no guess). Deterministic: the same context, the same draft.
  virtual Status Draft(std::span<const int32_t> context, int32_t max_tokens,
                       std::vector<int32_t>* draft) = 0;

  // Drafters that can propose several branches at once return true and implement DraftTree: up to
  // max_tokens nodes after `context`, each node's parent before it, siblings with different
  // tokens (cleared first; empty: no guess). Deterministic drafters only (the verifier follows the
  // child equal to the target's choice, so the longest path the target agrees with wins).
  virtual bool branching() const { return false; }
  virtual Status DraftTree(std::span<const int32_t> /*context*/, int32_t /*max_tokens*/,
                           std::vector<DraftNode>* tree) {
    tree->clear();
    return Status::Ok();
  }

  // Drafters that sample from a distribution q (a draft model at a temperature above 0) return
  // true; the verifier then accepts draft[i] with probability min(1, p/q) and needs q:
  // draft_probs() after a Draft holds [draft.size(), vocab] probabilities, row i the q that
  // draft[i] was sampled from. Deterministic drafters (the default) return false and are verified
  // by equality with the target's own choice.
  virtual bool sampled() const { return false; }
  virtual std::span<const float> draft_probs() const { return {}; }

  // Block drafters condition on the target's hidden states: the layers (0-based; the residual
  // stream after each) they read, empty for none. The verifier then hands over, for every token
  // that enters the target's KV cache (prompt rows and accepted rows, in order), the outputs of
  // those layers: ObserveHidden(pos, n, hidden, layer_stride) covers context positions
  // [pos, pos + n), the value of layer j (an index into target_layers()) for position pos + i at
  // hidden[j * layer_stride + i * d_model + c]. A pos below what the drafter holds means the
  // context was cut back there (rows from pos on are replaced). Before Draft(context, ...) the
  // drafter has seen positions [0, context.size() - 1): the last context token is the one the
  // draft continues, not yet evaluated by the target.
  virtual std::span<const int32_t> target_layers() const { return {}; }
  virtual Status ObserveHidden(int32_t /*pos*/, int32_t /*n*/, const float* /*hidden*/,
                               size_t /*layer_stride*/) {
    return Status::Ok();
  }
  // How many context positions the drafter holds hidden states for (a session that kept its
  // context hands over only the rows after min(this, what it handed this drafter)).
  virtual int32_t n_observed() const { return 0; }
};

// Prompt lookup (n-gram matching): finds the most recent earlier occurrence of the context's last
// n tokens (n from max_ngram down to min_ngram) and proposes the tokens that followed it. Pays off
// where the output copies from the input (extraction, editing, repetition). Allocates nothing.
//
// With max_branches > 1 it drafts a tree: the continuations of up to max_branches matches (longest
// n-gram first, then the most recent) whose first tokens differ, each a branch from the root; when
// there are several, the most recent match's branch gets about half the nodes and the others
// share the rest.
struct PromptLookupOptions {
  int32_t min_ngram = 2;
  int32_t max_ngram = 4;
  int32_t max_branches = 1;
  Status Validate() const;
};

class PromptLookupDrafter final : public Drafter {
 public:
  explicit PromptLookupDrafter(const PromptLookupOptions& options = {}) : options_(options) {}
  Status Draft(std::span<const int32_t> context, int32_t max_tokens,
               std::vector<int32_t>* draft) override;
  bool branching() const override { return options_.max_branches > 1; }
  Status DraftTree(std::span<const int32_t> context, int32_t max_tokens,
                   std::vector<DraftNode>* tree) override;

 private:
  PromptLookupOptions options_;
};

}  // namespace pocket
