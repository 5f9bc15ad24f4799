"""Did RL discover moves no teacher showed? Quiet positions (no win to take, no threat to block, and some move loses
the game value), where the `run.sh forced` teacher played a uniformly random free cell, split by whether the RL
run's games visited them, with each model's share of value-keeping moves beside the shortcut ceilings on the same
positions (`toolgym_tictactoe.shortcuts`: on quiet positions `copy` is chance, since the scan names no cell).

    python examples/tictactoe/discovery.py RUN_DIR NAME=EVAL_DIR [NAME=EVAL_DIR ...] [--json OUT.json]
    python examples/tictactoe/discovery.py --pool OUT.json OUT.json ...     (the seeds of one recipe, pooled)

RUN_DIR: a GRPO run with `save_rollouts = true` (its rollouts.jsonl.gz: every position with X to move its games
showed the model). EVAL_DIR: `toolgym eval tictactoe -a task=move -a kinds=quiet -n 0` of one model (every quiet
position, greedy). Rows: every quiet position; visited by at least one RL game; visited in at least 64 games (one
step's worth); not visited; each also for the held-out split alone.

`--pool` adds up the `--json` outputs of several runs (the seeds of one recipe, each with its own model and its own
visited set) row by row: a position counts once per run whose row holds it, and each shortcut ceiling is weighted
by the row's positions, so the pooled ceiling is the one of the same (run, position) pairs. The (run, position)
pairs of one position are not independent samples -- the position's difficulty is shared, and a model the runs share
(the start) answers it once for all of them -- so the pooled intervals are clustered by position
(`toolgym.stats.clustered_interval`); outputs written before the JSON held each position's answer get Wilson's
interval over the pairs, which is too narrow, and a line saying so.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from toolgym.journal import read_results
from toolgym.stats import clustered_interval, wilson
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
            row[m] = {"optimal": sum(scored), "n": len(scored),
                      "boards": {b: by_board[b] for b in boards if b in by_board}}
            cells.append(rate(sum(scored), len(scored)))
        for s in SHORTCUT_COLUMNS:
            v = 100 * position_scores(s, boards)["optimal"] if boards else float("nan")
            row[s] = v
            cells.append(f"{v:.1f}" if boards else "-")
        rows.append(row)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines), rows


def pooled_rate(rows: list[dict[str, object]], model: str) -> tuple[str, bool]:
    """One model's pooled cell over the runs' rows and whether its interval is clustered by position (every row
    holds its positions' answers) or Wilson's over the (run, position) pairs (outputs without them)."""
    cells = [r[model] for r in rows]
    if all("boards" in c for c in cells):  # type: ignore[operator]
        by_position: dict[str, tuple[float, int]] = {}
        for c in cells:
            for b, v in c["boards"].items():  # type: ignore[index,union-attr]
                k, n = by_position.get(b, (0.0, 0))
                by_position[b] = (k + float(v), n + 1)
        if len(by_position) < 2:
            return rate(sum(k for k, _ in by_position.values()), sum(n for _, n in by_position.values())), True
        p, lo, hi = clustered_interval(by_position.values())
        return f"{100 * p:.1f} ({100 * lo:.1f}-{100 * hi:.1f})", True
    return rate(sum(c["optimal"] for c in cells), sum(c["n"] for c in cells)), False  # type: ignore[index,misc]


def pool(outputs: list[dict[str, object]]) -> str:
    """The rows of several runs' `--json` outputs added up (see the module docstring); every run must have the same
    rows and model names. Intervals: 95 %, clustered by position where the outputs hold each position's answer."""
    names = [[r["positions"] for r in o["rows"]] for o in outputs]  # type: ignore[index,union-attr]
    if any(n != names[0] for n in names):
        raise SystemExit("--pool: the outputs have different rows")
    first = outputs[0]["rows"]  # type: ignore[index]
    models = [k for k, v in first[0].items() if isinstance(v, dict)]  # type: ignore[index,union-attr]
    if any([k for k, v in o["rows"][0].items() if isinstance(v, dict)] != models  # type: ignore[index,union-attr]
           for o in outputs):
        raise SystemExit("--pool: the outputs name different models")
    body, clustered = [], True
    for i, name in enumerate(names[0]):
        rows = [o["rows"][i] for o in outputs]  # type: ignore[index]
        n = sum(int(r["n"]) for r in rows)
        cells = [str(name), str(n)]
        for m in models:
            cell, by_position = pooled_rate(rows, m)
            clustered = clustered and by_position
            cells.append(cell)
        for s in SHORTCUT_COLUMNS:
            cells.append(f"{sum(r[s] * r['n'] for r in rows if r['n']) / n:.1f}" if n else "-")
        body.append("| " + " | ".join(cells) + " |")
    how = "95 % CI clustered by position" if clustered else "95 % Wilson CI"
    head = ["positions", "n (run, position)", *[f"{m} optimal % ({how})" for m in models],
            *[f"`{s}` ceiling %" for s in SHORTCUT_COLUMNS]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *body]
    if not clustered:
        lines.append("\n(These outputs do not hold each position's answer, so the intervals treat the (run, position) "
                     "pairs as independent and are too narrow: run discovery.py again for intervals clustered by "
                     "position.)")
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["--pool"]:
        if len(sys.argv) < 4:
            raise SystemExit("usage: discovery.py --pool OUT.json OUT.json ...")
        print(pool([json.loads(Path(f).read_text()) for f in sys.argv[2:]]))
        return
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
