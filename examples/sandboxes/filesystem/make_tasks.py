"""Write tasks.jsonl for the filesystem walkthrough: every rollout starts from the same folder of notes (the
`fixtures/notes` fixture, copied into its sandbox) and is asked to write one new note or rename one.

Deterministic: `python make_tasks.py [N] [SEED]` (default 24 tasks, seed 0)."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

TOPICS = ["groceries", "garden", "travel", "books", "recipes", "budget", "music", "repairs"]
LINES = ["Check the tyres", "Order seeds", "Renew the passport", "Return the library books", "Try the lentil soup",
         "Pay the electricity bill", "Practise scales", "Fix the gate"]


def make(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        if i % 2 == 0:
            name, text = f"{rng.choice(TOPICS)}-{i}.txt", rng.choice(LINES)
            rows.append({
                "id": f"fs-{i}", "kind": "write", "file": name, "content": text,
                "prompt": f"In the notes folder, create a file named {name!r} containing exactly: {text}. "
                          "Use the tools, then answer <answer>done</answer>.",
                "answer": "done",
                "expected_calls": [{"name": "write_file", "arguments": {"path": [f"notes/{name}"], "content": [text]}}],
            })
        else:
            name = f"done-{i}.txt"
            rows.append({
                "id": f"fs-{i}", "kind": "rename", "file": name, "content": "Buy milk\nCall the plumber\n",
                "prompt": f"In the notes folder, rename todo.txt to {name!r}. Use the tools, then answer "
                          "<answer>done</answer>.",
                "answer": "done",
                "expected_calls": [{"name": "move_file", "arguments": {"source": ["notes/todo.txt"],
                                                                       "destination": [f"notes/{name}"]}}],
            })
    return rows


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    out = Path(__file__).with_name("tasks.jsonl")
    out.write_text("".join(json.dumps(r) + "\n" for r in make(n, seed)))
    print(f"wrote {n} tasks to {out}")
