"""Summaries of a set of trajectories: means with 95 % confidence intervals, win/draw/loss, pass@k and pass^k,
tool-call accuracy overall and per tool, error counts."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from toolgym.types import Trajectory

ACCURACY_FLAGS = ("parse_ok", "name_ok", "args_ok", "exec_ok", "call_match")


def mean_ci(values: list[float]) -> dict[str, float]:
    """Mean and the half-width of its normal-approximation 95 % CI (0 for fewer than two values)."""
    n = len(values)
    if n == 0:
        return {"mean": float("nan"), "ci95": float("nan"), "n": 0}
    mean = sum(values) / n
    if n < 2:
        return {"mean": mean, "ci95": 0.0, "n": n}
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return {"mean": mean, "ci95": 1.96 * math.sqrt(var / n), "n": n}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): chance that at least one of k samples out of n (c correct) passes."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k (tau-bench): chance that all of k samples out of n (c correct) pass."""
    return math.comb(c, k) / math.comb(n, k) if k <= n else float("nan")


def _ks(r: int) -> list[int]:
    ks, k = [], 1
    while k <= r:
        ks.append(k)
        k *= 2
    if r not in ks:
        ks.append(r)
    return ks


def summarize(trajs: Iterable[Trajectory], success_threshold: float = 1.0) -> dict[str, Any]:
    trajs = list(trajs)
    ok = [t for t in trajs if t.error is None]
    out: dict[str, Any] = {"rollouts": len(trajs), "errors": len(trajs) - len(ok)}
    out["error_kinds"] = dict(Counter((t.error or "").split(":")[0][:80] for t in trajs if t.error).most_common(10))
    out["reward"] = mean_ci([t.reward for t in ok])
    names = sorted({k for t in ok for k in t.rewards})
    out["rewards"] = {k: mean_ci([t.rewards[k] for t in ok if k in t.rewards]) for k in names}
    mnames = sorted({k for t in ok for k in t.metrics})
    out["metrics"] = {k: mean_ci([t.metrics[k] for t in ok if k in t.metrics]) for k in mnames}
    if {"win", "draw", "loss"} <= set(mnames):
        out["outcomes"] = {k: out["metrics"][k]["mean"] for k in ("win", "draw", "loss")}
    out["stop_reasons"] = dict(Counter(t.stop_reason or "error" for t in trajs))
    # pass@k / pass^k over examples, success = reward >= threshold
    by_ex: dict[int, list[bool]] = defaultdict(list)
    for t in ok:
        by_ex[t.example_id].append(t.reward >= success_threshold)
    if by_ex:
        r = min(len(v) for v in by_ex.values())
        out["success_threshold"] = success_threshold
        out["pass_at_k"] = {str(k): sum(pass_at_k(len(v), sum(v), k) for v in by_ex.values()) / len(by_ex) for k in _ks(r)}
        out["pass_hat_k"] = {str(k): sum(pass_hat_k(len(v), sum(v), k) for v in by_ex.values()) / len(by_ex)
                             for k in _ks(r)}
    out["tool_accuracy"] = tool_accuracy(ok)
    return out


def tool_accuracy(trajs: Iterable[Trajectory]) -> dict[str, dict[str, float]]:
    """Rates of each accuracy flag over all model calls, overall ('*') and per tool, with call counts."""
    per: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for t in trajs:
        for c in t.calls:
            for key in ("*", c.name or "<none>"):
                for flag in ACCURACY_FLAGS:
                    v = getattr(c, flag)
                    if v is not None:
                        per[key][flag].append(float(v))
    result = {}
    for tool, flags in per.items():
        row: dict[str, float] = {"calls": float(len(flags["parse_ok"]))}
        row.update({f: sum(v) / len(v) for f, v in flags.items() if v})
        result[tool] = row
    return result
