"""`toolgym model ...` commands (a typer sub-app the main CLI mounts as `model`)."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(help="Local models: build the tiny offline model.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Local models (tiny offline model; policy URIs hf:PATH and vllm:PATH)."""


@app.command("init-tiny")
def init_tiny_cmd(
    out: Path = typer.Option(..., "--out", help="Directory to write the model + tokenizer to."),
    size: str | None = typer.Option(None, "--size", help="tiny (hidden 64, 2 layers) | small (128, 3) | medium (192, 4) "
                                    "| base (256, 4); default tiny, or small with --base toolcall."),
    base: str = typer.Option("random", "--base", help="random: random weights (the tokenizer trained on --corpus); "
                             "toolcall: the tool-calling base -- its own tokenizer, then pre-training on random tool "
                             "use (see docs/models.md)."),
    minutes: float | None = typer.Option(None, "--minutes", help="--base toolcall: pre-train for this wall time "
                                         "(default 25)."),
    steps: int | None = typer.Option(None, "--steps", help="--base toolcall: pre-train for this many steps instead "
                                     "(reproducible)."),
    num_threads: int = typer.Option(1, "--num-threads", help="--base toolcall: torch CPU threads."),
    seed: int = typer.Option(0, "--seed", help="Seed for the corpus, tokenizer and weights (deterministic)."),
    vocab_size: int = typer.Option(2048, "--vocab-size", help="Upper bound on the BPE vocabulary."),
    corpus: list[str] = typer.Option(["chatml", "tictactoe"], "--corpus", help="Corpus sources (repeatable)."),
    corpus_file: list[Path] = typer.Option([], "--corpus-file", help="Extra tokenizer corpus: text files, or "
                                           "`toolgym synth` JSONL rows (their messages, thoughts and tool schemas)."),
) -> None:
    """Build a Qwen2-style model with a locally trained tokenizer (no hub needed): random weights, or with
    `--base toolcall` pre-trained to call tools it has never seen."""
    import json

    from toolgym.models.tiny import init_tiny

    if base not in ("random", "toolcall"):
        raise typer.BadParameter(f"--base must be random or toolcall, not {base!r}")
    if base == "toolcall":
        _toolcall(out, size or "small", seed, minutes, steps, num_threads)
        return
    if minutes is not None or steps is not None:
        raise typer.BadParameter("--minutes/--steps apply to --base toolcall")
    size = size or "tiny"

    path = init_tiny(out, size=size, seed=seed, vocab_size=vocab_size, corpus_sources=corpus, extra_corpus_files=corpus_file)
    info = json.loads((path / "toolgym_tiny.json").read_text())
    typer.echo(f"wrote {path} ({info['params']:,} params, vocab {info['vocab_size']}); use it as hf:{path}")


def _toolcall(out: Path, size: str, seed: int, minutes: float | None, steps: int | None, threads: int) -> None:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from toolgym.models.toolcall import build_toolcall_base

    if minutes is not None and steps is not None:
        raise typer.BadParameter("give --minutes or --steps, not both")
    with Progress(TextColumn("pre-training"), BarColumn(), TextColumn("{task.fields[info]}"), TimeElapsedColumn()) as prog:
        bar = prog.add_task("pretrain", total=1.0, info="")

        def tick(r: dict) -> None:  # type: ignore[type-arg]
            done = r["step"] / steps if steps else r["frac"]
            prog.update(bar, completed=done, info=f"step {r['step']} loss {r['loss']:.3f}")

        info = build_toolcall_base(out, size=size, steps=steps, minutes=minutes if minutes is not None else 25.0,
                                   seed=seed, num_threads=threads, on_step=tick)
    ev = info.get("eval", {})
    rates = ", ".join(f"{k} {100 * v['rate']:.0f} %" for k, v in ev.items() if isinstance(v, dict) and v.get("rate") is not None)
    typer.echo(f"wrote {out} ({info['params']:,} params, {info['steps']} steps, {info['build_s'] / 60:.1f} min); "
               f"fresh random tools: {rates}; use it as hf:{out}")


@app.command("eval-base")
def eval_base_cmd(
    model: Path = typer.Argument(..., help="A model folder (e.g. one built with --base toolcall)."),
    n: int = typer.Option(200, "-n", help="Fresh random conversations."),
    seed: int = typer.Option(12345, "--seed"),
) -> None:
    """Exact calls, abstention and answers of a model on fresh random tools it has never seen (95 % intervals)."""
    import json

    from toolgym.models.toolcall import eval_toolcall

    typer.echo(json.dumps(eval_toolcall(model, n=n, seed=seed), indent=2))


if __name__ == "__main__":
    app()
