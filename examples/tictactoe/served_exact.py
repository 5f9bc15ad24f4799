"""Exact win / draw / loss of a model as a user meets it: `toolgym serve tictactoe -m MODEL` over stdio, asked with
`suggest_move` for every board X faces in every line of play against the env's opponent, the outcome then weighted
exactly (`shortcuts.exact_outcome`, the walk the shortcut ceilings use). The served agent answers each board alone
(one request, no game history), so this is the skill a client gets that plays a game by asking move after move --
not the skill the model shows in its own multi-turn games (`exact_games.py`).

    python examples/tictactoe/served_exact.py MODEL_URI|default [--opponent optimal|random] [--side X|O] [-c 16]
                                              [--json OUT.json] [-- SERVE_OPTIONS]

`--side O` sends every board with the colours swapped and `agent_plays = "O"` (the same cells must come back).
The served agent moves again after a move the server rejects (`suggest_move`'s `attempts`; boards counted as
`retried_boards`); a request answered with an error or with no legal move forfeits the line (counted as lost, and
apart as `forfeited`). Prints the `random` and `copy-centre` shortcuts' exact scores against the same opponent beside
the model's. Exits 1 when a request errored, 2 when the server did not start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_server_tictactoe import game as g
from rich.console import Console
from rich.progress import Progress
from toolgym_tictactoe import positions as P
from toolgym_tictactoe.shortcuts import exact_outcome, game_outcome

OPPONENTS = {"optimal": 0.0, "random": 1.0}


def replies(board: str, random_move_prob: float) -> set[str]:
    """The X-to-move boards the opponent can leave after its move on `board` (any free cell when it can move at
    random, else its minimax-best ones), games that are over left out."""
    cells = g.free_cells(board) if random_move_prob > 0 else g.minimax_choices(board, "O", "uniform")
    return {b for b in (g.play(board, c, "O") for c in cells) if not g.is_over(b)}


def next_boards(board: str, move: int | None, random_move_prob: float) -> set[str]:
    """The X-to-move boards that can follow X's `move` on `board`; none once the game is over or the move is
    invalid."""
    if move is None or move not in g.free_cells(board):
        return set()
    after = g.play(board, move, "X")
    return set() if g.is_over(after) else replies(after, random_move_prob)


def first_boards(random_move_prob: float) -> set[str]:
    """X's first boards: the empty one (X starts) and those after the opponent's opening (O starts)."""
    return {g.EMPTY * 9} | replies(g.EMPTY * 9, random_move_prob)


def score(moves: dict[str, int | None], random_move_prob: float) -> dict[str, float]:
    """Exact W/D/L of the player `moves` (board -> its cell; None or an occupied cell forfeits the line). A board not
    in `moves` is one `collect` did not reach: exact_outcome walks the opponent's non-best replies at weight 0 against
    the optimal opponent, and those lines count for nothing."""
    def policy(board: str) -> dict[int, float]:
        m = moves.get(board)
        return {m: 1.0} if m is not None and m in g.free_cells(board) else {}

    w, d, lo = exact_outcome(policy, random_move_prob)
    forfeited = 1.0 - w - d - lo
    forfeited = forfeited if forfeited > 1e-9 else 0.0  # rounding, not a line
    return {"win": w, "draw": d, "loss": lo + forfeited, "forfeited": forfeited}


async def collect(answer: Callable[[str], Awaitable[int | None]], random_move_prob: float) -> dict[str, int | None]:
    """`answer` (board -> X's cell, None for no move) asked once for every board X can face against the opponent,
    level by level, each level's boards at once."""
    moves: dict[str, int | None] = {}

    async def ask(board: str) -> None:
        moves[board] = await answer(board)

    frontier = first_boards(random_move_prob)
    while frontier:
        await asyncio.gather(*(ask(b) for b in frontier))
        frontier = {n for b in frontier for n in next_boards(b, moves[b], random_move_prob)} - moves.keys()
    return moves


async def walk(model: str, random_move_prob: float, side: str, concurrency: int, extra: list[str],
               progress: Progress) -> tuple[dict[str, int | None], list[str], list[str]]:
    """`collect` through one `toolgym serve tictactoe -m MODEL` process over stdio; returns board -> cell, the
    errors' messages and the boards where the agent's first move was rejected and it moved again."""
    params = StdioServerParameters(command=str(Path(sys.executable).parent / "toolgym"),
                                   args=["serve", "tictactoe", *([] if model == "default" else ["-m", model]),
                                         "--max-concurrency", str(concurrency), *extra], env=dict(os.environ))
    errors: list[str] = []
    retried: list[str] = []  # boards whose first move the server rejected (the agent moved again: `attempts`)
    sem = asyncio.Semaphore(concurrency)
    task = progress.add_task("boards asked", total=None)
    async with Client(stdio_client(params)) as client:
        async def answer(board: str) -> int | None:
            async with sem:
                sent = P.swap_colours(board) if side == "O" else board
                res = await client.call_tool("suggest_move", {"board": sent, "agent_plays": side})
            progress.advance(task)
            if res.is_error:
                errors.append(f"{board}: {res.content[0].text if res.content else 'error'}")
                return None
            got = res.structured_content or json.loads(res.content[0].text)
            if got.get("attempts", 1) > 1:
                retried.append(board)
            return got.get("position")

        moves = await collect(answer, random_move_prob)
    return moves, errors, retried


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Options after -- go to toolgym serve (e.g. -- -a suggest_turns=5).")
    ap.add_argument("model", help="policy URI for toolgym serve (hf:PATH, ...; default: the env's default model)")
    ap.add_argument("--opponent", choices=sorted(OPPONENTS), default="optimal")
    ap.add_argument("--side", choices=["X", "O"], default="X")
    ap.add_argument("-c", "--concurrency", type=int, default=16)
    ap.add_argument("--json", type=Path, default=None)
    argv = sys.argv[1:] if argv is None else list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:cut])
    args.serve_options = argv[cut + 1:]
    p = OPPONENTS[args.opponent]
    console = Console(stderr=True)
    with Progress(console=console) as progress:
        try:
            moves, errors, retried = asyncio.run(walk(args.model, p, args.side, args.concurrency, args.serve_options,
                                             progress))
        except Exception as exc:  # noqa: BLE001 - the server did not start or the session broke: say so, exit 2
            console.print(f"[red]served_exact: no answer from toolgym serve: {exc!r}")
            return 2
    result = {"model": args.model, "opponent": args.opponent, "side": args.side, "boards": len(moves),
              "invalid_boards": sum(m is None or m not in g.free_cells(b) for b, m in moves.items()),
              "retried_boards": len(retried), "errors": len(errors), **score(moves, p)}
    rows = [(f"served {args.model} (as {args.side})", result)]
    for name in ("random", "copy-centre"):
        w, d, lo = game_outcome(name, p)
        rows.append((f"shortcut {name}", {"win": w, "draw": d, "loss": lo}))
    print(f"exact against the {args.opponent} opponent, {len(moves)} boards asked ({result['invalid_boards']} "
          f"answered invalid, {len(retried)} after a rejected move, {len(errors)} errored; forfeited lines "
          f"{100 * result['forfeited']:.2f} %):")
    print("| player | W % | D % | L % |\n|---|---|---|---|")
    for label, r in rows:
        print(f"| {label} | {100 * r['win']:.2f} | {100 * r['draw']:.2f} | {100 * r['loss']:.2f} |")
    for e in errors[:5]:
        print(f"error: {e}", file=sys.stderr)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**result, "moves": moves, "retried": retried, "error_messages": errors},
                                        indent=1))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
