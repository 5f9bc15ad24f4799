"""Models, apart from the policies that sample from them: their text conventions and their files.

- `toolgym.models.chat`: chat-template rendering for token-exact multi-turn trajectories (`ChatRenderer`,
  `TokenTracker`, `tokenize_conversation`) and the template prefix-preservation check;
- `toolgym.models.formats`: tool-call formats (hermes, pythonic, llama3): parse a model's output into an
  `AssistantTurn`, render calls back to text;
- `toolgym.models.tiny` (+ `cli`, `toolgym model init-tiny`): the tiny offline model built here;
- `check_model_source` (here): is a name a local model folder or a plausible hub id.

Why these are not in `toolgym.policies`: they describe a model and its tokenizer, not a way to sample from one.
The token-level policies (`toolgym.policies.model`) use chat and formats to build prompts and parse turns, and so
does training (`toolgym.train.data` tokenizes SFT rows with the same renderer, so SFT and RL see the same tokens);
the tiny model uses the Hermes format for its tokenizer corpus. Keeping them here lets training depend on them
without depending on a sampling backend. The policy URIs (`hf:`, `vllm:`, `vllm-server:`) are resolved by
`toolgym.policies.load_policy`.

This package stays import-light (no torch/transformers at import time).
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["check_model_source"]

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
