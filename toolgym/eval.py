"""Evaluation runs: n examples x r rollouts through the rollout engine, streamed to a results folder.

Folder layout: `run.json` (what was run), `results.jsonl` (one trajectory per line, appended and flushed as each
rollout finishes), `summary.json`, `rewards.png`, `servers/NAME.log` (each server's stderr). Statistics count every
rollout, an errored one as a failure (`toolgym.stats`). `resume=True` keeps every finished rollout already in
`results.jsonl` (errored ones are run again) and runs only the rest. Before it does, the file is rewritten atomically
to hold only the records it keeps -- a torn last line from a killed run and the error records the re-runs supersede
are removed -- so it stays valid JSONL with exactly one record per (example, rollout) after the run.

`evaluate_exact` runs an env's exact evaluation instead (`StatefulToolEnv.exact_eval`: every episode a greedy
policy can meet, weighted by its chance; `toolgym eval --exact`): its folder holds `run.json`, `exact.json` and
`servers/`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolgym.env import StatefulToolEnv
from toolgym.journal import drop_torn_lines, first_finished, read_results, record_line, run_differences
from toolgym.mcp_bridge import server_logs
from toolgym.policies import SAMPLING_OPTIONS, Policy
from toolgym.rollout import iter_rollouts
from toolgym.stats import summarize
from toolgym.types import Trajectory


async def evaluate(
    env: StatefulToolEnv,
    policy: Policy,
    tasks: list[dict[str, Any]],
    rollouts_per_example: int = 1,
    concurrency: int = 8,
    out_dir: Path | None = None,
    resume: bool = False,
    run_info: dict[str, Any] | None = None,
    success_threshold: float = 1.0,
    on_progress: Callable[[Trajectory], None] | None = None,
    error_reward: float | None = None,
    skipped_tasks: list[str] | None = None,
    seed: int | None = None,
) -> tuple[list[Trajectory], dict[str, Any]]:
    """Run the evaluation; return (trajectories in job order, summary). `error_reward`: what an errored rollout counts
    as in the statistics (default: the env's `error_reward`, 0); `skipped_tasks`: the invalid tasks left out
    (`toolgym.check`), reported in the summary; `seed`: each rollout's sampling is seeded by (seed, example, rollout)
    (`toolgym.rollout.rollout_seed`), so the run can be reproduced -- and resumed -- whatever the concurrency."""
    keep: dict[tuple[int, int], Trajectory] = {}
    results_file = None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        run_file = out_dir / "run.json"
        info = dict(run_info or {}, n=len(tasks), rollouts_per_example=rollouts_per_example)
        check_run_folder(out_dir, info, resume)
        run_file.write_text(json.dumps(info, indent=2, default=str))
        if resume:  # the file keeps one finished record per rollout; the rest run again
            drop_torn_lines(out_dir / "results.jsonl", first_finished())
            keep = read_results(out_dir / "results.jsonl")
        results_file = (out_dir / "results.jsonl").open("a")
    jobs = [(i, r, task) for i, task in enumerate(tasks) for r in range(rollouts_per_example) if (i, r) not in keep]
    results: dict[tuple[int, int], Trajectory] = dict(keep)
    for t in keep.values():
        if on_progress:
            on_progress(t)
    try:
        with server_logs(out_dir / "servers") if out_dir is not None else contextlib.nullcontext():
            await env.start()
            async for _, traj in iter_rollouts(env, policy, jobs, concurrency, seed):
                line, traj = record_line(traj)  # a record that cannot be written is an error of its rollout
                results[(traj.example_id, traj.rollout_index)] = traj
                if results_file is not None:
                    results_file.write(line)
                    results_file.flush()
                if on_progress:
                    on_progress(traj)
    finally:
        if results_file is not None:
            results_file.close()
    ordered = [results[k] for k in sorted(results)]
    by = tuple(getattr(env, "report_by", ()) or ())
    floor = env.error_reward if error_reward is None else error_reward
    summary = summarize(ordered, success_threshold, by, floor)
    if skipped_tasks:
        summary["skipped_tasks"] = {"count": len(skipped_tasks), "tasks": skipped_tasks}
    summary["policy"] = (run_info or {}).get("model") or policy.name  # the URI the run named, else the policy's name
    summary["answer_key"] = bool(getattr(policy, "answer_key", False))
    if run_info and "sampling" in run_info:  # the sampling options among the policy's (run.json keeps them all)
        summary["sampling"] = {k: v for k, v in run_info["sampling"].items() if k in SAMPLING_OPTIONS}
    if hasattr(policy, "stats"):
        summary["policy_stats"] = dict(policy.stats)
    if env.provider is not None:
        summary["server_restarts"] = env.provider.restarts
    if out_dir is not None:
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        title = f"{getattr(env, 'name', 'env')} / {policy.name}"
        plot_rewards(ordered, out_dir / "rewards.png", title=title)
        if summary.get("by"):
            plot_breakdown(summary["by"], report_names(env), out_dir / "breakdown.png", title=title)
    return ordered, summary


RESUME_KEYS = ("env", "model", "n", "rollouts_per_example", "env_args", "seed")
"""What a resumed run must share with the run in its folder (the sampling may change: it is recorded, not checked)."""


def check_run_folder(out_dir: Path, info: dict[str, Any], resume: bool, keys: tuple[str, ...] | None = None
                     ) -> tuple[int, int]:
    """Check, before anything is loaded, that a run described by `info` (with `n` and `rollouts_per_example`) may
    write to `out_dir`: a folder with results needs `resume`, and a resumed one must hold the same run on `keys`
    (default `RESUME_KEYS`; a `ValueError` naming the differences; `FileExistsError` without `resume`). Returns
    (rollouts already finished, rollouts in the run)."""
    total = int(info["n"]) * int(info["rollouts_per_example"])
    run_file, results = out_dir / "run.json", out_dir / "results.jsonl"
    if not resume:
        if results.exists():
            raise FileExistsError(f"{results} exists: pass --resume to continue it or choose --out")
        return 0, total
    if run_file.exists():
        diff = run_differences(json.loads(run_file.read_text()), info, keys or RESUME_KEYS)
        if diff:
            raise ValueError(f"--resume: {out_dir} holds a different run; differences (old, new): {diff}")
    keep = first_finished()
    done = set()
    if results.exists():
        for line in results.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and keep(rec):
                key = (rec.get("example_id"), rec.get("rollout_index"))
                if isinstance(key[0], int) and isinstance(key[1], int) and key[0] < int(info["n"]) \
                        and key[1] < int(info["rollouts_per_example"]):
                    done.add(key)
    return len(done), total


def has_exact_eval(env: StatefulToolEnv) -> bool:
    """Whether the env implements `StatefulToolEnv.exact_eval` (the base raises NotImplementedError)."""
    return type(env).exact_eval is not StatefulToolEnv.exact_eval


def inexact_reason(metrics: dict[str, float]) -> str | None:
    """Why an exact evaluation's `metrics` are not what the policy scores (None: they are): games that errored
    (`errored` > 0: their probability is counted as lost) or lines that did not replay their parent's moves
    (`diverged` > 0: the policy is not deterministic). Keys an env does not report count as 0."""
    why = []
    if metrics.get("errored", 0.0) > 0:
        why.append(f"errored games hold {100 * metrics['errored']:.2f} % of the probability (counted as lost)")
    if metrics.get("diverged", 0.0) > 0:
        why.append(f"{int(metrics['diverged'])} line(s) did not replay their parent's moves (the policy is not "
                   "deterministic: greedy decoding whose answer depends on the batch, or a sampling player)")
    return "; ".join(why) or None


async def evaluate_exact(env: StatefulToolEnv, policy: Policy, out_dir: Path | None = None,
                         run_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """The env's exact evaluation of `policy` (`env.exact_eval`, the env started here; closing it and the policy is
    the caller's), as a summary: `exact` (metric -> value), `not_exact` (`inexact_reason`, or None), `policy`,
    `answer_key`, `sampling` and the policy's `stats`. With `out_dir`, once the walk is done: `run.json` (`run_info`
    with `exact: true`) and `exact.json` (the summary) there. Raises NotImplementedError for an env without the hook."""
    if not has_exact_eval(env):
        raise NotImplementedError(f"{type(env).__name__} has no exact evaluation")
    await env.start()
    metrics = {k: float(v) for k, v in (await env.exact_eval(policy)).items()}
    summary: dict[str, Any] = {"exact": metrics, "not_exact": inexact_reason(metrics),
                               "policy": (run_info or {}).get("model") or policy.name,
                               "answer_key": bool(getattr(policy, "answer_key", False))}
    if run_info and "sampling" in run_info:
        summary["sampling"] = {k: v for k, v in run_info["sampling"].items() if k in SAMPLING_OPTIONS}
    if hasattr(policy, "stats"):
        summary["policy_stats"] = dict(policy.stats)
    if out_dir is not None:  # once the walk is done: a run that failed leaves no record of itself
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "run.json").write_text(json.dumps(dict(run_info or {}, exact=True), indent=2, default=str))
        (out_dir / "exact.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


def report_names(env: StatefulToolEnv) -> list[str]:
    """The columns of breakdown tables and plots: the env's `report_metrics`, else its rubric's functions."""
    return list(getattr(env, "report_metrics", None) or env.rubric.weights)


def plot_breakdown(by: dict[str, dict[str, dict[str, Any]]], names: list[str], path: Path, title: str = "") -> None:
    """One panel per task field: the rate metrics (values in [0, 1]) of each field value as bars with 95 % CIs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fields = list(by)
    fig, axes = plt.subplots(len(fields), 1, figsize=(max(6.0, 1.2 * max(len(v) for v in by.values()) * 1.5),
                                                      3.2 * len(fields)), squeeze=False)
    for ax, field in zip(axes[:, 0], fields, strict=True):
        rows = by[field]
        shown = [n for n in names if any(n in r and 0.0 <= r[n]["lo"] and r[n]["hi"] <= 1.0 for r in rows.values())]
        width = 0.8 / max(1, len(shown))
        for j, name in enumerate(shown):
            xs, ys, lo, hi = [], [], [], []
            for i, (_, r) in enumerate(rows.items()):
                if name in r:
                    xs.append(i + (j - (len(shown) - 1) / 2) * width)
                    ys.append(r[name]["mean"])
                    lo.append(r[name]["mean"] - r[name]["lo"])
                    hi.append(r[name]["hi"] - r[name]["mean"])
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=name)
        ax.set_xticks(range(len(rows)), [f"{v}\n(n={r['n']})" for v, r in rows.items()])
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(f"by {field}")
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=min(6, max(1, len(labels))), fontsize=8,
               bbox_to_anchor=(0.5, 0.965))
    fig.suptitle(f"{title}  (bars: mean, whiskers: 95 % CI)")
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_rewards(trajs: list[Trajectory], path: Path, title: str = "") -> None:
    """Histogram of the total reward and of each reward function."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [t for t in trajs if t.error is None]
    names = ["reward", *sorted({k for t in ok for k in t.rewards})]
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        vals = [t.reward if name == "reward" else t.rewards.get(name, 0.0) for t in ok]
        ax.hist(vals, bins=20, color="#4C72B0")
        ax.set_title(name)
        ax.set_xlabel("value")
    axes[0][0].set_ylabel("rollouts")
    fig.suptitle(f"{title}  (n={len(ok)}, errors={len(trajs) - len(ok)})")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run_sync(coro: Any) -> Any:
    return asyncio.run(coro)
