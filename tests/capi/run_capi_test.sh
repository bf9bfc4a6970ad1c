#!/usr/bin/env bash
# Installs the build into a scratch prefix, compiles capi_test.c with the C compiler against the
# installed header and library only, and runs it on stories260K.
set -euo pipefail
build_dir="$1" source_dir="$2" shared_dir="$3" cc="${4:-cc}"
prefix="$build_dir/capi-install"
rm -rf "$prefix"
cmake --install "$build_dir" --prefix "$prefix" --component Unspecified >/dev/null
"$cc" -std=c11 -Wall -Wextra -Werror -I"$prefix/include" "$source_dir/tests/capi/capi_test.c" \
  -L"$prefix/lib" -lpocket -Wl,-rpath,"$prefix/lib" $EXTRA_LDFLAGS -o "$build_dir/capi_test"
"$build_dir/capi_test" "$shared_dir/testdata/stories260K/stories260K.bin" \
  "$shared_dir/testdata/stories260K/tok512.bin"
