"""Focus data for the recipe's `focus` phase: the teacher rows re-weighted toward what the full SFT gets wrong.

After `run.sh sft` the model takes every immediate win and block, but (1) keeps the game value in only ~62 % of the
*quiet* positions (no immediate tactic, and some move loses value: which quiet move keeps a draw or a win is game
knowledge the line scan does not show), and (2) has never seen a fifth move: every teacher game that X starts and
draws passes through a held-out position (the exploit teacher always opens in the same cell and the optimal reply
is a held-out class), so the games file has none, and the model breaks its call format or plays an occupied cell on
the last free cell in about a quarter of its games against the optimal opponent. One SFT round on this mix fixes
both without forgetting the rest:

- every teacher game (`teacher_games.jsonl`) twice;
- the teacher's X-first draws (`teacher_draws.jsonl`: the same minimax teacher with `tie_break=random`, which opens
  anywhere, so some draws avoid every held-out position; games of five X moves only) twice;
- every quiet training position six times, every free one twice;
- 800 win/block training positions (replay, shuffle seed 0).

Only training-split rows exist in the inputs (`run.sh synth` never writes a held-out position and keeps no game
that passes through one); a held-out position row is refused. Usage:
    python examples/tictactoe/focus_data.py POSITIONS.jsonl GAMES.jsonl DRAWS.jsonl OUT.jsonl
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

REPLAY = 800  # win/block rows, so the scan-and-verdict skill is rehearsed while quiet moves are learnt
QUIET, FREE, GAMES = 6, 2, 2  # repeats


def x_moves(row: dict) -> int:  # type: ignore[type-arg]
    return sum(m.get("role") == "assistant" for m in row.get("messages", []))


def build(positions: list[dict], games: list[dict], draws: list[dict]) -> list[dict]:  # type: ignore[type-arg]
    """The focus mix, in a fixed order (SFT shuffles it): games, long draws, quiet, free, replay."""
    if any(r["task"].get("split") != "train" for r in positions):
        raise SystemExit("focus data must come from training positions only (split=train)")
    kind = [r["task"]["kind"] for r in positions]
    quiet = [r for r, k in zip(positions, kind) if k == "quiet"]
    free = [r for r, k in zip(positions, kind) if k == "free"]
    other = [r for r, k in zip(positions, kind) if k not in ("quiet", "free")]
    random.Random(0).shuffle(other)
    long_draws = [r for r in draws if x_moves(r) >= 5]
    return games * GAMES + long_draws * GAMES + quiet * QUIET + free * FREE + other[:REPLAY]


def _read(path: str) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def main(positions: str, games: str, draws: str, out: str) -> None:
    data = build(_read(positions), _read(games), _read(draws))
    Path(out).write_text("".join(json.dumps(r) + "\n" for r in data))
    kinds: dict[str, int] = {}
    for r in data:
        k = r["task"].get("kind") or f"game ({x_moves(r)} moves)"
        kinds[k] = kinds.get(k, 0) + 1
    print(f"{out}: {len(data)} rows {dict(sorted(kinds.items()))}")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
