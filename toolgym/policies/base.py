"""The policy interface every backend implements: `Policy` (long-lived) and `PolicySession` (one rollout).

A `Policy` holds a client or a model; for each rollout the engine calls `policy.open(tools, task)` and gets a
`PolicySession`, which sees the growing OpenAI-style message list and returns one `AssistantTurn` per call of
`act`. Sessions of token-level backends keep the exact token ids, assistant mask and logprobs of their rollout and
hand them over through `token_trace()`; other sessions return None.

The backends (`toolgym.policies.*`, `toolgym.models.*`) import this module only; the URI resolver that imports the
backends lives in `toolgym.policy`, so the import arrows run one way: resolver -> backends -> interface.
"""

from __future__ import annotations

import abc
from typing import Any

from toolgym.types import AssistantTurn, TokenTrace


class PolicyUnavailable(RuntimeError):
    """The policy cannot answer at all (e.g. its every endpoint refuses connections). Unlike a failed turn, which
    fails one rollout, this stops an eval or synth run at once with one message (finished rollouts are kept)."""


class PolicySession(abc.ABC):
    """One rollout's view of a policy."""

    @abc.abstractmethod
    async def act(self, messages: list[dict[str, Any]]) -> AssistantTurn:
        """Return the next assistant turn given the conversation so far (OpenAI chat format)."""

    def token_trace(self) -> TokenTrace | None:
        """Exact tokens of this rollout, for backends that have them."""
        return None

    async def aclose(self) -> None:
        """Release per-rollout resources."""


class Policy(abc.ABC):
    """A source of assistant turns; `open` starts one rollout."""

    name: str = "policy"

    @abc.abstractmethod
    def open(self, tools: list[dict[str, Any]], task: dict[str, Any]) -> PolicySession:
        """Start a rollout. `tools` are OpenAI-style schemas the model may call; `task` is the dataset row
        (scripted reference players may read it; model policies must not)."""

    async def preflight(self) -> None:
        """Check, before a run, that the policy can answer at all; raise `PolicyUnavailable` if not (default:
        nothing to check)."""

    async def aclose(self) -> None:
        """Release long-lived resources (HTTP clients, engines)."""


__all__ = ["Policy", "PolicySession", "PolicyUnavailable"]
