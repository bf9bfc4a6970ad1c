"""Reference for the DFlash block drafter (speculative decoding), written from the released format's
semantics (docs of the DFlash release, issue 13), not from pocket's C++.

A drafter is a Hugging Face directory: config.json with architectures ["DFlashDraftModel"], Qwen3
layer fields, block_size and dflash_config {mask_token_id, target_layer_ids}; safetensors tensors
fc.weight [hidden, len(target_layer_ids) * target_hidden], hidden_norm.weight, norm.weight and
layers.{i}.{input_layernorm, post_attention_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm,
mlp.{gate,up,down}_proj}.weight. It has no embedding and no lm_head: the target's are used.

For a block after n committed tokens ids[0..n-1], with ids[n] the pending token:
  ctx   = hidden_norm(fc(concat_j target_residual_after_layer[target_layer_ids[j]](ids[:n])))
  x     = target_embedding([ids[n], mask, ..., mask])            (B rows, positions n..n+B-1)
  layer: h = input_layernorm(x); q = q_norm(q_proj(h)) at the block positions;
         k = k_norm(k_proj([ctx; h])), v = v_proj([ctx; h]) at positions 0..n+B-1 (neox RoPE);
         attention with no mask (every block row sees every context row and every block row);
         x += o_proj(attn); x += down(silu(gate(post_attention_layernorm(x))) * up(...))
  logits = target_output(norm(x))                                 [B, vocab]
"""

import numpy as np

import model as model_lib
import safetensors_io

ARCHITECTURE = "DFlashDraftModel"


class DFlashDrafter:
    def __init__(self, directory, target):
        d = safetensors_io.HFModelDir(directory)
        cfg = d.config
        tc = target.config
        if ARCHITECTURE not in (cfg.get("architectures") or []):
            raise ValueError(f"{directory}: architectures {cfg.get('architectures')!r} is not "
                             f"[{ARCHITECTURE!r}]")
        self.target = target
        self.block_size = int(cfg["block_size"])
        dc = cfg["dflash_config"]
        self.mask_token_id = int(dc["mask_token_id"])
        self.layer_ids = [int(i) for i in dc["target_layer_ids"]]
        self.n_layers = int(cfg["num_hidden_layers"])
        self.d_model = int(cfg["hidden_size"])
        self.n_heads = int(cfg["num_attention_heads"])
        self.n_kv_heads = int(cfg.get("num_key_value_heads") or self.n_heads)
        self.head_dim = int(cfg.get("head_dim") or self.d_model // self.n_heads)
        self.d_ff = int(cfg["intermediate_size"])
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.rope_base = float(cfg.get("rope_theta", 10000.0))
        if self.block_size < 2:
            raise ValueError(f"block_size {self.block_size} < 2")
        if self.d_model != tc.d_model:
            raise ValueError(f"hidden_size {self.d_model} != target hidden {tc.d_model}")
        if not 0 <= self.mask_token_id < tc.vocab_size:
            raise ValueError(f"mask_token_id {self.mask_token_id} outside [0, {tc.vocab_size})")
        for i in self.layer_ids:
            if not 0 <= i < tc.n_layers:
                raise ValueError(f"target layer id {i} outside [0, {tc.n_layers})")
        dm, q, kv, ff, hd = (self.d_model, self.n_heads * self.head_dim,
                             self.n_kv_heads * self.head_dim, self.d_ff, self.head_dim)
        want = {"fc.weight": (dm, len(self.layer_ids) * tc.d_model), "hidden_norm.weight": (dm,),
                "norm.weight": (dm,)}
        for i in range(self.n_layers):
            p = f"layers.{i}."
            want.update({
                p + "input_layernorm.weight": (dm,), p + "post_attention_layernorm.weight": (dm,),
                p + "self_attn.q_proj.weight": (q, dm), p + "self_attn.k_proj.weight": (kv, dm),
                p + "self_attn.v_proj.weight": (kv, dm), p + "self_attn.o_proj.weight": (dm, q),
                p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
                p + "mlp.gate_proj.weight": (ff, dm), p + "mlp.up_proj.weight": (ff, dm),
                p + "mlp.down_proj.weight": (dm, ff)})
        self.weights = {}
        for name, shape in want.items():
            t = d.tensor(name)
            if tuple(t.shape) != shape:
                raise ValueError(f"{name}: expected {list(shape)}, file has {list(t.shape)}")
            self.weights[name] = t

    def context_features(self, ids, dtype):
        """[n, len(layer_ids) * target_d_model]: the target's residual stream after each chosen
        layer (full recompute over ids), concatenated in target_layer_ids order."""
        outs = {}
        self.target.final_hidden(ids, dtype, trace=lambda name, x: outs.__setitem__(name, x))
        return np.concatenate([outs[f"blk.{i}.out"] for i in self.layer_ids], axis=1)

    def block_logits(self, ids, n, dtype=np.float32):
        """Logits [block_size, vocab] of the block drafted after ids[:n], ids[n] its first token."""
        B, H, KV, hd = self.block_size, self.n_heads, self.n_kv_heads, self.head_dim
        tw = self.target.weights_as(dtype)
        w = {k: v.astype(dtype) for k, v in self.weights.items()}
        norm = model_lib.rms_norm
        if n > 0:
            feats = self.context_features(list(ids[:n]), dtype)
            ctx = norm(feats @ w["fc.weight"].T, w["hidden_norm.weight"], self.eps)     # [n, d]
        else:
            ctx = np.zeros((0, self.d_model), dtype=dtype)
        tokens = [int(ids[n])] + [self.mask_token_id] * (B - 1)
        x = tw["token_embd"][tokens]                                                   # [B, d]
        cos, sin = model_lib.rope_tables(n + B, hd, self.rope_base, dtype)
        group = H // KV
        scale = x.dtype.type(1.0 / np.sqrt(hd))
        for i in range(self.n_layers):
            p = f"layers.{i}."
            h = norm(x, w[p + "input_layernorm.weight"], self.eps)
            q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(B, H, hd)
            q = norm(q, w[p + "self_attn.q_norm.weight"], self.eps)
            q = model_lib.apply_rope(q, cos[n:], sin[n:], "neox")
            src = np.concatenate([ctx, h], axis=0)                                     # [n+B, d]
            k = (src @ w[p + "self_attn.k_proj.weight"].T).reshape(n + B, KV, hd)
            k = norm(k, w[p + "self_attn.k_norm.weight"], self.eps)
            k = model_lib.apply_rope(k, cos, sin, "neox")
            v = (src @ w[p + "self_attn.v_proj.weight"].T).reshape(n + B, KV, hd)
            k = np.repeat(k, group, axis=1).transpose(1, 0, 2)                         # [H, n+B, hd]
            v = np.repeat(v, group, axis=1).transpose(1, 0, 2)
            scores = (q.transpose(1, 0, 2) @ k.transpose(0, 2, 1)) * scale             # [H, B, n+B]
            out = (model_lib.softmax(scores) @ v).transpose(1, 0, 2).reshape(B, H * hd)
            x = x + out @ w[p + "self_attn.o_proj.weight"].T
            h = norm(x, w[p + "post_attention_layernorm.weight"], self.eps)
            gate = h @ w[p + "mlp.gate_proj.weight"].T
            up = h @ w[p + "mlp.up_proj.weight"].T
            x = x + (model_lib.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
        return norm(x, w["norm.weight"], self.eps) @ tw["output"].T                    # [B, vocab]

    def draft(self, ids, n, dtype=np.float32):
        """The draft tokens (argmax of rows 1..B-1, first maximum on ties)."""
        return [int(t) for t in self.block_logits(ids, n, dtype)[1:].argmax(axis=1)]
