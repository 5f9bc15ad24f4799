"""`toolgym export verifiers ENV OUT`: write a verifiers 0.4 (`verifiers.v1`) environment package for a toolgym env.

The package (`OUT/pyproject.toml`, `OUT/<pkg>/...`, `<pkg>` = the env name in snake case + `_vf`) holds:

    <pkg>/toolgym_export.json   what was exported: how to load the env, reward names + weights, visible tools
    <pkg>/tasks.jsonl           one row per task: the prompt (initial messages after the hidden setup), the task row
    <pkg>/env/                  for a config-file env: the config (as JSON) and its tasks / python reward modules
    <pkg>/taskset.py            `vf.Taskset` + `vf.Task` (one `@vf.reward`/`@vf.metric` per rubric function)
    <pkg>/toolset.py            `vf.Toolset` serving the env's model-visible tools over the same MCP server
    <pkg>/harness.py            verifiers' null chat program, run without `uv` (offline local eval)

The classes are thin subclasses of `toolgym.export.vf_runtime` (read it for the mapping onto the v1 API and its
limits), so the package needs `verifiers==0.4.0` and `toolgym` in the same venv (`scripts/setup_verifiers_venv.sh`).
Run it with verifiers' own eval, locally and without a platform account:

    PYTHONPATH=OUT vf-eval <pkg> -n 5 --model MODEL --client.base-url http://127.0.0.1:8000/v1 \\
        --client.api-key-var OPENAI_API_KEY --no-push --no-rich

Export runs the env's hidden setup once per task against the real server (to write each task's first messages),
so exporting needs the server installed here, like `toolgym eval` does.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from toolgym.config_env import ConfigEnv
from toolgym.env import StatefulToolEnv

FORMAT_VERSION = 1


def package_name(env_name: str) -> str:
    stem = re.sub(r"\W+", "_", env_name.strip().lower()).strip("_") or "env"
    if stem[0].isdigit():
        stem = f"env_{stem}"
    return f"{stem}_vf"


def _class_prefix(pkg: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in pkg.removesuffix("_vf").split("_") if p) or "Env"


async def _initial_rows(env: StatefulToolEnv, tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each task's first messages after the env's hidden setup (an episode against the real server, then closed)."""
    rows = []
    async with env:
        for i, task in enumerate(tasks):
            async with env.episode(task, i) as ep:
                messages = list(ep.messages)
            system = None
            if messages and messages[0].get("role") == "system":
                system, messages = str(messages[0].get("content") or ""), messages[1:]
            rows.append({"prompt": messages, "system_prompt": system, "task": task})
    return rows


def _copy_config_env(env: ConfigEnv, src: Path, dest: Path) -> dict[str, Any]:
    """Copy a config-only env into `dest` (config as JSON + its tasks file + python reward modules)."""
    dest.mkdir(parents=True, exist_ok=True)
    cfg = env.config.model_dump(mode="json", exclude_none=True)
    tasks_src = (env.base_dir / env.tasks_path).resolve()  # the `tasks=` option's file when given
    shutil.copy2(tasks_src, dest / "tasks.jsonl")
    cfg["tasks"]["path"] = "tasks.jsonl"
    for rc in env.config.rewards:
        if rc.type == "python" and rc.function:
            mod = rc.function.partition(":")[0]
            path = env.base_dir / (mod.replace(".", "/") + ".py")
            if path.is_file():
                target = dest / path.relative_to(env.base_dir)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
    for server in ([cfg["server"]] if cfg.get("server") else []) + list(cfg.get("servers") or []):
        cmd = server.get("command") or []
        if cmd and os.sep in cmd[0] and not Path(cmd[0]).is_absolute() and (env.base_dir / cmd[0]).exists():
            cmd[0] = os.path.normpath(env.base_dir / cmd[0])  # a server installed beside the original config (link kept)
        for i, fx in enumerate(server.get("fixtures") or []):  # fixtures stay where they are
            src = fx if isinstance(fx, str) else fx["src"]
            if not Path(src).is_absolute():
                src = str((env.base_dir / src).resolve())
                server["fixtures"][i] = src if isinstance(fx, str) else {**fx, "src": src}
        local = [c for c in cmd[1:] if (env.base_dir / c).is_file()]
        for c in local:  # a server script beside the config (`python server.py`) travels with it
            target = dest / c
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(env.base_dir / c, target)
    (dest / "env.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return {"config": "env/env.json", "source": str(src)}


def export_verifiers(
    env_ref: str,
    out: str | Path,
    n: int | None = None,
    seed: int = 0,
    package: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
    force: bool = False,
) -> Path:
    """Write the verifiers package for `env_ref` (an installed env name or a config-file path) into `out`; returns
    the package directory (`out/<pkg>`)."""
    from toolgym import __version__
    from toolgym.registry import load_env

    env_kwargs = dict(env_kwargs or {})
    env = load_env(env_ref, **env_kwargs)
    pkg = package or package_name(env.name)
    if not pkg.isidentifier():
        raise ValueError(f"package name {pkg!r} is not a Python identifier")
    out = Path(out)
    pkg_dir = out / pkg
    if out.exists() and any(out.iterdir()):
        if not force:
            raise FileExistsError(f"{out} is not empty (pass --force to overwrite)")
        shutil.rmtree(pkg_dir, ignore_errors=True)
    pkg_dir.mkdir(parents=True, exist_ok=True)

    if isinstance(env, ConfigEnv):
        source = _copy_config_env(env, Path(env_ref).resolve(), pkg_dir / "env")
    else:
        source = {"name": env_ref}
    tasks = env.build_dataset(n, seed)
    rows = asyncio.run(_initial_rows(env, tasks))
    with (pkg_dir / "tasks.jsonl").open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")  # raises on a task row that is not JSON: say so rather than drop it

    from toolgym.export.common import reward_entries  # no verifiers import here

    spec = {
        "format": FORMAT_VERSION,
        "toolgym_version": __version__,
        "env": source,
        "env_name": env.name,
        "env_kwargs": env_kwargs,
        "num_tasks": len(rows),
        "seed": seed,
        "rewards": reward_entries(env),
        "tools": [t["function"]["name"] for t in _visible_tools(env)],
        "hidden_tools": sorted(env.hidden_tools),
        "hidden_args": env.hidden_args,
        "max_turns": env.max_turns,
    }
    (pkg_dir / "toolgym_export.json").write_text(json.dumps(spec, indent=2) + "\n")
    _write_package(out, pkg, spec)
    return pkg_dir


def _visible_tools(env: StatefulToolEnv) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        async with env:
            return env.model_tools()

    return asyncio.run(go())


def _write_package(out: Path, pkg: str, spec: dict[str, Any]) -> None:
    prefix = _class_prefix(pkg)
    dash = pkg.replace("_", "-")
    files = {
        out / "pyproject.toml": f'''[project]
name = "{dash}"
version = "0.1.0"
description = "toolgym env {spec['env_name']!r} exported as a verifiers v1 environment (toolgym export verifiers)."
requires-python = ">=3.11"
dependencies = ["verifiers==0.4.0", "toolgym"]

[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[tool.setuptools]
packages = ["{pkg}"]

[tool.setuptools.package-data]
{pkg} = ["*.json", "*.jsonl", "env/**/*"]
''',
        out / pkg / "__init__.py": f'''"""toolgym env {spec['env_name']!r} as a verifiers v1 environment (written by `toolgym export verifiers`)."""

from {pkg}.harness import {prefix}Harness
from {pkg}.taskset import {prefix}Taskset

__all__ = ["{prefix}Harness", "{prefix}Taskset"]
''',
        out / pkg / "toolset.py": f'''"""The env's model-visible tools, served per rollout over the same MCP server (see toolgym.export.vf_runtime)."""

from pathlib import Path

from toolgym.export import vf_runtime as rt


class {prefix}Toolset(rt.ToolgymToolset):
    PACKAGE_DIR = Path(__file__).resolve().parent


if __name__ == "__main__":
    {prefix}Toolset.run()
''',
        out / pkg / "taskset.py": f'''"""Tasks and rewards of the toolgym env {spec['env_name']!r} (see toolgym.export.vf_runtime)."""

from pathlib import Path

import verifiers.v1 as vf

from toolgym.export import vf_runtime as rt
from {pkg}.toolset import {prefix}Toolset

PACKAGE_DIR = Path(__file__).resolve().parent

{prefix}Task = rt.build_task_class("{prefix}Task", __name__, PACKAGE_DIR, {prefix}Toolset)


class {prefix}Taskset(rt.ToolgymTaskset, vf.Taskset[{prefix}Task, rt.ToolgymTasksetConfig]):  # generic: the task type
    PACKAGE_DIR = PACKAGE_DIR
    TASK = {prefix}Task
''',
        out / pkg / "harness.py": f'''"""verifiers' null chat program run with this venv's Python (no `uv`): offline local evals."""

from toolgym.export import vf_runtime as rt


class {prefix}Harness(rt.ToolgymChatHarness):
    pass
''',
        out / "README.md": f'''# {dash}

The toolgym environment `{spec['env_name']}` exported by `toolgym export verifiers` as a verifiers 0.4 (`verifiers.v1`)
environment: {spec['num_tasks']} tasks, tools {', '.join(spec['tools']) or '(none)'} served over the env's own MCP
server, rewards {', '.join(f"{r['name']} (weight {r['weight']})" for r in spec['rewards'])}.

```bash
pip install -e .            # in a venv with verifiers==0.4.0 and toolgym (scripts/setup_verifiers_venv.sh)
vf-eval {pkg} -n 5 --model MODEL --client.base-url http://127.0.0.1:8000/v1 --client.api-key-var OPENAI_API_KEY \\
    --no-push --no-rich
```

The default harness is verifiers' null chat program run without `uv`; `--env.agent.harness.id null` picks the
stock one. Limits: see `toolgym/export/vf_runtime.py` and toolgym's README (Ecosystem section).
''',
    }
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
