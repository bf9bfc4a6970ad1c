#!/usr/bin/env bash
# Prints the path of the synthetic pocket-0.3b INT4 package (cache/models/pocket-0.3b-int4.pocket),
# making it first when it is missing: the BF16 GGUF of the exact MNN-Pocket-0.3B shape (seed 1,
# the real Qwen3 tokenizer), converted as scripts/main.sh does (about a minute on 2 cores).
# Usage: scripts/pocket-0.3b.sh [BUILD_DIR]   (default build; its bin/pocket is used)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
pocket="${1:-$root/build}/bin/pocket"
models="${POCKET_CACHE_DIR:-$root/cache}/models"
tokenizer="${POCKET_CACHE_DIR:-$root/cache}/tokenizer-qwen3/package/models/tokenizer.json"
package="$models/pocket-0.3b-int4.pocket"
if [ ! -f "$package" ]; then
  mkdir -p "$models"
  source_model="$models/pocket-0.3b-bf16.gguf"
  if [ ! -f "$source_model" ]; then
    "$pocket" make-model --preset pocket-0.3b --type bf16 --tokenizer "$tokenizer" --seed 1 \
      -o "$source_model" >&2
  fi
  "$pocket" convert "$source_model" -o "$package" --weights int4 --group 64 >&2
fi
echo "$package"
