"""Shortcut players and their exact ceilings: what a player scores that learnt a trick instead of the game.

A learning result on tic-tac-toe is only evidence of play when it clears what these tricks score on the same eval
(GUIDE §10: the "reader" GRPO result sat at the copy ceiling). Each shortcut is a move distribution per position
(X to move), scored exactly -- no sampling:

- `random`: a uniformly random free cell (chance);
- `first-free`: always the lowest-numbered free cell;
- `copy`: the cell the teacher's scan names (`forced_move`: the first `win` line, else the first `block` line --
  what the `think=track` text carries to the verdict), else a random free cell. A model whose own think text names
  that cell and that learnt only to act on it scores this;
- `copy-first`: the named cell, else the first free cell;
- `copy-centre`: the named cell, else the first free cell in centre, corners, edges order (`PREFERENCE`): copying
  plus one fixed opening habit.

`position_scores(name, boards)`: the expected share of legal and of value-keeping (optimal) moves over a set of
positions. `game_outcome(name, random_move_prob)`: exact win / draw / loss probabilities as X against the env's
opponent (a random free cell with probability P, else uniform among its minimax-best moves; who starts is a coin
flip). `ceilings(...)` is the table printed beside a result. `trap_move_values(p)` / `trap_gambles(p)`: on the boards
of the env's `restart_trap_share` (a choice among value-keeping moves), each move's exact expected reward against
the opponent at random-move probability p, and how often a value-losing move pays more than every value-keeping one.
`never_losing_bound()`: the most a player that never loses to optimal play wins against random play (95.56 %).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache

from mcp_server_tictactoe import game as g

from toolgym_tictactoe import PREFERENCE, forced_move
from toolgym_tictactoe import positions as P

Distribution = dict[int, float]
Outcome = tuple[float, float, float]  # P(win), P(draw), P(loss) for X

SHORTCUTS = ("random", "first-free", "copy", "copy-first", "copy-centre")


def _uniform(cells: list[int]) -> Distribution:
    return {c: 1.0 / len(cells) for c in cells}


def move_distribution(name: str, board: str) -> Distribution:
    """The move probabilities of shortcut `name` on `board` (X to move, at least one free cell)."""
    if name not in SHORTCUTS:
        raise ValueError(f"unknown shortcut {name!r}; known: {SHORTCUTS}")
    free = g.free_cells(board)
    if not free:
        raise ValueError(f"no free cell on {board!r}")
    if name.startswith("copy"):
        named = forced_move(board)
        if named is not None:
            return {named: 1.0}
    if name in ("random", "copy"):
        return _uniform(free)
    if name == "copy-centre":
        return {next(c for c in PREFERENCE if c in free): 1.0}
    return {free[0]: 1.0}  # first-free, copy-first


def position_scores(name: str, boards: Iterable[str]) -> dict[str, float]:
    """Expected legal and optimal (value-keeping) rates of shortcut `name` over `boards`, and their count `n`."""
    n, optimal = 0, 0.0
    for b in boards:
        best = set(P.analyze(b).optimal)
        optimal += sum(p for c, p in move_distribution(name, b).items() if c in best)
        n += 1
    return {"n": float(n), "legal": 1.0 if n else 0.0, "optimal": optimal / n if n else 0.0}


def _mix(parts: list[tuple[float, Outcome]]) -> Outcome:
    return tuple(sum(w * o[i] for w, o in parts) for i in range(3))  # type: ignore[return-value]


def exact_outcome(policy: Callable[..., Distribution], random_move_prob: float, *, lookahead: bool = False,
                  style: str = "uniform") -> Outcome:
    """(win, draw, loss) probabilities of the X player `policy` (board -> move distribution) against the env's
    opponent, by walking the whole game tree; over both starts (a coin flip, as the env's dataset draws it).
    `lookahead=True`: the policy is called as `policy(board, after)`, where `after(cell)` is the exact outcome of
    playing `cell` there (for players that choose by expected result, such as the safest-best `ceiling.py` player).
    `style`: the opponent's choice among its best moves (`trappy`: among those that set a trap, when any do)."""
    if not 0.0 <= random_move_prob <= 1.0:
        raise ValueError(f"random_move_prob must be in [0, 1], not {random_move_prob}")

    @lru_cache(maxsize=None)
    def x_to_move(board: str) -> Outcome:
        if g.winner(board) == "O":
            return (0.0, 0.0, 1.0)
        if not g.free_cells(board):
            return (0.0, 1.0, 0.0)
        dist = policy(board, lambda c: after_x(g.play(board, c, "X"))) if lookahead else policy(board)
        return _mix([(p, after_x(g.play(board, c, "X"))) for c, p in dist.items()])

    @lru_cache(maxsize=None)
    def after_x(board: str) -> Outcome:
        if g.winner(board) == "X":
            return (1.0, 0.0, 0.0)
        free = g.free_cells(board)
        if not free:
            return (0.0, 1.0, 0.0)
        best_o = g.minimax_choices(board, "O", style)
        parts = [(random_move_prob / len(free), x_to_move(g.play(board, c, "O"))) for c in free]
        parts += [((1 - random_move_prob) / len(best_o), x_to_move(g.play(board, c, "O"))) for c in best_o]
        return _mix(parts)

    return _mix([(0.5, x_to_move(g.EMPTY * 9)), (0.5, after_x(g.EMPTY * 9))])


@lru_cache(maxsize=None)
def game_outcome(name: str, random_move_prob: float, style: str = "uniform") -> Outcome:
    """Exact (win, draw, loss) of shortcut `name` as X against the env's opponent at `random_move_prob`."""
    return exact_outcome(lambda b: move_distribution(name, b), random_move_prob, style=style)


def ceilings(boards: dict[str, list[str]] | None = None, random_move_probs: Iterable[float] = (1.0, 0.0),
             names: Iterable[str] = SHORTCUTS) -> list[dict[str, float | str]]:
    """One row per shortcut: its expected optimal rate on each named set of positions (`boards`: name -> boards)
    and its exact win / draw / loss % against the opponent at each random-move probability."""
    rows: list[dict[str, float | str]] = []
    for name in names:
        row: dict[str, float | str] = {"player": name}
        for label, bs in (boards or {}).items():
            row[f"{label} optimal %"] = 100 * position_scores(name, bs)["optimal"]
        for p in random_move_probs:
            w, d, lo = game_outcome(name, float(p))
            row[f"P={p:g} W/D/L %"] = f"{100 * w:.1f} / {100 * d:.1f} / {100 * lo:.1f}"
        rows.append(row)
    return rows


@lru_cache(maxsize=None)
def never_losing_wins(board: str, x_to_move: bool) -> float:
    """P(X wins) against the random opponent (a uniformly random free cell) when X, from `board` on, plays among its
    value-keeping moves (`positions.analyze(...).optimal`) the one that wins most often: the best a player that
    never loses to optimal play can do there."""
    if g.winner(board):
        return 1.0 if g.winner(board) == "X" else 0.0
    free = g.free_cells(board)
    if not free:
        return 0.0
    if not x_to_move:
        return sum(never_losing_wins(g.play(board, c, "O"), True) for c in free) / len(free)
    return max(never_losing_wins(g.play(board, c, "X"), False) for c in P.analyze(board).optimal)


def never_losing_bound() -> float:
    """The most a player that never loses to optimal play wins against random play, over both starts (95.56 %)."""
    return 0.5 * never_losing_wins(g.EMPTY * 9, True) + 0.5 * never_losing_wins(g.EMPTY * 9, False)


def trap_boards() -> list[str]:
    """The boards of the env's `restart_trap_share` (X to move, 1-7 marks, no win to take or threat to block, two or
    more value-keeping moves): where the optimal opponent cannot tell the value-keeping moves apart."""
    return [b for b in P.positions("all") if 1 <= 9 - b.count(".") <= 7 and forced_move(b) is None
            and len(P.analyze(b).optimal) >= 2]


def trap_move_values(random_move_prob: float, win: float = 1.0, draw: float = 0.5) -> dict[str, dict[int, float]]:
    """Per trap board (`trap_boards`), each free cell's exact expected outcome reward (`win` / `draw` / 0) against
    the env's opponent at `random_move_prob`, X playing its best reply to that opponent afterwards: what a trap
    restart's group compares. `trap_gambles` reads off where a value-losing move pays more than every value-keeping
    one."""
    if not 0.0 <= random_move_prob <= 1.0:
        raise ValueError(f"random_move_prob must be in [0, 1], not {random_move_prob}")

    @lru_cache(maxsize=None)
    def x_to_move(board: str) -> float:
        if g.winner(board) == "O":
            return 0.0
        free = g.free_cells(board)
        return max(after_x(g.play(board, c, "X")) for c in free) if free else draw

    @lru_cache(maxsize=None)
    def after_x(board: str) -> float:
        if g.winner(board) == "X":
            return win
        free = g.free_cells(board)
        if not free:
            return draw
        best_o = g.minimax_choices(board, "O", "uniform")
        return sum(random_move_prob / len(free) * x_to_move(g.play(board, c, "O")) for c in free) + \
            sum((1 - random_move_prob) / len(best_o) * x_to_move(g.play(board, c, "O")) for c in best_o)

    return {b: {c: after_x(g.play(b, c, "X")) for c in g.free_cells(b)} for b in trap_boards()}


def trap_gambles(random_move_prob: float) -> dict[str, float]:
    """Over the trap boards: `boards`, `gambles` (the share where some value-losing move's `trap_move_values` is
    above every value-keeping move's -- a group there rewards giving up the value) and `spread` (the mean gap
    between the best and the worst value-keeping move: the signal a group has to tell them apart)."""
    values = trap_move_values(random_move_prob)
    gambles, spread = 0, 0.0
    for b, q in values.items():
        keep = [q[c] for c in P.analyze(b).optimal]
        lose = [v for c, v in q.items() if c not in P.analyze(b).optimal]
        gambles += bool(lose) and max(lose) > max(keep)
        spread += max(keep) - min(keep)
    n = len(values)
    return {"boards": float(n), "gambles": gambles / n, "spread": spread / n}


def format_table(rows: list[dict[str, float | str]]) -> str:
    """A markdown table of `ceilings` rows."""
    if not rows:
        return ""
    keys = list(rows[0])
    out = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        out.append("| " + " | ".join(f"{r[k]:.1f}" if isinstance(r[k], float) else str(r[k]) for k in keys) + " |")
    return "\n".join(out)


__all__ = ["SHORTCUTS", "ceilings", "exact_outcome", "format_table", "game_outcome", "move_distribution",
           "never_losing_bound", "never_losing_wins", "position_scores", "trap_boards", "trap_gambles",
           "trap_move_values"]
