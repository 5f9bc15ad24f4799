"""Policies by name: the URI resolver (`load_policy`, `register_scheme`) and the policy interface.

Policies are named by URIs: `scripted:NAME` (a player the environment ships), `openai:MODEL` (+ base URL),
and the local backends `hf:PATH_OR_NAME`, `vllm:PATH_OR_NAME` and `vllm-server:NAME` registered by
`toolgym.models`. The interface (`Policy`, `PolicySession`) is defined in `toolgym.policies.base` and re-exported
here; the backends import that module, never this one, so the resolver can import the backends without an import
circle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from toolgym.policies.base import Policy, PolicySession, PolicyUnavailable

if TYPE_CHECKING:
    from toolgym.env import StatefulToolEnv

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


__all__ = ["Policy", "PolicyFactory", "PolicySession", "PolicyUnavailable", "load_policy", "register_scheme"]
