"""Summaries of a set of trajectories: means with 95 % confidence intervals, win/draw/loss, pass@k and pass^k,
tool-call accuracy overall and per tool, error counts.

Every rollout counts. A rollout that errored (a crashed server, a failing hidden call, a raising reward function:
`trajectory.error`) is a **failure**: it enters the reward's mean and CI at `error_reward` (0 unless the env sets a
floor), fails pass@k / pass^k, and counts as a loss in win/draw/loss; the error count and rate (with its Wilson
interval) are in every summary and breakdown table. Reward functions and metrics, which an errored rollout did not
produce, are averaged over the rollouts that have them (each with its `n`)."""

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
    return _wilson_float(successes / n, n, z)


def clustered_interval(clusters: Iterable[tuple[float, int]], z: float = 1.96) -> tuple[float, float, float]:
    """A pooled rate with a 95 % interval for samples that come in clusters whose members may be alike: `clusters`
    holds (successes, n) per cluster; the result is (rate, lo, hi), the rate being total successes / total n. Use it
    when several models are scored on the same tasks (a cluster is one task's results across the models: they share
    its difficulty and its draw), where `wilson` over the pooled count treats them as independent and is too narrow.

    The spread comes from the cluster-robust (sandwich, Liang-Zeger) variance of a ratio with the small-sample factor
    C / (C - 1), sum_c (y_c - p n_c)^2 / N^2 over C clusters; the interval is Wilson's at the effective sample size
    that variance implies (N over the design effect, Kish), never more than N, so it stays inside [0, 1] and is
    not empty at 0 % or 100 % (there, with no spread to measure, each cluster counts as one sample). NaNs for fewer
    than two clusters or no samples."""
    clusters = list(clusters)
    total = sum(n for _, n in clusters)
    if len(clusters) < 2 or not total:
        return float("nan"), float("nan"), float("nan")
    p = sum(k for k, _ in clusters) / total
    var = len(clusters) / (len(clusters) - 1) * sum((k - p * n) ** 2 for k, n in clusters) / total ** 2
    if 0 < p < 1:
        n_eff = min(float(total), p * (1 - p) / var) if var > 0 else float(total)
    else:
        n_eff = float(len(clusters))
    lo, hi = _wilson_float(p, n_eff, z)
    return p, lo, hi


def _wilson_float(p: float, n: float, z: float) -> tuple[float, float]:
    """Wilson's interval for a rate p over n > 0 samples (n may be fractional: an effective sample size); it always
    holds p, and the clamps keep float rounding from pushing a bound past it."""
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, min(centre - half, p)), min(1.0, max(centre + half, p))


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


def rollout_reward(t: Trajectory, error_reward: float = 0.0) -> float:
    """A rollout's reward for statistics: its reward, or `error_reward` when it errored."""
    return error_reward if t.error is not None else t.reward


def breakdown(trajs: Iterable[Trajectory], fields: Iterable[str],
              error_reward: float = 0.0) -> dict[str, dict[str, dict[str, Any]]]:
    """Reward and every reward function / metric, with CIs, per value of each task field (e.g. a position's kind
    or a question's difficulty): `{field: {value: {"n": rollouts, "errors": errored, "reward": {...}, name: {...}}}}`.
    Rollouts without the field are left out of that field's table; errored ones count in `reward` at
    `error_reward` and in `errors`."""
    trajs = list(trajs)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for field in fields:
        groups: dict[str, list[Trajectory]] = defaultdict(list)
        for t in trajs:
            if field in t.task:
                groups[str(t.task[field])].append(t)
        table: dict[str, dict[str, Any]] = {}
        for value in sorted(groups, key=lambda v: (not v.lstrip("-").isdigit(), int(v) if v.lstrip("-").isdigit()
                                                     else 0, v)):
            ts = groups[value]
            row: dict[str, Any] = {"n": len(ts), "errors": sum(t.error is not None for t in ts),
                                   "reward": mean_ci([rollout_reward(t, error_reward) for t in ts])}
            vals = [{**t.rewards, **t.metrics} for t in ts if t.error is None]
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


def summarize(trajs: Iterable[Trajectory], success_threshold: float = 1.0, by: Iterable[str] = (),
              error_reward: float = 0.0) -> dict[str, Any]:
    """Everything `toolgym eval` reports over **all** rollouts, an errored one counting as a failure at
    `error_reward` (see the module docstring); `by` adds per-value tables of those task fields (`breakdown`)."""
    trajs = list(trajs)
    ok = [t for t in trajs if t.error is None]
    errors = len(trajs) - len(ok)
    out: dict[str, Any] = {"rollouts": len(trajs), "errors": errors,
                           "error_rate": errors / len(trajs) if trajs else 0.0}
    lo, hi = wilson(errors, len(trajs))
    out["error_rate_ci"] = {"lo": lo, "hi": hi}
    out["error_reward"] = error_reward
    out["error_kinds"] = dict(Counter((t.error or "").split(":")[0][:80] for t in trajs if t.error).most_common(10))
    out["reward"] = mean_ci([rollout_reward(t, error_reward) for t in trajs])
    out["reward_finished"] = mean_ci([t.reward for t in ok])  # the rollouts that did not error, for diagnosis
    names = sorted({k for t in ok for k in t.rewards})
    out["rewards"] = {k: mean_ci([t.rewards[k] for t in ok if k in t.rewards]) for k in names}
    mnames = sorted({k for t in ok for k in t.metrics})
    out["metrics"] = {k: mean_ci([t.metrics[k] for t in ok if k in t.metrics]) for k in mnames}
    if {"win", "draw", "loss"} <= set(mnames):  # over all rollouts: an errored one is a loss
        n = len(trajs)
        out["outcomes"] = {k: (sum(t.metrics.get(k, 0.0) for t in ok) + (errors if k == "loss" else 0)) / n
                           for k in ("win", "draw", "loss")}
    out["stop_reasons"] = dict(Counter(t.stop_reason if t.error is None and t.stop_reason else "error" for t in trajs))
    # pass@k / pass^k over examples, success = reward >= threshold; an errored rollout fails
    by_ex: dict[int, list[bool]] = defaultdict(list)
    for t in trajs:
        by_ex[t.example_id].append(t.error is None and t.reward >= success_threshold)
    if by_ex:
        r = min(len(v) for v in by_ex.values())
        out["success_threshold"] = success_threshold
        out["pass_at_k"] = {str(k): sum(pass_at_k(len(v), sum(v), k) for v in by_ex.values()) / len(by_ex) for k in _ks(r)}
        out["pass_hat_k"] = {str(k): sum(pass_hat_k(len(v), sum(v), k) for v in by_ex.values()) / len(by_ex)
                             for k in _ks(r)}
    out["tool_accuracy"] = tool_accuracy(trajs)  # every call made, errored rollouts' included
    if any(c.server for t in trajs for c in t.calls):
        out["tool_accuracy_by_server"] = tool_accuracy(trajs, by_server=True)
    by = list(by)
    if by:
        out["by"] = breakdown(trajs, by, error_reward)
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
