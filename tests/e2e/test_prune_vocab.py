"""pocket prune-vocab end to end: the real Qwen3 tokenizer pruned to 65,536 tokens with the
shared corpus (counted on the first 90% of each file, measured on the last 10%), its
tokenizer.json read by Hugging Face's own tokenizers with the same ids as pocket, and a model
rewritten for a pruned vocabulary giving the same logits as the full one."""
import glob
import json
import os
import random
import unittest

import numpy as np

from harness import (CACHE, QWEN3_TOKENIZER, SHARED, SOURCE_DIR, ids_arg, json_lines, load_npy,
                     main_unittest, make_model, pocket, require, run, work_path)

CORPUS = sorted(glob.glob(os.path.join(SHARED, "testdata", "corpus", "zh", "*.csv")) +
                glob.glob(os.path.join(SHARED, "testdata", "corpus", "en", "*.txt")))
CODE = sorted(glob.glob(os.path.join(SOURCE_DIR, "src", "tokenizer", "*.cc")))
HF_PACKAGE = os.path.join(CACHE, "hf-tokenizers", "node_modules", "tokenizers")
HF_ORACLE = os.path.join(SOURCE_DIR, "src", "tokenizer", "testdata", "hf_oracle.js")


def held_out_lines(path, n):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    tail = lines[int(len(lines) * 0.9):]
    step = max(1, len(tail) // n)
    return [line for line in tail[::step] if line][:n]


class PruneVocab(unittest.TestCase):
    def test_qwen3_to_65536(self):
        require(QWEN3_TOKENIZER, "run scripts/fetch_fixtures.sh")
        self.assertTrue(CORPUS, "missing ../shared/testdata/corpus")
        out = work_path("qwen3-65536.json")
        p = pocket("prune-vocab", "--tokenizer", QWEN3_TOKENIZER, "--corpus", *CORPUS,
                   "--size", 65536, "-o", out, "--eval", *CODE, "--json")
        report = json.loads(p.stdout)
        print(json.dumps(report["held_out"], indent=1))
        self.assertEqual(report["pruned_vocab"], 65536)
        for cat in ("Chinese", "English"):
            self.assertLessEqual(report["held_out"][cat]["growth"], 0.03, cat)
        for cat, r in report["held_out"].items():
            self.assertTrue(r["round_trip_equal"], cat)
            self.assertGreater(r["chars"], 10000, cat)

        # Hugging Face's tokenizers reads the file and agrees with pocket, id for id.
        texts = []
        for path in CORPUS:
            texts += held_out_lines(path, 40)
        rng = random.Random(3)
        alphabet = "abc XYZ 012 你好世界的了 ¿ü€ 😀\n\t<|im_end|>"
        texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
                  for _ in range(100)]
        stdin = "".join(json.dumps({"text": t}) + "\n" for t in texts)
        ours = [line["ids"] for line in json_lines(pocket("tokenize", "-m", out,
                                                          input=stdin).stdout)]
        if os.path.exists(os.path.join(HF_PACKAGE, "package.json")):
            hf = [line["ids"] for line in json_lines(
                run(["node", HF_ORACLE, HF_PACKAGE, out], input=stdin).stdout)]
            self.assertEqual(len(hf), len(texts))
            for text, a, b in zip(texts, ours, hf):
                self.assertEqual(a, b, text)
            print(f"{len(texts)} texts: pocket and Hugging Face tokenizers agree on the pruned "
                  f"tokenizer.json")
        else:
            raise AssertionError(f"missing {HF_PACKAGE}: run scripts/fetch_fixtures.sh")

    def test_pruned_model_gives_the_same_logits(self):
        require(QWEN3_TOKENIZER, "run scripts/fetch_fixtures.sh")
        full = make_model("prune-full.gguf", type="f32", seed=4,
                          extra=("--tokenizer", QWEN3_TOKENIZER))
        small = work_path("prune-small.gguf")
        id_map = work_path("prune-map.json")
        en = [p for p in CORPUS if p.endswith("pride_and_prejudice_pg1342.txt")]
        pocket("prune-vocab", "--tokenizer", full, "--corpus", *en, "--size", 700,
               "-o", work_path("prune-small.json"), "--model", full, "--model-out", small,
               "--id-map", id_map)
        info = json.loads(pocket("info", small, "--json").stdout)
        self.assertEqual(info["vocab_size"], 700)
        self.assertEqual(info["tokenizer_vocab"], 700)
        with open(id_map) as f:
            old_of_new = json.load(f)
        self.assertEqual(len(old_of_new), 700)
        new_of_old = {o: n for n, o in enumerate(old_of_new)}

        compared = 0
        for text in held_out_lines(en[0], 60):
            a = json_lines(pocket("tokenize", "-m", full,
                                  input=json.dumps({"text": text}) + "\n").stdout)[0]["ids"]
            b = json_lines(pocket("tokenize", "-m", small,
                                  input=json.dumps({"text": text}) + "\n").stdout)[0]["ids"]
            if not a or not all(i in new_of_old for i in a):
                continue
            self.assertEqual(b, [new_of_old[i] for i in a], text)
            pocket("logits", "-m", full, "--ids", ids_arg(a), "--all", "-o", work_path("pf.npy"))
            pocket("logits", "-m", small, "--ids", ids_arg(b), "--all", "-o", work_path("ps.npy"))
            lf, ls = load_npy(work_path("pf.npy")), load_npy(work_path("ps.npy"))
            err = np.abs(lf[:, old_of_new] - ls).max()
            self.assertLessEqual(err, 1e-5, text)
            compared += 1
            if compared == 5:
                break
        print(f"{compared} texts whose tokens are all kept: same logits (max err <= 1e-5)")
        self.assertGreaterEqual(compared, 3)

    def test_errors(self):
        require(QWEN3_TOKENIZER, "run scripts/fetch_fixtures.sh")
        p = pocket("prune-vocab", "--tokenizer", QWEN3_TOKENIZER, "--corpus", CORPUS[0],
                   "--size", 100, "-o", work_path("bad.json"), check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("must stay", p.stderr)
        self.assertFalse(os.path.exists(work_path("bad.json")))
        full = make_model("prune-full.gguf", type="f32", seed=4,
                          extra=("--tokenizer", QWEN3_TOKENIZER))
        other = make_model("prune-other.gguf", type="f32", seed=4)  # a different vocabulary
        p = pocket("prune-vocab", "--tokenizer", full, "--corpus", CORPUS[0], "--size", 600,
                   "-o", work_path("x.json"), "--model", other, "--model-out",
                   work_path("x.gguf"), check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("token", p.stderr)
        self.assertFalse(os.path.exists(work_path("x.gguf")))


if __name__ == "__main__":
    main_unittest()
