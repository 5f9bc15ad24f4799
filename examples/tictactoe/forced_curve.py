"""The RL curve of `run.sh forced`: losses against the optimal opponent per eval step (the run's periodic greedy eval,
`eval/metrics/loss`), with the start's rate and the shortcut ceilings drawn as lines, beside the sampled training
games (reward, losses, wins) per step; a run with `probe_games` also has its greedy probe games' reward and losses,
dashed in its colour.

    python examples/tictactoe/forced_curve.py RUNS_ROOT RUN_DIR [RUN_DIR ...] [-o PNG] [--start EVAL_NAME]

RUN_DIR: GRPO run folders (metrics.jsonl), each optionally as NAME=DIR; the legend names each by NAME or its folder.
The second panel is the greedy eval's invalid calls per game: a model whose argmax picks an occupied cell on one
position that many eval games pass through loses all of them at the turn cap, so this is where runs part.
`--start`: the eval folder name of the start's 200 games vs the optimal opponent under RUNS_ROOT/eval (default
forced-sft-games200-optimal).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from toolgym.train.runstate import read_metrics
from toolgym_tictactoe.shortcuts import game_outcome


def smooth(ys: list[float], k: int) -> list[float]:
    return [sum(ys[max(0, i - k + 1) : i + 1]) / len(ys[max(0, i - k + 1) : i + 1]) for i in range(len(ys))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("runs", nargs="+", help="RUN_DIR or NAME=RUN_DIR")
    ap.add_argument("-o", "--out", type=Path, default=Path("examples/tictactoe/forced_curves.png"))
    ap.add_argument("--start", default="forced-sft-games200-optimal")
    ap.add_argument("--smooth", type=int, default=10)
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(20, 4.2))
    ax = axes[0]
    start = args.root / "eval" / args.start / "summary.json"
    if start.exists():
        s = json.loads(start.read_text())
        ax.axhline(100 * s["metrics"]["loss"]["mean"], color="grey", ls="--", lw=1, label="start (200 games)")
    for name, style in (("copy", ":"), ("copy-centre", "-.")):
        ax.axhline(100 * game_outcome(name, 0.0)[2], color="tab:red", ls=style, lw=1, label=f"`{name}` ceiling")
    ax.axhline(5, color="black", ls=":", lw=0.8, label="target 5 %")
    for spec in args.runs:
        name, _, path = spec.rpartition("=")
        run = Path(path)
        name = name or run.name
        recs = [m for m in read_metrics(run) if "step" in m]
        for a, key, scale in ((ax, "eval/metrics/loss", 100), (axes[1], "eval/metrics/invalid_moves", 1)):
            pts = [(m["step"], scale * m[key]) for m in recs if key in m]
            if pts:
                xs, ys = zip(*pts, strict=True)
                a.plot(xs, ys, marker="o", markersize=3, label=name)
        for k, (key, title) in enumerate((("reward", "sampled reward (training games)"),
                                          ("metrics/loss", "sampled games lost"))):
            vals = [(m["step"], m[key]) for m in recs if isinstance(m.get(key), int | float)]
            if vals:
                xs2, ys2 = zip(*vals, strict=True)
                line = axes[k + 2].plot(xs2, smooth(list(ys2), args.smooth), label=name)[0]
                axes[k + 2].set_title(f"{title}, {args.smooth}-step mean")
                probes = [(m["step"], m[f"probe/{key}"]) for m in recs if isinstance(m.get(f"probe/{key}"), int | float)]
                if probes:  # probe_games: the step's greedy games of the training pool, dashed in the run's colour
                    xs3, ys3 = zip(*probes, strict=True)
                    axes[k + 2].plot(xs3, smooth(list(ys3), args.smooth), ls="--", color=line.get_color(),
                                     label=f"{name} (greedy probes)")
    ax.set_title("losses vs the optimal opponent (greedy eval, 100 games)")
    ax.set_ylabel("% of games")
    axes[1].set_title("invalid calls per game (greedy eval, 100 games)")
    for a in axes:
        a.set_xlabel("step")
        a.grid(alpha=0.3)
    ax.legend(fontsize=7)
    axes[2].legend(fontsize=7)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=100)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
