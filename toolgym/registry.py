"""Find environments: installed packages register `load_environment` under the `toolgym.envs` entry-point group
(the verifiers convention); a path to a `.toml`/`.json` file builds a config-only env."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from toolgym.env import StatefulToolEnv

GROUP = "toolgym.envs"


def available_envs() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=GROUP))


def load_env(name_or_path: str, **kwargs: Any) -> StatefulToolEnv:
    """An environment by entry-point name (`tictactoe`) or config file path (`examples/x/env.toml`)."""
    p = Path(name_or_path)
    if p.suffix in (".toml", ".json") or p.is_file():
        if not p.is_file():
            raise FileNotFoundError(f"env config {p} not found")
        from toolgym.config_env import load_config_env

        return load_config_env(p, **kwargs)
    eps = {ep.name: ep for ep in entry_points(group=GROUP)}
    if name_or_path not in eps:
        raise ValueError(f"unknown environment {name_or_path!r}; installed: {', '.join(sorted(eps)) or 'none'} "
                         f"(or pass a path to an env config .toml)")
    env = eps[name_or_path].load()(**kwargs)
    if not isinstance(env, StatefulToolEnv):
        raise TypeError(f"{name_or_path}: load_environment returned {type(env).__name__}, not a StatefulToolEnv")
    return env
