#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run): setup, then
#   1. release build + every test (unit, end-to-end against the numpy reference, C API),
#   2. ARM64 cross build (base, quant, kernels) + their tests under qemu-aarch64 -cpu max, where
#      every kernel table runs (reference, neon, dotprod, i8mm),
#   3. debug build with AddressSanitizer + UndefinedBehaviorSanitizer + every test,
#   4. ThreadSanitizer build of the runtime's multi-threaded tests (sessions on many threads, the
#      engine with cancellation from others, the shared prefix cache),
#   5. libFuzzer targets (clang, ASan) for the file parsers, each for a bounded time.
# Environment: POCKET_FUZZ_SECONDS (default 40 per target), POCKET_SKIP_DEBUG=1, POCKET_JOBS.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
jobs="${POCKET_JOBS:-$(nproc)}"
"$root/scripts/setup.sh"

# Each stage's heading says how long the suite has run (CI's limit is 90 minutes; keep it near 60).
start_s=$SECONDS
step() { printf '\n==== %s (at %d:%02d) ====\n' "$*" $(((SECONDS - start_s) / 60)) $(((SECONDS - start_s) % 60)); }

step "release build"
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs"
step "release tests"
ctest --preset release -j "$jobs" --timeout 1800

step "aarch64 cross build (base, quant, kernels)"
cmake --preset aarch64 >/dev/null
cmake --build --preset aarch64 -j "$jobs"
step "aarch64 tests (qemu-aarch64: reference, neon, dotprod, i8mm tables)"
ctest --preset aarch64 -j "$jobs" --timeout 1800

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

step "fuzzing (libFuzzer + ASan, ${POCKET_FUZZ_SECONDS:-40} s per target)"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$jobs"
"$root/tests/fuzz/run_fuzzers.sh" "$root/build-fuzz" "${POCKET_FUZZ_SECONDS:-40}"

step "all tests passed"
