"""Exact win/draw/loss of scripted tic-tac-toe players against the env's opponent, by walking the whole game tree
(no sampling noise): what a model imitating the teacher can expect, and what is left for RL to find.

    python examples/tictactoe/ceiling.py [--random-move-prob P ...]

The opponent is the env's: a random free cell with probability P, else uniform among its minimax-best moves; who
starts is a coin flip, as in the env's dataset. Players (X):
- `teacher`: minimax, first best move in centre/corner/edge order (`scripted:minimax`);
- `teacher-random`: minimax, uniform among the best moves (`--teacher-arg tie_break=random`);
- `best-safe`: among the minimax-best moves (so it never loses to the optimal opponent), the one with the highest
  expected reward against this opponent: the most a model trained from the teacher can reach without giving up a
  draw against perfect play.
All take an immediate win, else block, as the teacher's verdict does. Below them, the shortcut players of
`toolgym_tictactoe.shortcuts` (random, first free cell, copy the cell the scan names else random / first free /
centre-corner-edge): what a model scores that learnt a trick instead of the game.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from mcp_server_tictactoe import game as g
from toolgym_tictactoe import explain_best_move, forced_move
from toolgym_tictactoe.shortcuts import SHORTCUTS, Distribution, Outcome, game_outcome
from toolgym_tictactoe.shortcuts import exact_outcome as walk

PLAYERS = ("teacher", "teacher-random", "best-safe")


def _score(o: Outcome, draw_reward: float = 0.5) -> float:
    return o[0] + draw_reward * o[1]


def teacher_policy(player: str) -> Callable[[str, Callable[[int], Outcome]], Distribution]:
    """The move distribution of `player` on a board (X to move), given the exact outcome after each cell."""
    if player not in PLAYERS:
        raise ValueError(f"player must be one of {PLAYERS}, not {player!r}")

    def choose(board: str, after: Callable[[int], Outcome]) -> Distribution:
        forced = forced_move(board)
        if forced is not None:
            return {forced: 1.0}
        best = g.best_moves(board, "X")
        if player == "teacher":
            return {explain_best_move(board)[0]: 1.0}
        if player == "teacher-random":
            return {c: 1 / len(best) for c in best}
        return {max(best, key=lambda c: _score(after(c))): 1.0}

    return choose


def exact_outcome(player: str, random_move_prob: float) -> Outcome:
    """(win, draw, loss) probabilities of `player` as X against the env's opponent, over both starts."""
    return walk(teacher_policy(player), random_move_prob, lookahead=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--random-move-prob", type=float, nargs="+", default=[1.0, 0.45, 0.0],
                    help="opponent random-move probabilities (1 = the random opponent, 0 = the optimal one)")
    args = ap.parse_args()
    print(f"{'player':<15} {'opponent':>9}   win %  draw %  loss %  reward")
    for p in args.random_move_prob:
        for player in PLAYERS:
            w, d, lo = exact_outcome(player, p)
            print(f"{player:<15} {p:>9.2f}  {100 * w:6.1f}  {100 * d:6.1f}  {100 * lo:6.1f}  {_score((w, d, lo)):6.3f}")
        for player in SHORTCUTS:
            w, d, lo = game_outcome(player, p)
            print(f"{player:<15} {p:>9.2f}  {100 * w:6.1f}  {100 * d:6.1f}  {100 * lo:6.1f}  {_score((w, d, lo)):6.3f}")


if __name__ == "__main__":
    main()
