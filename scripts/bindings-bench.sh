#!/usr/bin/env bash
# The bindings' streaming overhead: 256 greedy tokens of the pocket-0.3b INT4 package streamed
# through the C API (build/bin/capi_stream), Python (bench/python_stream.py in build/pyenv) and
# Java (build/java from ctest bindings.java, when built), interleaved round by round in one run; prints each run's JSON
# line and the medians with their ratio to C. Usage: scripts/bindings-bench.sh [ROUNDS=5] [THREADS=2]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds="${1:-5}"
threads="${2:-2}"
model="$("$root/scripts/pocket-0.3b.sh")"
[ -x "$root/build/pyenv/bin/python" ] || "$root/bindings/python/run_tests.sh" "$root/build" -q -k nothing_matches >/dev/null || true
# Java: the jar and JNI library ctest bindings.java builds (build/java), and this class.
java_dir="$root/build/java"
if [ -f "$java_dir/pocket.jar" ]; then
  mkdir -p "$java_dir/bench"
  javac -d "$java_dir/bench" -cp "$java_dir/pocket.jar" "$root/bench/JavaStream.java"
  POCKET_JAVA_STREAM="java -Dpocket.jni.library=$java_dir/libpocket_jni.so -cp $java_dir/pocket.jar:$java_dir/bench JavaStream"
fi
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for r in $(seq "$rounds"); do
  echo "round $r/$rounds" >&2
  "$root/build/bin/capi_stream" "$model" 256 1 "$threads" | tee -a "$out"
  "$root/build/pyenv/bin/python" "$root/bench/python_stream.py" "$model" 256 1 "$threads" | tee -a "$out"
  if [ -n "${POCKET_JAVA_STREAM:-}" ]; then $POCKET_JAVA_STREAM "$model" 256 1 "$threads" | tee -a "$out"; fi
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
med = {}
for api in dict.fromkeys(r["api"] for r in runs):
    med[api] = statistics.median(r["tokens_per_s"] for r in runs if r["api"] == api)
for api, v in med.items():
    print(f"{api}: median {v:.1f} tok/s ({v / med['c']:.3f}x the C API)")
PY
