#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run): setup, then
#   1. release build + every test (unit, end-to-end against the numpy reference, C API) on the
#      best kernel table, then the end-to-end tests once more on the AVX2 table (when the CPU has
#      a better one: what an AVX2-only machine runs) and the numpy comparisons on the reference
#      table (POCKET_KERNELS picks the table; see `pocket kernels`),
#   2. ARM64 cross build (base, quant, kernels) + their tests under qemu-aarch64 -cpu max, where
#      every kernel table runs (reference, neon, dotprod, i8mm),
#   3. debug build with AddressSanitizer + UndefinedBehaviorSanitizer + every test,
#   4. ThreadSanitizer build of the runtime's multi-threaded tests (sessions on many threads, the
#      engine with cancellation from others, the shared prefix cache),
#   5. libFuzzer targets (clang, ASan) for the file parsers, each for a bounded time.
# Environment: POCKET_FUZZ_SECONDS (default 20 per target), POCKET_SKIP_DEBUG=1, POCKET_JOBS,
# POCKET_KERNELS (a table for the whole run instead of the best one).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
jobs="${POCKET_JOBS:-$(nproc)}"
"$root/scripts/setup.sh"

# Each stage's heading says how long the suite has run (CI's limit is 90 minutes; keep it near 60).
start_s=$SECONDS
step() { printf '\n==== %s (at %d:%02d) ====\n' "$*" $(((SECONDS - start_s) / 60)) $(((SECONDS - start_s) % 60)); }

# Which machine this log comes from: CI runs on whichever CPU class the session drew, and a test
# that passes on one table may not on another.
cpu_model="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
cpu_flags="$(grep -m1 -o -w -E 'avx2|fma|f16c|avx512(f|bw|vl|dq|_vnni|_bf16|vbmi)|amx_(tile|int8|bf16)|avx_vnni|asimd|asimddp|i8mm' \
  /proc/cpuinfo | sort -u | tr '\n' ' ' || true)"
echo "machine: ${cpu_model:-$(uname -m)}, $(nproc) cores; ISA flags: ${cpu_flags:-none listed}"

step "release build"
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
# The kernel table every stage below runs on (the best the CPU offers, or POCKET_KERNELS's).
"$root/build/bin/pocket" kernels
kernels_json="$("$root/build/bin/pocket" kernels --json)"
table_field() { /usr/bin/python3 -c 'import json, sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$kernels_json" "$1"; }
default_table="$(table_field default)"
has_table() { /usr/bin/python3 -c 'import json, sys; sys.exit(sys.argv[2] not in json.loads(sys.argv[1])["tables"])' "$kernels_json" "$1"; }

step "release tests (the ${default_table} table)"
ctest --preset release -j "$jobs" --timeout 1800

# The same end-to-end tests on the tables other machines run: the AVX2 table (AVX2-only CPUs,
# such as AMD Zen 2/3) when this CPU runs a better one, and the reference table for the tests
# that compare with the numpy reference.
if [ "$default_table" != avx2 ] && has_table avx2; then
  step "end-to-end tests once more on the avx2 table (POCKET_KERNELS=avx2)"
  POCKET_KERNELS=avx2 ctest --preset release -j "$jobs" --timeout 1800 -L e2e
fi
if [ "$default_table" != reference ]; then
  step "numpy-reference tests once more on the reference table (POCKET_KERNELS=reference)"
  POCKET_KERNELS=reference ctest --preset release -j "$jobs" --timeout 1800 -L numpy
fi

step "aarch64 cross build (base, quant, kernels)"
cmake --preset aarch64 >/dev/null
cmake --build --preset aarch64 -j "$jobs"
step "aarch64 tests (qemu-aarch64: reference, neon, dotprod, i8mm tables)"
ctest --preset aarch64 -j "$jobs" --timeout 1800
# The Java bindings' JNI layer cross-compiled for aarch64 against the real header and the JDK's
# JNI headers (linking needs an aarch64 libpocket.so, which this project does not build yet:
# docs/bindings.md).
jdk="$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")"
aarch64-linux-gnu-g++ -std=c++17 -O2 -fPIC -Wall -Wextra -Werror -c \
  "$root/bindings/java/jni/pocket_jni.cc" -I "$root/include" -I "$root/build/include" \
  -I "$jdk/include" -I "$jdk/include/linux" -o "$root/build-aarch64/pocket_jni.o"
echo "bindings/java/jni/pocket_jni.cc: compiled for aarch64"

if [ "${POCKET_SKIP_DEBUG:-0}" != 1 ]; then
  step "debug build (ASan + UBSan)"
  cmake --preset debug >/dev/null
  cmake --build --preset debug -j "$jobs"
  step "debug tests (ASan + UBSan)"
  ctest --preset debug -j "$jobs" --timeout 3600
fi

step "ThreadSanitizer: the runtime's multi-threaded tests (sessions, engine, prefix cache)"
cmake --preset tsan >/dev/null
tsan_tests=(concurrency_test engine_test prefix_cache_test session_test)
cmake --build --preset tsan -j "$jobs" --target "${tsan_tests[@]}"
for t in "${tsan_tests[@]}"; do
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" "$root/build-tsan/bin/$t" --gtest_brief=1
done

step "fuzzing (libFuzzer + ASan, ${POCKET_FUZZ_SECONDS:-20} s per target)"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$jobs"
"$root/tests/fuzz/run_fuzzers.sh" "$root/build-fuzz" "${POCKET_FUZZ_SECONDS:-20}"

step "all tests passed"
