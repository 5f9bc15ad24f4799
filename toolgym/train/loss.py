r"""Group-relative advantages and the policy-gradient losses, on one screen.

Shapes: `logp`, `old_logp`, `ref_logp`, `mask` are [B, T] (token log-probs of the *sampled* tokens under the
trainer, the behaviour policy and the reference; mask 1 on assistant-sampled tokens); `adv` is [B].

Per-token objective, with \(A\) the sequence's advantage, \(r = \pi_\theta / \pi_{\text{old}}\) the token's ratio
and \(\operatorname{sg}\) a stop-gradient:

| `loss_type` | per-token loss | note |
|---|---|---|
| `grpo`, `dr_grpo`, `dapo` | \(-\min\big(r A,\ \operatorname{clip}(r, 1-\epsilon_{low}, 1+\epsilon_{high})\, A\big)\) | PPO clip; `dapo`: \(\epsilon_{high} > \epsilon_{low}\) |
| `gspo` | the same with the sequence-level ratio \(s = \exp\big(\tfrac{1}{T_i}\sum_t \log r_t\big)\) for every token | token form \(\operatorname{sg}[s]\, \pi_\theta / \operatorname{sg}[\pi_\theta]\): the gradient is \(s\, \nabla \tfrac{1}{T_i}\sum_t \log \pi_\theta\) |
| `cispo` | \(-\operatorname{sg}\big[\min(r, 1+\epsilon_{IS})\big]\, A \log \pi_\theta\) | clipped IS weight (`epsilon_high_is`), never a zero gradient |

plus, when a reference is given, \(\beta\, k_3\) with \(k_3 = e^{d} - d - 1\), \(d = \log \pi_{ref} - \log \pi_\theta\)
(`kl_coef` is \(\beta\)).

Aggregation (`token_weights`), chosen so gradient accumulation over micro-batches gives the same gradient as one
big batch -- the normalisers are counts over the *whole step*, passed in (\(T_i\): sequence \(i\)'s loss tokens,
\(N\): sequences, \(M\): loss tokens, \(L\): the longest sequence):

| `loss_type` | token weight | meaning |
|---|---|---|
| `grpo`, `gspo` | \(1 / (T_i N)\) | mean over each sequence's tokens, then mean over sequences |
| `dapo`, `cispo` | \(1 / M\) | mean over all tokens of the step |
| `dr_grpo` | \(1 / (N L)\) | sum over tokens / (n_seqs * max_len), a constant: no length bias |
"""

from __future__ import annotations

from typing import Any

import torch

from toolgym.policies.hf import supports_logits_to_keep

LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "cispo", "gspo")


def group_advantages(rewards: torch.Tensor, group_size: int, scale: bool = False, eps: float = 1e-6) -> torch.Tensor:
    """Rewards [G*group_size] laid out group after group -> mean-centred advantages (optionally / group std).
    A group with constant reward gets advantage exactly 0 everywhere: a float32 mean of eight rewards of 1.2 is off
    by an ulp, which would leave such a group 1e-7 (and, scaled by its std of 1e-7, about 0.1) of advantage -- a push
    on every token of a group that compared nothing -- and `skip_constant_groups` would not see it as constant.
    Computed in float64, returned as float32."""
    r = rewards.double().view(-1, group_size)
    adv = r - r.mean(dim=1, keepdim=True)
    if scale:
        adv = adv / (r.std(dim=1, keepdim=True, unbiased=False) + eps)
    constant = (r == r[:, :1]).all(dim=1, keepdim=True)
    return adv.masked_fill(constant, 0.0).float().view(-1)


def token_weights(mask: torch.Tensor, loss_type: str, n_seqs: int, n_tokens: int, max_len: int) -> torch.Tensor:
    """Weight of each token in the step's loss (see module docstring); `n_*` count the whole step."""
    m = mask.float()
    if loss_type in ("grpo", "gspo"):
        return m / m.sum(-1, keepdim=True).clamp(min=1) / n_seqs
    if loss_type in ("dapo", "cispo"):
        return m / max(n_tokens, 1)
    if loss_type == "dr_grpo":
        return m / (n_seqs * max_len)
    raise ValueError(f"unknown loss_type {loss_type!r}; known: {LOSS_TYPES}")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    adv: torch.Tensor,
    weights: torch.Tensor,
    loss_type: str = "grpo",
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    eps_high_is: float = 5.0,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """The step's loss contribution of these sequences (sum of weighted per-token terms) and detached stats.
    `kl_weights` (same shape as `weights`): the KL term's own token weights, for a KL over more tokens than the
    policy gradient covers (`pg_tokens="answer"`: the anchor holds the reasoning too); None = `weights`."""
    m = (weights > 0).float()
    A = adv[:, None].to(logp.dtype)
    log_r = (logp - old_logp) * m
    if loss_type == "gspo":
        seq = log_r.sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1)
        log_r = seq.detach() + logp - logp.detach()
    ratio = torch.exp(log_r)
    if loss_type == "cispo":
        per_tok = -torch.clamp(ratio, max=1 + eps_high_is).detach() * A * logp
        clipped = (ratio > 1 + eps_high_is).float()
    else:
        clipped_ratio = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
        per_tok = -torch.min(ratio * A, clipped_ratio * A)
        clipped = ((ratio * A) > (clipped_ratio * A)).float()  # the clip is active (gradient cut)
    kl = torch.zeros_like(logp)
    kw = weights if kl_weights is None else kl_weights
    km = (kw > 0).float()
    loss = (per_tok * weights).sum()
    if ref_logp is not None:
        d = (ref_logp - logp) * km
        kl = torch.exp(d) - d - 1
        if kl_coef:
            loss = loss + kl_coef * (kl * kw).sum()
    n = m.sum().clamp(min=1)
    stats = {
        "clip_frac": float((clipped * m).sum() / n),
        "kl": float((kl.detach() * km).sum() / km.sum().clamp(min=1)),
        "ratio_mean": float((ratio.detach() * m).sum() / n),
        "tokens": float(m.sum()),
    }
    return loss, stats


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log p(ids[t] | ids[<t]) from causal-LM logits [B, T, V] -> [B, T] (position 0 gets 0).
    Uses logits / temperature, matching the sampler's logprobs."""
    lp = torch.log_softmax(logits[:, :-1].float() / temperature, dim=-1)
    out = lp.gather(-1, ids[:, 1:, None]).squeeze(-1)
    return torch.cat([torch.zeros_like(out[:, :1]), out], dim=1)


MIN_SHARED_PREFIX = 16  # below this a shared-prefix forward saves less than its second model call costs


def masked_logprobs(model: Any, ids: torch.Tensor, attn: torch.Tensor, mask: torch.Tensor,
                    temperature: float = 1.0) -> torch.Tensor:
    """`token_logprobs` of a forward pass, with the LM head and softmax run only from the batch's first masked
    token on (`logits_to_keep`): prompt positions never need logits, and on long prompts they are most of the
    sequence. Returns [B, T]; positions before the window are 0 (they carry no loss weight).

    Shared prefix: the rows of a step usually start with the same tokens (system prompt + tool schemas: 378 of
    the 432 prompt tokens of a tic-tac-toe move task). That prefix runs once, as one row with a KV cache, and the
    rest of every row attends to it -- the same function and gradient as the full forward (autograd sums the rows'
    gradients into the shared keys and values), with far fewer tokens through the network. Models whose cache is
    not a plain `DynamicCache` (sliding-window, LFM2's convolutions) take the full forward."""
    from toolgym.policies.kv_cache import expand_prefix_cache, shared_prefix_len

    B, T = ids.shape
    cols = mask.detach().sum(0).nonzero()
    first = int(cols[0]) if len(cols) else 1
    keeps = supports_logits_to_keep(model)
    P = min(shared_prefix_len(ids, attn), first - 1) if B > 1 and keeps else 0
    if P >= MIN_SHARED_PREFIX:
        pre = model(input_ids=ids[:1, :P], attention_mask=attn[:1, :P], use_cache=True, logits_to_keep=1)
        past = pre.past_key_values
        if expand_prefix_cache(past, B):
            pos = torch.arange(P, T, device=ids.device).expand(B, -1)
            keep = T - first + 1
            logits = model(input_ids=ids[:, P:], attention_mask=attn, position_ids=pos, past_key_values=past,
                           use_cache=True, logits_to_keep=keep).logits
            window = token_logprobs(logits, ids[:, first - 1 :], temperature)
            return torch.cat([window.new_zeros(B, first - 1), window], dim=1)
    if not keeps or first <= 1:
        return token_logprobs(model(input_ids=ids, attention_mask=attn).logits, ids, temperature)
    keep = T - first + 1  # logits at positions first-1 .. T-1 (the last, past the end, is dropped)
    logits = model(input_ids=ids, attention_mask=attn, logits_to_keep=keep).logits
    window = token_logprobs(logits, ids[:, first - 1 :], temperature)  # [B, keep]; column 0 predicts nothing
    return torch.cat([window.new_zeros(window.shape[0], first - 1), window], dim=1)
