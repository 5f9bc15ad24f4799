"""The texts a tic-tac-toe player reads and writes: the board as the server renders it (`parse_board`), and the think
texts of the scripted teachers (`scan_lines`, `explain_best_move`, `unreasoned_think`), which the recipe's models
learn to write before each move. Shared by the env's players (`toolgym_tictactoe`) and by the game's symmetric
images (`toolgym_tictactoe.symmetry`), which write a model's think text again for a rotated board."""

from __future__ import annotations

import functools
import random
import re
from typing import Any

_CELL = re.compile(r"^\s*(\S)\s*\|\s*(\S)\s*\|\s*(\S)\s*$")


def parse_board(text: str) -> str | None:
    """The last board in a text rendered by the server ('X', 'O', digits for free cells) as a 9-char string."""
    rows: list[str] = []
    found: str | None = None
    for line in text.splitlines():
        m = _CELL.match(line)
        if m:
            rows.append("".join(c if c in "XO" else "." for c in m.groups()))
            if len(rows) == 3:
                found, rows = "".join(rows), []
        elif not line.startswith("---"):
            rows = []
    return found


def board_from_messages(messages: list[dict[str, Any]]) -> str | None:
    for m in reversed(messages):
        if m.get("role") in ("tool", "user") and isinstance(m.get("content"), str):
            b = parse_board(m["content"])
            if b is not None:
                return b
    return None


# ---------------------------------------------------------------- the teachers' think texts
PREFERENCE = (4, 0, 2, 6, 8, 1, 3, 5, 7)  # centre, corners, edges: the tie-break among equally good moves


def completing_cells(board: str, side: str) -> list[int]:
    """Free cells that would complete a line of three for `side`."""
    from mcp_server_tictactoe import game as g

    return [c for c in g.free_cells(board) if g.winner(g.play(board, c, side)) == side]


def _threat(board: str, line: tuple[int, ...]) -> tuple[str, int] | None:
    """('win', cell) if X has two in `line` and its third cell is free, ('block', cell) for O, else None."""
    cells = [board[i] for i in line]
    if cells.count(".") == 1:
        free = line[cells.index(".")]
        for side, what in (("X", "win"), ("O", "block")):
            if cells.count(side) == 2:
                return what, free
    return None


THINK_FORMATS = ("scan", "forks", "track", "slots", "none")
"""Teacher think texts; "none" is the bare verdict (`I play 4.`): the move is decided in the weights, not in text."""


def _open_mark(board: str, line: tuple[int, ...]) -> str | None:
    """'x' if `line` holds one X and two free cells (X could make two in a row there), 'o' for one O, else None."""
    cells = [board[i] for i in line]
    if cells.count(".") == 2:
        for side in ("X", "O"):
            if cells.count(side) == 1:
                return side.lower()
    return None


def fork_cells(board: str, side: str) -> list[int]:
    """Free cells where `side` would make two lines of two at once (a fork): cells shared by two lines that each
    hold one `side` piece and two free cells."""
    from collections import Counter

    from mcp_server_tictactoe import game as g

    count: Counter[int] = Counter()
    for line in g.LINES:
        cells = [board[i] for i in line]
        if cells.count(side) == 1 and cells.count(".") == 2:
            count.update(i for i in line if board[i] == ".")
    return sorted(c for c, k in count.items() if k >= 2)


def scan_lines(board: str, think: str = "scan") -> str:
    """The eight lines of three, one per text line: its cells, then their contents with free cells as their number,
    and a mark on a line one move from three (`048: X X 8 win 8`, `258: O 5 O block 5`); rows, columns, diagonals.
    The teacher writes this before its verdict, so a small model finds a threat one cell lookup at a time and one
    text line at a time instead of in one step over the whole board; the spaces keep every content its own token.
    `think="forks"` also marks lines with one piece and two free cells (`036: X 3 6 x`, `147: 1 O 7 o`), the lines
    a fork is made of. `think="track"` does that and ends every line with the forced move found so far (`| block 5`,
    `| win 2`, `| -`: the first win, else the first block), so the verdict copies from the line just above instead
    of searching the whole scan -- a local step a tiny model learns reliably. `think="slots"` ends every line with
    two slots instead, the first win cell and the first block cell seen so far (`| 6 -`, `| - 5`, `| 6 5`): each
    slot is copied from the line above or filled from this line's mark of its own kind, never mixed."""
    from mcp_server_tictactoe import game as g

    out = []
    best: tuple[str, int] | None = None  # "track": the forced move so far (first win, else first block)
    first: dict[str, int] = {}  # "slots": the first win cell and the first block cell so far
    for line in g.LINES:
        text = "".join(map(str, line)) + ": " + " ".join(board[i] if board[i] != g.EMPTY else str(i) for i in line)
        mark = _threat(board, line)
        if mark:
            text += f" {mark[0]} {mark[1]}"
        elif think in ("forks", "track", "slots") and (om := _open_mark(board, line)):
            text += f" {om}"
        if think == "track":
            if mark and (best is None or (best[0] == "block" and mark[0] == "win")):
                best = mark
            text += f" | {best[0]} {best[1]}" if best else " | -"
        if think == "slots":
            if mark:
                first.setdefault(mark[0], mark[1])
            text += " | " + " ".join(str(first[k]) if k in first else "-" for k in ("win", "block"))
        out.append(text)
    return "\n".join(out)


def forced_move(board: str) -> int | None:
    """The cell the teacher must play, if any: the first `win` line of the scan, else the first `block` line."""
    from mcp_server_tictactoe import game as g

    marks = [m for m in (_threat(board, line) for line in g.LINES) if m]
    for kind in ("win", "block"):
        for what, cell in marks:
            if what == kind:
                return cell
    return None


@functools.lru_cache(maxsize=None)
def safe_value(board: str, x_to_move: bool) -> float:
    """Expected reward (win 1, draw 0.5) for X against the random opponent when X takes an immediate win, else
    blocks, else plays the minimax-best move with the highest such value (`tie_break="exploit"`)."""
    from mcp_server_tictactoe import game as g

    if g.winner(board):
        return 1.0 if g.winner(board) == "X" else 0.0
    free = g.free_cells(board)
    if not free:
        return 0.5
    if not x_to_move:
        return sum(safe_value(g.play(board, c, "O"), True) for c in free) / len(free)
    forced = forced_move(board)
    moves = [forced] if forced is not None else g.best_moves(board, "X")
    return max(safe_value(g.play(board, c, "X"), False) for c in moves)


def explain_best_move(board: str, tie_break: str = "preference", rng: random.Random | None = None,
                      think: str = "scan") -> tuple[int, str]:
    """A minimax-best move for X and a reason a small model can imitate token by token: the line scan
    (`scan_lines`), then the verdict: the first `win` line of the scan, else the first `block` line (`forced_move`),
    else a best move chosen by `tie_break` (see `_minimax_player`; "random" draws with `rng`). The teacher's think
    block is this text.

    `think="forks"`: quiet verdicts also name both sides' fork cells (`fork_cells`: "No threats. X forks: 2, 6.
    O forks: none. I play 2."), and among the best moves the teacher prefers, in this order, its first fork cell, then
    the opponent's fork cell when there is exactly one, then `tie_break` -- a rule a small model can carry to
    positions it never saw.

    `think="none"`: the same move (as with `think="scan"`) and only `I play N.` as the reason."""
    from mcp_server_tictactoe import game as g

    if think not in THINK_FORMATS:
        raise ValueError(f"think must be one of {THINK_FORMATS}, not {think!r}")
    if think == "none":
        cell = forced_move(board)
        if cell is None:
            cell, _ = explain_best_move(board, tie_break, rng, "scan")
        return cell, f"I play {cell}."
    scan = scan_lines(board, think)
    cell = forced_move(board)
    if cell is not None:
        if cell in completing_cells(board, "X"):
            return cell, f"{scan}\nI win at {cell}. I play {cell}."
        return cell, f"{scan}\nO wins at {cell}; I block. I play {cell}."
    best = g.best_moves(board, "X")
    if tie_break == "exploit":  # the best move against a random opponent among those that never lose
        top = max(safe_value(g.play(board, c, "X"), False) for c in best)
        best = [c for c in best if safe_value(g.play(board, c, "X"), False) >= top - 1e-12]
    rule = None
    if think in ("forks", "track", "slots"):
        xf, of = fork_cells(board, "X"), fork_cells(board, "O")
        rule = xf[0] if xf else (of[0] if len(of) == 1 else None)
    if rule is not None and rule in best:
        cell = rule
    elif tie_break == "random":
        cell = (rng or random.Random()).choice(best)
    else:  # preference, and ties among exploit's best moves
        cell = next(c for c in PREFERENCE if c in best)
    if think in ("forks", "track", "slots"):
        names = [", ".join(map(str, f)) or "none" for f in (xf, of)]
        return cell, f"{scan}\nNo threats. X forks: {names[0]}. O forks: {names[1]}. I play {cell}."
    return cell, f"{scan}\nNo threats. I play {cell}."


def unreasoned_think(board: str, think: str, cell: int, free_list: bool = False,
                order: list[int] | None = None) -> str:
    """The think text of a cell played without a reason (a random quiet move, or the invalid call before a retry).
    `free_list` names the free cells before the cell (`I'll play somewhere free: 2 7. I play 7.`), each copied from
    the scan's row lines, so the cell is one of a few just written rather than recalled from the whole board.
    `order`: the free cells in the order to list them (default: the board's)."""
    cells = [i for i, c in enumerate(board) if c == "."] if order is None else order
    free = ": " + " ".join(str(i) for i in cells) if free_list else ""
    if think == "none":
        return f"Free{free}. I play {cell}." if free_list else f"I play {cell}."
    return f"{scan_lines(board, think)}\nI'll play somewhere free{free}. I play {cell}."


__all__ = ["PREFERENCE", "THINK_FORMATS", "board_from_messages", "completing_cells", "explain_best_move", "fork_cells",
           "forced_move", "parse_board", "safe_value", "scan_lines", "unreasoned_think"]
