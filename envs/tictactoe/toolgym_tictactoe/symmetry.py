"""A game's images under the board's symmetries (`TicTacToeEnv.symmetric_images`, GRPO's `symmetry_images`).

Tic-tac-toe is the same game under the 8 rotations and reflections of the board, and the opponent is too: it picks
uniformly among its equally good moves (or a uniformly random cell), so a rotated game is exactly as likely a game
against it, with the same outcome. A played game therefore stands for up to 8 games, each with the same reward.
Training on the images as well (AlphaZero trained on its positions' symmetric images) gives every decision a game
reached the gradient in every orientation at once; without them, what RL learns at a position in one orientation
reaches the others only through the model's own generalisation -- and a tiny model generalises by a surface habit as
readily as by the board (measured in the recipe: a place in the free-cell list its think text writes).

An image is the same conversation with every cell `c` written as the image cell: the boards the server showed
rebuilt exactly as the server writes them (`game.describe`), `make_move`'s position moved, and each think text
written again, for the image board, in the format the model wrote it in -- one of the teacher formats of this
package (`think_variants`: the line scan in its variants, forced-move verdicts, fork lists, free-cell lists), found
by rendering each for the original board and move and keeping the one that equals the model's text. A turn written
in no known format (a garbled scan), a call that is not one valid `make_move`, a tool result the server would not
have written (an error) or a forced verdict whose image names another forced cell first: that conversation gets no
image (`None`), so an image never holds text the model's own format would not have produced.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from typing import Any

from mcp_server_tictactoe import game as g

from toolgym_tictactoe import positions as P

_PLAYED = re.compile(r"^You played (\d)\.(?: Opponent played (\d)\.)?\n")
_THINKS = ("track", "scan", "forks", "slots")


def cell_map(perm: tuple[int, ...]) -> dict[int, int]:
    """Where each cell goes under a symmetry of `positions.SYMMETRIES` (image board `b'[i] = b[perm[i]]`)."""
    return {perm[i]: i for i in range(9)}


def image_board(board: str, to: dict[int, int]) -> str:
    out = ["."] * 9
    for c, v in enumerate(board):
        out[to[c]] = v
    return "".join(out)


def think_variants(board: str, cell: int) -> dict[tuple[Any, ...], Callable[[str, int], str | None]]:
    """The teacher think texts this package writes for X playing `cell` on `board`, each as a renderer
    `(board, cell) -> text` (None where that format would not play `cell` there: a forced verdict names the scan's
    first forced cell). Keys name the format."""
    from toolgym_tictactoe.text import explain_best_move, fork_cells, forced_move, scan_lines, unreasoned_think

    def forced(think: str) -> Callable[[str, int], str | None]:
        def render(b: str, c: int) -> str | None:
            return explain_best_move(b, think=think)[1] if forced_move(b) == c else None
        return render

    def reasoned(think: str) -> Callable[[str, int], str | None]:
        def render(b: str, c: int) -> str | None:
            if forced_move(b) is not None:
                return None
            if think == "scan":
                return f"{scan_lines(b, think)}\nNo threats. I play {c}."
            names = [", ".join(map(str, f)) or "none" for f in (fork_cells(b, "X"), fork_cells(b, "O"))]
            return f"{scan_lines(b, think)}\nNo threats. X forks: {names[0]}. O forks: {names[1]}. I play {c}."
        return render

    def unreasoned(think: str, free_list: bool) -> Callable[[str, int], str | None]:
        return lambda b, c: unreasoned_think(b, think, c, free_list)

    out: dict[tuple[Any, ...], Callable[[str, int], str | None]] = {}
    if forced_move(board) == cell:
        out.update({("forced", t): forced(t) for t in (*_THINKS, "none")})
    else:
        out.update({("reasoned", t): reasoned(t) for t in _THINKS})
    out.update({("free", t, fl): unreasoned(t, fl) for t in (*_THINKS, "none") for fl in (False, True)})
    return out


def _position(call: dict[str, Any]) -> int | None:
    fn = call.get("function") or {}
    if fn.get("name") != "make_move":
        return None
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    pos = args.get("position") if isinstance(args, dict) and set(args) == {"position"} else None
    return pos if isinstance(pos, int) and not isinstance(pos, bool) and 0 <= pos <= 8 else None


def game_image(messages: list[dict[str, Any]], perm: tuple[int, ...]) -> list[dict[str, Any]] | None:
    """`messages` (a game's conversation) under the symmetry `perm`, or None where it cannot be written faithfully
    (see the module docstring). The identity gives back a conversation equal to `messages` exactly when every part
    of it was recognised."""
    from toolgym_tictactoe.text import parse_board

    to = cell_map(perm)
    out: list[dict[str, Any]] = []
    board: str | None = None  # the board X is to move on (after the last tool result)
    cell: int | None = None  # the last move X made
    for m in messages:
        role, content = m.get("role"), m.get("content")
        if role == "system":
            out.append(m)
        elif role == "user":
            board = parse_board(content) if isinstance(content, str) and board is None else None
            if board is None or not content.endswith(g.describe(board)):
                return None
            head = content[: len(content) - len(g.describe(board))]
            out.append({**m, "content": head + g.describe(image_board(board, to))})
        elif role == "assistant":
            calls = m.get("tool_calls") or []
            if board is None or len(calls) != 1 or (content or "").strip():
                return None
            cell = _position(calls[0])
            if cell is None or board[cell] != ".":
                return None
            image = dict(m)
            if think := m.get("reasoning_content"):
                variants = think_variants(board, cell)
                key = next((k for k, render in variants.items() if render(board, cell) == think), None)
                text = None if key is None else variants[key](image_board(board, to), to[cell])
                if text is None:
                    return None
                image["reasoning_content"] = text
            fn = calls[0]["function"]
            args = {"position": to[cell]}
            image["tool_calls"] = [{**calls[0], "function": {
                **fn, "arguments": json.dumps(args) if isinstance(fn.get("arguments"), str) else args}}]
            out.append(image)
            board = g.play(board, cell, "X")
        elif role == "tool":
            match = _PLAYED.match(content) if isinstance(content, str) else None
            if match is None or board is None or cell is None or int(match.group(1)) != cell:
                return None
            reply = None if match.group(2) is None else int(match.group(2))
            if reply is not None:
                board = g.play(board, reply, "O")
            if content != match.group(0) + g.describe(board):
                return None
            head = f"You played {to[cell]}." + ("" if reply is None else f" Opponent played {to[reply]}.")
            out.append({**m, "content": f"{head}\n{g.describe(image_board(board, to))}"})
            cell = None
        else:
            return None
    return out


def game_images(messages: list[dict[str, Any]], k: int, rng: random.Random) -> list[list[dict[str, Any]]]:
    """Up to `k` images of a game under distinct non-identity symmetries drawn by `rng`, none equal to the game
    itself or to another image (a game whose boards are all symmetric has fewer; a forced verdict whose image would
    name another forced cell first skips that symmetry); [] when the game cannot be written faithfully at all
    (its identity image is not the game itself)."""
    if k <= 0 or game_image(messages, P.SYMMETRIES[0]) != messages:
        return []
    perms = list(P.SYMMETRIES[1:])
    rng.shuffle(perms)
    seen = [messages]
    for perm in perms:
        if len(seen) > k:
            break
        img = game_image(messages, perm)
        if img is not None and all(img != s for s in seen):
            seen.append(img)
    return seen[1:]


__all__ = ["cell_map", "game_image", "game_images", "image_board", "think_variants"]
