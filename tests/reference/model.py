"""Reference forward pass (full recompute, no KV cache) for llama / qwen2 / qwen3 decoders.

Sources: GGUF files, .pocket packages, Hugging Face safetensors directories, llama2.c checkpoints.
Each loader maps its own names and conventions onto one Config and one set of canonical weight names:

    token_embd [vocab, d_model]   output_norm [d_model]   output [vocab, d_model]
    L.attn_norm [d_model]  L.wq [n_heads*head_dim, d_model]  L.wk, L.wv [n_kv_heads*head_dim, d_model]
    L.wo [d_model, n_heads*head_dim]  L.bq, L.bk, L.bv (optional)  L.q_norm, L.k_norm [head_dim] (opt)
    L.ffn_norm [d_model]  L.w_gate, L.w_up [d_ff, d_model]  L.w_down [d_model, d_ff]

(L is the layer index.) All weights are float32 numpy arrays in PyTorch [out, in] order.
"""

import os
from dataclasses import dataclass

import numpy as np

import gguf
import llama2c
import pocket_io
import safetensors_io

SUPPORTED_ARCHS = ("llama", "qwen2", "qwen3")


@dataclass
class Config:
    arch: str
    n_layers: int
    d_model: int
    d_ff: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    rope_base: float
    rms_eps: float
    rope_style: str          # "interleaved": pairs (x[2i], x[2i+1]); "neox": (x[i], x[i+head_dim/2])
    source: str = ""

    def validate(self):
        if self.arch not in SUPPORTED_ARCHS:
            raise ValueError(f"architecture {self.arch!r} unsupported (supported: {SUPPORTED_ARCHS})")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")
        if self.rope_style not in ("interleaved", "neox"):
            raise ValueError(f"unknown rope style {self.rope_style}")


class Model:
    def __init__(self, config, weights, tokenizer=None):
        config.validate()
        self.config = config
        self.weights = weights           # canonical name -> float32 array
        self.tokenizer = tokenizer
        self._cast, self._cast_dtype = None, None   # weights converted for --f64
        self._check_shapes()

    def _check_shapes(self):
        c, w = self.config, self.weights
        q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        want = {"token_embd": (c.vocab_size, c.d_model), "output_norm": (c.d_model,),
                "output": (c.vocab_size, c.d_model)}
        for i in range(c.n_layers):
            want.update({
                f"{i}.attn_norm": (c.d_model,), f"{i}.wq": (q_dim, c.d_model),
                f"{i}.wk": (kv_dim, c.d_model), f"{i}.wv": (kv_dim, c.d_model),
                f"{i}.wo": (c.d_model, q_dim), f"{i}.ffn_norm": (c.d_model,),
                f"{i}.w_gate": (c.d_ff, c.d_model), f"{i}.w_up": (c.d_ff, c.d_model),
                f"{i}.w_down": (c.d_model, c.d_ff),
            })
            optional = {f"{i}.bq": (q_dim,), f"{i}.bk": (kv_dim,), f"{i}.bv": (kv_dim,),
                        f"{i}.q_norm": (c.head_dim,), f"{i}.k_norm": (c.head_dim,)}
            want.update({k: v for k, v in optional.items() if k in w})
            if c.arch == "qwen3" and (f"{i}.q_norm" not in w or f"{i}.k_norm" not in w):
                raise ValueError(f"qwen3 layer {i}: missing QK-norm weights")
        for name, shape in want.items():
            if name not in w:
                raise ValueError(f"missing weight {name}")
            if tuple(w[name].shape) != tuple(shape):
                raise ValueError(f"weight {name}: expected {list(shape)}, file has {list(w[name].shape)}")

    # ------------------------------------------------------------------------- forward

    def weights_as(self, dtype):
        """All weights converted to dtype (cached, so repeated forwards do not re-convert)."""
        dtype = np.dtype(dtype)
        if dtype == np.float32:
            return self.weights
        if self._cast is None or self._cast_dtype != dtype:
            self._cast = {k: v.astype(dtype) for k, v in self.weights.items()}
            self._cast_dtype = dtype
        return self._cast

    def forward(self, ids, dtype=np.float32, last_only=False):
        """Logits [n_tokens, vocab] (or [1, vocab] with last_only) for ids at positions 0..n-1,
        computed and returned in dtype (float32 by default)."""
        x = self.final_hidden(ids, dtype, last_only)
        return x @ self.weights_as(dtype)["output"].T              # [n, vocab], in dtype

    def final_hidden(self, ids, dtype=np.float32, last_only=False, trace=None):
        """The final-norm hidden states [n_tokens, d_model] (or [1, d_model]): what the output
        matrix, or a classification head, multiplies. trace(name, x), when given, receives the
        intermediates pocket's debug trace names: "embed" and "blk.N.out" (the residual stream)."""
        c = self.config
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim != 1 or ids.size == 0:
            raise ValueError("ids must be a non-empty 1-D sequence")
        if ids.min() < 0 or ids.max() >= c.vocab_size:
            raise ValueError(f"token id out of range [0, {c.vocab_size})")
        w = self.weights_as(dtype)
        n = ids.size
        cos, sin = rope_tables(n, c.head_dim, c.rope_base, dtype)
        x = w["token_embd"][ids]                                    # [n, d_model]
        if trace:
            trace("embed", x)
        for i in range(c.n_layers):
            x = x + self.attention(w, i, rms_norm(x, w[f"{i}.attn_norm"], c.rms_eps), cos, sin)
            x = x + self.feed_forward(w, i, rms_norm(x, w[f"{i}.ffn_norm"], c.rms_eps))
            if trace:
                trace(f"blk.{i}.out", x)
        if last_only:
            x = x[-1:]
        return rms_norm(x, w["output_norm"], c.rms_eps)

    def attention(self, w, i, h, cos, sin):
        c = self.config
        n = h.shape[0]
        q = h @ w[f"{i}.wq"].T                                      # [n, n_heads*head_dim]
        k = h @ w[f"{i}.wk"].T                                      # [n, n_kv_heads*head_dim]
        v = h @ w[f"{i}.wv"].T
        if f"{i}.bq" in w:                                          # qwen2: q/k/v biases
            q = q + w[f"{i}.bq"]
        if f"{i}.bk" in w:
            k = k + w[f"{i}.bk"]
        if f"{i}.bv" in w:
            v = v + w[f"{i}.bv"]
        q = q.reshape(n, c.n_heads, c.head_dim)
        k = k.reshape(n, c.n_kv_heads, c.head_dim)
        v = v.reshape(n, c.n_kv_heads, c.head_dim)
        if f"{i}.q_norm" in w:                                      # qwen3: per-head RMSNorm
            q = rms_norm(q, w[f"{i}.q_norm"], c.rms_eps)
            k = rms_norm(k, w[f"{i}.k_norm"], c.rms_eps)
        q = apply_rope(q, cos, sin, c.rope_style)                   # [n, n_heads, head_dim]
        k = apply_rope(k, cos, sin, c.rope_style)                   # [n, n_kv_heads, head_dim]
        group = c.n_heads // c.n_kv_heads                           # query head h -> kv h // group
        k = np.repeat(k, group, axis=1).transpose(1, 0, 2)          # [n_heads, n, head_dim]
        v = np.repeat(v, group, axis=1).transpose(1, 0, 2)
        q = q.transpose(1, 0, 2)                                    # [n_heads, n, head_dim]
        scores = (q @ k.transpose(0, 2, 1)) * q.dtype.type(1.0 / np.sqrt(c.head_dim))
        causal = np.triu(np.ones((n, n), dtype=bool), k=1)          # key after query: masked
        scores = np.where(causal[None], -np.inf, scores)            # [n_heads, n, n]
        probs = softmax(scores)
        out = (probs @ v).transpose(1, 0, 2).reshape(n, c.n_heads * c.head_dim)
        return out @ w[f"{i}.wo"].T                                 # [n, d_model]

    def feed_forward(self, w, i, h):
        gate = h @ w[f"{i}.w_gate"].T                               # [n, d_ff]
        up = h @ w[f"{i}.w_up"].T
        return (silu(gate) * up) @ w[f"{i}.w_down"].T               # [n, d_model]

    def generate(self, ids, n_new, dtype=np.float32, stop_ids=()):
        """Greedy decoding by full recompute; returns the new ids (stops after a stop id is
        produced, without including it)."""
        seq = list(ids)
        new = []
        for _ in range(n_new):
            logits = self.forward(seq, dtype=dtype, last_only=True)[0]
            nxt = int(np.argmax(logits))                            # first maximum on ties
            if nxt in stop_ids:
                break
            seq.append(nxt)
            new.append(nxt)
        return new


def rms_norm(x, weight, eps):
    """x * rsqrt(mean(x^2) + eps) * weight over the last axis."""
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x * (x.dtype.type(1.0) / np.sqrt(ms + x.dtype.type(eps))) * weight


def softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def silu(x):
    with np.errstate(over="ignore"):        # exp(-x) -> inf for very negative x gives -0, fine
        return x / (x.dtype.type(1.0) + np.exp(-x))


def rope_tables(n, head_dim, base, dtype):
    """cos/sin [n, head_dim/2]; pair i rotates by angle pos * base^(-2i/head_dim) (angles in f64)."""
    inv_freq = 1.0 / (float(base) ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim))
    angles = np.arange(n, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


def apply_rope(x, cos, sin, style):
    """x [n, heads, head_dim]; rotate each pair (a, b) -> (a cos - b sin, a sin + b cos)."""
    half = x.shape[-1] // 2
    if style == "interleaved":
        a, b = x[..., 0::2], x[..., 1::2]
    else:
        a, b = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    ra, rb = a * c - b * s, a * s + b * c
    if style == "interleaved":
        return np.stack([ra, rb], axis=-1).reshape(x.shape)
    return np.concatenate([ra, rb], axis=-1)


# ----------------------------------------------------------------------------- loaders

CLASSIFIER_TENSOR = "cls_head.weight"
CLASSIFIER_LABELS = {"pocket": "classifier_labels", "gguf": "pocket.classifier.labels"}


def load_classifier(path):
    """The classification head of a .pocket or GGUF file (docs/format.md): (labels, weight
    [n_labels, d_model] float32), or None when the file has none."""
    fmt = detect_format(path)
    if fmt == "pocket":
        pf = pocket_io.PocketFile(path)
        labels, has_tensor = pf.meta.get(CLASSIFIER_LABELS[fmt]), CLASSIFIER_TENSOR in pf.tensors
        get = pf.tensor
    elif fmt == "gguf":
        r = gguf.GGUFReader(path)
        labels, has_tensor = r.get(CLASSIFIER_LABELS[fmt]), CLASSIFIER_TENSOR in r.tensors
        get = r.tensor
    else:
        return None
    if labels is None and not has_tensor:
        return None
    if labels is None or not has_tensor:
        raise ValueError(f"{path}: a classification head needs both {CLASSIFIER_TENSOR} and "
                         f"{CLASSIFIER_LABELS[fmt]}")
    w = np.asarray(get(CLASSIFIER_TENSOR), dtype=np.float32)
    if w.ndim != 2 or w.shape[0] != len(labels):
        raise ValueError(f"{path}: {CLASSIFIER_TENSOR} {list(w.shape)} for {len(labels)} labels")
    return list(labels), w

def detect_format(path):
    if os.path.isdir(path):
        return "hf"
    with open(path, "rb") as f:
        head = f.read(8)
    magic = head[:4]
    if head == pocket_io.MAGIC:
        return "pocket"
    if magic == gguf.GGUF_MAGIC:
        return "gguf"
    if llama2c.is_llama2c_checkpoint(path):
        return "llama2c"
    if magic == b"ak42":
        raise ValueError(f"{path}: llama2.c version 1/2 export; only legacy (version 0) is supported")
    raise ValueError(f"{path}: not a GGUF file, .pocket package, HF directory or llama2.c checkpoint")


def load_model(path, tokenizer_path=None):
    fmt = detect_format(path)
    if fmt == "gguf":
        return load_gguf(path)
    if fmt == "hf":
        return load_hf(path)
    if fmt == "pocket":
        return load_pocket(path)
    return load_llama2c(path, tokenizer_path)


def load_llama2c(path, tokenizer_path=None):
    ck = llama2c.Llama2cCheckpoint(path)
    a = ck.arrays
    cfg = Config("llama", ck.n_layers, ck.dim, ck.hidden_dim, ck.n_heads, ck.n_kv_heads,
                 ck.dim // ck.n_heads, ck.vocab_size, 10000.0, 1e-5, "interleaved", "llama2c")
    w = {"token_embd": a["token_embedding_table"], "output_norm": a["rms_final_weight"],
         "output": a["wcls"]}
    for i in range(ck.n_layers):
        w.update({f"{i}.attn_norm": a["rms_att_weight"][i], f"{i}.wq": a["wq"][i],
                  f"{i}.wk": a["wk"][i], f"{i}.wv": a["wv"][i], f"{i}.wo": a["wo"][i],
                  f"{i}.ffn_norm": a["rms_ffn_weight"][i], f"{i}.w_gate": a["w1"][i],
                  f"{i}.w_down": a["w2"][i], f"{i}.w_up": a["w3"][i]})
    tok = llama2c.Llama2cTokenizer(tokenizer_path, ck.vocab_size) if tokenizer_path else None
    return Model(cfg, w, tok)


GGUF_LAYER_NAMES = {
    "attn_norm": "attn_norm.weight", "wq": "attn_q.weight", "wk": "attn_k.weight",
    "wv": "attn_v.weight", "wo": "attn_output.weight", "ffn_norm": "ffn_norm.weight",
    "w_gate": "ffn_gate.weight", "w_up": "ffn_up.weight", "w_down": "ffn_down.weight",
}
GGUF_OPTIONAL_LAYER_NAMES = {
    "bq": "attn_q.bias", "bk": "attn_k.bias", "bv": "attn_v.bias",
    "q_norm": "attn_q_norm.weight", "k_norm": "attn_k_norm.weight",
}


def load_gguf(path):
    r = gguf.GGUFReader(path)
    arch = r.get("general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"{path}: general.architecture {arch!r} unsupported")

    def key(name, default=None, required=False):
        full = f"{arch}.{name}"
        if full not in r.metadata:
            if required:
                raise ValueError(f"{path}: missing metadata {full}")
            return default
        return r.metadata[full]

    scaling = key("rope.scaling.type")
    if scaling not in (None, "none") or "rope_freqs.weight" in r.tensors:
        raise ValueError(f"{path}: RoPE scaling ({scaling!r}) is not supported by the reference")
    d_model = int(key("embedding_length", required=True))
    n_heads = int(key("attention.head_count", required=True))
    head_dim = int(key("attention.key_length", d_model // n_heads))
    if int(key("attention.value_length", head_dim)) != head_dim:
        raise ValueError(f"{path}: attention.value_length != key_length is unsupported")
    if int(key("rope.dimension_count", head_dim)) != head_dim:
        raise ValueError(f"{path}: partial rotary embedding (rope.dimension_count) unsupported")
    emb = r.tensor("token_embd.weight")
    cfg = Config(
        arch=arch, n_layers=int(key("block_count", required=True)), d_model=d_model,
        d_ff=int(key("feed_forward_length", required=True)), n_heads=n_heads,
        n_kv_heads=int(key("attention.head_count_kv", n_heads)), head_dim=head_dim,
        vocab_size=emb.shape[0], rope_base=float(key("rope.freq_base", 10000.0)),
        rms_eps=float(key("attention.layer_norm_rms_epsilon", 1e-5 if arch == "llama" else 1e-6)),
        rope_style="interleaved" if arch == "llama" else "neox", source="gguf")
    w = {"token_embd": emb, "output_norm": r.tensor("output_norm.weight")}
    w["output"] = r.tensor("output.weight") if "output.weight" in r.tensors else emb
    for i in range(cfg.n_layers):
        for canon, name in GGUF_LAYER_NAMES.items():
            w[f"{i}.{canon}"] = r.tensor(f"blk.{i}.{name}")
        for canon, name in GGUF_OPTIONAL_LAYER_NAMES.items():
            if f"blk.{i}.{name}" in r.tensors:
                w[f"{i}.{canon}"] = r.tensor(f"blk.{i}.{name}")
    return Model(cfg, w)


HF_LAYER_NAMES = {
    "attn_norm": "input_layernorm.weight", "wq": "self_attn.q_proj.weight",
    "wk": "self_attn.k_proj.weight", "wv": "self_attn.v_proj.weight",
    "wo": "self_attn.o_proj.weight", "ffn_norm": "post_attention_layernorm.weight",
    "w_gate": "mlp.gate_proj.weight", "w_up": "mlp.up_proj.weight", "w_down": "mlp.down_proj.weight",
}
HF_OPTIONAL_LAYER_NAMES = {
    "bq": "self_attn.q_proj.bias", "bk": "self_attn.k_proj.bias", "bv": "self_attn.v_proj.bias",
    "q_norm": "self_attn.q_norm.weight", "k_norm": "self_attn.k_norm.weight",
}


def load_hf(directory):
    d = safetensors_io.HFModelDir(directory)
    cfg_json = d.config
    arch = cfg_json.get("model_type")
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"{directory}: model_type {arch!r} unsupported")
    if cfg_json.get("rope_scaling") is not None:
        raise ValueError(f"{directory}: rope_scaling {cfg_json['rope_scaling']} is not supported")
    if cfg_json.get("hidden_act", "silu") != "silu":
        raise ValueError(f"{directory}: hidden_act {cfg_json['hidden_act']!r} unsupported")
    if cfg_json.get("mlp_bias") or cfg_json.get("use_sliding_window"):
        raise ValueError(f"{directory}: mlp_bias / use_sliding_window are not supported")
    if cfg_json.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError(f"{directory}: partial_rotary_factor unsupported")
    n_heads = int(cfg_json["num_attention_heads"])
    d_model = int(cfg_json["hidden_size"])
    cfg = Config(
        arch=arch, n_layers=int(cfg_json["num_hidden_layers"]), d_model=d_model,
        d_ff=int(cfg_json["intermediate_size"]), n_heads=n_heads,
        n_kv_heads=int(cfg_json.get("num_key_value_heads") or n_heads),
        head_dim=int(cfg_json.get("head_dim") or d_model // n_heads),
        vocab_size=int(cfg_json["vocab_size"]), rope_base=float(cfg_json.get("rope_theta", 10000.0)),
        rms_eps=float(cfg_json.get("rms_norm_eps", 1e-6)), rope_style="neox", source="hf")
    emb = d.tensor("model.embed_tokens.weight")
    w = {"token_embd": emb, "output_norm": d.tensor("model.norm.weight")}
    tied = cfg_json.get("tie_word_embeddings", False) or not d.has("lm_head.weight")
    w["output"] = emb if tied else d.tensor("lm_head.weight")
    for i in range(cfg.n_layers):
        prefix = f"model.layers.{i}."
        for canon, name in HF_LAYER_NAMES.items():
            w[f"{i}.{canon}"] = d.tensor(prefix + name)
        for canon, name in HF_OPTIONAL_LAYER_NAMES.items():
            if d.has(prefix + name):
                w[f"{i}.{canon}"] = d.tensor(prefix + name)
    return Model(cfg, w)


def load_pocket(path, verify_data=True):
    """A .pocket package: configuration from the meta JSON; fused attn_qkv / ffn_gate_up split."""
    pf = pocket_io.PocketFile(path, verify_data=verify_data)
    m = pf.meta
    cfg = Config(
        arch=m["architecture"], n_layers=m["n_layers"], d_model=m["d_model"], d_ff=m["d_ff"],
        n_heads=m["n_heads"], n_kv_heads=m["n_kv_heads"], head_dim=m["head_dim"],
        vocab_size=m["vocab_size"], rope_base=float(m["rope_base"]), rms_eps=float(m["rms_eps"]),
        rope_style=m["rope_style"], source="pocket")
    emb = pf.tensor("token_embd.weight")
    w = {"token_embd": emb, "output_norm": pf.tensor("output_norm.weight")}
    if m["tied_output"] == ("output.weight" in pf.tensors):
        raise ValueError(f"{path}: tied_output is {m['tied_output']} but output.weight is "
                         f"{'present' if 'output.weight' in pf.tensors else 'absent'}")
    w["output"] = emb if m["tied_output"] else pf.tensor("output.weight")
    flags = {"bq": "qkv_bias", "bk": "qkv_bias", "bv": "qkv_bias", "q_norm": "qk_norm",
             "k_norm": "qk_norm"}
    for i in range(cfg.n_layers):
        for canon, name in GGUF_LAYER_NAMES.items():
            a = pf.layer_tensor(i, name)
            if a is None:
                raise ValueError(f"{path}: missing tensor blk.{i}.{name} (nor a fused one)")
            w[f"{i}.{canon}"] = a
        for canon, name in GGUF_OPTIONAL_LAYER_NAMES.items():
            a = pf.layer_tensor(i, name)
            if (a is not None) != m[flags[canon]]:
                raise ValueError(f"{path}: meta {flags[canon]} is {m[flags[canon]]} but "
                                 f"blk.{i}.{name} is {'present' if a is not None else 'absent'}")
            if a is not None:
                w[f"{i}.{canon}"] = a
    return Model(cfg, w)
