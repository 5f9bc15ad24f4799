"""Write tasks.jsonl for the memory-server walkthrough: each task starts from one person in the knowledge graph
(created by the env's hidden `[[setup]]` call) and asks the agent to record one new fact about them.

Deterministic: `python make_tasks.py [N] [SEED]` (default 24 tasks, seed 0)."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

PEOPLE = ["Ada Byron", "Alan Turing", "Grace Hopper", "Edsger Dijkstra", "Barbara Liskov", "Donald Knuth",
          "Frances Allen", "John Backus", "Margaret Hamilton", "Ken Thompson", "Radia Perlman", "Tony Hoare"]
ROLES = ["mathematician", "logician", "rear admiral", "professor", "engineer", "author"]
FACTS = ["likes tea", "plays the cello", "keeps bees", "runs marathons", "collects maps", "speaks Welsh",
         "grows tomatoes", "sails on weekends", "writes poetry", "bakes bread"]


def make(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        person, role, fact = PEOPLE[i % len(PEOPLE)], rng.choice(ROLES), rng.choice(FACTS)
        rows.append({
            "id": f"memory-{i}",
            "person": person,
            "known": f"is a {role}",
            "fact": fact,
            "prompt": f"The knowledge graph has an entity named {person!r}. Record this new observation about "
                      f"them: {fact!r}. Use the tools, then answer <answer>done</answer>.",
            "answer": "done",
            "expected_calls": [{"name": "add_observations", "arguments": {
                "observations": [[{"entityName": person, "contents": [fact]}]]}}],
        })
    return rows


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 24
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    out = Path(__file__).with_name("tasks.jsonl")
    out.write_text("".join(json.dumps(r) + "\n" for r in make(n, seed)))
    print(f"wrote {n} tasks to {out}")
