#!/usr/bin/env bash
# Installs the build into a scratch prefix, compiles capi_test.c with the C compiler against the
# installed header and library only, and runs it on stories260K, and on a .pocket copy of it with
# a random classification head (made by the build's pocket CLI).
set -euo pipefail
build_dir="$1" source_dir="$2" shared_dir="$3" cc="${4:-cc}"
prefix="$build_dir/capi-install"
rm -rf "$prefix"
cmake --install "$build_dir" --prefix "$prefix" --component Unspecified >/dev/null
"$cc" -std=c11 -Wall -Wextra -Werror -I"$prefix/include" "$source_dir/tests/capi/capi_test.c" \
  -L"$prefix/lib" -lpocket -Wl,-rpath,"$prefix/lib" $EXTRA_LDFLAGS -o "$build_dir/capi_test"
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
"$build_dir/capi_test" "$stories/stories260K.bin" "$stories/tok512.bin" "$head_model"
