#!/usr/bin/env bash
# The distribution tests of speculative sampling with their full 20,000 draws per sample under
# ASan + UBSan (CI's debug stage draws 5,000 to stay within its time; about 20 minutes on 2 cores).
# Usage: scripts/spec_distribution_asan.sh [BUILD_DIR]   (default build-debug: cmake --preset debug)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build-debug}"
cmake --build "$build" -j2 --target spec_distribution_test
POCKET_SPEC_DRAWS=20000 "$build/bin/spec_distribution_test"
