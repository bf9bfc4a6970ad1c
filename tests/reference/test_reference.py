#!/usr/bin/python3
"""Self-check of the numpy reference. Plain python; exit code 0 when every check passes.

  /usr/bin/python3 tests/reference/test_reference.py [--testdata DIR]
  (DIR defaults to $POCKET_TESTDATA, else ../shared/testdata beside the repository)

(a) stories260K greedy output equals llama2.c's known-good test_all.py::expected_stdout
(b) dequantization of hand-built blocks (Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, F16, BF16)
(c) GGUF files written by gguf_write.py (and one built byte by byte) read back equal
(d) synthetic models: HF safetensors vs GGUF (llama permuted RoPE, qwen2 biases, qwen3 QK-norm),
    quantized GGUF vs its dequantized F32 twin, refusals (see test_models.py)
(e) .pocket packages built byte by byte from the spec read back exactly; corruption refused
    (see test_pocket.py)
"""

import argparse
import os
import struct
import sys
import tempfile
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gguf  # noqa: E402
import gguf_write  # noqa: E402
import llama2c  # noqa: E402
import model as model_lib  # noqa: E402
import test_models  # noqa: E402
import test_pocket  # noqa: E402

DEFAULT_TESTDATA = os.environ.get("POCKET_TESTDATA") or os.path.normpath(
    os.path.join(HERE, "..", "..", "..", "shared", "testdata"))

# karpathy/llama2.c test_all.py, test_runc: stdout of
# `./run stories260K.bin -z tok512.bin -t 0.0 -n 200` without its final "\n".
EXPECTED_STDOUT = (
    b'Once upon a time, there was a little girl named Lily. She loved to play outside in the park. '
    b'One day, she saw a big, red ball. She wanted to play with it, but it was too high.\n'
    b'Lily\'s mom said, "Lily, let\'s go to the park." Lily was sad and didn\'t know what to do. '
    b'She said, "I want to play with your ball, but I can\'t find it."\n'
    b'Lily was sad and didn\'t know what to do. She said, "I\'m sorry, Lily. I didn\'t know what '
    b'to do."\nLily didn\'t want to help her mom, so she'
)
RUN_C_STEPS = 200   # run.c -n: total positions forwarded, prompt included

RESULTS = []


def check(name, ok, detail=""):
    RESULTS.append((name, bool(ok)))
    print(f"[{'PASS' if ok else 'FAIL'}] {name}" + (f": {detail}" if detail else ""))
    return ok


def run_c_output(m, prompt_ids):
    """What run.c prints for -t 0 -n RUN_C_STEPS: every token after BOS (forced prompt tokens,
    then greedy ones), each decoded after its predecessor, stopping if BOS is sampled."""
    n_new = RUN_C_STEPS + 1 - len(prompt_ids)
    new = m.generate(prompt_ids, n_new, stop_ids={llama2c.BOS_ID})
    seq = list(prompt_ids) + new
    out = b"".join(m.tokenizer.printable(m.tokenizer.decode_piece(seq[i - 1], seq[i]))
                   for i in range(1, len(seq)))
    return seq, out


def first_difference(a, b):
    n = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
    return f"first difference at byte {n}: got {a[n:n + 40]!r}, expected {b[n:n + 40]!r}"


# ----------------------------------------------------------------------------- (a) stories260K

def test_stories260k(testdata):
    d = os.path.join(testdata, "stories260K")
    ckpt, tok = os.path.join(d, "stories260K.bin"), os.path.join(d, "tok512.bin")
    if not (os.path.isfile(ckpt) and os.path.isfile(tok)):
        return check("stories260K present", False, f"missing files in {d}")
    m = model_lib.load_model(ckpt, tok)
    check("stories260K detected as llama2.c", model_lib.detect_format(ckpt) == "llama2c")

    seq_bos, out = run_c_output(m, [llama2c.BOS_ID])
    check("stories260K BOS-only greedy, 200 steps == llama2.c expected_stdout", out == EXPECTED_STDOUT,
          f"{len(out)} bytes, {len(seq_bos) - 1} tokens" if out == EXPECTED_STDOUT
          else first_difference(out, EXPECTED_STDOUT))

    prompt = m.tokenizer.encode("Once upon a time", bos=True)
    check("encode('Once upon a time') starts with BOS and round-trips",
          prompt[0] == 1 and m.tokenizer.decode(prompt[1:], prev_id=1) == b"Once upon a time",
          f"ids {prompt}")
    seq_p, out_p = run_c_output(m, prompt)
    check("stories260K prompt 'Once upon a time' greedy, 200 steps == expected_stdout",
          out_p == EXPECTED_STDOUT,
          f"{len(seq_p) - len(prompt)} generated after {len(prompt)} prompt ids"
          if out_p == EXPECTED_STDOUT else first_difference(out_p, EXPECTED_STDOUT))
    check("prompt ids are what the model itself generates after BOS",
          seq_bos[:len(prompt)] == prompt, f"BOS-only run starts {seq_bos[:len(prompt)]}")

    enc = m.tokenizer.encode("Hé! \u4e2d")   # byte fallback for code points not in the vocab
    check("encoder byte fallback (+3) and decoder <0xXX> pieces",
          m.tokenizer.decode(enc[1:], prev_id=1) == "Hé! \u4e2d".encode("utf-8"), f"ids {enc}")

    ids = seq_bos[:40]
    l32 = m.forward(ids, dtype=np.float32)
    l64 = m.forward(ids, dtype=np.float64)
    err = float(np.max(np.abs(l32 - l64)))
    check("stories260K float32 vs --f64 logits (40 positions)", err < 1e-3, f"max abs diff {err:.2e}")
    naive = test_models.naive_incremental_logits(m, ids)
    err = float(np.max(np.abs(naive - l64)))
    check("full-recompute forward == naive per-token KV-cache forward (f64)", err < 1e-9,
          f"max abs diff {err:.2e}")


# ----------------------------------------------------------------------------- (b) blocks

def f16_bytes(x):
    return np.float16(x).tobytes()


def test_dequant_blocks():
    # Q4_0: d = 0.5, low nibbles 0..15 (elements 0..15), high nibbles 15..0 (elements 16..31).
    lo = np.arange(16, dtype=np.uint8)
    raw = f16_bytes(0.5) + bytes(lo | ((15 - lo) << 4))
    want = np.concatenate([(lo.astype(np.float32) - 8) * 0.5, (15 - lo.astype(np.float32) - 8) * 0.5])
    got = gguf.dequantize(np.frombuffer(raw, np.uint8), gguf.Q4_0, 32)
    check("Q4_0 block: (q - 8) * d", np.array_equal(got, want), f"{got[:4]} ... {got[-2:]}")

    # Q4_1: d = 0.25, m = -1: x = q * d + m
    raw = f16_bytes(0.25) + f16_bytes(-1.0) + bytes(lo | ((15 - lo) << 4))
    want = np.concatenate([lo * 0.25 - 1.0, (15 - lo) * 0.25 - 1.0]).astype(np.float32)
    got = gguf.dequantize(np.frombuffer(raw, np.uint8), gguf.Q4_1, 32)
    check("Q4_1 block: q * d + m", np.array_equal(got, want))

    # Q8_0: d = 0.125, signed bytes from -128 to 127
    q = np.array([-128, -127, -64, -1, 0, 1, 63, 127] * 4, dtype=np.int8)
    raw = f16_bytes(0.125) + q.tobytes()
    got = gguf.dequantize(np.frombuffer(raw, np.uint8), gguf.Q8_0, 32)
    check("Q8_0 block: q * d", np.array_equal(got, q.astype(np.float32) * 0.125))

    # Q4_K, scale bytes written out by hand. Sub-blocks 0..3 take scale = b[j] & 63 and
    # min = b[j+4] & 63; sub-blocks 4..7 take the low 4 bits from b[j+8] (scale: low nibble,
    # min: high nibble) and the top 2 bits from the top bits of b[j] (scale) and b[j+4] (min).
    sb = [1 | 0x40, 2, 3 | 0xC0, 4, 5, 6 | 0x80, 7, 8 | 0x40, 0x21, 0x43, 0x65, 0x87]
    sc = [1, 2, 3, 4, 1 + 16, 3, 5 + 48, 7]
    mn = [5, 6, 7, 8, 2, 4 + 32, 6, 8 + 16]
    q = np.random.default_rng(1).integers(0, 16, 256)
    qs = bytearray(128)
    for c in range(4):                     # chunk c: sub-block 2c low nibbles, 2c+1 high nibbles
        for i in range(32):
            qs[32 * c + i] = q[64 * c + i] | (q[64 * c + 32 + i] << 4)
    raw = f16_bytes(0.5) + f16_bytes(0.25) + bytes(sb) + bytes(qs)
    want = np.array([0.5 * sc[i // 32] * q[i] - 0.25 * mn[i // 32] for i in range(256)], np.float32)
    got = gguf.dequantize(np.frombuffer(raw, np.uint8), gguf.Q4_K, 256)
    check("Q4_K super-block: d*sc*q - dmin*m with 6-bit packed scales/mins",
          np.array_equal(got, want), f"max err {np.max(np.abs(got - want)):.3g}")

    # Q6_K: q in 0..63 (stored as 4 low bits in ql + 2 high bits in qh), value d * sc[i//16] * (q-32).
    rng = np.random.default_rng(2)
    q = rng.integers(0, 64, 256)
    scales = np.array([-128, -7, -1, 0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 127, -50], np.int8)
    ql, qh = bytearray(128), bytearray(64)
    for h in range(2):
        for i in range(32):
            a, b, c, e = (q[128 * h + 32 * k + i] for k in range(4))
            ql[64 * h + i] = (a & 15) | ((c & 15) << 4)
            ql[64 * h + 32 + i] = (b & 15) | ((e & 15) << 4)
            qh[32 * h + i] = (a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6)
    raw = bytes(ql) + bytes(qh) + scales.tobytes() + f16_bytes(0.5)
    want = np.array([0.5 * scales[i // 16] * (q[i] - 32) for i in range(256)], np.float32)
    got = gguf.dequantize(np.frombuffer(raw, np.uint8), gguf.Q6_K, 256)
    check("Q6_K super-block: d * sc[i/16] * (q - 32)", np.array_equal(got, want),
          f"max err {np.max(np.abs(got - want)):.3g}")
    zero = gguf.dequantize(np.frombuffer(bytes(192) + scales.tobytes() + f16_bytes(2.0), np.uint8),
                           gguf.Q6_K, 256)
    check("Q6_K all-zero quants give -32 * d * sc", np.array_equal(
        zero, np.repeat(scales.astype(np.float32) * -64.0, 16)))

    # F16 / BF16 bit patterns and round trips
    bits = np.array([0x3C00, 0xC000, 0x3555, 0x7BFF, 0x0001], "<u2")
    got = gguf.dequantize(bits.view(np.uint8), gguf.F16, 5)
    check("F16 bit patterns", np.array_equal(got, np.array(
        [1.0, -2.0, 0.333251953125, 65504.0, 2.0 ** -24], np.float32)))
    bits = np.array([0x3F80, 0xC040, 0x4049, 0x0000, 0x8000], "<u2")
    got = gguf.dequantize(bits.view(np.uint8), gguf.BF16, 5)
    check("BF16 bit patterns", np.array_equal(got, np.array([1.0, -3.0, 3.140625, 0.0, -0.0], np.float32)))
    x = np.array([1.00390625, 1.01171875, -2.5, 1e-3], np.float32)
    rt = gguf_write.f32_to_bf16_bits(x)
    check("f32 -> BF16 rounds to nearest even", list(rt[:3]) == [0x3F80, 0x3F82, 0xC020],
          f"{[hex(v) for v in rt]}")
    vals = np.linspace(-4, 4, 64, dtype=np.float32)
    rt16 = gguf.dequantize(vals.astype("<f2").view(np.uint8), gguf.F16, 64)
    rtbf = gguf.dequantize(gguf_write.f32_to_bf16_bits(vals).astype("<u2").view(np.uint8),
                           gguf.BF16, 64)
    check("F16 / BF16 round trips of exact values", np.array_equal(rt16, vals.astype(np.float16))
          and np.allclose(rtbf, vals, rtol=2 ** -8, atol=0))


# ----------------------------------------------------------------------------- (c) GGUF files

def test_gguf_files(tmp):
    metadata = [
        ("general.architecture", gguf.STRING, "llama", None),
        ("test.u8", gguf.UINT8, 200, None), ("test.i8", gguf.INT8, -100, None),
        ("test.u16", gguf.UINT16, 60000, None), ("test.i16", gguf.INT16, -30000, None),
        ("test.u32", gguf.UINT32, 4000000000, None), ("test.i32", gguf.INT32, -2000000000, None),
        ("test.f32", gguf.FLOAT32, 0.5, None), ("test.bool", gguf.BOOL, True, None),
        ("test.u64", gguf.UINT64, 2 ** 63 + 5, None), ("test.i64", gguf.INT64, -(2 ** 62), None),
        ("test.f64", gguf.FLOAT64, 1e-300, None), ("test.str", gguf.STRING, "héllo ▁", None),
        ("test.arr_str", gguf.ARRAY, ["a", "", "ß"], gguf.STRING),
        ("test.arr_i32", gguf.ARRAY, [1, -2, 3], gguf.INT32),
        ("test.arr_f32", gguf.ARRAY, [0.25, -1.5], gguf.FLOAT32),
    ]
    rng = np.random.default_rng(3)
    f32 = rng.standard_normal((3, 5)).astype(np.float32)
    f16 = rng.standard_normal((4, 8)).astype(np.float16).astype(np.float32)
    bf = gguf.bf16_to_f32(gguf_write.f32_to_bf16_bits(rng.standard_normal((2, 3, 4))))
    quant = {t: test_models.random_blocks(rng, t, 2 * gguf.GGML_TYPES[t][1])
             for t in (gguf.Q4_0, gguf.Q4_1, gguf.Q8_0, gguf.Q4_K, gguf.Q6_K)}
    for version in (2, 3):
        for alignment in (32, 64, 8, 256):
            w = gguf_write.GGUFWriter(alignment=alignment, version=version)
            for k, vt, v, et in metadata:
                w.add(k, vt, v, et)
            w.add_array_tensor("f32", f32)
            w.add_array_tensor("f16", f16, gguf.F16)
            w.add_array_tensor("bf16", bf, gguf.BF16)
            for t, raw in quant.items():
                w.add_raw_tensor(f"q.{gguf.type_name(t)}", [gguf.GGML_TYPES[t][1], 2], t, raw)
            path = os.path.join(tmp, f"t_v{version}_a{alignment}.gguf")
            w.write(path)
            r = gguf.GGUFReader(path)
            ok = r.version == version and r.alignment == alignment
            ok &= r.data_offset % alignment == 0 and all(t.offset % alignment == 0
                                                         for t in r.tensors.values())
            for k, vt, v, et in metadata:
                got = r.metadata[k]
                ok &= (abs(got - v) < 1e-7) if vt == gguf.FLOAT32 else got == v
                ok &= r.metadata_types[k][0] == vt
            ok &= np.array_equal(r.tensor("f32"), f32) and r.tensors["f32"].dims == [5, 3]
            ok &= np.array_equal(r.tensor("f16"), f16) and np.array_equal(r.tensor("bf16"), bf)
            ok &= r.tensor("bf16").shape == (2, 3, 4)
            for t, raw in quant.items():
                a = r.tensor(f"q.{gguf.type_name(t)}")
                ok &= a.shape == (2, gguf.GGML_TYPES[t][1]) and np.array_equal(
                    a.reshape(-1), gguf.dequantize(np.frombuffer(raw, np.uint8), t, a.size))
                ok &= bytes(r.raw(f"q.{gguf.type_name(t)}")) == raw
            check(f"GGUF v{version} alignment {alignment}: metadata and 8 tensors read back", ok)

    # Built byte by byte (no writer): v3, alignment 16, one F32 tensor with dims [3, 2].
    body = b"GGUF" + struct.pack("<IQQ", 3, 1, 1)
    body += struct.pack("<Q", 17) + b"general.alignment" + struct.pack("<II", gguf.UINT32, 16)
    body += struct.pack("<Q", 1) + b"w" + struct.pack("<I", 2) + struct.pack("<QQ", 3, 2)
    body += struct.pack("<IQ", gguf.F32, 0)
    pad = (-len(body)) % 16
    body += b"\xff" * pad + struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    path = os.path.join(tmp, "hand.gguf")
    with open(path, "wb") as f:
        f.write(body)
    r = gguf.GGUFReader(path)
    check("hand-built GGUF: dims [3,2] -> shape (2,3), data at first multiple of 16",
          r.data_offset == len(body) - 24 and np.array_equal(
              r.tensor("w"), np.array([[1, 2, 3], [4, 5, 6]], np.float32)),
          f"data_offset {r.data_offset}")
    try:
        with open(path, "r+b") as f:
            f.write(b"GGUX")
        gguf.GGUFReader(path)
        check("bad magic refused", False)
    except ValueError as e:
        check("bad magic refused", True, str(e))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--testdata", default=DEFAULT_TESTDATA)
    args = p.parse_args()
    sections = [("stories260K", lambda tmp: test_stories260k(args.testdata)),
                ("dequantization", lambda tmp: test_dequant_blocks()),
                ("GGUF files", test_gguf_files),
                ("synthetic models", lambda tmp: test_models.run_all(tmp, check)),
                (".pocket packages", lambda tmp: test_pocket.run_all(tmp, check))]
    with tempfile.TemporaryDirectory() as tmp:
        for title, fn in sections:
            print(f"== {title}")
            try:
                fn(tmp)
            except Exception:
                traceback.print_exc()
                check(f"{title}: no exception", False)
    failed = [n for n, ok in RESULTS if not ok]
    print(f"\n{len(RESULTS) - len(failed)}/{len(RESULTS)} checks passed")
    for n in failed:
        print(f"  FAILED: {n}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
