#!/usr/bin/env bash
# Runs every fuzz target for a bounded time from the generated seeds; fails on any finding.
set -euo pipefail
build_dir="$1" seconds="${2:-60}"
work="$build_dir/fuzz-work"
mkdir -p "$work/seeds"
"$build_dir/bin/make_seeds" "$work/seeds"
status=0
root="$(cd "$(dirname "$0")/../.." && pwd)"
shared="${POCKET_SHARED_DIR:-$root/../shared}"
for target in gguf_fuzz safetensors_fuzz tokenizer_json_fuzz pocket_fuzz tokenizer_section_fuzz \
  grammar_fuzz adapter_fuzz serve_request_fuzz; do
  corpus="$work/corpus-$target"
  mkdir -p "$corpus"
  case "$target" in
    gguf_fuzz) cp "$work/seeds/seed.gguf" "$corpus/" ;;
    safetensors_fuzz) cp "$work/seeds/seed.safetensors" "$corpus/" ;;
    tokenizer_json_fuzz) cp "$work/seeds/seed.json" "$corpus/" ;;
    pocket_fuzz) cp "$work/seeds/seed.pocket" "$corpus/" ;;
    adapter_fuzz) cp "$work/seeds/seed.adapter" "$work/seeds/seed-adapter.pocket" "$corpus/" ;;
    tokenizer_section_fuzz) cp "$work/seeds/seed-v1.ptok" "$work/seeds/seed-v2.ptok" "$corpus/" ;;
    serve_request_fuzz)
      # Endpoint byte (1: chat, 0: completions), then a request body.
      printf '\1{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"temperature":0.5,"stop":["a"],"stream":true,"stream_options":{"include_usage":true},"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}}}' >"$corpus/chat.seed"
      printf '\0{"model":"m","prompt":"Once","max_tokens":16,"seed":3,"top_p":0.9,"n":1}' >"$corpus/completion.seed"
      # Near the nesting limit (64 levels), so mutations cross it both ways.
      { printf '\1{"model":"m","messages":[{"role":"user","content":'
        printf '[%.0s' $(seq 60); printf '1'; printf ']%.0s' $(seq 60); printf '}]}'; } >"$corpus/deep.seed" ;;
    grammar_fuzz)
      # Mode byte (0: GBNF, 1: JSON Schema), the grammar, NUL, a text to feed.
      for f in "$shared"/testdata/gbnf/*.gbnf; do
        { printf '\0'; cat "$f"; printf '\0{"a": [1, "x"]}\n- item\n'; } >"$corpus/$(basename "$f").seed"
      done
      for f in "$root"/tests/e2e/schemas/*.json; do
        { printf '\1'; cat "$f"; printf '\0{"name":"a","age":3,"active":true}'; } >"$corpus/$(basename "$f").seed"
      done
      { printf '\1'; printf '{"type":"array","items":%.0s' $(seq 30); printf '{}'
        printf '}%.0s' $(seq 30); printf '\0[[[]]]'; } >"$corpus/deep-schema.seed" ;;
  esac
  # JSON inputs: the dictionary, and room for deep nesting and wide schemas.
  extra=()
  case "$target" in
    serve_request_fuzz | grammar_fuzz | tokenizer_json_fuzz)
      extra=(-dict="$root/tests/fuzz/json.dict" -max_len=65536) ;;
  esac
  echo "fuzz: $target for ${seconds}s"
  if ! "$build_dir/bin/$target" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
       -print_final_stats=1 -artifact_prefix="$work/$target-" "${extra[@]}" "$corpus" \
       >"$work/$target.log" 2>&1; then
    echo "fuzz: $target FOUND A PROBLEM; log tail:"
    tail -n 40 "$work/$target.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|Done [0-9]+ runs" "$work/$target.log" | tail -n 2
  fi
done
exit "$status"
