"""`pocket convert --drafter DIR` (issue 13): the DFlash block drafter stored in the model's
.pocket package, so one file deploys both.

- The packaged drafter's logits (`pocket drafter-logits --drafter package`) equal, bit for bit,
  those of the drafter loaded from its directory with the same weight form against the same
  package (int8, the default; int4; f32 as stored), over blocks that go forward and back.
- `pocket info` shows it (text and --json); `pocket verify` passes; converting the package again
  keeps it.
- Bad input: a drafter for another target (hidden size, layers past the target's depth), a
  missing tensor, a wrong shape, an unknown --drafter-weights, a missing directory: exit 1 with a
  message naming the field or tensor, and no output file.
"""
import json
import os
import shutil
import unittest

import numpy as np

from harness import ids_arg, main_unittest, make_model, pocket, work_path
from test_dflash_reference import make_drafter, read_safetensors, token_ids, write_safetensors

BLOCKS = [30, 12, 39, 0]


class PackagedDrafter(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.target = make_model("cd-target-qwen3.gguf", extra=("--layers", "4"))
        cls.drafter = make_drafter("cd-drafter-qwen3", cls.target)
        cls.ids = token_ids(1024, 40, seed=5)

    def convert(self, name, *extra, weights="int8"):
        out = work_path(name)
        if os.path.exists(out):
            os.remove(out)
        p = pocket("convert", self.target, "-o", out, "--weights", weights, "--drafter",
                   self.drafter, *extra)
        self.assertIn("| drafter |", p.stdout)
        print(p.stdout.strip())
        return out

    def logits(self, model, drafter, tag, *extra):
        out = work_path(f"cd-{tag}.npy")
        pocket("drafter-logits", "-m", model, "--drafter", drafter, "--ids", ids_arg(self.ids),
               "--block-at", ids_arg(BLOCKS), *extra, "-o", out)
        return np.load(out)

    def test_packaged_equals_directory_loaded(self):
        for weights in ("int8", "int4", "f32"):
            with self.subTest(weights=weights):
                extra = () if weights == "int8" else ("--drafter-weights", weights)
                package = self.convert(f"cd-{weights}.pocket", *extra)
                a = self.logits(package, "package", f"{weights}-package")
                b = self.logits(package, self.drafter, f"{weights}-dir", "--drafter-weights",
                                weights)
                self.assertEqual(a.shape, b.shape)
                self.assertGreater(np.abs(b).max(), 0.1)
                # One scalar quantizer made both drafters' codes, and one table runs both.
                self.assertTrue(np.array_equal(a, b),
                                f"{weights}: max difference {np.abs(a - b).max():g}")

    def test_info_verify_and_reconvert(self):
        package = self.convert("cd-info.pocket")
        text = pocket("info", package).stdout
        self.assertIn("drafter:      DFlash block drafter: 2 layers, block 9", text)
        self.assertIn("int8", text)
        info = json.loads(pocket("info", package, "--json").stdout)
        d = info["drafter"]
        self.assertEqual(d["n_layers"], 2)
        self.assertEqual(d["block_size"], 9)
        self.assertEqual(d["weights"], "int8")
        self.assertEqual(d["target_layer_ids"], [1, 2, 3])
        self.assertGreater(d["weight_bytes"], 0)
        self.assertIn("drafter", info["tensor_groups"])
        pocket("verify", package)
        # Converting the package again keeps its drafter, unchanged (from a package with dense
        # target matrices: the converter does not read fused packed matrices back).
        package = self.convert("cd-dense.pocket", weights="f32")
        again = work_path("cd-again.pocket")
        if os.path.exists(again):
            os.remove(again)
        pocket("convert", package, "-o", again, "--weights", "f32")
        a = self.logits(package, "package", "again-a")
        b = self.logits(again, "package", "again-b")
        self.assertTrue(np.array_equal(a, b))
        # A package without a drafter says so.
        plain = work_path("cd-plain.pocket")
        if os.path.exists(plain):
            os.remove(plain)
        pocket("convert", self.target, "-o", plain, "--weights", "int8")
        self.assertNotIn("drafter:", pocket("info", plain).stdout)
        p = pocket("drafter-logits", "-m", plain, "--drafter", "package", "--ids", "1,2,3", "-o",
                   work_path("cd-plain.npy"), check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("holds no block drafter", p.stderr)


class BadDrafters(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.target = make_model("cd-target-qwen3.gguf", extra=("--layers", "4"))
        cls.good = make_drafter("cd-drafter-qwen3", cls.target)

    def variant(self, tag, config=None, tensors=None):
        path = work_path(f"cd-bad-{tag}")
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(self.good, path)
        if config is not None:
            with open(os.path.join(path, "config.json")) as f:
                c = json.load(f)
            config(c)
            with open(os.path.join(path, "config.json"), "w") as f:
                json.dump(c, f)
        if tensors is not None:
            st = os.path.join(path, "model.safetensors")
            meta, t = read_safetensors(st)
            tensors(t)
            write_safetensors(st, meta, t)
        return path

    def expect_error(self, drafter, *needles, target=None, extra=()):
        out = work_path("cd-bad.pocket")
        if os.path.exists(out):
            os.remove(out)
        p = pocket("convert", target or self.target, "-o", out, "--drafter", drafter, *extra,
                   check=False)
        self.assertNotEqual(p.returncode, 0, f"stderr: {p.stderr}")
        self.assertIn("pocket: error:", p.stderr)
        for needle in needles:
            self.assertIn(needle, p.stderr)
        self.assertFalse(os.path.exists(out), "a failed conversion left an output file")
        self.assertEqual([f for f in os.listdir(os.path.dirname(out)) if "cd-bad.pocket" in f], [])
        print(p.stderr.strip())

    def test_drafter_for_another_target(self):
        self.expect_error(self.variant("hidden", config=lambda c: c.update(hidden_size=128)),
                          "hidden_size", "128")
        self.expect_error(self.variant("vocab", config=lambda c: c.update(vocab_size=2048)),
                          "vocab_size", "2048")
        shallow = make_model("cd-target-shallow.gguf", extra=("--layers", "2"))
        self.expect_error(self.good, "target_layer_ids", target=shallow)

    def test_bad_tensors(self):
        def missing(t):
            del t["layers.1.mlp.up_proj.weight"]

        def transposed(t):
            dtype, shape, blob = t["fc.weight"]
            t["fc.weight"] = (dtype, shape[::-1], blob)

        self.expect_error(self.variant("missing", tensors=missing), "layers.1.mlp.up_proj.weight",
                          "missing")
        self.expect_error(self.variant("shape", tensors=transposed), "fc.weight")

    def test_bad_options(self):
        self.expect_error(self.good, "--drafter-weights", "int3", extra=("--drafter-weights",
                                                                         "int3"))
        self.expect_error(work_path("cd-no-such-drafter"), "cd-no-such-drafter")


if __name__ == "__main__":
    main_unittest()
