"""Local model backends, tool-call formats and the tiny offline model.

Policy URIs (registered with the resolver in `toolgym.policy` by `register_schemes`):

- `hf:PATH_OR_NAME`   -- in-process transformers engine (`toolgym.models.hf.HFPolicy`), CPU or CUDA, batched.
- `vllm:PATH_OR_NAME` -- in-process vLLM engine (`toolgym.models.vllm_engine.VLLMPolicy`), optional extra.
- `vllm-server:NAME`  -- token-exact policy against a running vLLM server (`toolgym.models.server`, option
  `base_url`): prompts rendered and tokenized here, token ids in / sampled ids + logprobs out.

This module stays import-light (no torch/transformers/vllm at import time): factories import their backend lazily.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["register_schemes", "load_hf", "load_vllm", "load_vllm_server"]


def load_hf(target: str, env: Any = None, **options: Any) -> Any:
    """`hf:PATH_OR_NAME` -> `HFPolicy` (imports torch/transformers on first use)."""
    from toolgym.models.hf import HFPolicy

    return HFPolicy(target, **options)


def load_vllm(target: str, env: Any = None, **options: Any) -> Any:
    """`vllm:PATH_OR_NAME` -> `VLLMPolicy` (imports vllm on first use)."""
    from toolgym.models.vllm_engine import VLLMPolicy

    return VLLMPolicy(target, **options)


def load_vllm_server(target: str, env: Any = None, **options: Any) -> Any:
    """`vllm-server:NAME` -> `VLLMServerPolicy` (needs transformers for the tokenizer)."""
    from toolgym.models.server import VLLMServerPolicy

    return VLLMServerPolicy(target, **options)


def register_schemes(register: Callable[[str, Callable[..., Any]], None]) -> None:
    """Register the `hf` and `vllm` URI schemes."""
    register("hf", load_hf)
    register("vllm", load_vllm)
    register("vllm-server", load_vllm_server)
