"""The memory walkthrough's state reward: after the rollout, the knowledge graph (read through the server's own
`read_graph` tool) holds exactly this task's person, with the observation the task started from and the new one,
and nothing else. A rollout that sees another rollout's entities -- a shared graph -- scores 0."""

from __future__ import annotations

import json
from typing import Any


async def own_state(env: Any, task: dict[str, Any]) -> float:
    graph = json.loads((await env.call("read_graph")).text)
    entities = graph.get("entities") or []
    if [e.get("name") for e in entities] != [task["person"]]:
        return 0.0
    return float(sorted(entities[0].get("observations") or []) == sorted([task["known"], task["fact"]]))
