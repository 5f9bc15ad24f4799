"""Find environments: installed packages register `load_environment` under the `toolgym.envs` entry-point group
(the verifiers convention); a path to a `.toml`/`.json` file builds a config-only env; `module:attr` names an env
class (or a factory) in an importable module, for an env not packaged yet (`toolgym eval mypkg.envs:MyEnv`). Every
env is built through `load_env`, which checks the options given against the ones the env declares
(`toolgym.options`)."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from toolgym.env import StatefulToolEnv
from toolgym.options import EnvOption, check_options, declared_options, parse_pairs

GROUP = "toolgym.envs"
_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def available_envs() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=GROUP))


def _is_config(name_or_path: str) -> bool:
    p = Path(name_or_path)
    return p.suffix in (".toml", ".json") or p.is_file()


def env_factory(name_or_path: str) -> Callable[..., StatefulToolEnv]:
    """What builds the env: the entry point's `load_environment`, or the config-file loader bound to the path."""
    if _is_config(name_or_path):
        p = Path(name_or_path)
        if not p.is_file():
            raise FileNotFoundError(f"env config {p} not found")
        from toolgym.config_env import ConfigEnv, config_env_factory

        factory: Callable[..., ConfigEnv] = config_env_factory(p)
        return factory
    eps = {ep.name: ep for ep in entry_points(group=GROUP)}
    if name_or_path not in eps and _REF.match(name_or_path):
        module, _, attr = name_or_path.partition(":")
        try:
            found = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(f"cannot load environment {name_or_path!r}: {exc}") from None
        if not callable(found):
            raise ValueError(f"environment {name_or_path!r} is not an env class or factory")
        return found  # type: ignore[no-any-return]
    if name_or_path not in eps:
        raise ValueError(f"unknown environment {name_or_path!r}; installed: {', '.join(sorted(eps)) or 'none'} "
                         f"(or pass a path to an env config .toml)")
    fn: Callable[..., StatefulToolEnv] = eps[name_or_path].load()
    return fn


def env_options(name_or_path: str) -> dict[str, EnvOption] | None:
    """The options an env declares (None: its factory declares none, so options pass unchecked)."""
    return declared_options(env_factory(name_or_path))


def check_env_args(name_or_path: str, args: Mapping[str, Any], from_text: bool = False) -> dict[str, Any]:
    """`args` checked against the env's declared options and typed (`from_text`: command-line strings).
    Raises `EnvOptionError` (a `ValueError`) naming an unknown option's closest match, or a bad value's rule."""
    return check_options(env_factory(name_or_path), args, name_or_path, from_text)


def parse_env_args(name_or_path: str, pairs: list[str] | None) -> dict[str, Any]:
    """Command-line `key=value` pairs (`-a`) as the env's typed options: `-a require_think=false` is `False`."""
    return check_env_args(name_or_path, parse_pairs(pairs), from_text=True)


def load_env(name_or_path: str, **kwargs: Any) -> StatefulToolEnv:
    """An environment by entry-point name (`tictactoe`) or config file path (`examples/x/env.toml`), built with
    `kwargs` checked against its declared options (an unknown or out-of-range option is an `EnvOptionError`)."""
    factory = env_factory(name_or_path)
    env = factory(**check_options(factory, kwargs, name_or_path))
    if not isinstance(env, StatefulToolEnv):
        raise TypeError(f"{name_or_path}: load_environment returned {type(env).__name__}, not a StatefulToolEnv")
    return env
