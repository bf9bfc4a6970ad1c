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
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$here/tests" "$@"
