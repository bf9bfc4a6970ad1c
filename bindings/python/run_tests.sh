#!/usr/bin/env bash
# Installs the Python package into a fresh virtual environment the way a user does
# (`pip install ./bindings/python`, offline: Debian's setuptools, no index) and runs its pytest
# suite against the CLI. Usage: run_tests.sh BUILD_DIR [pytest args...]
# The venv sees Debian's numpy, pytest and jsonschema (--system-site-packages); the package
# bundles BUILD_DIR/lib/libpocket.so, the library this build made.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$(cd "${1:?usage: run_tests.sh BUILD_DIR [pytest args]}" && pwd)"
shift
venv="$build/pyenv"
rm -rf "$venv"
/usr/bin/python3 -m venv --system-site-packages "$venv"
# A copy of the sources: pip builds in place, and the checkout stays clean.
src="$(mktemp -d)"
trap 'rm -rf "$src"' EXIT
cp -r "$here/." "$src/"
rm -rf "$src/build" "$src"/*.egg-info
POCKET_LIBRARY="$build/lib/libpocket.so" "$venv/bin/pip" install --quiet --no-index \
  --no-build-isolation --disable-pip-version-check "$src"
# From outside the source tree, so `import pocket` is the installed package.
cd "$build"
unset POCKET_LIBRARY
"$venv/bin/python" -c 'import pocket, sys; print("pocket", pocket.version(), "from", pocket.__file__)'
"$venv/bin/python" -m pytest -q -p no:cacheprovider "$here/tests" "$@"

# From an installed library instead of a bundled one: pocket installed into a scratch prefix
# (`cmake --install`), the package built with POCKET_BUNDLE_LIBRARY=0 into a second venv, the
# library found by the dynamic loader.
prefix="$src/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
venv2="$src/venv-installed"
/usr/bin/python3 -m venv --system-site-packages "$venv2"
rm -rf "$src/build" "$src"/*.egg-info
POCKET_BUNDLE_LIBRARY=0 "$venv2/bin/pip" install --quiet --no-index --no-build-isolation \
  --disable-pip-version-check "$src"
if ls "$venv2"/lib/python3*/site-packages/pocket/libpocket.so >/dev/null 2>&1; then
  echo "run_tests.sh: POCKET_BUNDLE_LIBRARY=0 still bundled the library" >&2
  exit 1
fi
LD_LIBRARY_PATH="$(dirname "$(find "$prefix" -name 'libpocket.so' | head -1)")" \
  "$venv2/bin/python" -c '
import sys, pocket
m = pocket.Model.load(sys.argv[1], tokenizer=sys.argv[2])
r = m.session().generate("Once upon a time", max_tokens=8, temperature=0)
assert r.n_generated_tokens == 8, r
print("installed library:", pocket.version(), repr(r.text))' \
  "${POCKET_SHARED_DIR:-$here/../../../shared}/testdata/stories260K/stories260K.bin" \
  "${POCKET_SHARED_DIR:-$here/../../../shared}/testdata/stories260K/tok512.bin"
