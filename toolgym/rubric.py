"""Rubric: weighted reward functions that take what they name.

    Rubric([(win, 1.0), (format_ok, 0.2), (invalid_move_penalty, 1.0), (num_turns, 0.0)])

A reward function declares the inputs it wants by parameter name, from `AVAILABLE` (`state`, `task`, `trajectory`,
`calls`, `messages`, `turns`, `env`); it may be sync or async and returns a float. Weight 0 makes it a metric: it is
reported but does not enter the reward; a metric may return None when it does not apply to a rollout (e.g. "took
the immediate win" on a position without one): it is then left out of that rollout's metrics and of their means.
A function that raises is an error on that rollout (`RewardError`, with the function's name), never a silent 0.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

AVAILABLE = frozenset({"state", "task", "trajectory", "calls", "messages", "turns", "env"})


class RewardError(RuntimeError):
    """A reward function raised or returned a non-number."""


class Rubric:
    def __init__(self, funcs: Sequence[tuple[Callable[..., Any], float] | Callable[..., Any]] = ()) -> None:
        self.items: list[tuple[str, Callable[..., Any], float, list[str] | None]] = []
        for item in funcs:
            fn, weight = item if isinstance(item, tuple) else (item, 1.0)
            self.add(fn, weight)

    def add(self, fn: Callable[..., Any], weight: float = 1.0, name: str | None = None) -> Rubric:
        name = name or getattr(fn, "__name__", "reward")
        if any(n == name for n, *_ in self.items):
            raise ValueError(f"duplicate reward function name {name!r}")
        params = inspect.signature(fn).parameters
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            wanted = None
        else:
            wanted = [p for p in params if p != "self"]
            unknown = [p for p in wanted if p not in AVAILABLE and params[p].default is inspect.Parameter.empty]
            if unknown:
                raise ValueError(
                    f"reward function {name!r} asks for {unknown}; a reward function may take {sorted(AVAILABLE)}"
                )
            wanted = [p for p in wanted if p in AVAILABLE]
        self.items.append((name, fn, float(weight), wanted))
        return self

    @property
    def weights(self) -> dict[str, float]:
        return {n: w for n, _, w, _ in self.items}

    async def score(self, values: dict[str, float] | None = None, **inputs: Any
                    ) -> tuple[dict[str, float], dict[str, float], float]:
        """Run every function; return (rewards by name, metrics by name, total reward = the weighted sum).
        `values`: entries already computed elsewhere (by name); their functions are not called."""
        rewards: dict[str, float] = {}
        metrics: dict[str, float] = {}
        for name, fn, weight, wanted in self.items:
            kwargs = inputs if wanted is None else {k: inputs[k] for k in wanted}
            try:
                if values is not None and name in values:
                    value = values[name]
                else:
                    value = fn(**kwargs)
                if inspect.isawaitable(value):
                    value = await value
                if value is None and weight == 0.0:  # a metric that does not apply to this rollout
                    continue
                value = float(value)
            except Exception as exc:
                raise RewardError(f"reward function {name!r} raised {type(exc).__name__}: {exc}") from exc
            if value != value:  # NaN
                raise RewardError(f"reward function {name!r} returned NaN")
            if weight == 0.0:
                metrics[name] = value
            else:
                rewards[name] = value
        total = sum(rewards[n] * w for n, _, w, _ in self.items if n in rewards)
        return rewards, metrics, total
