#!/usr/bin/env bash
# Installs the build into a scratch prefix, compiles capi_test.c with the C compiler against the
# installed header and library only, and runs it on stories260K, on a .pocket copy of it with
# a random classification head, and on a tiny random model with the Qwen3 tokenizer, its chat
# template and a random 3-label classification head (both made by the build's pocket CLI).
# Checks first that the installed header imports its symbols on Windows (POCKET_API) unless the
# library's own build says otherwise.
set -euo pipefail
build_dir="$1" source_dir="$2" shared_dir="$3" cc="${4:-cc}"
prefix="$build_dir/capi-install"
rm -rf "$prefix"
cmake --install "$build_dir" --prefix "$prefix" --component Unspecified >/dev/null

# POCKET_API as a Windows compiler would see it (preprocessing only).
pocket_api() {
  printf '#include <pocket/pocket.h>\nPOCKET_API_IS POCKET_API\n' |
    "$cc" -E -P -I"$prefix/include" "$@" -x c - | grep '^POCKET_API_IS' | tr -d ' '
}
check_api() {
  local got
  got="$(pocket_api "${@:2}")"
  if [[ "$got" != "POCKET_API_IS$1" ]]; then
    echo "POCKET_API with $*: got '$got'" >&2
    exit 1
  fi
}
check_api '__declspec(dllimport)' -D_WIN32
check_api '__declspec(dllexport)' -D_WIN32 -DPOCKET_BUILDING_LIBRARY
check_api '' -D_WIN32 -DPOCKET_STATIC

"$cc" -std=c11 -Wall -Wextra -Werror -pthread -I"$prefix/include" \
  "$source_dir/tests/capi/capi_test.c" -L"$prefix/lib" -lpocket -Wl,-rpath,"$prefix/lib" \
  $EXTRA_LDFLAGS -o "$build_dir/capi_test"
stories="$shared_dir/testdata/stories260K"
head="$build_dir/capi-head.npy"
head_model="$build_dir/capi-head.pocket"
/usr/bin/python3 - "$stories/stories260K.bin" "$head" <<'EOF'
import struct, sys
import numpy as np
dim = struct.unpack("<i", open(sys.argv[1], "rb").read(4))[0]  # llama2.c header: dim first
rng = np.random.default_rng(5)
np.save(sys.argv[2], (rng.standard_normal((3, dim)) / np.sqrt(dim)).astype(np.float32))
EOF
rm -f "$head_model"
"$build_dir/bin/pocket" convert "$stories/stories260K.bin" --tokenizer "$stories/tok512.bin" \
  --weights f32 --classifier-head "$head" --classifier-labels happy,sad,neutral \
  -o "$head_model" >/dev/null

# The cache of downloaded fixtures: POCKET_CACHE_DIR, else the build's setting, else the default.
cache_dir="${POCKET_CACHE_DIR:-}"
if [[ -z "$cache_dir" && -f "$build_dir/CMakeCache.txt" ]]; then
  cache_dir="$(sed -n 's/^POCKET_CACHE_DIR:[A-Z]*=//p' "$build_dir/CMakeCache.txt")"
fi
cache_dir="${cache_dir:-$source_dir/cache}"
qwen3_tokenizer="$cache_dir/tokenizer-qwen3/package/models/tokenizer.json"
if [[ ! -f "$qwen3_tokenizer" ]]; then
  echo "missing $qwen3_tokenizer (the Qwen3 tokenizer: scripts/fetch_fixtures.sh)" >&2
  exit 1
fi
chat_model="$build_dir/capi-chat.gguf"
rm -f "$chat_model"
"$build_dir/bin/pocket" make-model --preset tiny --arch qwen3 --type f32 --seed 3 \
  --tokenizer "$qwen3_tokenizer" --classifier-labels yes,no,maybe -o "$chat_model" >/dev/null

# A LoRA adapter for stories260K (not on q/k: llama2.c rows are in interleaved-RoPE order).
adapter="$build_dir/capi-adapter"
rm -rf "$adapter"
"$build_dir/bin/pocket" make-adapter -m "$stories/stories260K.bin" --rank 4 \
  --targets v,o,gate,up,down --init 0.2 --seed 3 -o "$adapter" >/dev/null

POCKET_CAPI_ADAPTER="$adapter" "$build_dir/capi_test" "$stories/stories260K.bin" \
  "$stories/tok512.bin" "$head_model" "$chat_model"
