"""A decode step for the continuous batch with fewer Python steps per token than a transformers forward.

A decode step of a tiny model is mostly framework overhead: for the 3-layer, 128-wide tic-tac-toe default one
transformers forward makes ~15 module calls per layer, builds a cache view and mask per layer, and dispatches
through its attention registry, while the arithmetic is a few small matmuls. `LeanDecoder` runs the same arithmetic
straight from the model's own weight tensors (no copies, so a trainer's in-place updates are seen at once):
embedding, per layer RMSNorm -> q/k/v projections (+ bias, + Qwen3's q/k norms) -> RoPE from the model's own
rotary module (so every rope type the model supports is honoured) -> the new key/value written into the slot
buffers -> scaled-dot-product attention over the row's live columns (grouped-query heads expanded by SDPA) -> output
projection, RMSNorm -> SiLU-gated MLP, and the final norm and LM head.

It is used only for decoder-only models whose layers are exactly that (`LeanDecoder.supports`: model types
`llama`, `qwen2`, `qwen3`, `mistral` without sliding windows, SiLU activation, plain `nn.Linear` layers -- none of
these architectures has attention-logit softcapping or embedding scaling); anything else keeps the transformers
forward. `tests/models/test_lean_decode.py` checks that its logits match transformers' on the same slot buffers,
and that greedy generations are identical. The gain is measured by `benchmarks/bench_serve.py` (its
`transformers-forward` configuration, side by side with the default; docs/serving.md).
"""

from __future__ import annotations

from typing import Any

SUPPORTED = ("llama", "qwen2", "qwen3", "mistral")


class LeanDecoder:
    """One decode step over the continuous batch's slot buffers (see `toolgym.policies.continuous`)."""

    def __init__(self, model: Any) -> None:
        import torch

        self.torch = torch
        self.F = torch.nn.functional
        cfg = model.config
        inner = model.model
        self.embed = inner.embed_tokens
        self.rotary = inner.rotary_emb
        self.norm = inner.norm
        self.lm_head = model.lm_head
        self.layers = list(inner.layers)
        a0 = self.layers[0].self_attn
        self.head_dim = int(a0.head_dim)
        self.n_heads = int(cfg.num_attention_heads)
        self.n_kv = int(cfg.num_key_value_heads)
        self.scaling = float(a0.scaling)
        self.eps = [(float(la.input_layernorm.variance_epsilon), float(la.post_attention_layernorm.variance_epsilon))
                    for la in self.layers]
        self.final_eps = float(self.norm.variance_epsilon)
        self.qk_norm = hasattr(a0, "q_norm")

    @staticmethod
    def supports(model: Any) -> bool:
        """Whether `model`'s decode step is exactly the arithmetic `step` runs."""
        cfg = getattr(model, "config", None)
        if cfg is None or getattr(cfg, "model_type", None) not in SUPPORTED:
            return False
        inner = getattr(model, "model", None)
        if inner is None or not all(hasattr(inner, a) for a in ("embed_tokens", "rotary_emb", "norm", "layers")):
            return False
        if getattr(cfg, "hidden_act", None) != "silu" or getattr(cfg, "pretraining_tp", 1) not in (1, None):
            return False
        if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
            return False
        if getattr(cfg, "use_sliding_window", False) and getattr(cfg, "sliding_window", None):
            return False
        if getattr(cfg, "model_type", None) == "mistral" and getattr(cfg, "sliding_window", None):
            return False
        import torch

        lin = torch.nn.Linear
        if type(inner.embed_tokens) is not torch.nn.Embedding or type(getattr(model, "lm_head", None)) is not lin:
            return False
        for la in inner.layers:
            att = getattr(la, "self_attn", None)
            if att is None or not all(hasattr(att, p) for p in ("q_proj", "k_proj", "v_proj", "o_proj", "scaling")):
                return False
            if getattr(att, "sliding_window", None) or not all(
                    hasattr(la.mlp, p) for p in ("gate_proj", "up_proj", "down_proj")):
                return False
            # plain linear layers only: a LoRA or quantised layer computes more than its `.weight`
            mods = [getattr(att, p) for p in ("q_proj", "k_proj", "v_proj", "o_proj")]
            mods += [getattr(la.mlp, p) for p in ("gate_proj", "up_proj", "down_proj")]
            if any(type(m) is not lin for m in mods):
                return False
        return True

    def _rms(self, x: Any, weight: Any, eps: float) -> Any:
        dt = x.dtype
        h = x.float()
        h = h * self.torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return weight * h.to(dt)

    def step(self, ids: Any, pos: Any, keys: list[Any], values: list[Any], mask: Any, n: int, s: int, e: int) -> Any:
        """Logits [n, vocab] for one new token per row: `ids`/`pos` [n, 1]; `keys`/`values` the per-layer slot
        buffers [slots, kv_heads, columns, head_dim] (the new token's key/value is written at column `e`);
        `mask` [n, 1, 1, e + 1 - s] bool, the columns [s, e] each row attends."""
        return self.forward(ids, pos, keys, values, mask, n, s, e)[:, -1]

    def forward(self, ids: Any, pos: Any, keys: list[Any], values: list[Any], mask: Any, n: int, s: int, e: int
                ) -> Any:
        """Logits [n, T, vocab] for T new tokens per row (`ids`/`pos` [n, T]): their keys/values are written at
        columns [e, e + T) and `mask` [n, 1, T, e + T - s] says which of the columns [s, e + T) each new token
        attends (a speculative step verifies T - 1 drafted tokens at once; `step` is T = 1)."""
        torch, F = self.torch, self.F
        D, Hq, Hk = self.head_dim, self.n_heads, self.n_kv
        T = ids.shape[1]
        h = self.embed.weight[ids]  # [n, T, hidden]
        cos, sin = self.rotary(h, pos)  # [n, T, D]
        cos, sin = cos[:, None], sin[:, None]  # [n, 1, T, D]
        half = D // 2
        gqa = Hq != Hk
        for li, la in enumerate(self.layers):
            att, mlp = la.self_attn, la.mlp
            eps1, eps2 = self.eps[li]
            x = self._rms(h, la.input_layernorm.weight, eps1)
            q = F.linear(x, att.q_proj.weight, att.q_proj.bias).view(n, T, Hq, D).transpose(1, 2)
            k = F.linear(x, att.k_proj.weight, att.k_proj.bias).view(n, T, Hk, D).transpose(1, 2)
            v = F.linear(x, att.v_proj.weight, att.v_proj.bias).view(n, T, Hk, D).transpose(1, 2)
            if self.qk_norm:
                q = self._rms(q, att.q_norm.weight, float(att.q_norm.variance_epsilon))
                k = self._rms(k, att.k_norm.weight, float(att.k_norm.variance_epsilon))
            q = q * cos + torch.cat((-q[..., half:], q[..., :half]), dim=-1) * sin
            k = k * cos + torch.cat((-k[..., half:], k[..., :half]), dim=-1) * sin
            kb, vb = keys[li], values[li]
            kb[:n, :, e : e + T] = k
            vb[:n, :, e : e + T] = v
            o = F.scaled_dot_product_attention(q, kb[:n, :, s : e + T], vb[:n, :, s : e + T], attn_mask=mask,
                                               scale=self.scaling, enable_gqa=gqa)
            h = h + F.linear(o.transpose(1, 2).reshape(n, T, Hq * D), att.o_proj.weight, att.o_proj.bias)
            x = self._rms(h, la.post_attention_layernorm.weight, eps2)
            g = F.linear(x, mlp.gate_proj.weight, mlp.gate_proj.bias)
            u = F.linear(x, mlp.up_proj.weight, mlp.up_proj.bias)
            h = h + F.linear(F.silu(g) * u, mlp.down_proj.weight, mlp.down_proj.bias)
        h = self._rms(h, self.norm.weight, self.final_eps)
        return F.linear(h, self.lm_head.weight, getattr(self.lm_head, "bias", None))


__all__ = ["SUPPORTED", "LeanDecoder"]
