"""Pieces of the verifiers export that need no verifiers import: how a toolgym rubric splits between the toolset
process (rewards that read only `env`/`state`/`task`, i.e. the live MCP session) and the scorer (the rest)."""

from __future__ import annotations

import inspect
from typing import Any

SERVER_SIDE = frozenset({"env", "state", "task"})


def wanted_params(fn: Any) -> set[str] | None:
    """The inputs a reward function names (None: it takes **kwargs)."""
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return None
    return {p for p in params if p != "self"}


def server_side(fn: Any) -> bool:
    """Whether a rubric function needs only inputs the toolset process has (`env`, `state`, `task`) and reads the
    env or its state (so it may make hidden calls on the rollout's session)."""
    wanted = wanted_params(fn)
    return wanted is not None and wanted <= SERVER_SIDE and bool(wanted & {"env", "state"})


def reward_entries(env: Any) -> list[dict[str, Any]]:
    """`[{"name", "weight", "runs_in"}]` for the env's rubric, in order."""
    return [{"name": name, "weight": weight, "runs_in": "toolset" if server_side(fn) else "scorer"}
            for name, fn, weight, _ in env.rubric.items]
