#!/bin/bash
# Reproduces the kernels table of docs/benchmarks.md: the pocket-0.3b and qwen3-0.6b presets
# (synthetic weights, seed 1, the real Qwen3 tokenizer) at Q4_0, Q4_1, Q8_0 (GGUF) and as the INT4
# g64 package, pp512 / tg128 on 1 and 2 threads, plus the INT4 package with --no-amx, and the
# INT4 package and Q4_0 GGUF with --no-huge-pages.
# Models are made once into cache/models; results go to cache/bench/*.jsonl (one JSON object per
# (model, threads)) and a markdown table on stdout. Usage: scripts/bench_all.sh [repetitions]
set -euo pipefail
cd "$(dirname "$0")/.."
reps="${1:-5}"
pocket=build/bin/pocket
tokenizer=cache/tokenizer-qwen3/package/models/tokenizer.json
models=cache/models
out=cache/bench
[ -x "$pocket" ] || { echo "build first: cmake --preset release && cmake --build build" >&2; exit 1; }
[ -f "$tokenizer" ] || { echo "missing $tokenizer: run scripts/fetch_fixtures.sh" >&2; exit 1; }
mkdir -p "$models" "$out"
for preset in pocket-0.3b qwen3-0.6b; do
  for type in bf16 q4_0 q4_1 q8_0; do
    f="$models/$preset-$type.gguf"
    [ -f "$f" ] || "$pocket" make-model --preset "$preset" --type "$type" --tokenizer "$tokenizer" \
      --seed 1 -o "$f"
  done
  p="$models/$preset-int4.pocket"
  [ -f "$p" ] || "$pocket" convert "$models/$preset-bf16.gguf" -o "$p" --weights int4 --group 64
done
run() {  # name, model, extra flags
  echo "bench: $1" >&2
  "$pocket" bench -m "$2" -p 512 -n 128 -t 1,2 -r "$reps" --json "${@:3}" > "$out/$1.jsonl"
}
for preset in pocket-0.3b qwen3-0.6b; do
  run "$preset-int4" "$models/$preset-int4.pocket"
  for type in q4_0 q4_1 q8_0; do run "$preset-$type" "$models/$preset-$type.gguf"; done
done
run pocket-0.3b-int4-noamx "$models/pocket-0.3b-int4.pocket" --no-amx
run pocket-0.3b-int4-nohuge "$models/pocket-0.3b-int4.pocket" --no-huge-pages
run pocket-0.3b-q4_0-nohuge "$models/pocket-0.3b-q4_0.gguf" --no-huge-pages
python3 - "$out" <<'PY'
import glob, json, os, sys
print("| model | threads | pp512 t/s | tg128 t/s | stream GB/s | decode roofline "
      "| prefetched read GB/s (roofline) | peak RSS + MB | session MB | huge pages |")
print("|---|---|---|---|---|---|---|---|---|---|")
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.jsonl"))):
    for line in open(f):
        j = json.loads(line)
        print(f"| {os.path.basename(f)[:-6]} | {j['threads']} | {j['prefill_tokens_per_s']:.0f} "
              f"({j['prefill_tokens_per_s_min']:.0f}-{j['prefill_tokens_per_s_max']:.0f}) | "
              f"{j['decode_tokens_per_s']:.1f} ({j['decode_tokens_per_s_min']:.1f}-"
              f"{j['decode_tokens_per_s_max']:.1f}) | {j['memory_bandwidth_gbps']:.1f} | "
              f"{100 * j['decode_roofline_fraction']:.0f}% | "
              f"{j.get('memory_bandwidth_prefetched_gbps') or 0:.1f} "
              f"({100 * (j.get('decode_prefetched_roofline_fraction') or 0):.0f}%) | "
              f"{j['peak_rss_increase_bytes'] / 1e6:.1f} | {j.get('session_bytes', 0) / 1e6:.1f} | "
              f"{100 * j.get('huge_page_weight_fraction', -1):.0f}% |")
PY
