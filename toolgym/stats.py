"""Summaries of a set of trajectories: means with 95 % confidence intervals, win/draw/loss, pass@k and pass^k,
tool-call accuracy overall and per tool, error counts."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from toolgym.types import Trajectory

ACCURACY_FLAGS = ("parse_ok", "name_ok", "args_ok", "exec_ok", "call_match")


def wilson(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a proportion (95 % for z=1.96): unlike mean +- 1.96 SE it stays inside [0, 1] and
    is not empty at 0 % or 100 %."""
    if n == 0:
        return float("nan"), float("nan")
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_ci(values: list[float]) -> dict[str, float]:
    """Mean, the half-width of its normal-approximation 95 % CI (0 for fewer than two values) and the interval
    `lo`..`hi`: the Wilson interval when every value is 0 or 1 (a rate), else mean +- ci95."""
    n = len(values)
    if n == 0:
        return {"mean": float("nan"), "ci95": float("nan"), "n": 0, "lo": float("nan"), "hi": float("nan")}
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    half = 1.96 * math.sqrt(var / n)
    lo, hi = wilson(sum(values), n) if all(v in (0.0, 1.0) for v in values) else (mean - half, mean + half)
    return {"mean": mean, "ci95": half, "n": n, "lo": min(lo, mean), "hi": max(hi, mean)}  # min/max: float rounding


def breakdown(trajs: Iterable[Trajectory], fields: Iterable[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """Reward and every reward function / metric, with CIs, per value of each task field (e.g. a position's kind
    or a question's difficulty): `{field: {value: {"n": rollouts, "reward": {...}, name: {...}}}}`. Rollouts without
    the field are left out of that field's table; errored rollouts of every table."""
    ok = [t for t in trajs if t.error is None]
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for field in fields:
        groups: dict[str, list[Trajectory]] = defaultdict(list)
        for t in ok:
            if field in t.task:
                groups[str(t.task[field])].append(t)
        table: dict[str, dict[str, Any]] = {}
        for value in sorted(groups, key=lambda v: (not v.lstrip("-").isdigit(), int(v) if v.lstrip("-").isdigit()
                                                     else 0, v)):
            ts = groups[value]
            row: dict[str, Any] = {"n": len(ts), "reward": mean_ci([t.reward for t in ts])}
            vals = [{**t.rewards, **t.metrics} for t in ts]
            for name in sorted({k for v in vals for k in v}):
                row[name] = mean_ci([v[name] for v in vals if name in v])
            table[value] = row
        out[field] = table
    return out


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


def summarize(trajs: Iterable[Trajectory], success_threshold: float = 1.0, by: Iterable[str] = ()) -> dict[str, Any]:
    """Everything `toolgym eval` reports; `by` adds per-value tables of those task fields (`breakdown`)."""
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
    if any(c.server for t in ok for c in t.calls):
        out["tool_accuracy_by_server"] = tool_accuracy(ok, by_server=True)
    by = list(by)
    if by:
        out["by"] = breakdown(trajs, by)
    return out


def tool_accuracy(trajs: Iterable[Trajectory], by_server: bool = False) -> dict[str, dict[str, float]]:
    """Rates of each accuracy flag over all model calls, overall ('*') and per tool (`by_server`: per server of a
    multi-server env, calls to no server -- unknown tools -- under '<none>'), with call counts."""
    per: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for t in trajs:
        for c in t.calls:
            key_of = (c.server or "<none>") if by_server else (c.name or "<none>")
            for key in ("*", key_of):
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
