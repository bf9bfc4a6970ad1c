#!/usr/bin/env bash
# Prompt lookup on real text: the stories260K model (llama2.c, trained) on story prompts that
# repeat themselves, and on an input-copying task (a passage, then its opening again: the model
# goes on copying). For each prompt and mode (none, lookup, auto), R runs of `pocket run --json`
# (greedy, 1 thread); prints the median decode tokens/s, the mean accepted draft length per
# verification pass, tokens per target pass, and the speedup over plain decoding in the same run
# (modes interleaved per repetition). Greedy tokens must be identical across modes (checked).
# Usage: scripts/spec_lookup.sh [POCKET] [REPETITIONS] [TOKENS]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
pocket="${1:-$root/build/bin/pocket}"
reps="${2:-5}"
n="${3:-200}"
shared="${POCKET_SHARED_DIR:-$root/../shared}"
model="$shared/testdata/stories260K/stories260K.bin"
tok="$shared/testdata/stories260K/tok512.bin"
/usr/bin/python3 - "$pocket" "$model" "$tok" "$reps" "$n" <<'EOF'
import json, statistics, subprocess, sys
pocket, model, tok, reps, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
passage = ("Lily had a red ball. She liked to play with her ball in the park every day. One day, "
           "the ball rolled into the pond and a big frog sat on it. Lily laughed and said, "
           "\"Frog, can I have my ball back?\" The frog jumped away and Lily took her ball home.")
prompts = {
    "story (repeats)": "Lily and Tom went to the park. Lily and Tom",
    "story (open)": "Once upon a time",
    "copy a passage": passage + "\n\n" + passage[:60],
}
modes = ["none", "lookup", "lookup --draft-branches 4", "auto"]
print(f"| prompt | mode | decode tokens/s (median of {reps}) | accepted per pass | tokens per "
      f"target pass | speedup |")
print("|---|---|---|---|---|---|")
for name, prompt in prompts.items():
    runs = {m: [] for m in modes}
    for _ in range(reps):
        for m in modes:
            out = subprocess.run([pocket, "run", "-m", model, "--tokenizer", tok, "-p", prompt,
                                  "-n", n, "--temp", "0", "-t", "1", "--json", "--spec"] + m.split(),
                                 capture_output=True, text=True, check=True)
            runs[m].append(json.loads(out.stdout))
    plain_tokens = runs["none"][0]["tokens"]
    plain = statistics.median(r["decode_tokens_per_s"] for r in runs["none"])
    for m in modes:
        for r in runs[m]:
            if r["tokens"] != plain_tokens:
                sys.exit(f"{name} {m}: tokens differ from plain decoding")
        r = runs[m][0]
        tps = statistics.median(x["decode_tokens_per_s"] for x in runs[m])
        passes = r["verify_passes"]
        accepted = r["accepted_draft_tokens"] / passes if passes else 0.0
        target_passes = passes + r["plain_decode_steps"] if m != "none" else len(r["tokens"])
        per_pass = len(r["tokens"]) / target_passes if target_passes else 0.0
        print(f"| {name} | {m} | {tps:.0f} | {accepted:.2f} | {per_pass:.2f} | {tps / plain:.2f}x |")
EOF
