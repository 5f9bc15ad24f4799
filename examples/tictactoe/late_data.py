"""Late-board data for `run.sh forced-late` (ninth round): one SFT epoch that continues the retry start on the boards
where its greedy games stall.

Every turn-cap game of the eighth round's retry start and its RL arms stalled with exactly one free cell: the scan
is right, then "I'll play somewhere free. I play N." names a taken cell (the first call on 80 % of one-cell boards),
again after each error, and a would-be draw is lost. The start had seen few such boards (25 one-cell turns and 10
retries there in its 267 games; 16 one-cell `free` positions). This mix is still the forced teacher's (wins and
blocks right, every other move random), so the model is still never shown a strategic move; its rows come from the
teacher with `free_list=true` (a random cell's think text lists the free cells first), so every position is in it:

- every game in GAMES files once (from `scripted:imperfect` with `invalid_last_prob`, so a share of their one-cell
  boards show a taken cell, the error and the retry);
- every training position with at most `LATE` free cells, `LATE_REPEATS` times (X to move with one or two cells);
- every other training position once (`REPLAY`: a number keeps a seeded sample of them instead).

Only training-split positions are accepted (a held-out position row is refused). Usage:
    python examples/tictactoe/late_data.py POSITIONS.jsonl OUT.jsonl GAMES.jsonl [GAMES.jsonl ...]
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

LATE = 2  # free cells
LATE_REPEATS = 2
REPLAY: int | None = None  # every other position


def free_cells(row: dict) -> int:  # type: ignore[type-arg]
    return str(row["task"]["board"]).count(".")


def build(positions: list[dict], games: list[dict]) -> list[dict]:  # type: ignore[type-arg]
    """The late mix in a fixed order (SFT shuffles it): games, late positions repeated, the other positions."""
    if any(r["task"].get("split") != "train" for r in positions):
        raise SystemExit("late data must come from training positions only (split=train)")
    late = [r for r in positions if free_cells(r) <= LATE]
    other = [r for r in positions if free_cells(r) > LATE]
    random.Random(0).shuffle(other)
    return games + late * LATE_REPEATS + (other if REPLAY is None else other[:REPLAY])


def _read(path: str) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def main(positions: str, out: str, *games: str) -> None:
    data = build(_read(positions), [r for g in games for r in _read(g)])
    Path(out).write_text("".join(json.dumps(r) + "\n" for r in data))
    n_games = sum("board" not in r["task"] for r in data)
    late = sum("board" in r["task"] and free_cells(r) <= LATE for r in data)
    print(f"{out}: {len(data)} rows ({n_games} games, {late} late position rows, {len(data) - n_games - late} others)")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
