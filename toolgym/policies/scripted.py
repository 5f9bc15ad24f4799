"""Scripted players: plain Python functions that write assistant turns (tool calls) like a model would.

Environments ship their own (`env.scripted_players()`), e.g. a minimax expert for tic-tac-toe or a reference player
that runs a task's gold SQL. They see exactly what a model sees (the messages and tool schemas) plus the task row,
and must act only through tool calls. Useful as teachers (`toolgym synth`), baselines and for tests.

A player's factory declares the options it takes by its keyword parameters, the environment coming first and
positional-only: `def imperfect(env, /, mistake_prob: float = 0.2, seed: int | None = None) -> Policy`. An unknown
option is then an error naming the closest valid one; the sampling options the command line passes
(`toolgym.policies.base.SAMPLING_OPTIONS`) reach a player only if it declares them (`seed` for its randomness).
A factory taking bare `**options` gets every option, unchecked.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

from toolgym.policies.base import Policy, PolicySession, check_policy_options
from toolgym.types import AssistantTurn, ToolCall

TurnFn = Callable[[list[dict[str, Any]], dict[str, Any]], AssistantTurn]
_ids = itertools.count()


def call(name: str, arguments: dict[str, Any] | None = None, /, **kwargs: Any) -> ToolCall:
    """A well-formed tool call with a fresh id: `call("move", position=4)`, or `call("rename", {"name": "x"})` --
    the arguments as a dict, whatever their names (an argument may be called `name` or `arguments`)."""
    return ToolCall(name=name, arguments={**(arguments or {}), **kwargs}, id=f"call_{next(_ids)}")


def rollout_rng(memory: dict[str, Any], salt: str) -> random.Random:
    """A scripted player's random generator for one rollout, kept in its `memory`: drawn from the rollout's seed
    when the run seeds each rollout (`toolgym eval --seed`, every `toolgym serve` request: `Policy.open_seeded`), so
    the same seed plays the same game whatever the concurrency or how many requests came before; otherwise from how
    many rollouts the policy opened before (`session_index`: `toolgym synth`'s teacher games). `salt` tells players
    (and their own `seed` option) apart, e.g. f"{seed}"."""
    if "rng" not in memory:
        if memory.get("rollout_seed") is not None:
            memory["rng"] = random.Random(f"{salt}:rollout-seed:{memory['rollout_seed']}")
        else:
            memory["rng"] = random.Random(f"{salt}:{memory.get('session_index', 0)}")
    return memory["rng"]


class ScriptedSession(PolicySession):
    def __init__(self, fn: TurnFn, tools: list[dict[str, Any]], task: dict[str, Any], index: int = 0) -> None:
        self.fn, self.tools, self.task = fn, tools, task
        self.memory: dict[str, Any] = {"tools": tools, "task": task, "session_index": index, "rollout_seed": None}

    async def act(self, messages: list[dict[str, Any]]) -> AssistantTurn:
        return self.fn(messages, self.memory)


class ScriptedPolicy(Policy):
    """Wrap `fn(messages, memory) -> AssistantTurn`; `memory` is a per-rollout dict holding `tools`, `task`,
    `session_index` (how many rollouts this policy opened before) and `rollout_seed` (the rollout's seed when the run
    seeds rollouts, else None): draw per-rollout randomness with `rollout_rng(memory, ...)`, which uses them.
    `answer_key=True` marks a player that reads the task's expected answer (a reference player)."""

    def __init__(self, fn: TurnFn, name: str = "scripted", answer_key: bool = False) -> None:
        self.fn, self.name, self.answer_key = fn, name, answer_key
        self._opened = itertools.count()

    def open(self, tools: list[dict[str, Any]], task: dict[str, Any]) -> PolicySession:
        return ScriptedSession(self.fn, tools, task, next(self._opened))

    def open_seeded(self, tools: list[dict[str, Any]], task: dict[str, Any], seed: int) -> PolicySession:
        session = self.open(tools, task)  # through `open`, so a subclass that overrides it is still used
        if isinstance(session, ScriptedSession):
            session.memory["rollout_seed"] = seed
        return session


def load_scripted(target: str, env: Any = None, **options: Any) -> Policy:
    players = env.scripted_players() if env is not None else {}
    if target not in players:
        known = ", ".join(sorted(players)) or "none"
        where = f"environment {env.name!r}" if env is not None else "no environment"
        raise ValueError(f"unknown scripted player {target!r} for {where}; known: {known}")
    factory = players[target]
    options = check_policy_options(factory, {k: v for k, v in options.items() if v is not None}, f"scripted:{target}")
    return factory(env, **options)
