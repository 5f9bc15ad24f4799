"""Write the multi-server walkthrough's tasks: `tasks.jsonl` (training) and `heldout.jsonl` (a fixed held-out split
that training never sees). Two third-party servers: `mcp-server-time` (PyPI; `convert_time`) and the npm
`@modelcontextprotocol/server-everything` (`get-sum`). Four kinds, in turn:

- `time`: convert a time between two zones (needs `convert_time`);
- `sum`: add two numbers (needs `get-sum`);
- `both`: add two numbers to get an hour, then convert that hour between zones (`get-sum`, then `convert_time`);
- `none`: repeat two words back -- no tool (`expected_calls: []`, scored by `abstain_ok`).

Held out: zone pairs (ordered), operand pairs (of `sum` and `both` alike) and word pairs whose hash falls in the held-out
share (25 %) never occur in training tasks; a held-out `both` task has an unseen zone pair *and* unseen operands.
Held-out accuracy therefore measures unseen argument combinations (for `none`, unseen word pairs: every word
occurs in training, a model cannot write a token it was never trained to write).

The prompts are short and put zone names in quotes, as identifiers: the env's system prompt carries the answer
format, and a name then has the same tokens in the prompt and in the call's JSON (a tiny model's BPE writes
` Africa` after a space but `Africa` after a quote). docs/envs/multi-server.md has what each choice measured.

Deterministic: `python make_tasks.py [N_TRAIN] [N_HELDOUT] [OUT_DIR]` (defaults 800, 240 and this folder; the held-out split
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
         "violin", "harbor", "meadow", "candle", "puzzle", "lantern", "marble", "copper", "dragon", "feather",
         "jungle", "kettle", "ladder", "mirror", "needle", "orange", "parrot", "quartz", "saddle", "tunnel",
         "velvet", "walnut", "yellow", "zipper", "anchor", "button", "cactus", "dolphin", "engine", "falcon"]
KINDS = ("time", "sum", "both", "none")


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
        return {"prompt": f'It is {hh:02d}:{mm:02d} in "{src}". What time is it then in "{dst}"?',
                "answer": _convert(hh, mm, src, dst),
                "expected_calls": [{"name": "convert_time", "arguments": {
                    "source_timezone": [src], "time": [f"{hh:02d}:{mm:02d}"], "target_timezone": [dst]}}]}
    if kind == "sum":
        a, b = rng.randrange(100), rng.randrange(100)
        if heldout(a, b) != want:
            return None
        return {"prompt": f"What is {a} plus {b}?", "answer": str(a + b),
                "expected_calls": [{"name": "get-sum", "arguments": {"a": [a], "b": [b]}}]}
    if kind == "both":
        a = rng.randrange(12)
        b = rng.randrange(24 - a)
        src, dst = rng.sample(sorted(ZONES), 2)
        if heldout(src, dst) != want or heldout(a, b) != want:
            return None
        return {"prompt": f'Add {a} and {b} to get an hour H. At H:00 in "{src}", what time is it in "{dst}"?',
                "answer": _convert(a + b, 0, src, dst),
                "expected_calls": [{"name": "get-sum", "arguments": {"a": [a], "b": [b]}},
                                   {"name": "convert_time", "arguments": {
                                       "source_timezone": [src], "time": [f"{a + b:02d}:00"],
                                       "target_timezone": [dst]}}]}
    words = " ".join(rng.sample(WORDS, 2))
    if heldout(words) != want:
        return None
    return {"prompt": f"Repeat the words {words!r} back to me. No tool is needed.", "answer": words,
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
