"""The per-layer comparison hook: debug builds of pocket can hand out every intermediate of the
forward pass (pocket logits --trace-dir), and the numpy reference computes the same ones
(reference.py trace), so a wrong result is traced to the first layer where the two part, not only
seen in the final logits. Release builds compile the hook out (the option does not exist there)."""
import os
import shutil
import unittest

import numpy as np

from harness import (STORIES, STORIES_TOK, ids_arg, main_unittest, make_model, pocket, reference,
                     require, work_path)


def has_trace():
    return "--trace-dir" in pocket("logits", "--help").stdout


class LayerTrace(unittest.TestCase):
    def compare(self, name, model, tokenizer, ids, batch):
        if not has_trace():
            self.skipTest("a release build: the forward trace hook is compiled out")
        trace_dir = work_path(f"trace-{name}")
        shutil.rmtree(trace_dir, ignore_errors=True)
        os.makedirs(trace_dir)
        tok = ["--tokenizer", tokenizer] if tokenizer else []
        # An f32 KV cache (the precise setting): with f16 the first layer already differs by 3e-4.
        pocket("logits", "-m", model, *tok, "--kv-type", "f32", "--ids", ids_arg(ids),
               "-b", batch, "--all", "-o", os.path.join(trace_dir, "logits-all.npy"),
               "--trace-dir", trace_dir)
        ref_path = work_path(f"trace-{name}.npz")
        reference("trace", model, *tok, "--ids", ids_arg(ids), "-o", ref_path)
        ref = np.load(ref_path)
        names = ["embed"] + sorted((k for k in ref.files if k.startswith("blk.")),
                                   key=lambda k: int(k.split(".")[1]))
        self.assertGreater(len(names), 2)
        for key in names:  # in the order of the pass: the first mismatch is the culprit
            ours = np.load(os.path.join(trace_dir, key + ".npy")).astype(np.float64)
            theirs = ref[key].astype(np.float64)
            self.assertEqual(ours.shape, theirs.shape, key)
            scale = max(1.0, float(np.abs(theirs).max()))
            err = float(np.abs(ours - theirs).max()) / scale
            print(f"{name} {key}: max error {err:.2e}")
            self.assertLess(err, 2e-5, f"{name}: first difference at {key} (max error {err:.2e})")

    def test_stories260k_layer_by_layer(self):
        require(STORIES, "the shared test data (../shared/testdata) is missing")
        ids = [1, 403, 407, 261, 378, 1078, 411, 259, 1009, 29889, 13, 7, 99, 300, 12, 5, 88, 400]
        ids = [i % 512 for i in ids]
        self.compare("stories", STORIES, STORIES_TOK, ids, 8)

    def test_qwen3_layer_by_layer(self):
        model = make_model("tiny-qwen3-f32.gguf", arch="qwen3")
        ids = list(range(3, 60, 3))
        self.compare("qwen3", model, None, ids, 7)


if __name__ == "__main__":
    main_unittest()
