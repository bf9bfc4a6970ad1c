#!/bin/bash
# Reproduces the candidate-scoring figures of docs/benchmarks.md: 16 candidates scored in one
# forward pass against one pass per candidate (pocket score --compare), on the INT4 package that
# scripts/main.sh or scripts/bench_all.sh makes. Usage: scripts/score_bench.sh [model] [threads]
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-cache/models/pocket-0.3b-int4.pocket}"
threads="${2:-2}"
prompt="Review: the battery died after two days. Sentiment:"
labels=" very positive, somewhat positive, slightly positive, neutral overall, slightly negative,\
 somewhat negative, very negative, mixed feelings, not sure yet, strongly agree, strongly disagree,\
 mostly agree, mostly disagree, no opinion, needs more info, off topic"
phrases=" the battery life is short, the screen is too dim, it arrived broken and late, great value\
 for the price, the seller was very helpful, shipping took two weeks, works exactly as described,\
 the charger stopped working, sound quality is excellent, the case feels cheap, easy to set up and\
 use, it overheats when charging, the colors look washed out, customer service never replied,\
 better than my old phone, I would buy it again"
for set in labels phrases; do
  build/bin/pocket score -m "$model" -p "$prompt" --candidates "${!set}" --compare -r 5 \
    -t "$threads" --json 2>/dev/null | python3 -c "
import json, sys
j = json.load(sys.stdin)
n = sum(len(c['tokens']) for c in j['candidates'])
print(f'$set: {len(j[\"candidates\"])} candidates, {n} tokens: one pass {j[\"one_pass_ms\"]:.1f} ms, '
      f'one pass per candidate {j[\"separate_ms\"]:.1f} ms, {j[\"speedup\"]:.2f}x')"
done
