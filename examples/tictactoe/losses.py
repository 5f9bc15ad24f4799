"""Where a model's lost games were lost: for every lost game of an eval folder, the first move of the agent that gave
up game value (a position where X could still draw or win, and the move played is not among its optimal ones),
grouped by the position's symmetry class, with how many of those moves made a threat or a fork of X's (one or two
cells that complete a line: on a block board, an attack played instead of the block); games lost without such a move
(invalid moves: the turn cap, or a forfeit) are keyed by the board they stopped on instead, `(invalid moves) BOARD`, so
a board where a model's output breaks down shows up by name; errored rollouts are counted apart (each a lost game).

    python examples/tictactoe/losses.py EVAL_DIR [EVAL_DIR ...]

EVAL_DIR: a `toolgym eval tictactoe` folder of whole games (results.jsonl), e.g. runs/tictactoe/eval/forced-grpo-games200-optimal.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from toolgym.journal import read_results
from toolgym_tictactoe import positions as P

INVALID = "(invalid moves)"  # prefix of a loss with no value-losing move: `(invalid moves) BOARD`, BOARD its class
ERRORED = "(errored rollout: counted as a loss)"


def is_class(key: str) -> bool:
    """Whether a key of `lost_at`'s counter is a symmetry class where X gave up the value (not a stop by invalid moves
    or an errored rollout)."""
    return not key.startswith("(")


def first_blunder(start: str, moves: list[str]) -> str | None:
    """The board (X to move) where the agent first played a move that lost game value, or None."""
    found = blunder(start, moves)
    return found[0] if found else None


blunder = P.blunder  # (board, cell) of the agent's first move that lost game value, or None


def threats_made(board: str, cell: int) -> int:
    """How many cells that complete a line X at `cell` leaves X (1: a threat, 2: a fork; on a block board either
    wins against an opponent that misses its own win, and loses to one that does not)."""
    return len(P.completing(board[:cell] + "X" + board[cell + 1:], "X"))


def lost_at(eval_dir: Path) -> tuple[int, int, Counter[str]]:
    """(games, losses, where each loss was decided: the symmetry class of X's first value-losing move; without one,
    `(invalid moves) BOARD`, BOARD the class of the board the game stopped on; ERRORED for a rollout that failed)."""
    n, losses, where, _ = lost_detail(eval_dir)
    return n, losses, where


def lost_detail(eval_dir: Path) -> tuple[int, int, Counter[str], Counter[tuple[str, int]]]:
    """`lost_at`, and per symmetry class how many of its losing moves made a threat (1) or a fork (2): on a block
    board, an attack played instead of the block."""
    results = read_results(eval_dir / "results.jsonl")
    where: Counter[str] = Counter()
    attacks: Counter[tuple[str, int]] = Counter()
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
        start, moves = info.get("start") or "." * 9, list(res.get("moves") or [])
        found = blunder(start, moves)
        if found is None:
            stopped = res.get("board") or P.replay(start, moves)[-1]
            where[f"{INVALID} {P.canonical(stopped)}"] += 1
            continue
        board, cell = found
        cls = P.canonical(board)
        where[cls] += 1
        made = min(threats_made(board, cell), 2)
        if made:
            attacks[cls, made] += 1
    return len(results), losses, where, attacks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("evals", type=Path, nargs="+")
    args = ap.parse_args()
    for d in args.evals:
        n, losses, where, attacks = lost_detail(d)
        print(f"\n{d.name}: {losses} of {n} games lost")
        print("| decided at (symmetry class, X to move) | kind | split | games | of which a threat / a fork made |\n"
              "|---|---|---|---|---|")
        for board, k in where.most_common():
            if not is_class(board):
                print(f"| {board} | | | {k} | |")
            else:
                pos = P.analyze(board)
                print(f"| `{board[:3]}/{board[3:6]}/{board[6:]}` | {pos.kind} | {pos.split} | {k} "
                      f"| {attacks[board, 1]} / {attacks[board, 2]} |")


if __name__ == "__main__":
    main()
