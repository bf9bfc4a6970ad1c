#!/usr/bin/python3
"""Self-check of the .pocket reader (pocket_io.py). Plain python; exit code 0 when all pass.

  /usr/bin/python3 tests/reference/test_pocket.py      (also run by test_reference.py)

.pocket files are built here byte by byte from docs/format.md ("The .pocket package") with a
bitwise CRC-32C and a loop-based packer, independent of the reader's vectorized code; the
reader must give back exactly the values put in, and refuse corrupt or truncated files.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gguf  # noqa: E402
import model as model_lib  # noqa: E402
import pocket_io  # noqa: E402
import test_models  # noqa: E402


def crc32c_bitwise(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in bytes(data):
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


# ----------------------------------------------------------------------------- writer (from the spec)

def pack_matrix(codes, d, m, bits, group):
    """codes [rows, cols] ints, d/m [rows, cols/group] float16 (m None: symmetric) -> packed bytes.
    Rows are taken as given in panels of 16; a short last panel is padded with zero bytes."""
    rows, cols = codes.shape
    out = bytearray()
    for p in range(0, rows, 16):
        for g in range(cols // group):
            c0 = g * group

            def code(r, col):
                return int(codes[p + r, c0 + col]) if p + r < rows else 0
            if bits == 8:
                for i in range(group // 4):
                    out += bytes(code(r, 4 * i + j) for r in range(16) for j in range(4))
            else:
                half = group // 8
                for i in range(half):
                    out += bytes(code(r, 4 * i + j) | code(r, 4 * (i + half) + j) << 4
                                 for r in range(16) for j in range(4))
            for s in ([d] if m is None else [d, m]):
                for r in range(16):
                    out += struct.pack("<e", float(s[p + r, g])) if p + r < rows else b"\0\0"
    return bytes(out)


def packed_case(rng, rows, cols, bits, group, explicit_min):
    """Random codes and scales -> (bytes, expected float32 w = d*code + m)."""
    codes = rng.integers(0, 1 << bits, (rows, cols))
    d = rng.uniform(0.001, 0.05, (rows, cols // group)).astype(np.float16)
    m = rng.uniform(-0.5, 0.2, d.shape).astype(np.float16) if explicit_min else None
    d32 = np.repeat(d.astype(np.float32), group, axis=1)
    m32 = (np.repeat(m.astype(np.float32), group, axis=1) if explicit_min
           else np.float32(-(8 if bits == 4 else 128)) * d32)
    return codes, d, m, d32 * codes.astype(np.float32) + m32


def tokenizer_section(tokens, types, scores, merges, special, pre="qwen2"):
    blob = b"".join(t.encode("utf-8") for t in tokens)
    offsets = np.cumsum([0] + [len(t.encode("utf-8")) for t in tokens]).astype("<u4")
    out = b"PTOK" + struct.pack("<I4B4i", 1, 0, 1, 0, 0, *special)
    out += struct.pack("<I", len(pre)) + pre.encode() + struct.pack("<I", len(tokens))
    out += bytes(types) + offsets.tobytes() + blob
    out += struct.pack("<I", 1) + np.asarray(scores, "<f4").tobytes()
    return out + struct.pack("<I", len(merges)) + np.asarray(merges, "<u4").tobytes()


def build_pocket(sections, major=1):
    """sections: [(name, payload, flags)] -> the whole file (table at 64, sections 64-aligned)."""
    pos, layout = 64 + 64 * len(sections), []
    for name, payload, flags in sections:
        pos = -(-pos // 64) * 64
        layout.append((name, pos, payload, flags))
        pos += len(payload)
    out = bytearray(pos)
    for i, (name, off, payload, flags) in enumerate(layout):
        out[off:off + len(payload)] = payload
        out[64 + 64 * i:128 + 64 * i] = struct.pack("<16sQQII24x", name.encode(), off, len(payload),
                                                    crc32c_bitwise(payload), flags)
    head = struct.pack("<8sHHIQQII20x", b"POCKETPK", major, 0, 64, pos, 64, len(sections), 0)
    out[:64] = head + struct.pack("<I", crc32c_bitwise(head))
    return bytes(out)


class Package:
    def __init__(self):
        self.entries, self.data, self.expected = [], bytearray(), {}

    def add(self, name, dims, raw, expected, encoding=0, code=0, explicit_min=0, group=0):
        self.data += b"\0" * ((-len(self.data)) % 64)
        e = struct.pack("<H", len(name)) + name.encode() + struct.pack("<4BI", encoding, code,
                                                                     explicit_min, len(dims), group)
        e += struct.pack(f"<{len(dims)}q", *dims) + struct.pack("<QQ", len(self.data), len(raw))
        self.entries.append(e)
        self.data += raw
        self.expected[name] = np.asarray(expected, np.float32).reshape(dims)

    def dense(self, name, a, code):
        a = np.asarray(a, np.float32)
        if code == 0:
            return self.add(name, a.shape, a.astype("<f4").tobytes(), a, code=0)
        if code == 1:
            h = a.astype("<f2")
            return self.add(name, a.shape, h.tobytes(), h.astype(np.float32), code=1)
        bits = (a.view(np.uint32) >> 16).astype("<u2")                # bf16: truncated f32
        return self.add(name, a.shape, bits.tobytes(), (bits.astype(np.uint32) << 16).view(np.float32),
                        code=2)

    def blocks(self, rng, name, dims, ggml_type, code):
        raw = test_models.random_blocks(rng, ggml_type, int(np.prod(dims)))
        self.add(name, dims, raw, gguf.dequantize(np.frombuffer(raw, np.uint8), ggml_type,
                                                  int(np.prod(dims))), code=code)

    def packed(self, rng, name, rows, cols, bits, group, explicit_min):
        codes, d, m, w = packed_case(rng, rows, cols, bits, group, explicit_min)
        self.add(name, (rows, cols), pack_matrix(codes, d, m, bits, group), w, 1, bits,
                 explicit_min, group)
        return w

    def packed_gate_up(self, rng, name, d_ff, cols, bits, group, explicit_min):
        """Fused [2 d_ff, cols]: gate panel i, up panel i alternately, each half padded alone."""
        parts = [packed_case(rng, d_ff, cols, bits, group, explicit_min) for _ in range(2)]
        n_pan, pad_rows = -(-d_ff // 16), -(-d_ff // 16) * 16 - d_ff

        def interleave(i):        # (panels of gate, panels of up), zero rows (and scales) as padding
            a = [np.concatenate([x[i], np.zeros((pad_rows,) + x[i].shape[1:], x[i].dtype)])
                 for x in parts]
            return np.stack([a[0].reshape(n_pan, 16, -1), a[1].reshape(n_pan, 16, -1)], 1
                            ).reshape(2 * n_pan * 16, -1)
        m = interleave(2) if explicit_min else None
        raw = pack_matrix(interleave(0), interleave(1), m, bits, group)
        self.add(name, (2 * d_ff, cols), raw, np.concatenate([parts[0][3], parts[1][3]]), 1, bits,
                 explicit_min, group)
        return parts[0][3], parts[1][3]

    def directory(self):
        return struct.pack("<I", len(self.entries)) + b"".join(self.entries)


def tiny_package(rng, arch="qwen3", qk_norm=True, qkv_bias=False, tied=True, rope="neox"):
    """Two layers: layer 0 fused (qkv packed 4-bit min g32, gate_up 4-bit min g64, output 8-bit
    sym), layer 1 separate names in other encodings. d_ff = 40: the gate/up halves are padded."""
    L, D, H, KV, HD, FF, V = 2, 64, 4, 2, 16, 40, 50
    meta = dict(format="pocket", architecture=arch, n_layers=L, d_model=D, n_heads=H,
                n_kv_heads=KV, head_dim=HD, d_ff=FF, vocab_size=V, n_ctx_train=256,
                rope_base=10000.0, rms_eps=1e-6, rope_style=rope, qk_norm=qk_norm,
                qkv_bias=qkv_bias, tied_output=tied, bos_token_id=-1, eos_token_id=3,
                pad_token_id=4, generation=dict(temperature=0.7, top_k=20, top_p=0.8, min_p=0.0,
                                                repetition_penalty=1.0, max_tokens=64),
                inference=dict(n_ctx=256, kv_type="f16"), quantization=dict(weights="int4"),
                source=dict(path="synthetic", format="test"))
    pk, w = Package(), {}
    pk.blocks(rng, "token_embd.weight", (V, D), gguf.Q8_0, 3)
    w["token_embd"] = pk.expected["token_embd.weight"]
    pk.dense("output_norm.weight", rng.uniform(0.5, 1.5, D), 0)
    w["output_norm"] = pk.expected["output_norm.weight"]
    if not tied:
        w["output"] = pk.packed(rng, "output.weight", V, D, 8, 32, 0)
    else:
        w["output"] = w["token_embd"]
    q_dim, kv_dim = H * HD, KV * HD
    for i in range(L):
        b = f"blk.{i}."
        for nm, canon, n in (("attn_norm", "attn_norm", D), ("ffn_norm", "ffn_norm", D)) + \
                (("attn_q_norm", "q_norm", HD), ("attn_k_norm", "k_norm", HD)) * qk_norm:
            pk.dense(b + nm + ".weight", rng.uniform(0.5, 1.5, n), 0)
            w[f"{i}.{canon}"] = pk.expected[b + nm + ".weight"]
        if qkv_bias:
            for nm, canon, n in (("attn_q", "bq", q_dim), ("attn_k", "bk", kv_dim),
                                 ("attn_v", "bv", kv_dim)):
                pk.dense(b + nm + ".bias", rng.normal(0, 0.1, n), 0)
                w[f"{i}.{canon}"] = pk.expected[b + nm + ".bias"]
        if i == 0:
            qkv = pk.packed(rng, b + "attn_qkv.weight", q_dim + 2 * kv_dim, D, 4, 32, 1)
            w["0.wq"], w["0.wk"], w["0.wv"] = np.split(qkv, [q_dim, q_dim + kv_dim])
            w["0.wo"] = pk.packed(rng, b + "attn_output.weight", D, q_dim, 8, 64, 0)
            w["0.w_gate"], w["0.w_up"] = pk.packed_gate_up(rng, b + "ffn_gate_up.weight", FF, D,
                                                           4, 64, 1)
            pk.dense(b + "ffn_down.weight", rng.normal(0, 0.1, (D, FF)), 2)
        else:
            pk.dense(b + "attn_q.weight", rng.normal(0, 0.1, (q_dim, D)), 1)
            pk.blocks(rng, b + "attn_k.weight", (kv_dim, D), gguf.Q8_0, 3)
            pk.blocks(rng, b + "attn_v.weight", (kv_dim, D), gguf.Q4_0, 4)
            pk.blocks(rng, b + "attn_output.weight", (D, q_dim), gguf.Q4_1, 5)
            w["1.w_gate"] = pk.packed(rng, b + "ffn_gate.weight", FF, D, 8, 32, 1)
            w["1.w_up"] = pk.packed(rng, b + "ffn_up.weight", FF, D, 4, 64, 0)
            pk.dense(b + "ffn_down.weight", rng.normal(0, 0.1, (D, FF)), 0)
            for nm, canon in (("attn_q", "wq"), ("attn_k", "wk"), ("attn_v", "wv"),
                              ("attn_output", "wo")):
                w[f"1.{canon}"] = pk.expected[b + nm + ".weight"]
        w[f"{i}.w_down"] = pk.expected[b + "ffn_down.weight"]
    # Not used by the model: the K-quants and odd packed shapes (group 96, rows not a multiple of 16).
    pk.blocks(rng, "test.q4_K", (3, 256), gguf.Q4_K, 6)
    pk.blocks(rng, "test.q6_K", (2, 256), gguf.Q6_K, 7)
    pk.packed(rng, "test.packed4_sym_g96", 20, 192, 4, 96, 0)
    pk.packed(rng, "test.packed8_min_g96", 7, 192, 8, 96, 1)
    tokens = ["<unk>", "a", "Ġb", "<|end|>", "<|pad|>", "Ġ", "héllo", "ä¸Ń"]
    tok = tokenizer_section(tokens, [2, 1, 1, 3, 3, 1, 1, 6], np.arange(8) * -0.5,
                            [(5, 1), (1, 2)], (-1, 3, 4, 0))
    sections = [("meta", json.dumps(meta).encode(), 1), ("tokenizer", tok, 0),
                ("chat_template", "{{ messages }}".encode(), 0),
                ("tensors", pk.directory(), 1), ("data", bytes(pk.data), 1)]
    cfg = model_lib.Config(arch, L, D, FF, H, KV, HD, V, 10000.0, 1e-6, rope, "pocket")
    return sections, pk, model_lib.Model(cfg, w), tokens


def refused(path, data, fragment, verify_data=False):
    with open(path, "wb") as f:
        f.write(data)
    try:
        pocket_io.PocketFile(path, verify_data=verify_data)
        return False, "accepted"
    except ValueError as e:
        return fragment in str(e), str(e)


def run_all(tmp, check):
    check("CRC-32C check value crc32c(b'123456789') == 0xE3069283",
          pocket_io.crc32c(b"123456789") == 0xE3069283 == crc32c_bitwise(b"123456789"))
    rng = np.random.default_rng(7)
    ok = True
    for n in (0, 1, 63, 4095, 4096, 4097, 70001, 262147):
        buf = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        ok &= pocket_io.crc32c(buf) == crc32c_bitwise(buf)
        ok &= pocket_io.crc32c(buf[n // 3:], pocket_io.crc32c(buf[:n // 3])) == crc32c_bitwise(buf)
    check("CRC-32C (vectorized) equals the bitwise definition, chaining included", ok)

    sections, pk, want, tokens = tiny_package(rng)
    path = os.path.join(tmp, "tiny.pocket")
    data = build_pocket(sections)
    with open(path, "wb") as f:
        f.write(data)
    pf = pocket_io.PocketFile(path, verify_data=True)
    check("sections listed in order with sizes", [(s.name, s.size) for s in pf.sections.values()]
          == [(n, len(p)) for n, p, _ in sections])
    bad = [n for n, a in pk.expected.items() if not np.array_equal(pf.tensor(n), a)]
    check(f"all {len(pk.expected)} stored tensors read back exactly (dense, K-quants, packed "
          f"4/8-bit min/sym, groups 32/64/96, fused)", not bad, f"differ: {bad}" if bad else "")
    parts = {"blk.0.attn_q.weight": "0.wq", "blk.0.attn_k.weight": "0.wk", "blk.0.attn_v.weight": "0.wv",
             "blk.0.ffn_gate.weight": "0.w_gate", "blk.0.ffn_up.weight": "0.w_up"}
    check("fused attn_qkv / ffn_gate_up split into q, k, v / gate, up",
          all(np.array_equal(pf.logical_tensor(n), want.weights[c]) for n, c in parts.items()))
    t = pf.tokenizer
    check("tokenizer: strings, types, scores, merges, special ids, pre-tokenizer",
          t.strings == tokens and list(t.types) == [2, 1, 1, 3, 3, 1, 1, 6]
          and np.array_equal(t.scores, np.arange(8) * -0.5) and t.merges.tolist() == [[5, 1], [1, 2]]
          and (t.bos, t.eos, t.pad, t.unk, t.pre, t.kind, t.normalize_nfc)
          == (-1, 3, 4, 0, "qwen2", 0, 1)
          and pf.chat_template == "{{ messages }}")
    ids = [1, 7, 3, 22, 49, 0]
    m = model_lib.load_model(path)
    check("qwen3 tied model: config from meta and logits equal the model built from the values put in",
          m.config == want.config and np.array_equal(m.forward(ids), want.forward(ids)))

    sections2, _, want2, _ = tiny_package(rng, "qwen2", qk_norm=False, qkv_bias=True, tied=False,
                                          rope="interleaved")
    path2 = os.path.join(tmp, "qwen2.pocket")
    with open(path2, "wb") as f:
        f.write(build_pocket(sections2))
    m2 = model_lib.load_model(path2)
    check("qwen2 (biases, untied packed output, interleaved RoPE from meta): logits equal",
          m2.config.rope_style == "interleaved" and np.array_equal(m2.forward(ids), want2.forward(ids)))
    def cli(*args):
        return subprocess.run([sys.executable, os.path.join(HERE, "reference.py"), *args],
                              capture_output=True, text=True)
    out = cli("generate", path, "--ids", "1,7", "-n", "4")
    check("reference.py generate on a .pocket", out.returncode == 0 and out.stdout.strip() ==
          ",".join(map(str, want.generate([1, 7], 4))), out.stdout.strip() + out.stderr[-300:])
    npy = os.path.join(tmp, "l.npy")
    out = cli("logits", path2, "--ids", "1,2,3", "-o", npy)
    check("reference.py logits on a .pocket", out.returncode == 0 and np.array_equal(
        np.load(npy), want2.forward([1, 2, 3])), out.stderr.strip()[-300:])
    out = cli("info", path)
    check("reference.py info lists sections and tensors", out.returncode == 0 and "crc ok" in out.stdout
          and "blk.0.ffn_gate_up.weight packed4_g64_min [80, 64]" in out.stdout, out.stderr[-300:])

    bad_path = os.path.join(tmp, "bad.pocket")
    meta_off = pf.sections["meta"].offset
    flipped = bytearray(data)
    flipped[meta_off + 10] ^= 0x01
    check("flipped byte in meta detected",
          *refused(bad_path, bytes(flipped), "'meta': CRC-32C mismatch"))
    flipped = bytearray(data)
    flipped[pf.sections["data"].offset + 5] ^= 0x80
    ok1 = refused(bad_path, bytes(flipped), "'data': CRC-32C mismatch", verify_data=True)[0]
    check("flipped data byte: found by the data check, not loaded by load_model", ok1 and
          refused(bad_path, bytes(flipped), "never", verify_data=False)[1] == "accepted"
          and _fails(lambda: model_lib.load_model(bad_path)))
    check("truncated file refused", *refused(bad_path, data[:-100], "truncated"))
    check("truncated to 40 bytes refused", *refused(bad_path, data[:40], "too short"))
    flipped = bytearray(data)
    flipped[45] ^= 1
    check("header byte flip refused", *refused(bad_path, bytes(flipped), "header checksum"))
    check("major version 2 refused", *refused(bad_path, build_pocket(sections, major=2), "version 2"))
    check("unknown required section refused, naming it",
          *refused(bad_path, build_pocket(sections + [("future", b"x", 1)]), "'future'"))
    res = refused(bad_path, build_pocket(sections + [("future", b"x", 0)]), "never")
    check("unknown optional section skipped", res == (False, "accepted"), res[1])
    short = pk.entries[0][:-8] + struct.pack("<Q", len(pk.data) + 1)
    directory = struct.pack("<I", len(pk.entries)) + short + b"".join(pk.entries[1:])
    bad_dir = [s if s[0] != "tensors" else ("tensors", directory, 1) for s in sections]
    check("n_bytes not matching shape and encoding refused",
          *refused(bad_path, build_pocket(bad_dir), "imply"))


def _fails(fn):
    try:
        fn()
        return False
    except ValueError:
        return True


def main():
    results = []

    def check(name, ok, detail=""):
        results.append(bool(ok))
        print(f"[{'PASS' if ok else 'FAIL'}] {name}" + (f": {detail}" if detail and not ok else ""))
    with tempfile.TemporaryDirectory() as tmp:
        run_all(tmp, check)
    print(f"\n{sum(results)}/{len(results)} checks passed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
