#!/usr/bin/env bash
# Builds the Java bindings (libpocket_jni.so, pocket.jar, the tests) into BUILD_DIR and runs the
# JUnit 5 tests with the console launcher; then, when the synthetic model
# cache/models/pocket-0.3b-int4.pocket exists, compiles and runs examples/Chat.java on it.
#
#   bindings/java/run_tests.sh [BUILD_DIR [LAUNCHER_ARGS...]]
#
# BUILD_DIR defaults to build/java under the repository root (its own CMake tree, not pocket's).
# LAUNCHER_ARGS replace the default selection of test classes, e.g.
#   bindings/java/run_tests.sh build/java --select-class=ai.pocket.LeakTest
# Environment: POCKET_BUILD_DIR (pocket's build tree, default build/), POCKET_TESTDATA (the directory holding stories260K/; default ../shared/testdata
# from the repository root), POCKET_CLI (default build/bin/pocket), JUNIT_CONSOLE_JAR, JAVA_HOME.
# pocket itself must be built first (build/lib/libpocket.so). Exits non-zero when a test fails.
set -euo pipefail

java_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$java_dir/../.." && pwd)"
build_dir="${1:-$root/build/java}"
shift $(($# > 0 ? 1 : 0))
mkdir -p "$build_dir"
build_dir="$(cd "$build_dir" && pwd)"
testdata="${POCKET_TESTDATA:-$root/../shared/testdata}"
cli="${POCKET_CLI:-$root/build/bin/pocket}"
junit="${JUNIT_CONSOLE_JAR:-/usr/share/java/junit-platform-console-standalone.jar}"

generator=()
if [[ ! -f "$build_dir/CMakeCache.txt" ]] && command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
# The machine's cores are shared: one compile job, at low priority.
nice cmake -S "$java_dir" -B "$build_dir" "${generator[@]}" -DPOCKET_ROOT="$root" \
  -DPOCKET_BUILD_DIR="${POCKET_BUILD_DIR:-$root/build}" \
  -DPOCKET_TESTDATA="$testdata" -DPOCKET_CLI="$cli" -DJUNIT_CONSOLE_JAR="$junit" >/dev/null
nice cmake --build "$build_dir" --parallel 1

java="${JAVA_HOME:+$JAVA_HOME/bin/}java"
jni="$build_dir/libpocket_jni.so"
classpath="$build_dir/pocket.jar:$build_dir/pocket-tests.jar"
if (($# == 0)); then
  set --
  for source in "$java_dir"/src/test/java/ai/pocket/*Test.java; do
    set -- "$@" "--select-class=ai.pocket.$(basename "$source" .java)"
  done
fi
start=$SECONDS
log="$build_dir/junit.log"
# A fixed, small heap keeps the RSS that LeakTest measures from moving with the heap's size.
# -Xcheck:jni reports JNI misuse the tests cannot see (a local reference kept per token, a call
# with an exception pending) as warnings; any of them fails the run.
"$java" -Xms64m -Xmx64m -XX:+UseSerialGC -Xcheck:jni \
  -Dpocket.jni.library="$jni" -Dpocket.testdata="$testdata" -Dpocket.cli="$cli" \
  -Dpocket.root="$root" \
  -jar "$junit" --disable-banner --details=tree --disable-ansi-colors \
  --class-path "$classpath" --fail-if-no-tests "$@" 2>&1 | tee "$log"
if grep -E '^WARNING(:| in native method)' "$log" >&2; then
  echo "run_tests.sh: -Xcheck:jni reported JNI misuse (see $log)" >&2
  exit 1
fi
echo "run_tests.sh: JUnit tests passed in $((SECONDS - start)) s"

model="$root/cache/models/pocket-0.3b-int4.pocket"
if [[ -f "$model" ]]; then
  mkdir -p "$build_dir/examples"
  javac -encoding UTF-8 -Xlint:all -cp "$build_dir/pocket.jar" -d "$build_dir/examples" \
    "$java_dir/examples/Chat.java"
  out="$(printf 'Hello! What is a pocket? 😀\n' |
    "$java" -Dpocket.jni.library="$jni" -cp "$build_dir/pocket.jar:$build_dir/examples" \
      Chat "$model" 16 48)"
  printf '%s\n' "$out"
  if ! grep -q '^json: {' <<<"$out"; then
    echo "run_tests.sh: examples/Chat.java gave no JSON answer" >&2
    exit 1
  fi
  echo "run_tests.sh: examples/Chat.java ran on $model"
else
  echo "run_tests.sh: no $model: examples/Chat.java not run"
fi
