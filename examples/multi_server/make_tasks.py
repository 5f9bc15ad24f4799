"""Write the multi-server walkthrough's tasks: `tasks.jsonl` (training) and `heldout.jsonl` (a fixed held-out split
that training never sees). Two third-party servers: `mcp-server-time` (PyPI; `convert_time`) and the npm
`@modelcontextprotocol/server-everything` (`get-sum`). Four kinds, in turn:

- `time`: convert a time between two zones (needs `convert_time`);
- `sum`: add two numbers (needs `get-sum`);
- `both`: add two numbers to get an hour, then convert that hour between zones (`get-sum`, then `convert_time`);
- `none`: repeat a word back -- no tool (`expected_calls: []`, scored by `abstain_ok`).

Held out: zone pairs (ordered) and operand pairs whose hash falls in the held-out share (25 %) never occur in
training tasks, so held-out accuracy measures unseen argument combinations. Deterministic:
`python make_tasks.py [N_TRAIN] [N_HELDOUT] [OUT_DIR]` (defaults 800, 240 and this folder; the held-out split
does not depend on N_TRAIN)."""

from __future__ import annotations

import hashlib
import json
import random
import sys
from datetime import datetime, timedelta
from pathlib import Path

# UTC offsets in minutes; none of these zones observes daylight saving time, so answers do not depend on the date
ZONES = {"Asia/Tokyo": 540, "Asia/Kolkata": 330, "Asia/Shanghai": 480, "UTC": 0, "Asia/Dubai": 240,
         "Africa/Nairobi": 180, "America/Phoenix": -420, "Pacific/Honolulu": -600, "Asia/Kathmandu": 345,
         "Asia/Singapore": 480}
WORDS = ["apple", "river", "silver", "garden", "planet", "window", "pencil", "forest", "castle", "rocket",
         "violin", "harbor", "meadow", "candle", "puzzle", "lantern"]
KINDS = ("time", "sum", "both", "none")
SUFFIX = " Use the tools if you need them, then give the answer inside <answer></answer>."


def heldout(*key: object) -> bool:
    """Whether an argument combination is in the held-out share (25 %, by hash)."""
    return hashlib.sha256(repr(key).encode()).digest()[0] < 64


def _convert(hh: int, mm: int, src: str, dst: str) -> str:
    return f"{datetime(2000, 1, 1, hh, mm) + timedelta(minutes=ZONES[dst] - ZONES[src]):%H:%M}"


def _task(kind: str, rng: random.Random, split: str) -> dict | None:
    want = split == "heldout"
    if kind == "time":
        src, dst = rng.sample(sorted(ZONES), 2)
        if heldout(src, dst) != want:
            return None
        hh, mm = rng.randrange(24), rng.choice([0, 15, 30, 45])
        return {"prompt": f"It is {hh:02d}:{mm:02d} in {src}. What time is it then in {dst}?" + SUFFIX,
                "answer": _convert(hh, mm, src, dst),
                "expected_calls": [{"name": "convert_time", "arguments": {
                    "source_timezone": [src], "time": [f"{hh:02d}:{mm:02d}"], "target_timezone": [dst]}}]}
    if kind == "sum":
        a, b = rng.randrange(100), rng.randrange(100)
        if heldout(a, b) != want:
            return None
        return {"prompt": f"What is {a} plus {b}?" + SUFFIX, "answer": str(a + b),
                "expected_calls": [{"name": "get-sum", "arguments": {"a": [a], "b": [b]}}]}
    if kind == "both":
        a = rng.randrange(12)
        b = rng.randrange(24 - a)
        src, dst = rng.sample(sorted(ZONES), 2)
        if heldout(src, dst) != want:
            return None
        return {"prompt": f"Add {a} and {b} to get an hour H. At H:00 in {src}, what time is it in {dst}?" + SUFFIX,
                "answer": _convert(a + b, 0, src, dst),
                "expected_calls": [{"name": "get-sum", "arguments": {"a": [a], "b": [b]}},
                                   {"name": "convert_time", "arguments": {
                                       "source_timezone": [src], "time": [f"{a + b:02d}:00"],
                                       "target_timezone": [dst]}}]}
    word = rng.choice(WORDS)
    return {"prompt": f"Repeat the word {word!r} back to me. No tool is needed." + SUFFIX, "answer": word,
            "expected_calls": []}


def make(n: int, split: str, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows: list[dict] = []
    i = 0
    while len(rows) < n:
        kind = KINDS[len(rows) % len(KINDS)]
        task = _task(kind, rng, split)
        i += 1
        if task is not None:
            rows.append({"id": f"{split}-{len(rows)}", "kind": kind, "split": split, **task})
    return rows


if __name__ == "__main__":
    n_train = int(sys.argv[1]) if len(sys.argv) > 1 else 800
    n_held = int(sys.argv[2]) if len(sys.argv) > 2 else 240
    here = Path(sys.argv[3]) if len(sys.argv) > 3 else Path(__file__).parent
    here.mkdir(parents=True, exist_ok=True)
    for name, n, split, seed in (("tasks.jsonl", n_train, "train", 0), ("heldout.jsonl", n_held, "heldout", 1)):
        (here / name).write_text("".join(json.dumps(r) + "\n" for r in make(n, split, seed)))
        print(f"wrote {n} {split} tasks to {here / name}")
