"""The exact RL curve: each run's losses against the perfect opponent at every checkpoint, computed exactly
(`exact_games.py --json` files: every line of play, weighted; no sampling noise), the runs' mean with a 95 %
t-interval over the runs (the seed-to-seed spread, the only noise left), beside the `copy-centre` shortcut's exact
ceiling and the 5 % target.

    python examples/tictactoe/exact_curve.py EXACT_DIR RUN [RUN ...] --start NAME [--steps 10 20 30 40 50] [--kept]
                                             [-o curve.png]

EXACT_DIR holds NAME.json files: the start `--start`, each RUN's checkpoints `RUN-stepS.json` and its final model
`RUN.json` (the last step, 60 by default: `--last`). A RUN that is a run folder instead (with metrics.jsonl) brings
its own exact periodic evals (GRPO's `eval_exact`: `eval/exact/loss` by step; `--kept`: the best the run kept after
each eval, `best/value`, where it kept one). The mean is over the runs that have a
step, shown where at least half of them do. Prints the table and, with `-o`, draws the PNG.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from toolgym_tictactoe.shortcuts import game_outcome

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086,
        21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042}
"""Student-t 97.5 % quantiles by degrees of freedom (two-sided 95 % intervals over a few runs); past 30, 1.96."""


def loss(folder: Path, name: str) -> float | None:
    """The exact loss probability (played-out, turn-cap and errored games) of eval NAME, or None if absent."""
    f = folder / f"{name}.json"
    if not f.is_file():
        return None
    data = json.loads(f.read_text())
    (only,) = data.values()  # exact_games.py --json with one model
    return float(only["loss"])


def in_training(run_dir: Path, kept: bool = False) -> dict[int, float]:
    """A run's exact losses by step from its own periodic eval (`eval_exact`: `eval/exact/loss` in metrics.jsonl).
    `kept`: where the run kept its best (`best_metric = "eval/exact/loss"`), the best's value instead -- with
    `revert_to_best`, the weights the run goes on from after that eval."""
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line) if line.strip() else {}
        if "eval/exact/loss" in row:
            key = "best/value" if kept and "best/value" in row else "eval/exact/loss"
            out[int(row["step"])] = float(row[key])
    return out


def mean_t(values: list[float]) -> tuple[float, float, float]:
    """(mean, lo, hi): a 95 % t-interval over runs (lo = hi = mean for one run)."""
    n = len(values)
    m = sum(values) / n
    if n < 2:
        return m, m, m
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    half = T975.get(n - 1, 1.96) * sd / math.sqrt(n)
    return m, max(0.0, m - half), m + half


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--start", required=True, help="the start's eval name (step 0)")
    ap.add_argument("--steps", type=int, nargs="+", default=[10, 20, 30, 40, 50])
    ap.add_argument("--last", type=int, default=60, help="the step of each run's final model (RUN.json)")
    ap.add_argument("--kept", action="store_true", help="run folders with best_metric: the best kept after each "
                    "eval (with revert_to_best, the weights training went on from) instead of the eval itself")
    ap.add_argument("-o", "--out", type=Path)
    args = ap.parse_args()
    start = loss(args.folder, args.start)
    if start is None:
        raise SystemExit(f"{args.folder}/{args.start}.json: no exact eval of the start")
    curves: dict[str, dict[int, float]] = {}
    for run in args.runs:
        if (Path(run) / "metrics.jsonl").is_file():  # a run folder whose periodic eval was exact (eval_exact)
            curves[Path(run).name] = {0: start, **in_training(Path(run), args.kept)}
            continue
        ys = {s: loss(args.folder, f"{run}-step{s}") for s in args.steps}
        ys[args.last] = loss(args.folder, run)
        curves[run] = {0: start, **{s: y for s, y in ys.items() if y is not None}}
    steps = sorted({s for c in curves.values() for s in c})
    print("| run | " + " | ".join(f"step {s}" for s in steps) + " |")
    print("|---|" + "---|" * len(steps))
    for run, c in curves.items():
        print(f"| {run} | " + " | ".join(f"{100 * c[s]:.2f}" if s in c else "-" for s in steps) + " |")
    means: list[tuple[float, float, float] | None] = []
    for s in steps:  # over the runs that have the step, where at least half of them do
        ys = [c[s] for c in curves.values() if s in c]
        means.append(mean_t(ys) if 2 * len(ys) >= len(curves) else None)
    print("| mean (95 % t-interval over runs) | " + " | ".join(
        "-" if m is None else f"{100 * m[0]:.2f} ({100 * m[1]:.1f}-{100 * m[2]:.1f})" for m in means) + " |")
    ceiling = game_outcome("copy-centre", 0.0)[2]
    print(f"\nshortcut `copy-centre` (exact): {100 * ceiling:.2f} % losses; target: 5 %")
    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        for run, c in curves.items():
            ax.plot(list(c), [100 * y for y in c.values()], marker="o", ms=4, lw=1, alpha=0.6, label=run)
        pts = [(s, 100 * m[0], 100 * m[1], 100 * m[2]) for s, m in zip(steps, means, strict=True) if m is not None]
        xs, ms, los, his = zip(*pts, strict=True)
        ax.plot(xs, ms, color="black", lw=2.5, label=f"mean of {len(curves)} runs")
        ax.fill_between(xs, los, his, color="black", alpha=0.12, label="95 % t-interval over runs")
        ax.axhline(100 * ceiling, color="tab:red", ls="--", lw=1,
                   label=f"`copy-centre` shortcut ({100 * ceiling:.1f} %)")
        ax.axhline(5, color="tab:green", ls=":", lw=1.5, label="target (5 %)")
        ax.set_xlabel("GRPO step")
        ax.set_ylabel("losses vs the optimal opponent, exact (%)")
        top = max(50.0, min(100.0, 100 * start + 5))
        ax.set_ylim(0, top)
        for c in curves.values():  # points above the axis: a mark on its edge with the value
            for s, y in c.items():
                if 100 * y > top:
                    ax.annotate(f"{100 * y:.0f} %", (s, top), xytext=(4, -12), textcoords="offset points", fontsize=7)
                    ax.plot([s], [top], marker="^", color="grey", clip_on=False)
        ax.set_title("Exact losses against the perfect opponent (every line of play, weighted)")
        ax.legend(fontsize=7, loc="upper right")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(args.out, dpi=120)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
