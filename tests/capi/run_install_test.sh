#!/usr/bin/env bash
# The C library as an app gets it, from an installed tree in a scratch prefix:
#  1. the README's commands for an app ("Compiling and linking an app"), run as written (HOME a
#     scratch directory, so "$HOME/.local" is the prefix; in a scratch directory where build,
#     examples and ../shared are links to this build and checkout): `cmake --install`, pkg-config,
#     the compile line and the run of examples/c/hello.c, which the README quotes verbatim;
#  2. what `cmake --install` installed: the CLI (its --version the headers'), the C headers (with
#     pocket_version.h), the two shared libraries with their SONAME (the ABI version the version
#     macros give) and their pkg-config files, nothing else (no static layers, tests or
#     benchmarks);
#  3. a program that uses only pocket_voice.h links with -lpocket_voice alone and runs, and again
#     with `pkg-config --cflags --libs pocket_voice`.
# Usage: run_install_test.sh BUILD_DIR SOURCE_DIR SHARED_DIR [CC [LIBDIR]]; EXTRA_LDFLAGS (the
# sanitizers of the build) are added to every link.
set -euo pipefail
build_dir="$1" source_dir="$2" shared_dir="$3" cc="${4:-cc}" libdir="${5:-lib}"
extra_ldflags="${EXTRA_LDFLAGS:-}"
fail() {
  echo "run_install_test: FAILED: $*" >&2
  exit 1
}
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# 1. The README's block: the sh block that compiles examples/c/hello.c.
readme="$source_dir/README.md"
block="$tmp/readme-block.sh"
awk '/^```sh$/ { inside = 1; text = ""; next }
     /^```$/ && inside { if (text ~ /pkg-config --cflags --libs pocket/) { printf "%s", text; exit }
                         inside = 0; next }
     inside { text = text $0 "\n" }' "$readme" >"$block"
[[ -s "$block" ]] || fail "README.md has no sh block with 'pkg-config --cflags --libs pocket'"
# The C block the README quotes is examples/c/hello.c, byte for byte.
awk '/^```c$/ { inside = 1; next } /^```$/ && inside { exit } inside' "$readme" >"$tmp/readme.c"
cmp -s "$tmp/readme.c" "$source_dir/examples/c/hello.c" ||
  fail "README.md's C example differs from examples/c/hello.c: $(diff "$tmp/readme.c" "$source_dir/examples/c/hello.c" | head -5)"

work="$tmp/checkout"
mkdir -p "$work" "$tmp/home"
ln -s "$(cd "$build_dir" && pwd)" "$work/build"
ln -s "$source_dir/examples" "$work/examples"
ln -s "$(cd "$shared_dir" && pwd)" "$tmp/shared"
# `cc` as the README writes it, with the build's compiler and sanitizer flags.
(cd "$work" && HOME="$tmp/home" POCKET_TEST_CC="$cc" EXTRA_LDFLAGS="$extra_ldflags" \
  bash -euo pipefail -c 'cc() { "$POCKET_TEST_CC" "$@" $EXTRA_LDFLAGS; }; . "$1"' _ "$block") \
  >"$tmp/readme.out" 2>&1 || {
  cat "$tmp/readme.out" >&2
  fail "the README's commands (above) failed"
}
grep -v '^-- ' "$tmp/readme.out"
[[ -x "$work/hello" ]] || fail "the README's commands made no ./hello"
grep -Eq '^\[[1-9][0-9]* tokens\]$' "$tmp/readme.out" || fail "hello generated no tokens"

# 2. What was installed.
prefix="$tmp/home/.local"
version_h="$prefix/include/pocket/pocket_version.h"
[[ -f "$version_h" ]] || fail "no include/pocket/pocket_version.h"
macro() { sed -n "s/^#define $1 //p" "$version_h" | tr -d '"'; }
major="$(macro POCKET_VERSION_MAJOR)" minor="$(macro POCKET_VERSION_MINOR)"
patch="$(macro POCKET_VERSION_PATCH)" version="$(macro POCKET_VERSION_STRING)"
[[ "$version" == "$major.$minor.$patch" ]] ||
  fail "POCKET_VERSION_STRING $version is not MAJOR.MINOR.PATCH ($major.$minor.$patch)"
grep -qx "pocket $version (header $version)" "$tmp/readme.out" ||
  fail "hello's first line is not 'pocket $version (header $version)'"
# The ABI version: 0.MINOR while the major version is 0, then MAJOR (pocket_version.h).
if [[ "$major" == 0 ]]; then soversion="0.$minor"; else soversion="$major"; fi
expected=(bin/pocket include/pocket/pocket.h include/pocket/pocket_version.h
  include/pocket/pocket_voice.h "$libdir/pkgconfig/pocket.pc" "$libdir/pkgconfig/pocket_voice.pc")
for lib in pocket pocket_voice; do
  expected+=("$libdir/lib$lib.so" "$libdir/lib$lib.so.$soversion" "$libdir/lib$lib.so.$version")
  soname="$(objdump -p "$prefix/$libdir/lib$lib.so.$version" | awk '$1 == "SONAME" { print $2 }')"
  [[ "$soname" == "lib$lib.so.$soversion" ]] ||
    fail "lib$lib.so.$version has SONAME '$soname', expected lib$lib.so.$soversion"
done
installed="$(cd "$prefix" && find . -type f -o -type l | sed 's|^\./||' | sort)"
wanted="$(printf '%s\n' "${expected[@]}" | sort)"
[[ "$installed" == "$wanted" ]] ||
  fail "cmake --install installed (< got, > expected):
$(diff <(echo "$installed") <(echo "$wanted") || true)"
cli_version="$("$prefix/bin/pocket" --version)"
[[ "$cli_version" == "pocket $version" ]] || fail "pocket --version: '$cli_version', expected 'pocket $version'"
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
for pc in pocket pocket_voice; do
  got="$(pkg-config --modversion "$pc")"
  [[ "$got" == "$version" ]] || fail "pkg-config --modversion $pc: $got, expected $version"
done

# 3. pocket_voice.h alone, with -lpocket_voice alone; then as pkg-config says.
"$cc" -std=c99 -Wall -Wextra -Werror -pedantic -I"$prefix/include" \
  "$source_dir/tests/capi/voice_link_test.c" -L"$prefix/$libdir" -lpocket_voice \
  -Wl,-rpath,"$prefix/$libdir" $extra_ldflags -o "$tmp/voice_link_test"
"$tmp/voice_link_test"
# shellcheck disable=SC2046  # pkg-config's output is words
"$cc" -std=c99 -Wall -Wextra -Werror -pedantic "$source_dir/tests/capi/voice_link_test.c" \
  $(pkg-config --cflags --libs pocket_voice) -Wl,-rpath,"$prefix/$libdir" $extra_ldflags \
  -o "$tmp/voice_link_test_pc"
"$tmp/voice_link_test_pc" >/dev/null
echo "run_install_test: OK"
