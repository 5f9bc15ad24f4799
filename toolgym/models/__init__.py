"""Local model backends, tool-call formats and the tiny offline model.

Policy URIs (registered with the resolver in `toolgym.policy` by `register_schemes`):

- `hf:PATH_OR_NAME`   -- in-process transformers engine (`toolgym.models.hf.HFPolicy`), CPU or CUDA, batched.
- `vllm:PATH_OR_NAME` -- in-process vLLM engine (`toolgym.models.vllm_engine.VLLMPolicy`), optional extra.
- `vllm-server:NAME`  -- token-exact policy against a running vLLM server (`toolgym.models.server`, option
  `base_url`): prompts rendered and tokenized here, token ids in / sampled ids + logprobs out.

This module stays import-light (no torch/transformers/vllm at import time): factories import their backend lazily.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["register_schemes", "load_hf", "load_vllm", "load_vllm_server", "check_model_source"]

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


def check_model_source(target: str) -> str:
    """`target` if it is an existing local folder or a plausible hub id (`name` or `org/name`); else a ValueError
    that says which it is not: a path-like target (`/x`, `./x`, `~/x`, `a/b/c`) that does not exist is "no such
    model folder", anything else "neither a local model folder nor a hub id" (instead of the hub client's message
    about repo-id characters)."""
    path = Path(target).expanduser()
    if path.is_dir():
        return str(path)
    if path.exists():
        raise ValueError(f"model {target!r} is a file, not a model folder (config.json, weights, tokenizer)")
    looks_like_path = target.startswith(("/", "./", "../", "~", ".\\")) or target.count("/") > 1 or "\\" in target
    if looks_like_path:
        raise ValueError(f"no such model folder: {target!r} (from {Path.cwd()})")
    if not _HUB_ID.match(target) or ".." in target:
        raise ValueError(f"model {target!r} is neither a local model folder nor a hub id such as Qwen/Qwen3-0.6B")
    return target


def load_hf(target: str, env: Any = None, **options: Any) -> Any:
    """`hf:PATH_OR_NAME` -> `HFPolicy` (imports torch/transformers on first use)."""
    if options.get("model") is None:  # before importing torch: a bad path is named even where torch is missing
        check_model_source(target)
    from toolgym.models.hf import HFPolicy

    return HFPolicy(target, **options)


def load_vllm(target: str, env: Any = None, **options: Any) -> Any:
    """`vllm:PATH_OR_NAME` -> `VLLMPolicy` (imports vllm on first use)."""
    check_model_source(target)
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
