"""Every policy-gradient loss type, and its gradient, against an independent reference on a small fixed batch.

The reference below is written from the papers' definitions, not from `toolgym.train.loss`: plain Python loops over
sequences and tokens with `math` floats (no torch), the loss value AND the analytic derivative d loss / d logp[b, t]
of every entry derived by hand:

  PPO clip (grpo, dr_grpo, dapo), per token, r = exp(logp - old), c = clip(r, 1 - eps_low, 1 + eps_high):
      f = -min(r*A, c*A);  df/dlogp = -r*A (dr/dlogp = r) when r*A <= c*A, else 0 (the clip is active in the
      direction of A: r > 1 + eps_high with A > 0, or r < 1 - eps_low with A < 0)
  gspo (Zheng et al. 2025), per sequence, s = exp(mean_t (logp - old)), c = clip(s, ...):
      f_seq = -min(s*A, c*A);  df_seq/dlogp_t = -s*A / L (ds/dlogp_t = s / L) unless clipped, else 0
  cispo (MiniMax-M1), per token, w = sg[min(r, 1 + eps_high_is)]:
      f = -w*A*logp;  df/dlogp = -w*A (the IS weight is a constant: the gradient never vanishes)
  k3 KL (GRPO paper), d = ref - logp:  k = exp(d) - d - 1;  dk/dlogp = 1 - exp(d)   (added with kl_coef, per token)
Aggregation over the step (n sequences, N loss tokens, L_b tokens in sequence b):
  grpo, gspo:  (1/n) sum_b (1/L_b) sum_t f     (gspo: (1/n) sum_b f_seq; its KL per token like grpo)
  dapo, cispo: (1/N) sum_b sum_t f
  dr_grpo:     (1/(n * max_len)) sum_b sum_t f,  max_len = max_tokens * max_turns (the generation budget)

The reference's hand gradients are themselves checked by central finite differences of its own loss, then loss.py
(`token_weights` + `policy_loss` + autograd) is checked against it, alone, split into micro-batches with the
step's normalisers, and through `GRPOTrainer.update`. Negative controls show that the same comparison fails for
deliberately wrong variants (advantage sign, swapped eps, no clip, another aggregation, per-micro-batch
normalisers, KL sign, prompt tokens in the loss), so the checks cannot pass vacuously.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from toolgym.train import grpo as grpo_mod
from toolgym.train.loss import LOSS_TYPES, group_advantages, policy_loss, token_weights

TOL = 1e-6
DETECT = 1e-4  # a wrong variant must miss the reference by at least this much (100x the tolerance)
EPS_LOW, EPS_HIGH, EPS_HIGH_IS = 0.2, 0.28, 0.3  # asymmetric on purpose: a swap of the two is visible
MAX_TOKENS, MAX_TURNS = 4, 3
MAX_LEN = MAX_TOKENS * MAX_TURNS  # dr_grpo's constant normaliser, as GRPOTrainer.update builds it
KL = 0.1

# ---------------------------------------------------------------------------------------------------- the batch
# 5 sequences x 8 positions. 0 = prompt / tool result / padding; every sequence has a prompt prefix.
MASK = [
    [0, 0, 0, 1, 1, 1, 1, 1],  # 5 tokens, full length
    [0, 0, 1, 1, 0, 1, 0, 0],  # 3 tokens, a tool result in between, padding
    [0, 1, 1, 1, 1, 0, 0, 0],  # 4 tokens, padding
    [0, 0, 0, 0, 0, 0, 1, 0],  # 1 token after a long prompt
    [0, 0, 0, 1, 1, 1, 0, 0],  # 3 tokens
]
# behaviour log-probs: dyadic (exact in float32, as the sampler's logprobs travel through pad_batch)
OLD = [
    [0.0, -1.5, -0.25, -1.75, -0.875, -2.75, -0.125, -1.375],
    [0.0, -1.25, -2.0625, -0.9375, -2.5, -1.125, -0.5, -0.5],
    [0.0, -0.0625, -1.4375, -0.875, -2.0625, -1.25, -1.25, -1.25],
    [0.0, -1.25, -0.6875, -1.125, -1.3125, -2.6875, -0.4375, -0.8125],
    [0.0, -1.3125, -1.3125, -1.875, -0.0625, -1.0625, -2.75, -2.75],
]
# log r = logp - old on loss tokens (the rest is junk that must not leak: prompt/padding positions are masked).
# Against [1 - 0.2, 1 + 0.28] = log [-0.223, 0.247] and the cispo cap 1.3 = log 0.262:
LOG_R = [
    [0.7, -0.6, 0.9, 0.50, 0.21, 0.40, -0.02, 0.36],  # A>0: 0.50 0.40 0.36 clipped high; 0.21 in (out if eps swapped)
    [0.8, 0.3, 0.45, 0.40, -0.9, -0.05, 0.6, 0.6],  # A<0: 0.45 0.40 above the range but unclipped (min takes r*A)
    [-0.5, -0.24, -0.45, 0.05, -0.56, 0.7, 0.7, 0.7],  # A>0: -0.24 -0.45 -0.56 below the range, unclipped
    [0.3, 0.3, -0.8, 0.9, 0.4, -0.6, -0.24, 0.5],  # A<0: -0.24 clipped low (in if eps swapped)
    [0.6, -0.7, 0.2, 0.12, -0.30, 0.09, 0.8, 0.8],  # A>0: -0.30 below, unclipped; 0.12 0.09 in
]
# gspo's sequence log-ratios: 0.29 (A>0: clipped high), 0.267 (A<0: above, unclipped), -0.30 (A>0: below, unclipped),
# -0.24 (A<0: clipped low), -0.03 (in)
REF_D = [  # ref - logp
    [0.5, 0.3, -0.4, 0.25, -0.1, 0.4, -0.3, 0.15],
    [0.2, -0.5, -0.2, 0.35, 0.6, -0.45, 0.3, 0.3],
    [-0.3, 0.1, -0.35, 0.2, 0.45, -0.6, 0.2, 0.2],
    [0.4, -0.4, 0.5, 0.3, -0.2, 0.1, 0.3, -0.5],
    [0.1, 0.7, -0.6, -0.15, 0.05, 0.5, -0.4, -0.4],
]
LOGP = [[o + lr for o, lr in zip(orow, lrow, strict=True)] for orow, lrow in zip(OLD, LOG_R, strict=True)]
REF = [[lp + d for lp, d in zip(lrow, drow, strict=True)] for lrow, drow in zip(LOGP, REF_D, strict=True)]
ADV = [0.8, -0.6, 1.1, -0.35, 0.45]
B, T = len(MASK), len(MASK[0])
SPLITS = ([[0, 1], [2, 3], [4]], [[0], [1], [2], [3], [4]], [[0, 1, 2], [3, 4]])


# ---------------------------------------------------------------------------------------------------- reference
def hand_advantages(rewards: list[float], group_size: int, scale: bool, eps: float = 1e-6) -> list[float]:
    """A_i = r_i - mean(group), optionally / (population std of the group + eps)."""
    out = []
    for g in range(0, len(rewards), group_size):
        grp = rewards[g : g + group_size]
        mean = sum(grp) / len(grp)
        std = math.sqrt(sum((x - mean) ** 2 for x in grp) / len(grp))
        out += [(x - mean) / (std + eps) if scale else x - mean for x in grp]
    return out


def reference(kind: str, adv: list[float], *, logp: list[list[float]] = LOGP, mask: list[list[int]] = MASK,
              eps_low: float = EPS_LOW, eps_high: float = EPS_HIGH, eps_high_is: float = EPS_HIGH_IS,
              kl_coef: float = 0.0, max_len: int = MAX_LEN, is_logp: list[list[float]] | None = None) -> dict[str, Any]:
    """Loss, d loss / d logp[b][t], and per-token stats of the whole batch from the definitions in the docstring.
    `is_logp` is where cispo reads its (stop-gradient) IS weight; default `logp` (finite differences freeze it)."""
    is_logp = logp if is_logp is None else is_logp
    lo, hi = 1 - eps_low, 1 + eps_high
    n = len(mask)
    toks = [[t for t in range(len(row)) if row[t]] for row in mask]
    N = sum(len(s) for s in toks)
    loss = 0.0
    grad = [[0.0] * len(row) for row in mask]
    cut = [[False] * len(row) for row in mask]
    ratio = [[1.0] * len(row) for row in mask]
    kl_sum = 0.0
    for b, ts in enumerate(toks):
        A, L = adv[b], len(ts)
        if kind in ("grpo", "gspo"):
            coef = 1.0 / (L * n)  # mean over the sequence's tokens, then mean over sequences
        elif kind in ("dapo", "cispo"):
            coef = 1.0 / N  # mean over every token of the batch
        elif kind == "dr_grpo":
            coef = 1.0 / (n * max_len)  # token sum over a constant
        else:
            raise AssertionError(kind)
        if kind == "gspo":  # one ratio per sequence: the geometric mean of the token ratios
            s = math.exp(sum(logp[b][t] - OLD[b][t] for t in ts) / L)
            c = min(max(s, lo), hi)
            clipped = s * A > c * A
            loss += -min(s * A, c * A) / n
            for t in ts:
                grad[b][t] += 0.0 if clipped else -s * A / L / n
                cut[b][t], ratio[b][t] = clipped, s
        for t in ts:
            r = math.exp(logp[b][t] - OLD[b][t])
            if kind == "cispo":
                r_is = math.exp(is_logp[b][t] - OLD[b][t])
                w = min(r_is, 1 + eps_high_is)
                f, df = -w * A * logp[b][t], -w * A
                cut[b][t], ratio[b][t] = r_is > 1 + eps_high_is, r
            elif kind != "gspo":
                c = min(max(r, lo), hi)
                if r * A <= c * A:
                    f, df = -r * A, -r * A
                else:
                    f, df = -c * A, 0.0
                    cut[b][t] = True
                ratio[b][t] = r
            else:
                f = df = 0.0  # gspo's policy term is per sequence, above
            d = REF[b][t] - logp[b][t]
            k3 = math.exp(d) - d - 1
            kl_sum += k3
            loss += coef * (f + kl_coef * k3)
            grad[b][t] += coef * (df + kl_coef * (1 - math.exp(d)))
    return {"loss": loss, "grad": grad, "clip_frac": sum(map(sum, cut)) / N, "kl": kl_sum / N,
            "ratio_mean": sum(ratio[b][t] for b, ts in enumerate(toks) for t in ts) / N, "cut": cut}


# ---------------------------------------------------------------------------------------------------- loss.py side
def _t(x: list[list[float]] | list[float], dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.tensor(x, dtype=dtype)


def _n_tokens() -> int:
    return sum(map(sum, MASK))


def under_test(kind: str, adv: list[float], kl_coef: float = 0.0, dtype: torch.dtype = torch.float64,
               splits: list[list[int]] | None = None, per_micro_batch_norm: bool = False) -> dict[str, Any]:
    """loss.py on the batch, whole or as micro-batches (each cut to its own width, as pad_batch does), gradients
    accumulated on one leaf; normalisers over the whole step unless `per_micro_batch_norm` (a deliberate slip)."""
    logp = _t(LOGP, dtype).requires_grad_(True)
    old, ref, mask, A = _t(OLD, dtype), _t(REF, dtype), _t(MASK, dtype), _t(adv, dtype)
    total = 0.0
    stats: dict[str, Any] = {}
    for rows in splits or [list(range(B))]:
        width = max(t for r in rows for t in range(T) if MASK[r][t]) + 1
        m = mask[rows, :width]
        n_seqs, n_tok = (len(rows), int(m.sum())) if per_micro_batch_norm else (B, _n_tokens())
        w = token_weights(m, kind, n_seqs, n_tok, MAX_LEN)
        loss, stats = policy_loss(logp[rows, :width], old[rows, :width], A[rows], w, kind, EPS_LOW, EPS_HIGH,
                                  EPS_HIGH_IS, ref[rows, :width], kl_coef)
        loss.backward()
        total += float(loss.detach())
    return {"loss": total, "grad": logp.grad.tolist(), **(stats if splits is None else {})}


def mismatch(got: dict[str, Any], want: dict[str, Any]) -> float:
    """The largest absolute difference over the loss and every gradient entry."""
    worst = abs(got["loss"] - want["loss"])
    for b in range(B):
        for t in range(T):
            worst = max(worst, abs(got["grad"][b][t] - want["grad"][b][t]))
    return worst


def _explain(got: dict[str, Any], want: dict[str, Any]) -> str:
    bad = [(b, t, got["grad"][b][t], want["grad"][b][t]) for b in range(B) for t in range(T)
           if abs(got["grad"][b][t] - want["grad"][b][t]) > TOL]
    return f"loss {got['loss']:.9f} vs reference {want['loss']:.9f}; grad (b, t, got, want): {bad}"


# ---------------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("kl_coef", [0.0, KL])
@pytest.mark.parametrize("kind", LOSS_TYPES)
def test_reference_gradient_is_the_derivative_of_its_loss(kind: str, kl_coef: float) -> None:
    """The hand-derived gradients equal central differences of the reference loss (cispo: IS weight frozen)."""
    want = reference(kind, ADV, kl_coef=kl_coef)
    h = 1e-6
    for b in range(B):
        for t in range(T):
            plus = [row[:] for row in LOGP]
            minus = [row[:] for row in LOGP]
            plus[b][t] += h
            minus[b][t] -= h
            fd = (reference(kind, ADV, logp=plus, kl_coef=kl_coef, is_logp=LOGP)["loss"]
                  - reference(kind, ADV, logp=minus, kl_coef=kl_coef, is_logp=LOGP)["loss"]) / (2 * h)
            assert fd == pytest.approx(want["grad"][b][t], abs=TOL), (b, t)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("kl_coef", [0.0, KL])
@pytest.mark.parametrize("kind", LOSS_TYPES)
def test_loss_and_gradient_match_reference(kind: str, kl_coef: float, dtype: torch.dtype) -> None:
    want = reference(kind, ADV, kl_coef=kl_coef)
    got = under_test(kind, ADV, kl_coef, dtype)
    assert mismatch(got, want) <= TOL, _explain(got, want)
    for k in ("clip_frac", "kl", "ratio_mean"):
        assert got[k] == pytest.approx(want[k], abs=TOL), k
    masked = [got["grad"][b][t] for b in range(B) for t in range(T) if not MASK[b][t]]
    assert masked == [0.0] * len(masked)  # prompt, tool-result and padding positions get exactly nothing


@pytest.mark.parametrize("kind", LOSS_TYPES)
def test_fixed_batch_exercises_every_clip_case(kind: str) -> None:
    """The batch is not a soft target: for each type it holds clipped tokens (or sequences) on both sides with
    both signs of A, ratios outside the range that stay unclipped (min picks r*A), and ratios inside."""
    cut = reference(kind, ADV)["cut"]
    cases = set()
    for b in range(B):
        seq_r = math.exp(sum(LOG_R[b][t] for t in range(T) if MASK[b][t]) / sum(MASK[b]))
        for t in range(T):
            if MASK[b][t]:
                r = seq_r if kind == "gspo" else math.exp(LOG_R[b][t])
                hi = 1 + (EPS_HIGH_IS if kind == "cispo" else EPS_HIGH)
                side = "high" if r > hi else "low" if r < 1 - EPS_LOW and kind != "cispo" else "in"
                cases.add(("cut" if cut[b][t] else "kept", "+" if ADV[b] > 0 else "-", side))
    if kind == "cispo":
        assert {("cut", "+", "high"), ("cut", "-", "high"), ("kept", "+", "in"), ("kept", "-", "in")} <= cases
    else:
        assert {("cut", "+", "high"), ("cut", "-", "low"), ("kept", "+", "low"), ("kept", "-", "high"),
                ("kept", "+", "in")} <= cases
    assert all(c[0] == "kept" or c[2] != "in" for c in cases)  # nothing inside the range is ever cut


@pytest.mark.parametrize("kl_coef", [0.0, KL])
@pytest.mark.parametrize("kind", LOSS_TYPES)
def test_micro_batches_with_step_normalisers_sum_to_the_batch(kind: str, kl_coef: float) -> None:
    """What GRPOTrainer.update relies on: per-micro-batch losses with the step's n_seqs / n_tokens / max_len, summed
    (gradients accumulated), equal the whole batch's loss and gradient -- and the reference."""
    want = reference(kind, ADV, kl_coef=kl_coef)
    whole = under_test(kind, ADV, kl_coef)
    for splits in SPLITS:
        got = under_test(kind, ADV, kl_coef, splits=splits)
        assert mismatch(got, want) <= TOL, (splits, _explain(got, want))
        assert mismatch(got, whole) <= 1e-9, splits


def _trainer(kind: str, kl_coef: float, scale: bool, micro_batch_size: int, tmp_path: Any) -> Any:
    """A GRPOTrainer whose 'model' is the log-prob table itself (the row is read from the token ids), and whose
    optimizer records the accumulated gradient instead of stepping."""
    from toolgym.train.config import GRPOConfig

    class Table(torch.nn.Module):
        def __init__(self, values: list[list[float]]):
            super().__init__()
            self.table = torch.nn.Parameter(_t(values))

    class Recorder:
        def __init__(self, p: torch.Tensor):
            self.p, self.grads = p, []

        def step(self) -> None:
            self.grads.append(self.p.grad.detach().clone())

        def zero_grad(self, set_to_none: bool = True) -> None:
            self.p.grad = None

    tr = grpo_mod.GRPOTrainer.__new__(grpo_mod.GRPOTrainer)
    tr.cfg = GRPOConfig(model="unused", output_dir=tmp_path, env="unused", loss_type=kind, rollouts_per_example=B,
                        micro_batch_size=micro_batch_size, max_tokens=MAX_TOKENS, epsilon=EPS_LOW,
                        epsilon_high=EPS_HIGH, epsilon_high_is=EPS_HIGH_IS, kl_coef=kl_coef, scale_rewards=scale,
                        max_grad_norm=1e9)
    tr.env = SimpleNamespace(max_turns=MAX_TURNS)
    tr.model, tr.ref, tr.is_lora = Table(LOGP), Table(REF), False
    tr.opt, tr.sched = Recorder(tr.model.table), SimpleNamespace(step=lambda: None)
    tr.pad, tr.dev = 0, torch.device("cpu")
    tr.ema = None  # no weight average (ema_decay 0)
    tr._logp = lambda model, b: model.table[b.ids[:, 0] - 1000, : b.ids.shape[1]]
    tr.policy = SimpleNamespace(weights_changed=lambda: None)  # update() ends with the sampler's sync
    return tr


def _trajectories(rewards: list[float]) -> list[Any]:
    from toolgym.types import TokenTrace, Trajectory

    out = []
    for b in range(B):
        n = max(t for t in range(T) if MASK[b][t]) + 1  # the trace ends at its last sampled token
        trace = TokenTrace(ids=[1000 + b] + [7] * (n - 1), mask=MASK[b][:n], logprobs=OLD[b][:n])
        out.append(Trajectory(example_id=0, rollout_index=b, reward=rewards[b], tokens=trace))
    return out


REWARDS = [0.9, 0.1, 1.2, 0.2, 0.8]  # one group of 5: advantages +, -, +, -, + as in ADV


@pytest.mark.parametrize(("kl_coef", "scale", "micro_batch_size"), [(KL, True, 2), (0.0, False, 1)])
@pytest.mark.parametrize("kind", LOSS_TYPES)
def test_grpo_update_matches_reference(kind: str, kl_coef: float, scale: bool, micro_batch_size: int,
                                       tmp_path: Any) -> None:
    """End to end through GRPOTrainer.update: rewards -> group advantages -> pad_batch micro-batches -> the step's
    normalisers (n_tokens from the traces, max_len = max_tokens * max_turns) -> accumulated gradient."""
    tr = _trainer(kind, kl_coef, scale, micro_batch_size, tmp_path)
    stats = tr.update(_trajectories(REWARDS))
    want = reference(kind, hand_advantages(REWARDS, B, scale), kl_coef=kl_coef)
    got = {"loss": stats["loss"], "grad": tr.opt.grads[0].tolist()}
    assert len(tr.opt.grads) == 1
    assert mismatch(got, want) <= TOL, _explain(got, want)
    assert stats["clip_frac"] == pytest.approx(want["clip_frac"], abs=TOL)


@pytest.mark.parametrize("scale", [False, True])
def test_group_advantages_match_a_hand_loop(scale: bool) -> None:
    rewards = [1.0, 0.0, 0.5, 0.25, 0.7, 0.7, 0.7, 0.7, 0.0, 1.0, 1.0, 0.3]
    got = group_advantages(torch.tensor(rewards), 4, scale=scale).tolist()
    want = hand_advantages(rewards, 4, scale)
    assert got == pytest.approx(want, abs=TOL)
    assert got[4:8] == [0.0] * 4  # a constant group: zero advantage (no 0/0 with scale)
    assert sum(got[:4]) == pytest.approx(0.0, abs=TOL) and sum(got[8:]) == pytest.approx(0.0, abs=TOL)
    if scale:  # population std, not the sample std: the same loop with n - 1 would not match
        mean = sum(rewards[:4]) / 4
        sample_std = math.sqrt(sum((x - mean) ** 2 for x in rewards[:4]) / 3)
        assert abs(got[0] - (rewards[0] - mean) / (sample_std + 1e-6)) > DETECT


# ---------------------------------------------------------------------------------------------------- negative controls
OTHER = {"grpo": "dapo", "dapo": "grpo", "dr_grpo": "grpo", "gspo": "grpo", "cispo": "dapo"}
SLIPS = {
    "advantage sign flipped": lambda kind, kl: reference(kind, [-a for a in ADV], kl_coef=kl),
    "eps_low / eps_high swapped": lambda kind, kl: reference(kind, ADV, eps_low=EPS_HIGH, eps_high=EPS_LOW, kl_coef=kl),
    "no clip": lambda kind, kl: reference(kind, ADV, eps_low=1.0, eps_high=1e9, eps_high_is=1e9, kl_coef=kl),
    "another aggregation / objective": lambda kind, kl: reference(OTHER[kind], ADV, kl_coef=kl),
    "KL sign flipped": lambda kind, kl: reference(kind, ADV, kl_coef=-kl),
    "prompt and padding in the loss": lambda kind, kl: reference(kind, ADV, mask=[[0] + [1] * (T - 1)] * B,
                                                                 kl_coef=kl),
    "dr_grpo max_len without max_turns": lambda kind, kl: reference(kind, ADV, max_len=MAX_TOKENS, kl_coef=kl),
}
NEGATIVE = [(kind, slip) for kind in LOSS_TYPES for slip in SLIPS
            if not (slip == "eps_low / eps_high swapped" and kind == "cispo")  # cispo has no eps_low / eps_high
            and not (slip == "dr_grpo max_len without max_turns" and kind != "dr_grpo")]


@pytest.mark.parametrize(("kind", "slip"), NEGATIVE)
def test_negative_control_a_wrong_reference_is_detected(kind: str, slip: str) -> None:
    """The comparison that passes above fails against a deliberately wrong reference."""
    got = under_test(kind, ADV, KL)
    assert mismatch(got, reference(kind, ADV, kl_coef=KL)) <= TOL
    assert mismatch(got, SLIPS[slip](kind, KL)) > DETECT


@pytest.mark.parametrize("kind", LOSS_TYPES)
def test_negative_control_per_micro_batch_normalisers_are_detected(kind: str) -> None:
    """Normalising each micro-batch by its own counts (instead of the step's) misses the reference."""
    want = reference(kind, ADV, kl_coef=KL)
    for splits in SPLITS[:2]:
        assert mismatch(under_test(kind, ADV, KL, splits=splits), want) <= TOL
        assert mismatch(under_test(kind, ADV, KL, splits=splits, per_micro_batch_norm=True), want) > DETECT


@pytest.mark.parametrize("kind", LOSS_TYPES)
def test_negative_control_update_with_per_micro_batch_normalisers(kind: str, tmp_path: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The end-to-end check notices if GRPOTrainer.update normalised per micro-batch."""
    right = token_weights
    monkeypatch.setattr(grpo_mod, "token_weights", lambda mask, kind_, n_seqs, n_tokens, max_len: right(
        mask, kind_, mask.shape[0], int(mask.sum()), max_len))
    tr = _trainer(kind, KL, True, 2, tmp_path)
    stats = tr.update(_trajectories(REWARDS))
    got = {"loss": stats["loss"], "grad": tr.opt.grads[0].tolist()}
    assert mismatch(got, reference(kind, hand_advantages(REWARDS, B, True), kl_coef=KL)) > DETECT


# the answer part of each sequence (pg_tokens="answer"): MASK without each turn's leading "reasoning" tokens
PG_MASK = [
    [0, 0, 0, 0, 0, 1, 1, 1],
    [0, 0, 0, 1, 0, 1, 0, 0],
    [0, 0, 0, 0, 1, 0, 0, 0],
    [0, 0, 0, 0, 0, 0, 1, 0],
    [0, 0, 0, 0, 1, 1, 0, 0],
]


@pytest.mark.parametrize("kind", LOSS_TYPES)
def test_kl_over_every_sampled_token_with_the_gradient_on_the_answer(kind: str) -> None:
    """pg_tokens="answer" with a KL anchor: the policy term covers PG_MASK, the KL covers every sampled token (MASK),
    each with its own step normaliser. Reference: the policy-only loss on PG_MASK plus the KL-only loss on MASK (the
    reference with A = 0 is its KL term alone). A KL restricted to the answer tokens misses it (negative control)."""
    want_pg = reference(kind, ADV, mask=PG_MASK)
    want_kl = reference(kind, [0.0] * B, mask=MASK, kl_coef=KL)
    want = {"loss": want_pg["loss"] + want_kl["loss"],
            "grad": [[a + b for a, b in zip(r1, r2, strict=True)] for r1, r2 in zip(want_pg["grad"], want_kl["grad"],
                                                                                       strict=True)]}

    def run(kl_mask: list[list[int]] | None) -> dict[str, Any]:
        logp = _t(LOGP).requires_grad_(True)
        pg = _t(PG_MASK)
        w = token_weights(pg, kind, B, int(pg.sum()), MAX_LEN)
        kw = None if kl_mask is None else token_weights(_t(kl_mask), kind, B, int(_t(kl_mask).sum()), MAX_LEN)
        loss, st = policy_loss(logp, _t(OLD), _t(ADV), w, kind, EPS_LOW, EPS_HIGH, EPS_HIGH_IS, _t(REF), KL, kw)
        loss.backward()
        return {"loss": float(loss.detach()), "grad": logp.grad.tolist(), **st}

    got = run(MASK)
    assert mismatch(got, want) <= TOL, _explain(got, want)
    assert got["kl"] == pytest.approx(want_kl["kl"], abs=TOL)  # the KL stat is the mean over the KL's tokens
    assert mismatch(run(None), want) > DETECT  # KL on the answer tokens only: not the same loss


@pytest.mark.parametrize("kind", LOSS_TYPES)
def test_grpo_update_answer_only_matches_reference(kind: str, tmp_path: Any) -> None:
    """GRPOTrainer.update with pg_tokens="answer" and a KL anchor: each trace carries the reasoning-end id (9) where
    PG_MASK's answer starts (a turn without it is trained whole), so the gradient is the policy term on PG_MASK plus
    the KL on every sampled token, with the step's normalisers of each."""
    tr = _trainer(kind, KL, False, 2, tmp_path)
    tr.cfg = tr.cfg.model_copy(update={"pg_tokens": "answer"})
    tr.reasoning_end_ids = [9]
    trajs = _trajectories(REWARDS)
    for b, t in enumerate(trajs):
        for pos in range(1, len(t.tokens.ids)):  # the end marker: a sampled token just before an answer token
            if PG_MASK[b][pos] and not PG_MASK[b][pos - 1] and MASK[b][pos - 1]:
                t.tokens.ids[pos - 1] = 9
    stats = tr.update(trajs)
    adv = hand_advantages(REWARDS, B, False)
    want_pg, want_kl = reference(kind, adv, mask=PG_MASK), reference(kind, [0.0] * B, mask=MASK, kl_coef=KL)
    want = {"loss": want_pg["loss"] + want_kl["loss"],
            "grad": [[a + b for a, b in zip(r1, r2, strict=True)] for r1, r2 in zip(want_pg["grad"], want_kl["grad"],
                                                                                       strict=True)]}
    got = {"loss": stats["loss"], "grad": tr.opt.grads[0].tolist()}
    assert mismatch(got, want) <= TOL, _explain(got, want)
