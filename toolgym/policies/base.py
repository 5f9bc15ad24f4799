"""The policy interface every backend implements: `Policy` (long-lived) and `PolicySession` (one rollout).

A `Policy` holds a client or a model; for each rollout the engine calls `policy.open(tools, task)` and gets a
`PolicySession`, which sees the growing OpenAI-style message list and returns one `AssistantTurn` per call of
`act`. Sessions of token-level backends keep the exact token ids, assistant mask and logprobs of their rollout and
hand them over through `token_trace()`; other sessions return None.

Options: a policy declares the options it takes by its typed keyword parameters (a policy class: its `__init__`'s,
following `**options` up to the parent class's, as env options are declared -- `toolgym.options`; a scripted player:
its factory's). `check_policy_options` checks a user's options against that declaration by name: an unknown one is
a `PolicyOptionError` naming the closest valid one (`--model-arg tempreature=0.5` -> "did you mean
'temperature'?"). The sampling options `SAMPLING_OPTIONS` (temperature, top_p, max_tokens, seed: what the command
line's flags set) are accepted by every policy; a policy receives only those it declares (a scripted player that
does not sample ignores them).

The backends (`toolgym.policies.*`) import this module, never the package's resolver (`toolgym.policies`), so the
import arrows run one way: resolver -> backends -> interface.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping
from typing import Any

from toolgym.options import OptionError, check_known, declared_options
from toolgym.types import AssistantTurn, TokenTrace

SAMPLING_OPTIONS = ("temperature", "top_p", "max_tokens", "seed")
"""Options every policy accepts (a policy that does not sample ignores them)."""


class PolicyUnavailable(RuntimeError):
    """The policy cannot answer at all (e.g. its every endpoint refuses connections). Unlike a failed turn, which
    fails one rollout, this stops an eval or synth run at once with one message (finished rollouts are kept)."""


class PolicyOptionError(OptionError):
    """A policy option the policy does not take."""


def check_policy_options(factory: Callable[..., Any], options: Mapping[str, Any], owner: str) -> dict[str, Any]:
    """`options` checked by name against what `factory` (a policy class or a scripted player's factory) declares,
    minus the `SAMPLING_OPTIONS` it does not declare. Raises `PolicyOptionError` naming `owner` (the URI), the
    unknown option and the closest valid one. A factory taking bare `**options` declares nothing: `options` pass
    unchecked. Values are not converted (the policy does that)."""
    declared = declared_options(factory)
    if declared is None:
        return dict(options)
    check_known(options, {*declared, *SAMPLING_OPTIONS}, owner, error=PolicyOptionError)
    return {k: v for k, v in options.items() if k in declared}


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
    answer_key: bool = False
    """Whether the policy reads each task's expected answer (an env's reference player): its score is the env's
    ceiling, not a model's, and `toolgym eval` says so."""

    @abc.abstractmethod
    def open(self, tools: list[dict[str, Any]], task: dict[str, Any]) -> PolicySession:
        """Start a rollout. `tools` are OpenAI-style schemas the model may call; `task` is the dataset row
        (scripted reference players may read it; model policies must not)."""

    def open_seeded(self, tools: list[dict[str, Any]], task: dict[str, Any], seed: int) -> PolicySession:
        """Start a rollout whose sampling is a function of `seed` alone (and the conversation), whatever other rollouts
        run: what `toolgym serve` (one seed per request) and `toolgym eval` (one per example and rollout) use, so a
        result can be reproduced. Default: `open` (a policy that does not sample has nothing to seed)."""
        return self.open(tools, task)

    def expect_rollouts(self, n: int) -> None:
        """`n` more rollouts will ask this policy for turns (negative: that many have ended). A run announces its
        rollouts before they open sessions (`toolgym.rollout.iter_rollouts`), so a policy that batches in lock-step
        knows whom to wait for. Default: nothing to do."""

    async def preflight(self) -> None:
        """Check, before a run, that the policy can answer at all; raise `PolicyUnavailable` if not (default:
        nothing to check)."""

    async def aclose(self) -> None:
        """Release long-lived resources (HTTP clients, engines)."""


__all__ = ["SAMPLING_OPTIONS", "Policy", "PolicyOptionError", "PolicySession", "PolicyUnavailable",
           "check_policy_options"]
