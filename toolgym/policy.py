"""The policy interface: whatever writes the assistant turns (a scripted player, an HTTP model, a local engine).

A `Policy` is long-lived (holds a client or model); for each rollout the engine calls `policy.open(tools, task)`
and gets a `PolicySession`, which sees the growing OpenAI-style message list and returns one `AssistantTurn` per
call of `act`. Sessions of token-level backends keep the exact token ids, assistant mask and logprobs of their
rollout and hand them over through `token_trace()`; other sessions return None.

Policies are named by URIs: `scripted:NAME` (a player the environment ships), `openai:MODEL` (+ base URL),
and the local backends `hf:PATH_OR_NAME` and `vllm:PATH_OR_NAME` registered by `toolgym.models`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from toolgym.types import AssistantTurn, TokenTrace

if TYPE_CHECKING:
    from toolgym.env import StatefulToolEnv


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

    async def aclose(self) -> None:
        """Release long-lived resources (HTTP clients, engines)."""


PolicyFactory = Callable[..., Policy]
_SCHEMES: dict[str, PolicyFactory] = {}


def register_scheme(scheme: str, factory: PolicyFactory) -> None:
    """Register a URI scheme: `factory(target, env=env, **options) -> Policy`."""
    _SCHEMES[scheme] = factory


def load_policy(uri: str, env: StatefulToolEnv | None = None, **options: Any) -> Policy:
    """Build a policy from a URI such as `scripted:minimax`, `openai:gpt-4o-mini`, `hf:./ckpt`.

    A bare name without a scheme is looked up as a scripted player of the environment first, then treated as
    `openai:NAME` when a `base_url` option is given.
    """
    _ensure_builtin_schemes()
    scheme, sep, target = uri.partition(":")
    if not sep:
        if env is not None and uri in env.scripted_players():
            scheme, target = "scripted", uri
        elif options.get("base_url"):
            scheme, target = "openai", uri
        else:
            raise ValueError(
                f"cannot tell which backend {uri!r} names; use a URI such as scripted:NAME, "
                f"openai:MODEL (with --base-url), hf:PATH or vllm:PATH (known schemes: {sorted(_SCHEMES)})"
            )
    factory = _SCHEMES.get(scheme)
    if factory is None:
        raise ValueError(f"unknown policy scheme {scheme!r} in {uri!r}; known: {sorted(_SCHEMES)}")
    return factory(target, env=env, **options)


def _ensure_builtin_schemes() -> None:
    if "scripted" in _SCHEMES:
        return
    from toolgym.policies import openai_http, scripted

    register_scheme("scripted", scripted.load_scripted)
    register_scheme("openai", openai_http.load_openai)
    try:  # local model backends live in toolgym.models (optional heavy deps, imported lazily there)
        from toolgym import models
    except ImportError:
        return
    register = getattr(models, "register_schemes", None)
    if register is not None:
        register(register_scheme)
