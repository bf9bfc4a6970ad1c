"""The DFlash block drafter (src/model/dflash.h) against the independent numpy reference
(tests/reference/dflash.py), on synthetic targets and drafters (`pocket make-model --preset
dflash-drafter --target MODEL`).

- Fidelity (issue 13): the oracle path (--no-repack --kv-type f32, f32 drafter weights): every row
  of every block's logits within 1e-4 of the largest |logit| of the reference. Blocks are drafted
  in an order that goes forward, back (the target rejected drafts: the drafter's context is cut)
  and forward again, and once with no context, while the reference recomputes each from scratch.
- The quantized drafter forms (int8, int4) stay close to the reference.
- Bad input: malformed config fields, a missing tensor, a wrong shape, a mask id outside the
  vocabulary, a target layer past the target's depth, another hidden or vocabulary size: each
  exits 1 with a message naming the field or tensor.
"""
import json
import os
import shutil
import struct
import unittest

import numpy as np

from harness import (ids_arg, load_npy, main_unittest, make_model, pocket, reference, work_path)

ORACLE = ("--no-repack", "--kv-type", "f32")
TOLERANCE = 1e-4  # relative to the largest |logit| of the reference


def token_ids(vocab, n, seed):
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(0, vocab, size=n)]


def make_drafter(name, target, extra=()):
    path = work_path(name)
    if not os.path.exists(os.path.join(path, "model.safetensors")):
        pocket("make-model", "--preset", "dflash-drafter", "--target", target, *extra, "-o", path)
    return path


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", None)
    tensors = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        tensors[name] = (e["dtype"], list(e["shape"]), data[b:end])
    return meta, tensors


def write_safetensors(path, meta, tensors):
    header, blobs, offset = {}, [], 0
    if meta is not None:
        header["__metadata__"] = meta
    for name, (dtype, shape, blob) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


class DrafterMatchesReference(unittest.TestCase):
    def compare(self, target, drafter, tag, ids, blocks, flags=ORACLE, weights="f32",
                tol=TOLERANCE):
        ours, ref = work_path(f"dflash-{tag}.pocket.npy"), work_path(f"dflash-{tag}.ref.npy")
        pocket("drafter-logits", "-m", target, "--drafter", drafter, "--ids", ids_arg(ids),
               "--block-at", ids_arg(blocks), "--drafter-weights", weights, *flags, "-o", ours)
        if not os.path.exists(ref):
            reference("dflash", target, drafter, "--ids", ids_arg(ids), "--block-at",
                      ids_arg(blocks), "-o", ref)
        a, b = load_npy(ours), load_npy(ref)
        self.assertEqual(a.shape, b.shape)
        scale = np.abs(b).max()
        err = np.abs(a - b).max()
        print(f"{tag} ({weights}): max |logit| {scale:.3f}; max err {err:.2e} = {err / scale:.2e} "
              f"relative (tolerance {tol:g})")
        self.assertGreater(scale, 0.1, "logits are all near zero: the comparison would be empty")
        self.assertLessEqual(err, tol * scale)
        return a, b

    def test_qwen3_target_gqa_with_rollback(self):
        target = make_model("dflash-target-qwen3.gguf", extra=("--layers", "4"))
        drafter = make_drafter("dflash-drafter-qwen3", target)
        ids = token_ids(1024, 80, seed=1)
        # forward 70, back to 20 (rollback), forward 79 in one append of many rows, no context
        a, b = self.compare(target, drafter, "qwen3", ids, [70, 20, 79, 0])
        B = 9
        ours = a.reshape(4, B, -1)[:, 1:].argmax(axis=2)
        theirs = b.reshape(4, B, -1)[:, 1:].argmax(axis=2)
        # The same drafts, except where the reference's top two are within the tolerance (two
        # roundings may order a near-tie either way): those rows are left out, and must be few.
        top2 = np.sort(b.reshape(4, B, -1)[:, 1:], axis=2)[..., -2:]
        clear = (top2[..., 1] - top2[..., 0]) > 2 * TOLERANCE * np.abs(b).max()
        self.assertGreaterEqual(int(clear.sum()), clear.size - 2, "too many near-ties to compare")
        self.assertTrue((ours == theirs)[clear].all(), f"drafts differ: {ours} vs {theirs}")

    def test_llama_target_bf16_drafter_other_shape(self):
        # Interleaved-RoPE target (GGUF llama), untied output; a 3-layer bf16 drafter of block 5.
        target = make_model("dflash-target-llama.gguf", arch="llama")
        drafter = make_drafter("dflash-drafter-llama", target,
                               ("--type", "bf16", "--layers", "3", "--block-size", "5"))
        ids = token_ids(1024, 40, seed=2)
        self.compare(target, drafter, "llama", ids, [33, 39, 5])

    def test_qwen2_hf_target_f16_drafter(self):
        target = make_model("dflash-target-qwen2-hf", arch="qwen2", type="bf16")
        drafter = make_drafter("dflash-drafter-qwen2", target, ("--type", "f16"))
        ids = token_ids(1024, 24, seed=3)
        self.compare(target, drafter, "qwen2", ids, [23, 10])

    def test_quantized_drafter_forms(self):
        target = make_model("dflash-target-qwen3.gguf", extra=("--layers", "4"))
        drafter = make_drafter("dflash-drafter-qwen3", target)
        ids = token_ids(1024, 80, seed=1)
        # The default engine path (f16 KV cache) with packed drafter matrices. f32 drafter
        # weights: 8.6e-4 relative on the reference, avx2 and avx512 tables; 4.3e-3 on amx, whose
        # bf16 prefill attention (8-bit mantissas, 2^-8 = 3.9e-3) the 79-row append takes.
        self.compare(target, drafter, "qwen3", ids, [70, 20, 79, 0], flags=(), weights="f32",
                     tol=1e-2)
        self.compare(target, drafter, "qwen3", ids, [70, 20, 79, 0], flags=(), weights="int8",
                     tol=8e-2)
        self.compare(target, drafter, "qwen3", ids, [70, 20, 79, 0], flags=(), weights="int4",
                     tol=0.5)


class BadDrafters(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.target = make_model("dflash-target-qwen3.gguf", extra=("--layers", "4"))
        cls.good = make_drafter("dflash-drafter-qwen3", cls.target)

    def variant(self, tag, config=None, tensors=None):
        """A copy of the good drafter with config.json edited by config(dict) and the tensors by
        tensors(dict name -> (dtype, shape, bytes))."""
        path = work_path(f"dflash-bad-{tag}")
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

    def expect_error(self, drafter, *needles):
        p = pocket("drafter-logits", "-m", self.target, "--drafter", drafter, "--ids", "1,2,3",
                   "-o", work_path("dflash-bad.npy"), check=False)
        self.assertEqual(p.returncode, 1, f"exit {p.returncode}; stderr: {p.stderr}")
        self.assertIn("pocket: error:", p.stderr)
        for needle in needles:
            self.assertIn(needle, p.stderr)
        print(p.stderr.strip())

    def test_config_fields(self):
        def set_(key, value):
            return lambda c: c.__setitem__(key, value)

        def set_dflash(key, value):
            return lambda c: c["dflash_config"].__setitem__(key, value)

        def drop(key):
            return lambda c: c.pop(key)

        cases = [
            ("arch", set_("architectures", ["Qwen3ForCausalLM"]), ["architectures"]),
            ("no-block", drop("block_size"), ["block_size", "missing"]),
            ("block-1", set_("block_size", 1), ["block_size", "1"]),
            ("block-str", set_("block_size", "9"), ["block_size"]),
            ("no-dflash", drop("dflash_config"), ["dflash_config"]),
            ("mask-range", set_dflash("mask_token_id", 1024), ["mask_token_id", "1024"]),
            ("mask-neg", set_dflash("mask_token_id", -1), ["mask_token_id"]),
            ("layer-past", set_dflash("target_layer_ids", [1, 2, 4]), ["target_layer_ids", "4"]),
            ("layers-empty", set_dflash("target_layer_ids", []), ["target_layer_ids"]),
            ("hidden", set_("hidden_size", 128), ["hidden_size", "128"]),
            ("vocab", set_("vocab_size", 2048), ["vocab_size", "2048"]),
            ("heads", set_("num_attention_heads", 3), ["num_attention_heads"]),
            ("no-layers", drop("num_hidden_layers"), ["num_hidden_layers"]),
        ]
        for tag, edit, needles in cases:
            with self.subTest(tag=tag):
                self.expect_error(self.variant(tag, config=edit), *needles)

    def test_tensors(self):
        def missing(t):
            del t["layers.1.mlp.up_proj.weight"]

        def transposed(t):
            dtype, shape, blob = t["fc.weight"]
            t["fc.weight"] = (dtype, shape[::-1], blob)

        def short_norm(t):
            dtype, shape, blob = t["hidden_norm.weight"]
            t["hidden_norm.weight"] = (dtype, [shape[0] // 2], blob[:len(blob) // 2])

        self.expect_error(self.variant("missing", tensors=missing), "layers.1.mlp.up_proj.weight",
                          "missing")
        self.expect_error(self.variant("shape", tensors=transposed), "fc.weight", "[256, 768]",
                          "[768, 256]")
        self.expect_error(self.variant("norm", tensors=short_norm), "hidden_norm.weight", "[256]",
                          "[128]")

    def test_drafter_for_a_shallower_target(self):
        # The 4-layer target's drafter reads layer 3; a 2-layer target has no such layer.
        shallow = make_model("dflash-target-shallow.gguf")
        p = pocket("drafter-logits", "-m", shallow, "--drafter", self.good, "--ids", "1,2,3",
                   "-o", work_path("dflash-bad.npy"), check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("target_layer_ids", p.stderr)


if __name__ == "__main__":
    main_unittest()
