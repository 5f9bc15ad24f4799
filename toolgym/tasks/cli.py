"""`toolgym tasks ...` (a typer sub-app the main CLI mounts as `tasks`): `generate` verified tasks from a server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

app = typer.Typer(help="Tasks from the server itself.", no_args_is_help=True, pretty_exceptions_show_locals=False)
console = Console()


@app.callback()
def _group() -> None:
    """Tasks from the server itself: generate verified tasks and a held-out split."""


def _fail(msg: str) -> None:
    console.print(f"[bold red]error:[/] {msg}", soft_wrap=True)
    raise typer.Exit(2)


def _pairs(pairs: list[str], what: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for p in pairs:
        if "=" not in p:
            _fail(f"{what} {p!r}: expected NAME=VALUE")
        k, v = p.split("=", 1)
        try:
            val = json.loads(v)
        except json.JSONDecodeError:
            val = v
        out.setdefault(k.strip(), []).append(val)
    return out


def heldout_path(out: Path) -> Path:
    """Where the held-out split of `out` goes by default: `tasks.jsonl` -> `tasks.heldout.jsonl`."""
    return out.with_name(out.stem + ".heldout" + out.suffix)


def _task_rows(path: Path) -> list[dict[str, Any]]:
    try:
        rows = [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        _fail(f"--extend: {path}: {exc}")
    if not all(isinstance(r, dict) and isinstance(r.get("expected_calls"), list) for r in rows):
        _fail(f"--extend: {path} is not a tasks file (every row needs expected_calls)")
    return rows


@app.command("generate")
def generate_cmd(
    env_name: str = typer.Argument(..., help="Environment name or env config path (its server, sandboxes, setup)."),
    num: int = typer.Option(200, "-n", "--num", help="Training tasks to write."),
    heldout: int = typer.Option(60, "--heldout", help="Held-out tasks to write (values and tool pairs never in training)."),
    out: Path = typer.Option(..., "-o", "--out", help="Training tasks (JSONL)."),
    heldout_out: Path | None = typer.Option(None, "--heldout-out", help="Held-out tasks (default: OUT's stem + .heldout.jsonl)."),
    seed: int = typer.Option(0, "--seed"),
    no_tool_share: float = typer.Option(0.15, "--no-tool-share", min=0.0, max=0.9, help="Share of no-tool tasks (abstention)."),
    chain_share: float = typer.Option(0.25, "--chain-share", min=0.0, max=1.0, help="Share of two-call tasks among tool tasks."),
    ref_share: float = typer.Option(0.4, "--ref-share", min=0.0, max=1.0, help="Share of two-call tasks whose first "
                                    "result lists entries that refer to one ('the first entry of that result') "
                                    "instead of stating the second value."),
    listing_first: float = typer.Option(0.0, "--listing-first", min=0.0, max=1.0, help="Share of two-call attempts "
                                        "that start with a tool whose results listed entries so far (more references)."),
    extend: Path | None = typer.Option(None, "--extend", help="TASKS.jsonl of an existing set (TASKS.heldout.jsonl "
                                       "beside it): add to it -- no new training task uses a value or tool pair held "
                                       "out there, and ids continue its numbering."),
    heldout_share: float = typer.Option(0.2, "--heldout-share", min=0.01, max=0.9,
                                        help="Share of free values (and tool pairs) held out."),
    tool: list[str] = typer.Option([], "--tool", help="Only these tools (repeatable)."),
    exclude: list[str] = typer.Option([], "--exclude", help="Leave these tools out (repeatable)."),
    hint: list[str] = typer.Option([], "--hint", help="PARAM=VALUE: a value to try for a parameter (repeatable)."),
    field: list[str] = typer.Option([], "--field", help="KEY=VALUE: a field every task carries (fixtures, setup calls)."),
    error_pattern: list[str] = typer.Option([], "--error-pattern", help="Regex: a result matching it is a failed call "
                                            "(repeatable; default: results starting with error/exception/not found)."),
    concurrency: int = typer.Option(4, "-c", "--concurrency", min=1, help="Attempts in flight (each in its own episode)."),
    max_attempts: int | None = typer.Option(None, "--max-attempts", min=1, help="Attempt budget (default 12 x the tasks)."),
    no_replay: bool = typer.Option(False, "--no-replay", help="Skip re-running each kept task in a fresh episode."),
    paraphrase: str | None = typer.Option(None, "--paraphrase", help="MODEL: reword prompts with this model at "
                                          "--base-url (OpenAI-compatible); rewordings that change a value are not used."),
    base_url: str | None = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint for --paraphrase."),
    env_arg: list[str] = typer.Option([], "-a", "--env-arg", help="Env argument key=value (repeatable)."),
) -> None:
    """Generate tasks by calling the server: schema-valid arguments, each call executed in a fresh episode and kept
    only if it succeeds, answers from the results, no-tool tasks, and a held-out split by values."""
    import os

    from toolgym.registry import load_env, parse_env_args
    from toolgym.tasks.generate import DEFAULT_ERROR_PATTERNS, GenerationError, GenOptions, generate, openai_paraphraser

    if paraphrase and not base_url:
        _fail("--paraphrase needs --base-url (an OpenAI-compatible endpoint)")
    try:
        env = load_env(env_name, **parse_env_args(env_name, env_arg))
    except (ValueError, TypeError, FileNotFoundError) as exc:
        _fail(str(exc))
    fields = {k: v[-1] for k, v in _pairs(field, "--field").items()}
    keep_rows = _task_rows(extend) if extend else []
    avoid_rows = _task_rows(heldout_path(extend)) if extend else []
    opts = GenOptions(
        n_train=num, n_heldout=heldout, seed=seed, no_tool_share=no_tool_share, chain_share=chain_share,
        ref_share=ref_share, listing_first=listing_first, avoid=avoid_rows, keep=keep_rows,
        heldout_share=heldout_share, tools=tool or None, exclude=exclude, hints=_pairs(hint, "--hint"), fields=fields,
        error_patterns=tuple(error_pattern) or DEFAULT_ERROR_PATTERNS, concurrency=concurrency,
        max_attempts=max_attempts, replay=not no_replay,
        paraphrase=openai_paraphraser(paraphrase, base_url or "", os.environ.get("OPENAI_API_KEY"))
        if paraphrase else None)
    held_path = heldout_out or heldout_path(out)
    prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
                    TimeElapsedColumn(), console=console)
    with prog:
        bar = prog.add_task("attempts", total=None, info="")

        def tick(r: dict[str, Any]) -> None:
            prog.update(bar, description="two-call attempts" if r["chain"] else "attempts", completed=r["kept"],
                        total=r["target"], info=f"tried {r['tried']}")

        async def go() -> dict[str, Any]:
            try:
                return await generate(env, opts, tick)
            finally:
                await env.aclose()

        from toolgym.journal import run_interruptible

        try:
            res = run_interruptible(go(), "task generation")  # Ctrl-C / SIGTERM: servers and sandboxes removed
        except (GenerationError, ValueError) as exc:
            _fail(str(exc))
    for path, rows in ((out, res["train"]), (held_path, res["heldout"])):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    s = res["summary"]
    summary_path = out.with_name(out.stem + ".summary.json")
    summary_path.write_text(json.dumps(s, indent=2, ensure_ascii=False))
    console.print(f"wrote {s['train']} training tasks to {out} and {s['heldout']} held-out tasks to {held_path} "
                  f"({s['attempts']} attempts, {s['duplicates_dropped']} repeated tasks dropped; successful calls per "
                  f"tool: {s['succeeded_calls']}; summary {summary_path})")
    if s["tools_never_succeeded"]:
        console.print(f"[yellow]no successful call of:[/] {', '.join(s['tools_never_succeeded'])} "
                      f"(errors in the summary; --hint PARAM=VALUE gives the sampler values to try)")


if __name__ == "__main__":
    app()
