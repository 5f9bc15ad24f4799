"""Policies: what writes a rollout's assistant turns, built by URI (`load_policy`).

| URI | backend | module |
|---|---|---|
| `scripted:NAME` | a player the environment ships | `toolgym.policies.scripted` |
| `openai:MODEL` (+ `base_url`) | an OpenAI-compatible chat-completions endpoint | `toolgym.policies.openai_http` |
| `hf:PATH_OR_NAME` | in-process transformers engine, CPU or CUDA, batched | `toolgym.policies.hf` |
| `vllm:PATH_OR_NAME` | in-process vLLM engine (optional extra) | `toolgym.policies.vllm_engine` |
| `vllm-server:NAME` (+ `base_url`) | a running vLLM server, token-exact | `toolgym.policies.vllm_server` |

The package's modules:

- `base`: the interface (`Policy`, `PolicySession`, `PolicyUnavailable`) and the option check every scheme uses;
- `scripted`, `openai_http`: the policies that need no model in this process;
- `model`: `ModelPolicy`, the base of the token-level backends (chat template, exact tokens, tool-call parsing);
- `batching`: sampling params, generation requests/outputs, `BatchQueue` / `ContinuousQueue`;
- `hf` (+ `kv_cache`, `continuous`): the transformers engine, its KV caches and its continuous batching;
- `vllm_engine`, `vllm_server`: vLLM in this process, and the client of a vLLM server.

What is not a policy stays in `toolgym.models`: the model's text conventions (chat-template rendering, tool-call
formats -- training data uses them too), the model-source check and the tiny offline model.

This module stays import-light (no torch, transformers, vllm or httpx at import time): a scheme's factory imports
its backend on first use. The backends import `toolgym.policies.base`, never this module, so the import arrows
run one way: resolver -> backends -> interface. Every factory checks the options it is given against what its
policy declares (`base.check_policy_options`): an unknown option is an error naming the closest valid one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from toolgym.policies.base import (
    SAMPLING_OPTIONS,
    Policy,
    PolicyOptionError,
    PolicySession,
    PolicyUnavailable,
    check_policy_options,
)

if TYPE_CHECKING:
    from toolgym.env import StatefulToolEnv

PolicyFactory = Callable[..., Policy]


def register_scheme(scheme: str, factory: PolicyFactory) -> None:
    """Register a URI scheme: `factory(target, env=env, **options) -> Policy`."""
    _SCHEMES[scheme] = factory


def load_policy(uri: str, env: StatefulToolEnv | None = None, **options: Any) -> Policy:
    """Build a policy from a URI such as `scripted:minimax`, `openai:gpt-4o-mini`, `hf:./ckpt`.

    A bare name without a scheme is looked up as a scripted player of the environment first, then treated as
    `openai:NAME` when a `base_url` option is given. An option the policy does not take is a `PolicyOptionError`
    (a `ValueError`) naming the closest valid one.
    """
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


def policy_loader(uri: str, env: StatefulToolEnv | None = None, **options: Any) -> tuple[Callable[[], Policy], bool]:
    """`load_policy` in two steps, for a caller that wants to answer before a model is loaded (`toolgym serve`): the
    cheap checks now -- the URI, the model's path, the option names: a bad one raises here, as `load_policy` would --
    and `(load, heavy)`: `load()` builds the policy; `heavy` says it loads weights in this process (`hf:`), so it is
    worth calling in a background thread. Other schemes are built now (`load` returns the built policy)."""
    scheme, sep, target = uri.partition(":")
    if sep and scheme == "hf" and options.get("model") is None:
        from toolgym.models import check_model_source
        from toolgym.policies.hf import HFPolicy  # imports no torch (the engine does, on first use)

        check_model_source(target)
        check_policy_options(HFPolicy, options, f"hf:{target}")
        return (lambda: load_policy(uri, env, **options)), True
    policy = load_policy(uri, env, **options)
    return (lambda: policy), False


def _load_scripted(target: str, env: Any = None, **options: Any) -> Policy:
    """`scripted:NAME` -> the environment's player NAME."""
    from toolgym.policies import scripted

    return scripted.load_scripted(target, env, **options)


def _load_openai(target: str, env: Any = None, **options: Any) -> Policy:
    """`openai:MODEL` -> `OpenAIPolicy` (imports httpx on first use)."""
    from toolgym.policies import openai_http

    return openai_http.load_openai(target, env, **options)


def _load_hf(target: str, env: Any = None, **options: Any) -> Policy:
    """`hf:PATH_OR_NAME` -> `HFPolicy` (imports torch/transformers on first use)."""
    from toolgym.models import check_model_source

    if options.get("model") is None:  # before importing torch: a bad path is named even where torch is missing
        check_model_source(target)
    from toolgym.policies.hf import HFPolicy

    return HFPolicy(target, **check_policy_options(HFPolicy, options, f"hf:{target}"))


def _load_vllm(target: str, env: Any = None, **options: Any) -> Policy:
    """`vllm:PATH_OR_NAME` -> `VLLMPolicy` (imports vllm on first use)."""
    from toolgym.models import check_model_source

    check_model_source(target)
    from toolgym.policies.vllm_engine import VLLMPolicy

    return VLLMPolicy(target, **check_policy_options(VLLMPolicy, options, f"vllm:{target}"))


def _load_vllm_server(target: str, env: Any = None, **options: Any) -> Policy:
    """`vllm-server:NAME` -> `VLLMServerPolicy` (needs transformers for the tokenizer)."""
    from toolgym.policies.vllm_server import VLLMServerPolicy

    return VLLMServerPolicy(target, **check_policy_options(VLLMServerPolicy, options, f"vllm-server:{target}"))


_SCHEMES: dict[str, PolicyFactory] = {
    "scripted": _load_scripted, "openai": _load_openai, "hf": _load_hf, "vllm": _load_vllm,
    "vllm-server": _load_vllm_server,
}


__all__ = [
    "SAMPLING_OPTIONS", "Policy", "PolicyFactory", "PolicyOptionError", "PolicySession", "PolicyUnavailable",
    "load_policy", "policy_loader", "register_scheme",
]
