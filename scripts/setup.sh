#!/usr/bin/env bash
# Installs what building and testing pocket needs on Debian 12, then fetches the npm fixtures.
# Idempotent: packages already present are not reinstalled; run as root (or with sudo available).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

packages=(
  g++ cmake ninja-build pkg-config git            # build
  libutf8proc-dev nlohmann-json3-dev libcli11-dev  # core and CLI dependencies
  libcpp-httplib-dev                               # pocket serve (HTTP)
  libpocketsphinx-dev pocketsphinx-en-us           # pocket voice: speech recognition,
  flite1-dev libespeak-ng-dev                      # speech synthesis,
  libwebrtc-audio-processing-dev                   # voice activity detection,
  libsndfile1-dev                                  # WAV files,
  libasound2-dev                                   # ALSA capture and playback
  libgtest-dev libgmock-dev libbenchmark-dev       # tests and micro-benchmarks
  python3 python3-numpy                            # the independent numpy reference
  python3-jsonschema                               # independent check of constrained outputs
  python3-venv python3-pip python3-setuptools      # the Python bindings, pip-installed offline
  python3-pytest                                   # into a venv, and their tests
  openjdk-17-jdk-headless junit5                   # the Java bindings (JNI) and their JUnit tests
  clang libclang-rt-14-dev                         # libFuzzer targets
  clang-format                                     # the style check in the suite
  g++-aarch64-linux-gnu qemu-user googletest       # ARM64 kernels: cross build (GoogleTest from
                                                   # its sources), tests under QEMU
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm (the tokenizer fixture and the HF tokenizers oracle): Debian's packages unless
# a node and npm are already on the PATH (NodeSource and others ship npm inside nodejs).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

"$root/scripts/fetch_fixtures.sh"
