"""Synthetic-model checks used by test_reference.py (not run on their own).

The same random weights are written as a Hugging Face directory (rotate-half RoPE) and as GGUF.
For GGUF `llama` the Q/K rows are permuted per head so that interleaved-pair RoPE computes what
rotate-half computes on the original rows: new row 2i <- old row i, new row 2i+1 <- old row
i + head_dim/2. For qwen2/qwen3 GGUF keeps rotate-half, so rows stay as they are. Logits must agree.
"""

import json
import os
import struct

import numpy as np

import gguf
import gguf_write
import model as model_lib

TINY = dict(n_layers=2, d_model=32, d_ff=48, n_heads=4, n_kv_heads=2, vocab=40)


def random_blocks(rng, ggml_type, n_elements):
    """Random valid blocks: random bytes with every f16 scale field set to a modest value."""
    _, block_elems, block_bytes = gguf.GGML_TYPES[ggml_type]
    nb = n_elements // block_elems
    raw = rng.integers(0, 256, (nb, block_bytes), dtype=np.uint8)
    scale_fields = {gguf.Q4_0: [0], gguf.Q4_1: [0, 2], gguf.Q8_0: [0], gguf.Q4_K: [0, 2],
                    gguf.Q6_K: [block_bytes - 2]}[ggml_type]
    for off in scale_fields:
        d = rng.uniform(0.001, 0.02, nb).astype("<f2")
        raw[:, off:off + 2] = d.view(np.uint8).reshape(nb, 2)
    return raw.tobytes()


def naive_incremental_logits(m, ids):
    """Token-at-a-time forward with a KV cache, float64, loops instead of batched matmuls."""
    c = m.config
    w = {k: v.astype(np.float64) for k, v in m.weights.items()}
    group = c.n_heads // c.n_kv_heads
    k_cache = [[] for _ in range(c.n_layers)]
    v_cache = [[] for _ in range(c.n_layers)]
    out = []

    def norm(x, g):
        return x / np.sqrt(np.mean(x * x) + c.rms_eps) * g

    def rope(vec, pos):
        vec = vec.copy()
        half = c.head_dim // 2
        for i in range(half):
            theta = pos * c.rope_base ** (-2.0 * i / c.head_dim)
            j, k = (2 * i, 2 * i + 1) if c.rope_style == "interleaved" else (i, i + half)
            a, b = vec[j], vec[k]
            vec[j], vec[k] = a * np.cos(theta) - b * np.sin(theta), a * np.sin(theta) + b * np.cos(theta)
        return vec

    for pos, t in enumerate(ids):
        x = w["token_embd"][t].copy()
        for L in range(c.n_layers):
            h = norm(x, w[f"{L}.attn_norm"])
            q = w[f"{L}.wq"] @ h + w.get(f"{L}.bq", 0)
            k = w[f"{L}.wk"] @ h + w.get(f"{L}.bk", 0)
            v = w[f"{L}.wv"] @ h + w.get(f"{L}.bv", 0)
            q, k, v = (a.reshape(-1, c.head_dim) for a in (q, k, v))
            if f"{L}.q_norm" in w:
                q = np.array([norm(r, w[f"{L}.q_norm"]) for r in q])
                k = np.array([norm(r, w[f"{L}.k_norm"]) for r in k])
            q = np.array([rope(r, pos) for r in q])
            k = np.array([rope(r, pos) for r in k])
            k_cache[L].append(k)
            v_cache[L].append(v)
            att = np.zeros((c.n_heads, c.head_dim))
            for hd in range(c.n_heads):
                kv = hd // group
                s = np.array([q[hd] @ kk[kv] for kk in k_cache[L]]) / np.sqrt(c.head_dim)
                p = np.exp(s - s.max())
                p /= p.sum()
                att[hd] = sum(pi * vv[kv] for pi, vv in zip(p, v_cache[L]))
            x = x + w[f"{L}.wo"] @ att.reshape(-1)
            h = norm(x, w[f"{L}.ffn_norm"])
            g, u = w[f"{L}.w_gate"] @ h, w[f"{L}.w_up"] @ h
            x = x + w[f"{L}.w_down"] @ (g / (1 + np.exp(-g)) * u)
        out.append(w["output"] @ norm(x, w["output_norm"]))
    return np.array(out)


def make_hf_weights(rng, arch, head_dim, tied):
    s = TINY
    q_dim, kv_dim = s["n_heads"] * head_dim, s["n_kv_heads"] * head_dim

    def mat(o, i):
        return (rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)

    def gain(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    t = {"model.embed_tokens.weight": mat(s["vocab"], s["d_model"]) * 4,
         "model.norm.weight": gain(s["d_model"])}
    if not tied:
        t["lm_head.weight"] = mat(s["vocab"], s["d_model"])
    for L in range(s["n_layers"]):
        p = f"model.layers.{L}."
        t.update({p + "input_layernorm.weight": gain(s["d_model"]),
                  p + "self_attn.q_proj.weight": mat(q_dim, s["d_model"]),
                  p + "self_attn.k_proj.weight": mat(kv_dim, s["d_model"]),
                  p + "self_attn.v_proj.weight": mat(kv_dim, s["d_model"]),
                  p + "self_attn.o_proj.weight": mat(s["d_model"], q_dim),
                  p + "post_attention_layernorm.weight": gain(s["d_model"]),
                  p + "mlp.gate_proj.weight": mat(s["d_ff"], s["d_model"]),
                  p + "mlp.up_proj.weight": mat(s["d_ff"], s["d_model"]),
                  p + "mlp.down_proj.weight": mat(s["d_model"], s["d_ff"])})
        if arch == "qwen2":
            for n, dim in (("q", q_dim), ("k", kv_dim), ("v", kv_dim)):
                t[p + f"self_attn.{n}_proj.bias"] = (0.5 * rng.standard_normal(dim)).astype(np.float32)
        if arch == "qwen3":
            t[p + "self_attn.q_norm.weight"] = gain(head_dim)
            t[p + "self_attn.k_norm.weight"] = gain(head_dim)
    return t


def write_safetensors(path, tensors, dtype="F32"):
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors.items():
        if dtype == "BF16":
            raw = gguf_write.f32_to_bf16_bits(a).astype("<u2").tobytes()
        else:
            raw = a.astype({"F32": "<f4", "F16": "<f2"}[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_hf_dir(directory, arch, tensors, head_dim, tied, shards=1, dtype="F32", extra=None):
    os.makedirs(directory, exist_ok=True)
    s = TINY
    cfg = {"model_type": arch, "hidden_size": s["d_model"], "intermediate_size": s["d_ff"],
           "num_hidden_layers": s["n_layers"], "num_attention_heads": s["n_heads"],
           "num_key_value_heads": s["n_kv_heads"], "head_dim": head_dim, "rms_norm_eps": 1e-6,
           "rope_theta": 5000.0, "vocab_size": s["vocab"], "tie_word_embeddings": tied,
           "hidden_act": "silu", "rope_scaling": None}
    cfg.update(extra or {})
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f)
    names = list(tensors)
    if shards == 1:
        write_safetensors(os.path.join(directory, "model.safetensors"), tensors, dtype)
        return
    weight_map = {}
    for k in range(shards):
        fname = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[k::shards]}
        write_safetensors(os.path.join(directory, fname), part, dtype)
        weight_map.update({n: fname for n in part})
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


def permute_for_interleaved(w, n_heads):
    """Rows of one head ordered (0, h/2, 1, h/2+1, ...): rotate-half pairs become adjacent pairs."""
    hd = w.shape[0] // n_heads
    return w.reshape(n_heads, 2, hd // 2, -1).swapaxes(1, 2).reshape(w.shape)


def write_gguf_from_hf(path, arch, t, head_dim, tied, quant=None, rng=None, version=3):
    s = TINY
    wr = gguf_write.GGUFWriter(alignment=64, version=version)
    wr.add("general.architecture", gguf.STRING, arch)
    for key, val in (("block_count", s["n_layers"]), ("embedding_length", s["d_model"]),
                     ("feed_forward_length", s["d_ff"]), ("attention.head_count", s["n_heads"]),
                     ("attention.head_count_kv", s["n_kv_heads"]), ("attention.key_length", head_dim)):
        wr.add(f"{arch}.{key}", gguf.UINT32, val)
    wr.add(f"{arch}.rope.freq_base", gguf.FLOAT32, 5000.0)
    wr.add(f"{arch}.attention.layer_norm_rms_epsilon", gguf.FLOAT32, 1e-6)
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight"}
    if not tied:
        names["lm_head.weight"] = "output.weight"
    hf_to_gguf = {v: k for k, v in model_lib.GGUF_LAYER_NAMES.items()}
    hf_to_gguf.update({v: k for k, v in model_lib.GGUF_OPTIONAL_LAYER_NAMES.items()})
    for L in range(s["n_layers"]):
        for canon, hf in list(model_lib.HF_LAYER_NAMES.items()) + list(model_lib.HF_OPTIONAL_LAYER_NAMES.items()):
            gg = {**model_lib.GGUF_LAYER_NAMES, **model_lib.GGUF_OPTIONAL_LAYER_NAMES}[canon]
            names[f"model.layers.{L}.{hf}"] = f"blk.{L}.{gg}"
    for hf_name, gg_name in names.items():
        if hf_name not in t:
            continue
        a = t[hf_name]
        if arch == "llama" and gg_name.endswith(("attn_q.weight", "attn_k.weight")):
            n = s["n_heads"] if "attn_q" in gg_name else s["n_kv_heads"]
            a = permute_for_interleaved(a, n)
        if quant is not None and a.ndim == 2:
            raw = random_blocks(rng, quant, a.size)
            wr.add_raw_tensor(gg_name, [a.shape[1], a.shape[0]], quant, raw)
        else:
            wr.add_array_tensor(gg_name, a)
    wr.write(path)


def logits_of(path, ids, dtype=np.float32):
    return model_lib.load_model(path).forward(ids, dtype=dtype)


def run_all(tmp, check):
    rng = np.random.default_rng(7)
    ids = [1, 5, 9, 3, 30, 3, 17, 0, 39, 2, 11, 5]
    for arch, head_dim, tied in (("llama", 8, False), ("qwen2", 8, True), ("qwen3", 16, True)):
        t = make_hf_weights(rng, arch, head_dim, tied)
        hf_dir = os.path.join(tmp, f"hf_{arch}")
        write_hf_dir(hf_dir, arch, t, head_dim, tied, shards=2 if arch == "qwen3" else 1)
        gpath = os.path.join(tmp, f"{arch}.gguf")
        write_gguf_from_hf(gpath, arch, t, head_dim, tied)
        m_hf = model_lib.load_model(hf_dir)
        l_hf = m_hf.forward(ids, dtype=np.float64)
        l_gg = logits_of(gpath, ids, np.float64)
        err = float(np.max(np.abs(l_hf - l_gg)))
        check(f"{arch}: HF safetensors logits == GGUF logits (f64, {len(ids)} positions)",
              err < 1e-10, f"max abs diff {err:.2e}; logit scale {np.abs(l_hf).max():.2f}")
        naive = naive_incremental_logits(m_hf, ids)
        err = float(np.max(np.abs(naive - l_hf)))
        check(f"{arch}: full recompute == naive KV-cache forward (f64)", err < 1e-9, f"{err:.2e}")
        err = float(np.max(np.abs(m_hf.forward(ids) - l_hf)))
        check(f"{arch}: float32 math within 1e-4 of float64", err < 1e-4, f"{err:.2e}")
        last = m_hf.forward(ids, last_only=True)
        check(f"{arch}: last_only equals the last row", np.allclose(last[0], m_hf.forward(ids)[-1],
                                                                     atol=1e-6))

    t = make_hf_weights(rng, "qwen3", 16, True)
    for dtype in ("F16", "BF16"):
        d = os.path.join(tmp, f"hf_{dtype}")
        write_hf_dir(d, "qwen3", t, 16, True, dtype=dtype)
        f32 = model_lib.load_model(d).weights["0.wq"]
        ref = t["model.layers.0.self_attn.q_proj.weight"]
        want = ref.astype(np.float16).astype(np.float32) if dtype == "F16" else \
            gguf.bf16_to_f32(gguf_write.f32_to_bf16_bits(ref))
        check(f"HF {dtype} safetensors weights decode", np.array_equal(f32, want))

    for q in (gguf.Q4_0, gguf.Q4_1, gguf.Q8_0):
        t = make_hf_weights(rng, "llama", 8, False)
        qpath = os.path.join(tmp, f"q_{q}.gguf")
        write_gguf_from_hf(qpath, "llama", t, 8, False, quant=q, rng=np.random.default_rng(q))
        mq = model_lib.load_model(qpath)
        # twin: every tensor dequantized and stored as F32
        r = gguf.GGUFReader(qpath)
        wr = gguf_write.GGUFWriter()
        for k, v in r.metadata.items():
            vt, et = r.metadata_types[k]
            wr.add(k, vt, v, et)
        for name in r.tensors:
            wr.add_array_tensor(name, r.tensor(name))
        fpath = os.path.join(tmp, f"q_{q}_f32.gguf")
        wr.write(fpath)
        err = float(np.max(np.abs(mq.forward(ids) - logits_of(fpath, ids))))
        check(f"{gguf.type_name(q)} GGUF logits == its dequantized F32 twin", err == 0.0, f"{err:.2e}")
    for q, n in ((gguf.Q4_K, 256), (gguf.Q6_K, 256)):
        raw = random_blocks(rng, q, 2 * n)
        wr = gguf_write.GGUFWriter(alignment=128)
        wr.add_raw_tensor("x", [n, 2], q, raw)
        p = os.path.join(tmp, "k.gguf")
        wr.write(p)
        a = gguf.GGUFReader(p).tensor("x")
        rows = [gguf.dequantize(np.frombuffer(raw[i * len(raw) // 2:(i + 1) * len(raw) // 2],
                                              np.uint8), q, n) for i in range(2)]
        check(f"{gguf.type_name(q)} tensor [2, {n}]: row i is super-block i", a.shape == (2, n)
              and np.array_equal(a, np.stack(rows)) and np.all(np.isfinite(a)))

    t = make_hf_weights(rng, "llama", 8, False)
    for extra, what in (({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling"),
                        ({"model_type": "mistral"}, "model_type mistral")):
        d = os.path.join(tmp, "bad_" + what.split()[0])
        write_hf_dir(d, "llama", t, 8, False, extra=extra)
        try:
            model_lib.load_model(d)
            check(f"HF config with {what} refused", False)
        except ValueError as e:
            check(f"HF config with {what} refused", True, str(e))
