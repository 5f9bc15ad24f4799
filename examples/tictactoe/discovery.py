"""Did RL discover moves no teacher showed? Quiet positions (no win to take, no threat to block, and some move loses
the game value), where the `run.sh forced` teacher played a uniformly random free cell, split by whether the RL
run's games visited them, with each model's share of value-keeping moves beside the shortcut ceilings on the same
positions (`toolgym_tictactoe.shortcuts`: on quiet positions `copy` is chance, since the scan names no cell).

    python examples/tictactoe/discovery.py RUN_DIR NAME=EVAL_DIR [NAME=EVAL_DIR ...] [--json OUT.json]

RUN_DIR: a GRPO run with `save_rollouts = true` (its rollouts.jsonl.gz: every position with X to move its games
showed the model). EVAL_DIR: `toolgym eval tictactoe -a task=move -a kinds=quiet -n 0` of one model (every quiet
position, greedy). Rows: every quiet position; visited by at least one RL game; visited in at least 64 games (one
step's worth); not visited; each also for the held-out split alone.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from toolgym.journal import read_results
from toolgym.stats import wilson
from toolgym.train.runstate import read_rollouts
from toolgym_tictactoe import positions as P
from toolgym_tictactoe import positions_shown
from toolgym_tictactoe.shortcuts import position_scores

SHORTCUT_COLUMNS = ("copy", "copy-centre", "first-free")
OFTEN = 64


def visits(run_dir: Path) -> Counter[str]:
    """How many of the run's games showed each position with X to move (each game counts a position once; a step
    replayed after a resume counts once)."""
    return Counter(b for d in read_rollouts(run_dir) for b in positions_shown(d["messages"]))


def optimal_by_board(eval_dir: Path) -> dict[str, float]:
    """Each position's `optimal` reward (1 / 0) in a position eval."""
    out = {}
    for t in read_results(eval_dir / "results.jsonl").values():
        if t.error is None and "board" in t.task:
            out[t.task["board"]] = float(t.rewards.get("optimal", 0.0))
    return out


def rate(k: float, n: int) -> str:
    if not n:
        return "-"
    lo, hi = wilson(k, n)
    return f"{100 * k / n:.1f} ({100 * lo:.1f}-{100 * hi:.1f})"


def table(counts: Counter[str], evals: dict[str, dict[str, float]]) -> tuple[str, list[dict[str, object]]]:
    quiet = [b for b in P.positions("all") if P.analyze(b).kind == "quiet"]
    sets = {
        "all quiet": quiet,
        "visited by RL games": [b for b in quiet if counts[b] > 0],
        f"visited in >= {OFTEN} games": [b for b in quiet if counts[b] >= OFTEN],
        "not visited": [b for b in quiet if counts[b] == 0],
    }
    for name in list(sets):
        if name != "all quiet":
            sets[f"{name}, held-out"] = [b for b in sets[name] if P.analyze(b).heldout]
    head = ["positions", "n", *[f"{m} optimal %" for m in evals], *[f"`{s}` ceiling %" for s in SHORTCUT_COLUMNS]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows: list[dict[str, object]] = []
    for name, boards in sets.items():
        row: dict[str, object] = {"positions": name, "n": len(boards)}
        cells = [name, str(len(boards))]
        for m, by_board in evals.items():
            scored = [by_board[b] for b in boards if b in by_board]
            row[m] = {"optimal": sum(scored), "n": len(scored)}
            cells.append(rate(sum(scored), len(scored)))
        for s in SHORTCUT_COLUMNS:
            v = 100 * position_scores(s, boards)["optimal"] if boards else float("nan")
            row[s] = v
            cells.append(f"{v:.1f}" if boards else "-")
        rows.append(row)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", type=Path, help="GRPO run folder with rollouts.jsonl.gz")
    ap.add_argument("evals", nargs="+", help="NAME=EVAL_DIR: a quiet-position eval of one model")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = ap.parse_args()
    counts = visits(args.run_dir)
    evals = {}
    for spec in args.evals:
        name, _, folder = spec.partition("=")
        if not folder:
            raise SystemExit(f"expected NAME=EVAL_DIR, got {spec!r}")
        evals[name] = optimal_by_board(Path(folder))
    md, rows = table(counts, evals)
    print(f"{len(counts)} positions with X to move visited by the run's games "
          f"({sum(1 for b in counts if P.analyze(b).kind == 'quiet')} of them quiet)\n")
    print(md)
    if args.json:
        args.json.write_text(json.dumps({"visited_positions": len(counts), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
