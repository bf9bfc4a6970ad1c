"""Shared helpers for the end-to-end tests: where the pocket binary, the numpy reference and the
shared test data are, and small wrappers to run them. Run by ctest with POCKET_BIN,
POCKET_SHARED_DIR, POCKET_CACHE_DIR and POCKET_WORK_DIR set (tests/CMakeLists.txt)."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(os.path.dirname(HERE))
REFERENCE = os.path.join(SOURCE_DIR, "tests", "reference", "reference.py")
POCKET = os.environ.get("POCKET_BIN", os.path.join(SOURCE_DIR, "build", "bin", "pocket"))
SHARED = os.environ.get("POCKET_SHARED_DIR", os.path.join(SOURCE_DIR, "..", "shared"))
CACHE = os.environ.get("POCKET_CACHE_DIR", os.path.join(SOURCE_DIR, "cache"))
WORK = os.environ.get("POCKET_WORK_DIR") or tempfile.mkdtemp(prefix="pocket-e2e-")
os.makedirs(WORK, exist_ok=True)
PYTHON = "/usr/bin/python3"

STORIES = os.path.join(SHARED, "testdata", "stories260K", "stories260K.bin")
STORIES_TOK = os.path.join(SHARED, "testdata", "stories260K", "tok512.bin")
QWEN3_TOKENIZER = os.path.join(CACHE, "tokenizer-qwen3", "package", "models", "tokenizer.json")


def require(path, hint):
    if not os.path.exists(path):
        raise SystemExit(f"missing {path}: {hint}")


def run(args, check=True, input=None, timeout=600, env=None):
    """Runs a command; returns CompletedProcess with text stdout/stderr."""
    p = subprocess.run(args, input=input, capture_output=True, text=True, timeout=timeout,
                       env=env)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {p.returncode}\nstdout: {p.stdout[-2000:]}\n"
                             f"stderr: {p.stderr[-4000:]}")
    return p


def pocket(*args, **kw):
    return run([POCKET, *map(str, args)], **kw)


def reference(*args, **kw):
    return run([PYTHON, REFERENCE, *map(str, args)], **kw)


def work_path(name):
    return os.path.join(WORK, name)


def make_model(name, preset="tiny", arch="qwen3", type="f32", seed=1, extra=()):
    """Writes a synthetic model once per test run; returns its path."""
    path = work_path(name)
    if not os.path.exists(path):
        pocket("make-model", "--preset", preset, "--arch", arch, "--type", type, "--seed", seed,
               *extra, "-o", path)
    return path


def load_npy(path):
    return np.load(path).astype(np.float64)


def ids_arg(ids):
    return ",".join(str(i) for i in ids)


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def assert_greedy_agrees(test, ours, ref, model, prompt_ids, tie, ref_args=()):
    """Greedy tokens of the engine (`ours`) and of the numpy reference (`ref`), generated from
    `prompt_ids`: equal token for token, except that two computations that round differently may
    part at a near-tie. At the first position k where they differ, the reference's logits after
    prompt + ref[:k] must rank ref[k] first and ours[k] within `tie` of it (`tie`: the engine's
    error bound against the reference on this path); both continuations of such a tie are right,
    so the comparison ends there. Returns how many tokens agree."""
    n = min(len(ours), len(ref))
    k = next((i for i in range(n) if ours[i] != ref[i]), n)
    if k == n:
        test.assertEqual(len(ours), len(ref), "one run stopped where the other went on")
        return k
    out = work_path(f"greedy-tie-{os.getpid()}.npy")
    reference("logits", model, "--ids", ids_arg(list(prompt_ids) + list(ref[:k])), *ref_args,
              "-o", out)
    row = load_npy(out)[-1]
    gap = float(row[ref[k]] - row[ours[k]])
    print(f"greedy runs part at token {k}: reference logit of its token {ref[k]} is {gap:.2e} "
          f"above ours ({ours[k]}); near-tie bound {tie:g}")
    test.assertEqual(int(row.argmax()), ref[k], "the reference's own greedy token")
    test.assertLessEqual(gap, tie, f"token {k}: not a near-tie, the engine chose another token")
    return k


def main_unittest():
    import unittest
    unittest.main(argv=[sys.argv[0], "-v"], exit=True)
