#!/usr/bin/env bash
# The real-time acceptance run of issue 17: the acceptance conversation (20 turns, 5 barge-ins)
# through `pocket voice` with the pocket-0.3b INT4 package on 2 threads, paced in real time
# (about seven minutes: the model's noise replies play for up to half a minute). Prints the
# figures as JSON (the trace too with --trace FILE).
# Usage: scripts/voice-bench.sh [--model PACKAGE] [--threads N] [--trace FILE] [--runs N]
#                               [-- MORE POCKET VOICE FLAGS]   (e.g. -- --kernels avx2)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
model="$root/cache/models/pocket-0.3b-int4.pocket"
threads=2
trace=""
runs=1
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --trace) trace="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: $0 [--model PACKAGE] [--threads N] [--trace FILE] [--runs N] [-- FLAGS]" >&2; exit 2 ;;
  esac
done
if [ ! -f "$model" ]; then
  echo "voice-bench: no $model (the first README command makes it)" >&2
  exit 1
fi
for i in $(seq 1 "$runs"); do
  echo "voice-bench: run $i of $runs (real time, about 7 minutes)" >&2
  out="$(mktemp)"
  "$root/build/bin/pocket" voice -m "$model" --script "$root/tests/voice/acceptance.script" \
    -t "$threads" --json ${extra[@]+"${extra[@]}"} > "$out"
  if [ -n "$trace" ]; then
    /usr/bin/python3 -c 'import json,sys; [print(json.dumps(e)) for e in json.load(open(sys.argv[1]))["trace"]]' "$out" > "$trace"
  fi
  /usr/bin/python3 - "$out" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
keys = ["first_audio_ms_p50", "first_audio_ms_p90", "barge_in_ms_p50", "asr_wer", "turns",
        "barge_ins", "scripted_barge_ins", "samples_synthesized", "samples_played",
        "samples_dropped", "samples_reconcile", "early_prefills", "early_prompt_tokens",
        "turn_prompt_tokens", "conversation_s", "wall_s"]
print(json.dumps({k: j[k] for k in keys}))
PY
  rm -f "$out"
done
