"""The tic-tac-toe state space, exactly: every reachable position with the agent (X) to move, what kind of position
it is, and which moves are optimal. Small enough (4,520 positions) to evaluate a policy on all of it.

Positions are 9-character boards (`X`, `O`, `.`), cells 0-8 row by row, X to move, from games where either side
moved first (so X has as many pieces as O, or one fewer).

Kinds (the first that applies):
- `win`: X can complete a line now;
- `block`: O threatens to complete a line and X cannot win at once;
- `quiet`: no immediate win or threat, and some legal move loses game value (a real choice);
- `free`: no immediate win or threat, and every legal move keeps the game value (nothing to get wrong).

Optimal = a move that keeps the position's game-theoretic value (win / draw / loss under perfect play from both
sides); any such move counts. `fastest` is the stricter depth-aware set the server's opponent uses (faster wins,
slower losses).

Held-out split: a fixed share of the positions with at least two pieces, chosen by a hash of the board's symmetry
class (all rotations and reflections of a held-out board are held out with it), never
appears in any training source of the recipe (teacher data, GRPO tasks); positions with 0 or 1 pieces start every
game, so they are always in the training split.
"""

from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass
from typing import Literal

from mcp_server_tictactoe import game as g

HELDOUT_SHARE = 0.2
Split = Literal["all", "train", "heldout"]
KINDS = ("win", "block", "quiet", "free")


@dataclass(frozen=True)
class Position:
    """One position with X to move and its exact analysis."""

    board: str
    pieces: int
    kind: str
    legal: tuple[int, ...]
    optimal: tuple[int, ...]  # moves that keep the game value (any of them is right)
    fastest: tuple[int, ...]  # the depth-aware minimax set (fastest win / slowest loss)
    wins: tuple[int, ...]  # cells that complete a line of X now
    threats: tuple[int, ...]  # cells where O would complete a line next
    value: int  # game value for X: 1 win, 0 draw, -1 loss
    heldout: bool

    @property
    def split(self) -> str:
        return "heldout" if self.heldout else "train"


def completing(board: str, side: str) -> tuple[int, ...]:
    """Free cells that would complete a line of three for `side`."""
    return tuple(c for c in g.free_cells(board) if g.winner(g.play(board, c, side)) == side)


# the 8 symmetries of the square as cell permutations (rotations and reflections of the 3x3 grid)
SYMMETRIES: tuple[tuple[int, ...], ...] = tuple(
    tuple(3 * r + c for r, c in (f(i // 3, i % 3) for i in range(9)))
    for f in (lambda r, c: (r, c), lambda r, c: (c, 2 - r), lambda r, c: (2 - r, 2 - c), lambda r, c: (2 - c, r),
              lambda r, c: (r, 2 - c), lambda r, c: (2 - r, c), lambda r, c: (c, r), lambda r, c: (2 - c, 2 - r))
)


def images(board: str) -> set[str]:
    """A board's images under the 8 rotations and reflections (fewer when the board is itself symmetric)."""
    return {"".join(board[p[i]] for i in range(9)) for p in SYMMETRIES}


def canonical(board: str) -> str:
    """The smallest of a board's 8 images under rotation and reflection: one name per symmetry class."""
    return min(images(board))


def is_heldout(board: str, share: float = HELDOUT_SHARE) -> bool:
    """Whether a position belongs to the held-out split: a stable hash of its symmetry class (`canonical`) below
    `share`, for positions with at least two pieces. Whole classes are held out, so no rotated or mirrored copy of a
    held-out position is trained on either."""
    if 9 - board.count(g.EMPTY) < 2:
        return False
    digest = hashlib.sha256(f"tictactoe-heldout:{canonical(board)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


@functools.lru_cache(maxsize=None)
def analyze(board: str, side: str = "X") -> Position:
    """The exact analysis of a position with `side` to move (raises ValueError for a finished game or when it is
    not that side's turn). `heldout` is the split of the position seen from X (the colour-swapped board for O)."""
    if len(board) != 9 or set(board) - {"X", "O", g.EMPTY}:
        raise ValueError(f"a board is 9 cells of X, O and '.', got {board!r}")
    if side not in ("X", "O"):
        raise ValueError(f"side must be X or O, not {side!r}")
    mine, theirs = board.count(side), board.count(g.other(side))
    if g.is_over(board) or mine not in (theirs, theirs - 1):
        raise ValueError(f"not a position with {side} to move: {board!r}")
    values = g.move_values(board, side)  # from `side`'s point of view
    sign = {c: (v > 0) - (v < 0) for c, v in values.items()}
    top = max(sign.values())
    top_depth = max(values.values())
    wins, threats = completing(board, side), completing(board, g.other(side))
    optimal = tuple(c for c in sorted(sign) if sign[c] == top)
    if wins:
        kind = "win"
    elif threats:
        kind = "block"
    else:
        kind = "free" if len(optimal) == len(sign) else "quiet"
    return Position(board=board, pieces=mine + theirs, kind=kind, legal=tuple(sorted(sign)), optimal=optimal,
                    fastest=tuple(c for c in sorted(values) if values[c] == top_depth), wins=wins, threats=threats,
                    value=top, heldout=is_heldout(board if side == "X" else swap_colours(board)))


def replay(start: str, moves: list[str]) -> list[str]:
    """The boards of a game from `start` (X-view board) through `moves` (`["X4", "O0", ...]`, as the server's
    `game_result` lists them): the board before each move, then the final board (len(moves) + 1 boards)."""
    boards = [start]
    for m in moves:
        boards.append(g.play(boards[-1], int(m[1:]), m[0]))
    return boards


def blunder(start: str, moves: list[str]) -> tuple[str, int] | None:
    """(board, cell) of X's first move in a game from `start` through `moves` (as `replay` takes them) that gave up
    game value -- a board where X could still draw or win, a cell outside its optimal moves -- or None."""
    for board, mv in zip(replay(start, moves), moves, strict=False):
        if mv[0] == "X":
            pos = analyze(board)
            if pos.value >= 0 and int(mv[1:]) not in pos.optimal:
                return board, int(mv[1:])
    return None


def heldout_visits(start: str, moves: list[str]) -> int:
    """How many positions with X to move in a game from `start` through `moves` (as `replay` takes them) are in
    the held-out split."""
    boards = replay(start, moves)
    visits = sum(1 for b, m in zip(boards, moves, strict=False) if m[0] == "X" and is_heldout(b))
    board = boards[-1]
    if not g.is_over(board) and board.count("X") in (board.count("O"), board.count("O") - 1) and is_heldout(board):
        visits += 1  # the position the game stopped at, X to move
    return visits


@functools.lru_cache(maxsize=1)
def reachable_positions() -> tuple[str, ...]:
    """Every position with X to move that a legal game reaches (X or O moving first), sorted: 4,520 boards."""
    seen: set[str] = set()

    def walk(board: str, to_move: str) -> None:
        if g.is_over(board):
            return
        if to_move == "X":
            if board in seen:
                return
            seen.add(board)
        for c in g.free_cells(board):
            walk(g.play(board, c, to_move), g.other(to_move))

    walk(g.EMPTY * 9, "X")
    walk(g.EMPTY * 9, "O")
    return tuple(sorted(seen))


def positions(split: Split = "all") -> list[str]:
    """The reachable positions of one split, sorted."""
    if split not in ("all", "train", "heldout"):
        raise ValueError(f"split must be 'all', 'train' or 'heldout', not {split!r}")
    boards = reachable_positions()
    if split == "all":
        return list(boards)
    want = split == "heldout"
    return [b for b in boards if is_heldout(b) == want]


def swap_colours(board: str) -> str:
    """X <-> O: a position with O to move seen from X's side (what `suggest_move(agent_plays="O")` does)."""
    return board.translate(str.maketrans("XOxo", "OXox"))


def random_opening(rng: random.Random, max_moves: int, split: Split = "all", tries: int = 100) -> tuple[str, bool]:
    """A position with X to move after a random opening: who starts is a coin flip, then 0..max_moves random
    moves (both sides) are played, ending with X to move. Redrawn while it falls outside `split` or the game is
    over. Returns (board, x_started)."""
    for _ in range(tries):
        x_starts = rng.random() < 0.5
        board, side = g.EMPTY * 9, "X" if x_starts else "O"
        target = rng.randint(0, max_moves)
        # number of plies so that X is to move: even when X starts, odd when O starts
        plies = target - (target % 2) if x_starts else target - (1 - target % 2)
        if plies < 0:
            plies = 0 if x_starts else 1
        ok = True
        for _ in range(plies):
            free = g.free_cells(board)
            if not free or g.is_over(board):
                ok = False
                break
            board = g.play(board, rng.choice(free), side)
            side = g.other(side)
        if not ok or g.is_over(board):
            continue
        if split == "all" or is_heldout(board) == (split == "heldout"):
            return board, x_starts
    raise RuntimeError(f"no opening in split {split!r} after {tries} tries")
