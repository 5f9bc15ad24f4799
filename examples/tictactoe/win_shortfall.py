"""Where does a greedy model leave wins against the random opponent? Every decision of its exact walk
(`exact_games.py --opponent random --json`), scored against the player that never loses to optimal play and, among
the moves that keep the game value, picks the one that wins most often against random play
(`shortcuts.never_losing_wins`: 95.6 % over both starts, the
[exact bound](../../docs/training/tictactoe-recipe.md#exact-bounds)).

    python examples/tictactoe/win_shortfall.py EXACT.json[=RUN_DIR] [EXACT.json[=RUN_DIR] ...] [--start EXACT.json]

The gap between that bound and the model's exact wins is a sum over the model's own decisions (the performance
difference lemma): at each board the model reaches, with the chance it reaches it, what its move gives up against
the bound's best move there, the bound's player taking over afterwards. A model's move can give up wins in two
ways: it keeps the game value but sets fewer traps (`tie`: against the optimal opponent every value-keeping move
scores the same, so training against it never rewards the better one), or it gives the value away (`value lost`;
this can also *gain* wins against random play, which does not punish it). The rest of the gap is games the walk
lost outright (errors, the turn cap, invalid moves) -- `other`. The table splits the gap by who starts and by X's
move number and, given RUN_DIR (a GRPO run with saved rollouts), by whether the run's training games ever showed the
board. Rows: each model, their mean, and the start (`--start`, not in the mean).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from mcp_server_tictactoe import game as g
from toolgym.train.runstate import read_rollouts
from toolgym_tictactoe import positions as P
from toolgym_tictactoe import positions_shown
from toolgym_tictactoe.shortcuts import never_losing_bound as bound
from toolgym_tictactoe.shortcuts import never_losing_wins as never_lose_wins


def decisions(lines: list[dict[str, object]]) -> list[dict[str, object]]:
    """Each X decision of each line: the board, the move, who started, X's move number, the line's weight, what
    the move gave up against the bound's best move there (`gap`) and whether it kept the game value."""
    out = []
    for line in lines:
        board, n = g.EMPTY * 9, 0
        for mv in line["moves"]:  # type: ignore[attr-defined]
            side, cell = mv[0], int(mv[1:])
            if side == "X":
                n += 1
                after = never_lose_wins(g.play(board, cell, "X"), False)
                out.append({"board": board, "cell": cell, "x_starts": bool(line["x_starts"]), "move": n,
                            "weight": float(line["weight"]),  # type: ignore[arg-type]
                            "gap": never_lose_wins(board, True) - after,
                            "keeps_value": cell in P.analyze(board).optimal})
            board = g.play(board, cell, side)
    return out


def shortfall(walk: dict[str, object], visited: set[str] | None = None) -> dict[str, float]:
    """The gap between `bound()` and the walk's wins, split into parts that add up to it (see the module
    docstring). Keys: wins, bound, gap, tie, value lost, other, O first, X first, move 1..5, and with `visited`
    (boards the training games showed) visited / not visited."""
    if walk.get("opponent") != "random":
        raise SystemExit("win_shortfall.py reads exact walks against the random opponent (exact_games.py "
                         f"--opponent random), not {walk.get('opponent')!r}")
    parts: dict[str, float] = defaultdict(float)
    for d in decisions(walk["lines"]):  # type: ignore[arg-type]
        part = d["weight"] * d["gap"]  # type: ignore[operator]
        parts["tie" if d["keeps_value"] else "value lost"] += part
        parts["X first" if d["x_starts"] else "O first"] += part
        parts[f"move {d['move']}"] += part
        if visited is not None:
            parts["visited" if d["board"] in visited else "not visited"] += part
    out = {"wins": float(walk["win"]), "bound": bound()}  # type: ignore[arg-type]
    out["gap"] = out["bound"] - out["wins"]
    out["other"] = out["gap"] - parts["tie"] - parts["value lost"]
    return {**out, **parts}


COLUMNS = ("wins", "gap", "tie", "value lost", "other", "X first", "O first", "move 1", "move 2", "move 3",
           "move 4", "move 5", "visited", "not visited")


def table(rows: dict[str, dict[str, float]]) -> str:
    cols = [c for c in COLUMNS if any(c in r for r in rows.values())]
    lines = ["| model | " + " | ".join(f"{c} %" for c in cols) + " |", "|---|" + "---|" * len(cols)]
    for name, r in rows.items():
        lines.append(f"| {name} | " + " | ".join(f"{100 * r[c]:.2f}" if c in r else "-" for c in cols) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("walks", nargs="+", help="EXACT.json (exact_games.py --opponent random --json), optionally "
                    "=RUN_DIR: the GRPO run whose saved games say which boards training showed")
    ap.add_argument("--start", type=Path, help="the start's walk: a row of its own, not in the mean")
    args = ap.parse_args()
    rows: dict[str, dict[str, float]] = {}
    for spec in args.walks:
        path, _, run = spec.partition("=")
        if not Path(path).is_file():
            raise SystemExit(f"{path}: no such walk (write it with exact_games.py MODEL --opponent random --json)")
        if run and not (Path(run) / "rollouts.jsonl.gz").is_file():
            raise SystemExit(f"{run}: no rollouts.jsonl.gz (a GRPO run with save_rollouts = true)")
        data = json.loads(Path(path).read_text())
        visited = {b for d in read_rollouts(Path(run)) for b in positions_shown(d["messages"])} if run else None
        for name, walk in data.items():
            rows[name if len(data) > 1 else Path(path).stem] = shortfall(walk, visited)
    if len(rows) > 1:
        keys = set.intersection(*(set(r) for r in rows.values()))
        rows["mean of the models"] = {k: sum(r[k] for r in rows.values()) / len(rows) for k in keys}
    if args.start:
        (walk,) = json.loads(args.start.read_text()).values()
        rows[f"start: {args.start.stem}"] = shortfall(walk)
    print(f"bound: a player that never loses to optimal play wins {100 * bound():.2f} % against random play "
          f"(X first {100 * never_lose_wins(g.EMPTY * 9, True):.2f} %, O first "
          f"{100 * never_lose_wins(g.EMPTY * 9, False):.2f} %)\n")
    print(table(rows))
    print("\ngap = bound - wins = tie + value lost + other; the 'X first' / 'O first', 'move N' and 'visited' "
          "columns split tie + value lost (halves of the coin flip weighted in).")


if __name__ == "__main__":
    main()
