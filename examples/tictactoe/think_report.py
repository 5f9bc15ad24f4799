"""Where a tic-tac-toe model's reasoning goes wrong: reads `toolgym eval ... -o DIR` results and checks every
assistant turn against the teacher (`toolgym_tictactoe.explain_best_move`).

    python examples/tictactoe/think_report.py [--think track] runs/tictactoe/eval/sft-positions-all [more eval dirs]

Per turn kind (win / block / quiet: what the position needs) it prints how often the line scan is written right
(in the teacher's think format `--think`: scan, forks or track, the recipe's), the verdict is right, the move is
the one the think block names, and the move is minimax-best. A quiet verdict counts as right when it plays any
optimal move (any move that keeps the game value) and, in the forks/track formats, names the fork cells right.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

from mcp_server_tictactoe import game as g
from toolgym_tictactoe import board_from_messages, completing_cells, explain_best_move, scan_lines
from toolgym_tictactoe.positions import analyze

_PLAY = re.compile(r"I play (\d)\.")


def turn_kind(board: str) -> str:
    if completing_cells(board, "X"):
        return "win"
    return "block" if completing_cells(board, "O") else "quiet"


def verdict_ok(board: str, verdict: str, think: str = "scan") -> bool:
    """The teacher's verdict for `board`; in a quiet position the teacher's words with any optimal move."""
    want = explain_best_move(board, think=think)[1].split("\n")[-1]
    if turn_kind(board) == "quiet":
        stem = want.rsplit(" I play ", 1)[0]
        return verdict in {f"{stem} I play {c}." for c in analyze(board).optimal}
    return verdict == want


def report(dirs: list[Path], fmt: str = "scan") -> dict[str, Counter]:
    stats: dict[str, Counter] = {}
    for d in dirs:
        for line in (d / "results.jsonl").read_text().splitlines():
            msgs = json.loads(line)["messages"]
            for k, m in enumerate(msgs):
                if m.get("role") != "assistant":
                    continue
                board = board_from_messages(msgs[:k])
                if board is None or not g.free_cells(board):
                    continue
                c = stats.setdefault(turn_kind(board), Counter())
                c["turns"] += 1
                think = (m.get("reasoning_content") or "").strip()
                *scan, verdict = think.split("\n") if think else [""]
                c["scan_ok"] += "\n".join(scan) == scan_lines(board, fmt)
                c["verdict_ok"] += verdict_ok(board, verdict, fmt)
                calls = m.get("tool_calls") or []
                try:
                    move = int(json.loads(calls[0]["function"]["arguments"])["position"]) if calls else None
                except (ValueError, KeyError, TypeError):
                    move = None
                said = _PLAY.search(verdict)
                c["move_as_said"] += said is not None and move == int(said.group(1))
                c["legal"] += move in g.free_cells(board)
                c["best"] += move in analyze(board).optimal
    return stats


def main() -> None:
    args = sys.argv[1:]
    think = "scan"
    if args[:1] == ["--think"]:
        think, args = args[1], args[2:]
    stats = report([Path(a) for a in args], think)
    cols = ["scan_ok", "verdict_ok", "move_as_said", "legal", "best"]
    print(f"{'kind':<6} {'turns':>6} " + " ".join(f"{c:>12}" for c in cols))
    for kind in ("win", "block", "quiet"):
        c = stats.get(kind, Counter())
        n = c["turns"] or 1
        print(f"{kind:<6} {c['turns']:>6} " + " ".join(f"{100 * c[col] / n:>11.1f}%" for col in cols))


if __name__ == "__main__":
    main()
