"""Did any weights along a GRPO run meet both game targets at once? Each checkpoint placed by its exact losses
against the optimal opponent (the run's own periodic eval, `eval/exact/loss`) and its exact wins against random play
(an `exact_games.py --opponent random --json` walk of that checkpoint): the steps that meet both targets
(losses <= 5 %, wins >= 90 %), the most wins among the steps under the loss target, and each run's Pareto front
(the steps no other step beats on both). A keep-best rule (`best_metric`) can only pick weights a run passed
through, so if no point meets both, no rule on these runs will.

    python examples/tictactoe/frontier.py EXACT_DIR RUN_DIR [RUN_DIR ...] [--prefix forced-] [--loss-max 0.05]
                                          [--win-min 0.90] [-o frontier.png]
    python examples/tictactoe/frontier.py EXACT_DIR RUN_DIR [...] --missing   (what is left to walk: NAME MODEL_DIR)

EXACT_DIR holds the walks, named after the run folder: PREFIX+RUN-stepS-random.json for checkpoint S
(`RUN_DIR/checkpoints/step_00000S/model`); PREFIX+RUN-best-random.json counts for the step `best/best.json` names,
PREFIX+RUN-random.json for the run's last step (`final/`), where that step had an eval. A run that logged its own
walk against random play (`eval_sets.random` with eval_exact: `eval/random/exact/win`) needs none. Steps whose
losses are above `--loss-max` cannot meet both targets; `--missing` leaves them out. Beside the runs: the same two
numbers for the shortcut players, minimax with uniform ties and the never-losing bound (exact,
`toolgym_tictactoe.shortcuts`).
"""

from __future__ import annotations

import argparse
import json
import re
from functools import lru_cache
from pathlib import Path

from mcp_server_tictactoe import game as g
from toolgym.train.runstate import read_metrics
from toolgym_tictactoe.shortcuts import SHORTCUTS, exact_outcome, game_outcome, never_losing_bound

Point = tuple[float, float]
"""(losses against the optimal opponent, wins against the random one), both probabilities."""


def _walk_win(path: Path) -> float | None:
    """The exact win probability of an `exact_games.py --json` walk with one model, or None if the file is absent."""
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    if len(data) != 1:
        raise SystemExit(f"{path}: expected one model's walk, found {len(data)}")
    (only,) = data.values()
    if only.get("opponent") != "random":
        raise SystemExit(f"{path}: a walk against {only.get('opponent')!r}, not the random opponent")
    return float(only["win"])


def checkpoints(run: Path) -> dict[int, Path]:
    """Step -> model folder of each saved checkpoint of `run`."""
    out = {}
    for d in (run / "checkpoints").glob("step_*"):
        m = re.fullmatch(r"step_(\d+)", d.name)
        if m and (d / "model").is_dir():
            out[int(m.group(1))] = d / "model"
    return out


def run_points(exact_dir: Path, run: Path, prefix: str = "forced-") -> tuple[dict[int, float], dict[int, float]]:
    """(losses by step, wins against random by step) of one run: losses from its periodic exact eval, wins from its
    own `eval/random/exact/win` where logged, else from the walks in `exact_dir`."""
    rows = read_metrics(run / "metrics.jsonl")
    losses = {int(r["step"]): float(r["eval/exact/loss"]) for r in rows if "eval/exact/loss" in r}
    if not losses:
        raise SystemExit(f"{run}: no exact periodic eval (eval/exact/loss) in metrics.jsonl")
    wins = {int(r["step"]): float(r["eval/random/exact/win"]) for r in rows if "eval/random/exact/win" in r}
    name = prefix + run.name
    for step in losses:
        w = _walk_win(exact_dir / f"{name}-step{step}-random.json")
        if w is not None:
            wins.setdefault(step, w)
    best = run / "best" / "best.json"
    if best.is_file():
        w = _walk_win(exact_dir / f"{name}-best-random.json")
        if w is not None:
            wins.setdefault(int(json.loads(best.read_text())["step"]), w)
    last = max(int(r["step"]) for r in rows if "step" in r)
    if (run / "final").is_dir() and last in losses:  # the final weights, where the last step had an eval
        w = _walk_win(exact_dir / f"{name}-random.json")
        if w is not None:
            wins.setdefault(last, w)
    return losses, wins


def missing(exact_dir: Path, run: Path, prefix: str = "forced-", loss_max: float = 0.05) -> list[tuple[str, Path]]:
    """(walk name, model folder) of each checkpoint under the loss target that has no walk against random yet."""
    losses, wins = run_points(exact_dir, run, prefix)
    saved = checkpoints(run)
    return [(f"{prefix}{run.name}-step{s}", saved[s]) for s in sorted(losses)
            if losses[s] <= loss_max and s not in wins and s in saved]


def pareto(points: dict[int, Point]) -> list[int]:
    """The steps no other step beats on both counts (fewer or equal losses and more or equal wins, one strictly)."""
    def beaten(s: int) -> bool:
        lo, w = points[s]
        return any(lo2 <= lo and w2 >= w and (lo2, w2) != (lo, w) for t, (lo2, w2) in points.items() if t != s)
    return sorted(s for s in points if not beaten(s))


@lru_cache(maxsize=None)
def references() -> dict[str, Point]:
    """The same two exact numbers for the trivial players (`shortcuts`), minimax choosing uniformly among its best
    moves and the never-losing bound (among the value-keeping moves, the one that wins most against random play)."""
    out = {name: (game_outcome(name, 0.0)[2], game_outcome(name, 1.0)[0]) for name in SHORTCUTS}

    def uniform_minimax(board: str) -> dict[int, float]:
        best = g.best_moves(board, "X")
        return {c: 1 / len(best) for c in best}

    out["minimax, uniform ties"] = (exact_outcome(uniform_minimax, 0.0)[2], exact_outcome(uniform_minimax, 1.0)[0])
    out["never-losing bound"] = (0.0, never_losing_bound())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("exact_dir", type=Path)
    ap.add_argument("runs", type=Path, nargs="+")
    ap.add_argument("--prefix", default="forced-", help="the walks' names: PREFIX + the run folder's name")
    ap.add_argument("--loss-max", type=float, default=0.05, help="the loss target against the optimal opponent")
    ap.add_argument("--win-min", type=float, default=0.90, help="the wins target against random play")
    ap.add_argument("--missing", action="store_true", help="print NAME MODEL_DIR for each checkpoint under the "
                    "loss target that has no walk against random play yet, and exit")
    ap.add_argument("-o", "--out", type=Path, help="draw the points and fronts (PNG)")
    args = ap.parse_args()
    for run in args.runs:
        if not (run / "metrics.jsonl").is_file():
            raise SystemExit(f"{run}: not a run folder (no metrics.jsonl)")
    if args.missing:
        for run in args.runs:
            for name, model in missing(args.exact_dir, run, args.prefix, args.loss_max):
                print(name, model)
        return
    all_points: dict[str, dict[int, Point]] = {}
    met_total = under_total = both_total = 0
    print(f"targets: losses vs optimal <= {100 * args.loss_max:g} %, wins vs random >= {100 * args.win_min:g} %\n")
    print("| run | steps with both | under the loss target | meet both | most wins under the loss target "
          "| Pareto front (step: losses / wins %) |")
    print("|---|---|---|---|---|---|")
    for run in args.runs:
        losses, wins = run_points(args.exact_dir, run, args.prefix)
        pts = {s: (losses[s], wins[s]) for s in sorted(losses) if s in wins}
        all_points[run.name] = pts
        under = {s: p for s, p in pts.items() if p[0] <= args.loss_max}
        unwalked = [s for s in losses if losses[s] <= args.loss_max and s not in wins]
        met = [s for s, p in under.items() if p[1] >= args.win_min]
        both_total += len(pts)
        under_total += len(under)
        met_total += len(met)
        top = max(under.items(), key=lambda kv: (kv[1][1], -kv[1][0]), default=None)
        top_s = f"{100 * top[1][1]:.2f} (step {top[0]}, {100 * top[1][0]:.2f} % losses)" if top else "-"
        front = ", ".join(f"{s}: {100 * pts[s][0]:.2f} / {100 * pts[s][1]:.2f}" for s in pareto(pts))
        note = f" ({len(unwalked)} not walked)" if unwalked else ""
        print(f"| {run.name} | {len(pts)} | {len(under)}{note} | {len(met)} | {top_s} | {front} |")
    print(f"\n{met_total} of {under_total} points under the loss target meet the wins target too "
          f"({both_total} points with both numbers over {len(args.runs)} runs)")
    print("\n| reference player (exact) | losses vs optimal % | wins vs random % |\n|---|---|---|")
    for name, (lo, w) in references().items():
        print(f"| {name} | {100 * lo:.2f} | {100 * w:.2f} |")
    if args.out:
        draw(all_points, args.loss_max, args.win_min, args.out)
        print(f"wrote {args.out}")


def draw(all_points: dict[str, dict[int, Point]], loss_max: float, win_min: float, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig, ax = plt.subplots(figsize=(7.5, 5))
    ax.add_patch(Rectangle((-0.5, 100 * win_min), 100 * loss_max + 0.5, 100 - 100 * win_min, color="tab:green",
                           alpha=0.08, label="both targets met"))
    ax.axvline(100 * loss_max, color="tab:green", ls=":", lw=1.5, label=f"targets ({100 * loss_max:g} % / "
               f"{100 * win_min:g} %)")
    ax.axhline(100 * win_min, color="tab:green", ls=":", lw=1.5)
    arms = list(dict.fromkeys(re.sub(r"-seed\d+$", "", run) for run in all_points))  # one marker an arm
    for run, pts in all_points.items():
        if not pts:
            continue
        xs = [100 * p[0] for p in pts.values()]
        ys = [100 * p[1] for p in pts.values()]
        marker = "os^Dv<>ph*"[arms.index(re.sub(r"-seed\d+$", "", run)) % 10]
        line = ax.scatter(xs, ys, s=20, alpha=0.75, marker=marker, label=run)
        front = pareto(pts)
        ax.plot([100 * pts[s][0] for s in front], [100 * pts[s][1] for s in front], color=line.get_facecolor()[0],
                lw=1, alpha=0.8)
    for name, (lo, w) in references().items():
        if 100 * lo <= 30:
            ax.plot([100 * lo], [100 * w], marker="x", color="black", ms=6)
            ax.annotate(name, (100 * lo, 100 * w), xytext=(4, 3), textcoords="offset points", fontsize=7)
    ax.set_xlim(left=-0.5, right=min(30.0, max([100 * p[0] for pts in all_points.values() for p in pts.values()]
                                                 + [10.0]) + 1))
    ys = [100 * p[1] for pts in all_points.values() for p in pts.values()]
    ax.set_ylim(min(ys + [85.0]) - 1, 97)
    ax.set_xlabel("losses vs the optimal opponent, exact (%)")
    ax.set_ylabel("wins vs random play, exact (%)")
    ax.set_title("Each checkpoint on both game targets (lines: each run's Pareto front)")
    ax.legend(fontsize=6, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


if __name__ == "__main__":
    main()
