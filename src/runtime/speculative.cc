// Speculative decoding: a driver of the token steps (token_step.h) that verifies drafted tokens.
//
// A pending token p (chosen, accepted, not yet in the KV cache) and a draft d1..dk go through the
// target in ONE forward pass, [p, d1..dk] with logits for every row. Row i's logits are those
// plain decoding would see after p, d1..di, so the steps run on them in order: Choose picks t_i
// with the target's own sampler chain (its constraint mask and RNG), Accept takes it; while t_i
// equals d_{i+1}, that token is already in the cache and the next row follows; at the first
// difference t_i becomes the next pending token and the KV rows after p, d1..di are dropped (the
// history is truncated: constant time). With a deterministic drafter the emitted tokens are
// exactly plain decoding's, greedy and sampled alike. A sampled drafter (a draft model drawing
// d_i from q) is verified by the rule min(1, p/q) with a residual draw on rejection
// (Sampler::SampleDraft): the tokens then have plain decoding's distribution, not its exact
// random stream.
//
// Drafts are cut before verification where the constraint would not allow them (and after a stop
// token). A SpecPolicy (spec_policy.h) decides per step whether to verify and how much to draft:
// fixed (every draft of at least draft_min tokens, up to draft_max) or, with spec_auto, from the
// measured verification cost and the running acceptance; steps it does not speculate are plain
// decode steps, whose drafts (when cheap) are still checked against the decoded tokens.
#include <algorithm>

#include "base/timer.h"
#include "model/project.h"
#include "runtime/session.h"
#include "runtime/spec_policy.h"
#include "runtime/token_step.h"

namespace pocket {
namespace {

// The largest draft tree verified (a branch's path and rows must fit the forward's gathered tail:
// model/forward.h, kTreeTailPositions).
constexpr int32_t kMaxTreeNodes = 32;

// Every node's parent is the node before it (a single branch).
bool IsChain(std::span<const DraftNode> tree) {
  for (size_t i = 0; i < tree.size(); ++i) {
    if (tree[i].parent != static_cast<int32_t>(i) - 1) return false;
  }
  return true;
}

}  // namespace

// Drops the nodes the constraint would not allow after their path (and after a stop token), with
// their descendants; malformed trees (a parent not before its child) are cut at the first bad node.
Status Session::PruneTree(TokenStep& step, std::vector<DraftNode>* tree) {
  std::vector<DraftNode>& t = *tree;
  int32_t remap[kMaxTreeNodes];  // old index -> new index (-1: dropped)
  size_t n = std::min(t.size(), static_cast<size_t>(kMaxTreeNodes));
  for (size_t i = 0; i < n; ++i) {
    if (t[i].parent < -1 || t[i].parent >= static_cast<int32_t>(i)) n = i;
  }
  t.resize(n);
  size_t out = 0;
  for (size_t i = 0; i < n;) {
    // A branch: nodes i.. while each one's parent is the node before.
    size_t end = i + 1;
    while (end < n && t[end].parent == static_cast<int32_t>(end) - 1) ++end;
    const int32_t parent = t[i].parent;
    size_t legal = 0;
    if (parent < 0 || remap[parent] >= 0) {
      spec_path_.clear();
      for (int32_t a = parent; a >= 0; a = t[static_cast<size_t>(a)].parent)
        spec_path_.push_back(t[static_cast<size_t>(a)].token);
      std::reverse(spec_path_.begin(), spec_path_.end());
      const size_t depth = spec_path_.size();
      for (size_t j = i; j < end; ++j) spec_path_.push_back(t[j].token);
      POCKET_ASSIGN_OR_RETURN(const size_t ok, step.LegalPrefix(spec_path_));
      legal = ok > depth ? ok - depth : 0;
    }
    for (size_t j = i; j < end; ++j) {
      if (j - i < legal) {
        const int32_t p = t[j].parent;
        remap[j] = static_cast<int32_t>(out);
        t[out++] = {t[j].token, p < 0 ? -1 : remap[p]};
      } else {
        remap[j] = -1;
      }
    }
    i = end;
  }
  t.resize(out);
  return Status::Ok();
}

Status Session::DecodeSpeculative(TokenStep& step, const GenerateOptions& options,
                                  GenerateResult* result) {
  if (options.draft_max < 1) return InvalidArgumentError("draft_max must be at least 1");
  if (options.draft_min < 1 || options.draft_min > options.draft_max) {
    return InvalidArgumentError("draft_min must be between 1 and draft_max (", options.draft_max,
                                "), got ", options.draft_min);
  }
  Drafter& drafter = *options.drafter;
  const bool sampled = drafter.sampled();
  Drafter* observer = drafter.target_layers().empty() ? nullptr : &drafter;
  const int32_t vocab = model_->config().vocab_size;
  const size_t d_model = static_cast<size_t>(model_->config().d_model);
  const size_t n_ctx = static_cast<size_t>(kv_.n_ctx());
  // A verify pass (draft + 1 rows, one causal segment) stays below the tile form's threshold:
  // from kTileFormMinRows rows a table with a tile engine computes the segment in the tile form,
  // a different rounding from plain decoding's one row, and speculation must give plain
  // decoding's tokens on every table.
  const int32_t draft_max = std::min({options.draft_max, n_batch_ - 1, kTileFormMinRows - 2});
  if (draft_max < 1) return Status::Ok();  // (a batch of one row: nothing to verify with)
  const int32_t draft_min = std::min(options.draft_min, draft_max);
  spec_context_.reserve(n_ctx + 1);
  spec_rows_.reserve(static_cast<size_t>(draft_max) + 1);
  spec_logits_.resize(static_cast<size_t>(draft_max + 1) * static_cast<size_t>(vocab));
  if (observer != nullptr) {
    spec_hidden_.resize(
        std::max(spec_hidden_.size(),
                 observer->target_layers().size() * static_cast<size_t>(draft_max + 1) * d_model));
  }
  std::vector<int32_t>& draft = spec_draft_;
  draft.reserve(static_cast<size_t>(draft_max));
  std::vector<int32_t>& shadow = spec_shadow_;
  shadow.reserve(static_cast<size_t>(draft_max));
  shadow.clear();
  size_t shadow_pos = 0;  // the history slot of shadow[0]
  int32_t shadow_matched = 0;
  SpecPolicy policy(draft_max, draft_min, options.spec_auto, options.spec_guard);
  // Draft trees: deterministic branching drafters without hidden states (the tree's rows are
  // verified in one pass, each branch continuing its ancestors' slots: model/forward.h).
  const bool tree_mode = drafter.branching() && !sampled && observer == nullptr;
  const int32_t tree_max = std::min(draft_max, kMaxTreeNodes);
  if (tree_mode) {
    spec_tree_.reserve(static_cast<size_t>(tree_max));
    spec_path_.reserve(static_cast<size_t>(tree_max) + 1);
    spec_segments_.reserve(static_cast<size_t>(tree_max) + 1);
    spec_slots_.reserve(static_cast<size_t>(tree_max) * static_cast<size_t>(tree_max + 1));
    spec_moved_.reserve(static_cast<size_t>(tree_max));
  }
  std::vector<DraftNode>& tree = spec_tree_;
  tree.clear();

  int32_t emitted = 0;
  // Takes a chosen token through Accept and the stop checks: the token, or -1 when generation
  // stops. `history_size` is the history the token's logits follow (its own slot).
  auto take = [&](int32_t token, size_t history_size) -> StatusOr<int32_t> {
    if (token < 0) return -1;
    POCKET_ASSIGN_OR_RETURN(const bool go_on, step.Accept(token));
    if (!go_on) return -1;
    ++emitted;
    // A shadow draft is checked against each decoded token in its range.
    if (!shadow.empty() && history_size >= shadow_pos) {
      const size_t j = history_size - shadow_pos;
      const int32_t n = static_cast<int32_t>(shadow.size());
      if (j < shadow.size() && shadow[j] == token) {
        if (++shadow_matched == n) {
          policy.OnShadow(n, n);
          shadow.clear();
        }
      } else {
        policy.OnShadow(n, shadow_matched);
        shadow.clear();
      }
    }
    if (history_size >= n_ctx) {
      result->stop_reason = StopReason::kContextFull;
      return -1;
    }
    // The last token of the budget needs no forward pass: nothing samples from its logits.
    if (emitted == options.max_tokens) return -1;
    return token;
  };
  auto choose = [&](std::span<const float> logits, size_t history_size) -> StatusOr<int32_t> {
    if (cancelled()) {
      result->stop_reason = StopReason::kCancelled;
      return -1;
    }
    POCKET_ASSIGN_OR_RETURN(
        const int32_t token,
        step.Choose(logits, std::span<const int32_t>(history_.data(), history_size)));
    return take(token, history_size);
  };
  auto cancelled_status = [&](const Status& s) {
    if (s.code() != StatusCode::kCancelled) return false;
    result->stop_reason = StopReason::kCancelled;
    return true;
  };
  if (options.max_tokens == 0) return Status::Ok();
  POCKET_ASSIGN_OR_RETURN(int32_t pending, choose(logits_, history_.size()));
  while (pending >= 0) {
    const size_t base = history_.size();  // the pending token's slot
    // Draft after the context the pending token completes, within the budget (k drafted tokens
    // can emit k + 1), the context and the prefill chunk.
    const int32_t room =
        static_cast<int32_t>(std::min<size_t>(n_ctx - base - 1, static_cast<size_t>(draft_max)));
    const int32_t k_cap = std::min(room, options.max_tokens - emitted - 1);
    const int32_t k = std::min(policy.DraftLength(), k_cap);
    const bool guarded_step = k_cap > 0 && policy.rarely_right();
    draft.clear();
    const bool verify_wanted = k >= draft_min;
    if (verify_wanted || (k_cap > 0 && shadow.empty() && policy.ShadowDraft())) {
      spec_context_.assign(history_.begin(), history_.end());
      spec_context_.push_back(pending);
      const int32_t ask = verify_wanted ? k : policy.ShadowLength(k_cap);
      const Stopwatch draft_watch;
      tree.clear();
      if (verify_wanted && tree_mode) {
        POCKET_RETURN_IF_ERROR(drafter.DraftTree(spec_context_, std::min(ask, tree_max), &tree));
        if (static_cast<int32_t>(tree.size()) > ask) tree.clear();  // (a drafter's error)
        POCKET_RETURN_IF_ERROR(PruneTree(step, &tree));
        if (IsChain(tree)) {  // one branch: verified as a plain draft
          for (const DraftNode& node : tree) draft.push_back(node.token);
          tree.clear();
        }
      } else {
        POCKET_RETURN_IF_ERROR(drafter.Draft(spec_context_, ask, &draft));
      }
      const int64_t draft_us = draft_watch.elapsed_us();
      result->draft_us += draft_us;
      policy.OnDraft(ask, static_cast<double>(draft_us));
      if (static_cast<int32_t>(draft.size()) > ask) draft.resize(static_cast<size_t>(ask));
      if (!verify_wanted) {
        // Not verified: checked against what plain decoding produces instead.
        shadow.assign(draft.begin(), draft.end());
        shadow_pos = base + 1;
        shadow_matched = 0;
        draft.clear();
      } else if (tree.empty()) {
        POCKET_ASSIGN_OR_RETURN(const size_t legal, step.LegalPrefix(draft));
        draft.resize(legal);
      }
    }
    if (static_cast<int32_t>(tree.size()) >= draft_min && !tree.empty()) {
      if (!shadow.empty()) {
        policy.OnShadow(shadow_matched, shadow_matched);
        shadow.clear();
      }
      if (cancelled()) {
        result->stop_reason = StopReason::kCancelled;
        return Status::Ok();
      }
      // Rows [pending, nodes...]: the first branch (pending and the nodes that follow it in a
      // chain) in one segment, every other branch in a segment continuing its ancestors' slots.
      spec_rows_.assign(1, pending);
      for (const DraftNode& node : tree) spec_rows_.push_back(node.token);
      spec_segments_.clear();
      spec_slots_.clear();
      const int32_t n_rows = static_cast<int32_t>(spec_rows_.size());
      for (int32_t row = 0; row < n_rows;) {
        int32_t end = row + 1;  // the branch runs while each node's parent is the node before
        while (end < n_rows && tree[static_cast<size_t>(end - 1)].parent == end - 2) ++end;
        BatchSegment seg{&kv_, row, end, static_cast<int32_t>(base) + row};
        seg.adapters = &adapters_;
        if (row > 0) {
          // The ancestors' slots, from the pending token down to the branch's parent.
          const size_t first = spec_slots_.size();
          for (int32_t a = tree[static_cast<size_t>(row - 1)].parent; a >= 0;
               a = tree[static_cast<size_t>(a)].parent) {
            spec_slots_.push_back(static_cast<int32_t>(base) + 1 + a);
          }
          spec_slots_.push_back(static_cast<int32_t>(base));
          std::reverse(spec_slots_.begin() + static_cast<std::ptrdiff_t>(first), spec_slots_.end());
          seg.path_from = static_cast<int32_t>(base);
          seg.path = std::span<const int32_t>(spec_slots_).subspan(first);
        }
        spec_segments_.push_back(seg);
        row = end;
      }
      const Stopwatch watch;
      POCKET_RETURN_IF_ERROR(EvaluateTree(spec_rows_, spec_segments_, spec_logits_.data()));
      const double verify_us = static_cast<double>(watch.elapsed_us());
      ++result->n_verify_passes;
      ++result->n_tree_passes;
      result->n_drafted += static_cast<int32_t>(tree.size());
      // Walk from the root: the target chooses at each node (its row's logits follow the node's
      // path), and the walk moves to the child with that token while there is one.
      history_.push_back(pending);
      spec_moved_.clear();
      int32_t node = -1, accepted = 0, next = -1;
      bool rejected = false;
      for (;;) {
        const std::span<const float> row(
            spec_logits_.data() + static_cast<size_t>(node + 1) * static_cast<size_t>(vocab),
            static_cast<size_t>(vocab));
        POCKET_ASSIGN_OR_RETURN(const int32_t token, choose(row, history_.size()));
        if (token < 0) break;
        int32_t child = -1;
        bool has_children = false;
        for (int32_t c = node + 1; c < static_cast<int32_t>(tree.size()); ++c) {
          if (tree[static_cast<size_t>(c)].parent != node) continue;
          has_children = true;
          if (tree[static_cast<size_t>(c)].token == token) {
            child = c;
            break;
          }
        }
        if (child < 0) {
          rejected = has_children;
          next = token;
          break;
        }
        history_.push_back(token);
        spec_moved_.push_back(static_cast<int32_t>(base) + 1 + child);
        node = child;
        ++accepted;
      }
      // The accepted path's rows follow the pending token's slot (a no-op on the first branch).
      kv_.MoveSlots(spec_moved_, static_cast<int32_t>(base) + 1);
      const size_t kept = history_.size();
      result->n_draft_accepted += accepted;
      policy.OnVerify(static_cast<int32_t>(tree.size()), accepted, rejected, verify_us);
      if (options.record_spec_steps) {
        draft.clear();
        for (const DraftNode& n : tree) draft.push_back(n.token);
        result->spec_steps.push_back({draft, accepted});
      }
      Truncate(kept);
      std::copy_n(spec_logits_.data() + static_cast<size_t>(node + 1) * static_cast<size_t>(vocab),
                  vocab, logits_.data());
      logits_at_ = kept;
      pending = next;
      continue;
    }
    if (static_cast<int32_t>(draft.size()) < draft_min || draft.empty()) {
      // A plain decode step.
      const Stopwatch watch;
      const Status s =
          AppendObserved(std::span<const int32_t>(&pending, 1), nullptr, nullptr, observer);
      if (cancelled_status(s)) return Status::Ok();
      POCKET_RETURN_IF_ERROR(s);
      policy.OnPlainStep(static_cast<double>(watch.elapsed_us()));
      ++result->n_plain_steps;
      if (guarded_step) ++result->n_guarded_steps;
      POCKET_ASSIGN_OR_RETURN(pending, choose(logits_, history_.size()));
      continue;
    }
    // A verification pass over [pending, d1..dk].
    if (!shadow.empty()) {
      policy.OnShadow(shadow_matched, shadow_matched);  // cut short: what matched so far
      shadow.clear();
    }
    spec_rows_.assign(1, pending);
    spec_rows_.insert(spec_rows_.end(), draft.begin(), draft.end());
    const int32_t n_rows = static_cast<int32_t>(spec_rows_.size());
    if (cancelled()) {
      result->stop_reason = StopReason::kCancelled;
      return Status::Ok();
    }
    const Stopwatch watch;
    if (observer != nullptr) {
      POCKET_RETURN_IF_ERROR(
          EvaluateObserved(spec_rows_, scratch_.rows(0, n_rows), spec_logits_.data(), *observer));
    } else {
      POCKET_RETURN_IF_ERROR(
          Evaluate(spec_rows_, scratch_.rows(0, n_rows), spec_logits_.data(), nullptr));
    }
    const double verify_us = static_cast<double>(watch.elapsed_us());
    history_.insert(history_.end(), spec_rows_.begin(), spec_rows_.end());
    ++result->n_verify_passes;
    result->n_drafted += static_cast<int32_t>(draft.size());
    const std::span<const float> q = sampled ? drafter.draft_probs() : std::span<const float>();
    // Rows in order; row i's logits follow p, d1..di (history of base + 1 + i tokens).
    int32_t next = -1;
    int32_t accepted = 0;
    size_t kept = base + 1;
    for (size_t i = 0; i < spec_rows_.size(); ++i) {
      kept = base + 1 + i;
      const std::span<const float> row(spec_logits_.data() + i * static_cast<size_t>(vocab),
                                       static_cast<size_t>(vocab));
      int32_t token = -1;
      if (sampled && i < draft.size() && q.size() >= (i + 1) * static_cast<size_t>(vocab)) {
        if (cancelled()) {
          result->stop_reason = StopReason::kCancelled;
          break;
        }
        POCKET_ASSIGN_OR_RETURN(
            const int32_t chosen,
            step.ChooseDraft(
                row, std::span<const int32_t>(history_.data(), kept), draft[i],
                q.subspan(i * static_cast<size_t>(vocab), static_cast<size_t>(vocab))));
        POCKET_ASSIGN_OR_RETURN(token, take(chosen, kept));
      } else {
        POCKET_ASSIGN_OR_RETURN(token, choose(row, kept));
      }
      if (token < 0) break;
      if (i < draft.size() && token == draft[i]) {
        ++accepted;
        continue;  // already in the cache: the next row follows it
      }
      next = token;
      break;
    }
    result->n_draft_accepted += accepted;
    policy.OnVerify(static_cast<int32_t>(draft.size()), accepted, verify_us);
    if (options.record_spec_steps) result->spec_steps.push_back({draft, accepted});
    // Drop the KV rows of rejected drafts; the logits at hand are those after the kept history.
    Truncate(kept);
    if (observer != nullptr) {
      POCKET_RETURN_IF_ERROR(
          observer->ObserveHidden(static_cast<int32_t>(base), static_cast<int32_t>(kept - base),
                                  spec_hidden_.data(), static_cast<size_t>(n_rows) * d_model));
      hidden_drafter_ = observer;
      hidden_synced_ = kept;
    }
    const size_t row = kept - base - 1;
    std::copy_n(spec_logits_.data() + row * static_cast<size_t>(vocab), vocab, logits_.data());
    logits_at_ = kept;
    pending = next;
  }
  return Status::Ok();
}

}  // namespace pocket
