"""`toolgym export ...`: a typer sub-app (mounted by `toolgym.cli` as `export`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(help="Export a toolgym environment to other ecosystems.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Export a toolgym environment to other ecosystems."""


def _kv(items: list[str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


@app.command("verifiers")
def verifiers_cmd(
    env: Annotated[str, typer.Argument(help="Installed env name (tictactoe) or env config file (examples/x/env.toml).")],
    out: Annotated[Path, typer.Argument(help="Output directory for the verifiers package.")],
    n: Annotated[Optional[int], typer.Option("-n", help="Number of tasks to export (default: the env's dataset).")] = None,
    seed: Annotated[int, typer.Option(help="Dataset seed.")] = 0,
    package: Annotated[Optional[str], typer.Option(help="Python package name (default: <env name>_vf).")] = None,
    env_arg: Annotated[list[str], typer.Option("--env-arg", "-a", help="Env option KEY=VALUE (JSON values).")] = [],  # noqa: B006
    force: Annotated[bool, typer.Option(help="Overwrite a non-empty OUT.")] = False,
) -> None:
    """Write a verifiers 0.4 (v1) package: Taskset + Toolset over the same MCP server + the env's rewards."""
    from toolgym.export.verifiers import export_verifiers

    pkg_dir = export_verifiers(env, out, n=n, seed=seed, package=package, env_kwargs=_kv(env_arg), force=force)
    spec = json.loads((pkg_dir / "toolgym_export.json").read_text())
    typer.echo(f"wrote {pkg_dir} ({spec['num_tasks']} tasks; tools: {', '.join(spec['tools'])}; rewards: "
               + ", ".join(f"{r['name']}={r['weight']}" for r in spec["rewards"]) + ")")
    typer.echo(f"run:  PYTHONPATH={out} vf-eval {pkg_dir.name} -n 3 --model MODEL "
               "--client.base-url URL --client.api-key-var VAR --no-push")


__all__ = ["app"]
