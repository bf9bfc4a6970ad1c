#!/usr/bin/env bash
# Bit-identity check of two pocket binaries (e.g. before and after a refactor of the forward pass):
# logits of 1, 31, 32, 80 and 512 token ids (seeded by the length) as last position, all
# positions, prefill chunks of 16 on one thread, and prefill + decode of the last three; every
# .npy of OLD and NEW must be byte-identical.
# Usage: scripts/compare_logits.sh OLD_POCKET NEW_POCKET MODEL [WORK_DIR]
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 OLD_POCKET NEW_POCKET MODEL [WORK_DIR]" >&2
  exit 2
fi
old="$1" new="$2" model="$3" work="${4:-$(mktemp -d)}"
vocab=$("$new" info "$model" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["vocab_size"])')
status=0
for n in 1 31 32 80 512; do
  ids=$(/usr/bin/python3 -c "import random; r=random.Random($n); print(','.join(str(r.randrange($vocab)) for _ in range($n)))")
  for side in old new; do
    bin="$old"; [ "$side" = new ] && bin="$new"
    mkdir -p "$work/$side"
    "$bin" logits -m "$model" --ids "$ids" --all -t 2 -o "$work/$side/all_$n.npy"
    "$bin" logits -m "$model" --ids "$ids" -t 2 -o "$work/$side/last_$n.npy"
    "$bin" logits -m "$model" --ids "$ids" -b 16 -t 1 -o "$work/$side/b16_$n.npy"
    if [ "$n" -gt 4 ]; then
      "$bin" logits -m "$model" --ids "$ids" --all --decode-from $((n - 3)) -t 2 \
        -o "$work/$side/dec_$n.npy"
    fi
  done
done
for f in "$work"/old/*.npy; do
  if cmp -s "$f" "$work/new/$(basename "$f")"; then
    echo "identical $(basename "$f")"
  else
    echo "DIFFERENT $(basename "$f")"
    status=1
  fi
done
exit $status
