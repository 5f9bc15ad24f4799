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


@app.command("verifiers")
def verifiers_cmd(
    env: Annotated[str, typer.Argument(help="Installed env name (tictactoe) or env config file (examples/x/env.toml).")],
    out: Annotated[Path, typer.Argument(help="Output directory for the verifiers package.")],
    n: Annotated[Optional[int], typer.Option("-n", help="Number of tasks to export (default: the env's dataset).")] = None,
    seed: Annotated[int, typer.Option(help="Dataset seed.")] = 0,
    package: Annotated[Optional[str], typer.Option(help="Python package name (default: <env name>_vf).")] = None,
    env_arg: Annotated[list[str], typer.Option("--env-arg", "-a", help="Env option KEY=VALUE, typed by the env's declaration (see `toolgym envs ENV`).")] = [],  # noqa: B006
    force: Annotated[bool, typer.Option(help="Overwrite a non-empty OUT.")] = False,
) -> None:
    """Write a verifiers 0.4 (v1) package: Taskset + Toolset over the same MCP server + the env's rewards."""
    from toolgym.export.verifiers import export_verifiers
    from toolgym.registry import parse_env_args

    try:
        env_kwargs = parse_env_args(env, env_arg)
    except (ValueError, FileNotFoundError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    pkg_dir = export_verifiers(env, out, n=n, seed=seed, package=package, env_kwargs=env_kwargs, force=force)
    spec = json.loads((pkg_dir / "toolgym_export.json").read_text())
    typer.echo(f"wrote {pkg_dir} ({spec['num_tasks']} tasks; tools: {', '.join(spec['tools'])}; rewards: "
               + ", ".join(f"{r['name']}={r['weight']}" for r in spec["rewards"]) + ")")
    typer.echo(f"run:  PYTHONPATH={out} vf-eval {pkg_dir.name} -n 3 --model MODEL "
               "--client.base-url URL --client.api-key-var VAR --no-push")


__all__ = ["app"]
