"""Tic-tac-toe text for the tiny model's tokenizer (`toolgym model init-tiny --corpus tictactoe`, the default):
boards as the server renders them, tool schemas, tool calls, teacher-style thoughts and tool results.

Registered under the `toolgym.corpora` entry-point group (this package's pyproject), where
`toolgym.models.tiny.build_corpus` finds corpus sources by name. A source is `fn(rng) -> iterable of texts`; the
texts and the order they are drawn in are part of every tokenizer built so far (the committed checkpoint's too),
so changing them changes those tokenizers. Standard library only, so the file also loads on its own (the vLLM
check scripts load it by path in a venv without the env's dependencies).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))  # as the server's

TTT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_board",
            "description": "Show the current board, whose move it is and the free cells.",
            "parameters": {"type": "object", "properties": {}, "required": []},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "make_move",
            "description": "Place your X on a free cell (0-8, row by row); the opponent replies at once.",
            "parameters": {
                "type": "object",
                "properties": {"position": {"type": "integer", "description": "The cell to play, 0 (top left) to 8 (bottom right)."}},
                "required": ["position"],
            },
        },
    },
]
"""The env's two tools as OpenAI-style schemas (what the model sees), for rendering prompts without a server."""


def render_board(board: str) -> str:
    """A 9-cell board ('X', 'O', '.') as the server draws it: free cells show their number."""
    rows = []
    for r in range(3):
        cells = [board[3 * r + i] if board[3 * r + i] != "." else str(3 * r + i) for i in range(3)]
        rows.append(" " + " | ".join(cells))
    return "\n---+---+---\n".join(rows)


def tictactoe_corpus(rng: random.Random) -> Iterator[str]:
    """Boards, tool results, tool calls, thoughts and prompts of the tic-tac-toe environment."""
    yield "You are playing tic-tac-toe as X against an opponent (O). Cells are numbered 0-8, row by row."
    yield "Call make_move with the cell you want to play. Think step by step inside <think></think> first."
    for tool in TTT_TOOLS:
        yield json.dumps(tool)
    for _ in range(300):
        board = ["."] * 9
        side = rng.choice("XO")
        for _ in range(rng.randint(0, 8)):
            free = [i for i, c in enumerate(board) if c == "."]
            cell = rng.choice(free)
            board[cell] = side
            side = "O" if side == "X" else "X"
        b = "".join(board)
        free = ", ".join(str(i) for i, c in enumerate(b) if c == ".")
        pos = rng.choice([i for i, c in enumerate(b) if c == "."] or [4])
        xs = ", ".join(str(i) for i, c in enumerate(b) if c == "X") or "none"
        os_ = ", ".join(str(i) for i, c in enumerate(b) if c == "O") or "none"
        yield f"{render_board(b)}\nX: {xs}. O: {os_}.\nYou are X. Your move. Free cells: {free}."
        yield f"You played {pos}. Opponent played {rng.randint(0, 8)}.\n{render_board(b)}"
        yield json.dumps({"name": "make_move", "arguments": {"position": pos}})
        scan = "\n".join(  # the env's line scan (`toolgym_tictactoe.scan_lines`): rows, columns, diagonals
            "".join(map(str, line)) + ": " + " ".join(b[i] if b[i] != "." else str(i) for i in line)
            + rng.choice(["", "", f" win {line[0]}", f" block {line[2]}"])
            for line in LINES
        )
        verdict = rng.choice([f"I win at {pos}.", f"O wins at {pos}; I block.", "No threats.", "I'll play somewhere free."])
        yield f"<think>\n{scan}\n{verdict} I play {pos}.\n</think>"
        yield f"<think>\nThe free cells are {free}. I will play {pos} to block the opponent and make a line.\n</think>"
        yield rng.choice(
            [
                f"cell {pos} is already taken; free cells: {free}",
                f"invalid position {pos + 9}: choose a free cell from 0 to 8",
                "Game over: you won.",
                "Game over: you lost.",
                "Game over: draw.",
                "the game is over (draw); no more moves",
            ]
        )
