// The BPE merge loop, shared by byte-level BPE (merge by rank) and the llama2.c tokenizer (merge by
// score). It reproduces the merge order of Hugging Face tokenizers (lowest priority first, leftmost
// on ties): a linked list of symbols and a heap of candidate merges ordered by (priority,
// position), with stale candidates skipped when popped. O(n log n) in the number of symbols.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace pocket {

// A merge the lookup offers for an adjacent pair: lower `priority` merges first.
template <typename Priority>
struct MergeCandidate {
  Priority priority;
  int32_t id;  // the merged symbol
};

// Scratch buffers for MergeSymbols; reuse one per thread to avoid allocations.
template <typename Priority>
struct BpeScratch {
  struct Symbol {
    int32_t id;
    int32_t prev;  // index of the previous live symbol, or -1
    int32_t next;  // index of the next live symbol, or -1
    bool removed;  // merged into the symbol on its left
  };
  struct Entry {
    Priority priority;
    int32_t pos;
    int32_t id;
    int32_t left;  // the pair the candidate was made for
    int32_t right;
  };
  std::vector<Symbol> symbols;
  std::vector<Entry> heap;
};

// Merges the symbols in `ids` in place. `lookup(left, right, &candidate)` returns whether the pair
// can merge and, if so, fills the candidate.
template <typename Priority, typename Lookup>
void MergeSymbols(std::vector<int32_t>* ids, const Lookup& lookup, BpeScratch<Priority>* scratch) {
  using Entry = typename BpeScratch<Priority>::Entry;
  const auto n = static_cast<int32_t>(ids->size());
  if (n < 2) return;
  auto& symbols = scratch->symbols;
  auto& heap = scratch->heap;
  symbols.clear();
  heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    symbols.push_back({(*ids)[i], i - 1, i + 1 < n ? i + 1 : -1, false});
  }
  // The heap's top is the lowest priority, then the leftmost position.
  auto worse = [](const Entry& a, const Entry& b) {
    return a.priority != b.priority ? a.priority > b.priority : a.pos > b.pos;
  };
  MergeCandidate<Priority> candidate;
  for (int32_t i = 0; i + 1 < n; ++i) {
    if (lookup(symbols[i].id, symbols[i + 1].id, &candidate)) {
      heap.push_back({candidate.priority, i, candidate.id, symbols[i].id, symbols[i + 1].id});
    }
  }
  std::make_heap(heap.begin(), heap.end(), worse);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), worse);
    const Entry top = heap.back();
    heap.pop_back();
    auto& current = symbols[top.pos];
    if (current.removed || current.next < 0) continue;
    const int32_t next_pos = current.next;
    // Skip stale entries: the pair at this position must still merge into the same symbol (as in
    // HF; an unchanged pair trivially does, without a lookup).
    const bool unchanged = current.id == top.left && symbols[next_pos].id == top.right;
    if (!unchanged &&
        (!lookup(current.id, symbols[next_pos].id, &candidate) || candidate.id != top.id)) {
      continue;
    }
    current.id = top.id;
    current.next = symbols[next_pos].next;
    symbols[next_pos].removed = true;
    if (current.next >= 0) symbols[current.next].prev = top.pos;
    if (current.prev >= 0 && lookup(symbols[current.prev].id, current.id, &candidate)) {
      heap.push_back(
          {candidate.priority, current.prev, candidate.id, symbols[current.prev].id, current.id});
      std::push_heap(heap.begin(), heap.end(), worse);
    }
    if (current.next >= 0 && lookup(current.id, symbols[current.next].id, &candidate)) {
      heap.push_back(
          {candidate.priority, top.pos, candidate.id, current.id, symbols[current.next].id});
      std::push_heap(heap.begin(), heap.end(), worse);
    }
  }
  ids->clear();
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids->push_back(symbols[i].id);
}

}  // namespace pocket
