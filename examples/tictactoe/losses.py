"""Where a model's lost games were lost: for every lost game of an eval folder, the first move of the agent that gave
up game value (a position where X could still draw or win, and the move played is not among its optimal ones),
grouped by the position's symmetry class; games lost without such a move (the turn cap after invalid moves) are
counted apart, and so are errored rollouts (each counted as a lost game).

    python examples/tictactoe/losses.py EVAL_DIR [EVAL_DIR ...]

EVAL_DIR: a `toolgym eval tictactoe` folder of whole games (results.jsonl), e.g. runs/tictactoe/eval/forced-grpo-games200-optimal.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from toolgym.journal import read_results
from toolgym_tictactoe import positions as P

CAP = "(no value-losing move: the turn cap after invalid moves)"
ERRORED = "(errored rollout: counted as a loss)"


def first_blunder(start: str, moves: list[str]) -> str | None:
    """The board (X to move) where the agent first played a move that lost game value, or None."""
    for board, mv in zip(P.replay(start, moves), moves, strict=False):
        if mv[0] == "X":
            pos = P.analyze(board)
            if pos.value >= 0 and int(mv[1:]) not in pos.optimal:
                return board
    return None


def lost_at(eval_dir: Path) -> tuple[int, int, Counter[str]]:
    """(games, losses, where each loss was decided: symmetry class, CAP, or ERRORED for a rollout that failed)."""
    results = read_results(eval_dir / "results.jsonl")
    where: Counter[str] = Counter()
    losses = 0
    for t in results.values():
        if t.error:
            losses += 1
            where[ERRORED] += 1
            continue
        if not t.metrics.get("loss"):
            continue
        losses += 1
        info = t.info or {}
        res = info.get("result") or {}
        board = first_blunder(info.get("start") or "." * 9, list(res.get("moves") or []))
        where[CAP if board is None else P.canonical(board)] += 1
    return len(results), losses, where


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("evals", type=Path, nargs="+")
    args = ap.parse_args()
    for d in args.evals:
        n, losses, where = lost_at(d)
        print(f"\n{d.name}: {losses} of {n} games lost")
        print("| decided at (symmetry class, X to move) | kind | split | games |\n|---|---|---|---|")
        for board, k in where.most_common():
            if board in (CAP, ERRORED):
                print(f"| {board} | | | {k} |")
            else:
                pos = P.analyze(board)
                print(f"| `{board[:3]}/{board[3:6]}/{board[6:]}` | {pos.kind} | {pos.split} | {k} |")


if __name__ == "__main__":
    main()
