"""LoRA adapters for the numpy reference, written from PEFT's documented layout (independently of
pocket's C++ loader): adapter_config.json (r, lora_alpha, use_rslora, rank_pattern,
alpha_pattern) and adapter_model.safetensors with
base_model.model.model.layers.N.{self_attn,mlp}.X_proj.lora_A.weight [r, in] and
.lora_B.weight [out, r]; the token embedding's base_model.model.model.embed_tokens.lora_embedding_A
[r, vocab] and lora_embedding_B [d_model, r] (nn.Embedding: B @ A is [d_model, vocab], the
transpose of the embedding matrix); the output matrix's base_model.model.lm_head.lora_A.weight
[r, d_model] and lora_B.weight [vocab, r]. The adapters are MERGED into the model's weights:
W' = W + user_scale * s * B @ A with s = alpha / r (alpha / sqrt(r) with rsLoRA), in float64. A
tied model's embedding and output matrix are untied by the merge: each gets its own term only."""

import json
import os
import re

import numpy as np

import safetensors_io

# PEFT module -> the reference model's canonical weight name.
MODULES = {"self_attn.q_proj": "wq", "self_attn.k_proj": "wk", "self_attn.v_proj": "wv",
           "self_attn.o_proj": "wo", "mlp.gate_proj": "w_gate", "mlp.up_proj": "w_up",
           "mlp.down_proj": "w_down"}
NAME = re.compile(r"^(?:base_model\.model\.)?model\.layers\.(\d+)\.(\w+\.\w+)\.lora_([AB])\.weight$")
EMBED = re.compile(r"^(?:base_model\.model\.)?model\.embed_tokens\.lora_embedding_([AB])(?:\.weight)?$")
LM_HEAD = re.compile(r"^(?:base_model\.model\.)?lm_head\.lora_([AB])\.weight$")


def parse_arg(text):
    """DIR or DIR:SCALE."""
    head, sep, tail = text.rpartition(":")
    if sep:
        try:
            return head, float(tail)
        except ValueError:
            pass
    return text, 1.0


def pattern_value(patterns, module, default):
    for key, value in (patterns or {}).items():
        if module == key or module.endswith("." + key) or re.fullmatch(rf"(.*\.)?({key})", module):
            return value
    return default


def merge(model, directory, user_scale=1.0):
    """Adds the adapter's B @ A (scaled) to model.weights in place."""
    if os.path.isfile(directory):
        directory = os.path.dirname(directory) or "."
    with open(os.path.join(directory, "adapter_config.json")) as f:
        cfg = json.load(f)
    st = safetensors_io.SafetensorsFile(os.path.join(directory, "adapter_model.safetensors"))
    factors = {}
    for name in st.entries:
        m = NAME.match(name)
        if m is not None and m.group(2) in MODULES:
            factors.setdefault((int(m.group(1)), m.group(2)), {})[m.group(3)] = st.tensor(name)
            continue
        m = EMBED.match(name) or LM_HEAD.match(name)
        if m is None:
            raise ValueError(f"{directory}: tensor {name} is not a supported LoRA factor")
        module = "embed_tokens" if "embed_tokens" in name else "lm_head"
        factors.setdefault((-1, module), {})[m.group(1)] = st.tensor(name)
    c = model.config
    for (layer, module), ab in sorted(factors.items()):
        if layer < 0:
            if set(ab) != {"A", "B"}:
                raise ValueError(f"{directory}: {module}: needs both factors")
            a, b = ab["A"].astype(np.float64), ab["B"].astype(np.float64)
            r = a.shape[0]
            full = "model.embed_tokens" if module == "embed_tokens" else "lm_head"
            if r != pattern_value(cfg.get("rank_pattern"), full, cfg["r"]):
                raise ValueError(f"{directory}: {full}: rank {r} differs from the config")
            alpha = pattern_value(cfg.get("alpha_pattern"), full, cfg.get("lora_alpha", 8))
            s = alpha / (np.sqrt(r) if cfg.get("use_rslora") else r)
            key = "token_embd" if module == "embed_tokens" else "output"
            delta = b @ a  # [d_model, vocab] for the embedding, [vocab, d_model] for lm_head
            if key == "token_embd":
                delta = delta.T
            w = model.weights[key]
            if delta.shape != w.shape:
                raise ValueError(f"{directory}: {full}: B @ A gives {delta.shape}, W is {w.shape}")
            # A new array: a tied model's other matrix keeps the base weights (untied).
            model.weights[key] = (w.astype(np.float64) + user_scale * s * delta).astype(np.float32)
            continue
        if set(ab) != {"A", "B"}:
            raise ValueError(f"{directory}: layer {layer} {module}: needs lora_A and lora_B")
        if c.rope_style == "interleaved" and module in ("self_attn.q_proj", "self_attn.k_proj"):
            raise ValueError(f"{directory}: q/k adapters need a base in Hugging Face row order")
        a = ab["A"].astype(np.float64)
        b = ab["B"].astype(np.float64)
        r = a.shape[0]
        full = f"model.layers.{layer}.{module}"
        if r != pattern_value(cfg.get("rank_pattern"), full, cfg["r"]):
            raise ValueError(f"{directory}: {full}: rank {r} differs from the config")
        alpha = pattern_value(cfg.get("alpha_pattern"), full, cfg.get("lora_alpha", 8))
        s = alpha / (np.sqrt(r) if cfg.get("use_rslora") else r)
        key = f"{layer}.{MODULES[module]}"
        w = model.weights[key]
        if (b @ a).shape != w.shape:
            raise ValueError(f"{directory}: {full}: B @ A is {(b @ a).shape}, W is {w.shape}")
        model.weights[key] = (w.astype(np.float64) + user_scale * s * (b @ a)).astype(np.float32)
    model._cast = None
    return model
