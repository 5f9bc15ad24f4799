"""Tic-tac-toe rules and the minimax opponent. Pure Python, no MCP.

Cells are 0-8 row-major. The player (the model) is X, the opponent O. Minimax scores a finished game as
+(10 - depth) for a win, -(10 - depth) for a loss and 0 for a draw, so it prefers faster wins and slower losses.
The opponent chooses **uniformly among all equally good moves** (a first-best tie-break would let a model
memorise it) and, with probability `random_move_prob`, plays a uniformly random free cell instead. The `trappy`
style chooses among its equally good moves those that set a trap (`trap_moves`): the other side then has no win to
take and no threat to block, yet has a move that gives up the game's value.
Noise control: the RNG for a reply is seeded from the game seed and the board, so two rollouts of one example
that reach the same position get the same reply.
"""

from __future__ import annotations

import random
from functools import lru_cache

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))
EMPTY = "."


def winner(board: str) -> str | None:
    """'X' or 'O' if that side has three in a row, else None."""
    for a, b, c in LINES:
        if board[a] != EMPTY and board[a] == board[b] == board[c]:
            return board[a]
    return None


def free_cells(board: str) -> list[int]:
    return [i for i, c in enumerate(board) if c == EMPTY]


def is_over(board: str) -> bool:
    return winner(board) is not None or EMPTY not in board


def other(side: str) -> str:
    return "O" if side == "X" else "X"


def play(board: str, cell: int, side: str) -> str:
    return board[:cell] + side + board[cell + 1 :]


@lru_cache(maxsize=None)
def _value(board: str, to_move: str, depth: int) -> int:
    """Minimax value of `board` from X's point of view, `to_move` to play."""
    w = winner(board)
    if w is not None:
        return (10 - depth) if w == "X" else -(10 - depth)
    cells = free_cells(board)
    if not cells:
        return 0
    values = [_value(play(board, c, to_move), other(to_move), depth + 1) for c in cells]
    return max(values) if to_move == "X" else min(values)


def move_values(board: str, side: str) -> dict[int, int]:
    """Minimax value of each legal move for `side`, from `side`'s point of view (higher is better)."""
    depth = 9 - len(free_cells(board))
    sign = 1 if side == "X" else -1
    return {c: sign * _value(play(board, c, side), other(side), depth + 1) for c in free_cells(board)}


def best_moves(board: str, side: str) -> list[int]:
    """All moves for `side` with the best minimax value (sorted)."""
    values = move_values(board, side)
    if not values:
        return []
    top = max(values.values())
    return sorted(c for c, v in values.items() if v == top)


def can_win(board: str, side: str) -> bool:
    """Whether `side` has a free cell that completes a line."""
    return any(winner(play(board, c, side)) == side for c in free_cells(board))


def trap_moves(board: str, side: str) -> list[int]:
    """`side`'s best moves after which the other side faces a quiet position with a wrong move: no win to take, no
    threat to block, and at least one free cell whose minimax value is worse than its best (sorted)."""
    out = []
    for c in best_moves(board, side):
        after, them = play(board, c, side), other(side)
        if is_over(after) or can_win(after, them) or can_win(after, side):
            continue
        values = move_values(after, them).values()
        if min(values) < max(values):
            out.append(c)
    return out


STYLES = ("uniform", "trappy")


def reply_rng(seed: int, board: str) -> random.Random:
    """The opponent's RNG for the position `board` in the game seeded `seed` (noise control)."""
    return random.Random(f"tictactoe:{seed}:{board}")


def opponent_move(board: str, seed: int, random_move_prob: float, side: str = "O", style: str = "uniform") -> int:
    """The opponent's reply: random with probability `random_move_prob`, else uniform among best moves -- among
    those that set a trap when there are any, for the `trappy` style."""
    rng = reply_rng(seed, board)
    cells = free_cells(board)
    if rng.random() < random_move_prob:
        return rng.choice(cells)
    return rng.choice(minimax_choices(board, side, style))


def minimax_choices(board: str, side: str, style: str = "uniform") -> list[int]:
    """The moves the opponent chooses among (uniformly) when it does not play at random: its best moves, or for the
    `trappy` style those of them that set a trap when there are any."""
    return (style == "trappy" and trap_moves(board, side)) or best_moves(board, side)


def pieces(board: str) -> str:
    """Where the pieces are, as cell lists: 'X: 0, 4. O: 2, 8.' ('none' for a side without pieces). The same
    position as `render`, in a form a reader can use without decoding the grid."""
    def cells(side: str) -> str:
        return ", ".join(str(i) for i, c in enumerate(board) if c == side) or "none"

    return f"X: {cells('X')}. O: {cells('O')}."


def render(board: str) -> str:
    """A 3x3 text board with cell numbers on free cells, e.g. ' X | 1 | O'."""
    rows = []
    for r in range(3):
        cells = [board[3 * r + i] if board[3 * r + i] != EMPTY else str(3 * r + i) for i in range(3)]
        rows.append(" " + " | ".join(cells))
    return "\n---+---+---\n".join(rows)


def status(board: str) -> str:
    """The game's state from X's side: "win", "loss", "draw" or "in_progress"."""
    w = winner(board)
    if w == "X":
        return "win"
    if w == "O":
        return "loss"
    return "draw" if EMPTY not in board else "in_progress"


def describe(board: str) -> str:
    """What the server shows the player: the grid (`render`), the pieces (`pieces`), then whose move it is and the
    free cells, or how the game ended."""
    text = f"{render(board)}\n{pieces(board)}\n"
    state = status(board)
    if state == "in_progress":
        return text + f"You are X. Your move. Free cells: {', '.join(str(c) for c in free_cells(board))}."
    return text + {"win": "Game over: you won.", "loss": "Game over: you lost.", "draw": "Game over: draw."}[state]
