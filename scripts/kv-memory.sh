#!/usr/bin/env bash
# The KV memory scenario of issue 15: N sessions (default 8) of up to CONTEXT tokens (default
# 2,048: a 1,536-token prompt + 512 generated) whose prompts share a 1,000-token prefix, on one
# engine, first without a KV budget, then under half the KV bytes that run held. Checks:
#   - without a budget the sessions hold at most the KV bytes of the distinct tokens + one page
#     (64 positions) per session (the prefix's pages are shared, not copied);
#   - under half of that every session completes (saved to disk and restored) with the same tokens,
#     the KV held never exceeds the budget, and the process's peak RSS stays under
#     file + budget + 30 MB.
# Each run is its own process (peak RSS is per process). Prints both JSON rows and a verdict;
# exits 1 if a check fails. KV_MEMORY_NO_RSS=1 skips the RSS check (a sanitizer build, whose shadow
# memory dwarfs the figures).
#
#   scripts/kv-memory.sh [MODEL] [extra pocket bench options, e.g. -t 2 --memory 8]
# Defaults: the pocket-0.3b INT4 package of scripts/main.sh, -t 2 -p 1536 -n 512 -b 128
# --prefix-tokens 1000 --memory 8 (options given later override them).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
pocket="${POCKET_BIN:-$root/build/bin/pocket}"
model="${1:-${POCKET_CACHE_DIR:-$root/cache}/models/pocket-0.3b-int4.pocket}"
shift || true
[[ -x "$pocket" ]] || { echo "kv-memory: $pocket is missing (build first)" >&2; exit 2; }
[[ -f "$model" ]] || { echo "kv-memory: $model is missing (scripts/main.sh makes it)" >&2; exit 2; }
args=(-t 2 -p 1536 -n 512 -b 128 --prefix-tokens 1000 --memory 8 "$@")
# The sessions are saved under build/ (a disk), not /tmp: on a tmpfs /tmp the saved sessions would
# stay in memory, uncounted by the process's RSS.
mkdir -p "$root/build"
tmp="$(mktemp -d "${KV_MEMORY_SWAP_DIR:-$root/build}/kv-memory.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "kv-memory: without a budget" >&2
"$pocket" bench -m "$model" "${args[@]}" --json > "$tmp/free.json"
budget="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["kv_bytes_peak"] // 2)' "$tmp/free.json")"
echo "kv-memory: under a KV budget of $budget bytes (half)" >&2
"$pocket" bench -m "$model" "${args[@]}" --kv-budget "$budget" --swap-dir "$tmp" --json \
  > "$tmp/budget.json"
cat "$tmp/free.json" "$tmp/budget.json"
KV_MEMORY_NO_RSS="${KV_MEMORY_NO_RSS:-}" python3 - "$tmp/free.json" "$tmp/budget.json" <<'PY'
import json, os, sys
free, cap = (json.load(open(p)) for p in sys.argv[1:3])
mb = 1e6
checks = [
    ("every session completes without a budget", free["completed"] == free["sessions"]),
    (f"KV held {free['kv_bytes_peak'] / mb:.1f} MB <= distinct tokens "
     f"{free['kv_bytes_tokens'] / mb:.1f} MB + one page per session "
     f"({free['sessions']} x {free['page_bytes'] / mb:.2f} MB)",
     free["kv_bytes_peak"] <= free["kv_bytes_tokens"] + free["sessions"] * free["page_bytes"]),
    (f"every session completes under the budget ({cap['swaps_out']} saved, "
     f"{cap['swaps_in']} restored)", cap["completed"] == cap["sessions"] and cap["swaps_out"] > 0),
    ("the same tokens with and without the budget", cap["tokens_hash"] == free["tokens_hash"]),
    (f"KV held {cap['kv_bytes_peak'] / mb:.1f} MB <= budget {cap['kv_budget_bytes'] / mb:.1f} MB",
     cap["kv_bytes_peak"] <= cap["kv_budget_bytes"]),
    (f"peak RSS {cap['peak_rss_bytes'] / mb:.1f} MB < file {cap['file_bytes'] / mb:.1f} MB + "
     f"budget {cap['kv_budget_bytes'] / mb:.1f} MB + 30 MB",
     cap["peak_rss_bytes"] < cap["file_bytes"] + cap["kv_budget_bytes"] + 30 * mb),
]
if os.environ.get("KV_MEMORY_NO_RSS"):
    print("SKIP  " + checks.pop()[0] + " (KV_MEMORY_NO_RSS: a sanitizer build)")
ok = True
for what, passed in checks:
    print(("PASS  " if passed else "FAIL  ") + what)
    ok = ok and passed
sys.exit(0 if ok else 1)
PY
