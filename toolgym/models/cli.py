"""`toolgym model ...` commands (a typer sub-app the main CLI mounts as `model`)."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(help="Local models: build the tiny offline model, average checkpoints.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Local models (tiny offline model; policy URIs hf:PATH and vllm:PATH)."""


@app.command("init-tiny")
def init_tiny_cmd(
    out: Path = typer.Option(..., "--out", help="Directory to write the model + tokenizer to."),
    size: str = typer.Option("tiny", "--size", help="tiny (hidden 64, 2 layers) | small (128, 3) | medium (192, 4) "
                             "| base (256, 4) | large (512, 8: ~30M, for a GPU)."),
    seed: int = typer.Option(0, "--seed", help="Seed for the corpus, tokenizer and weights (deterministic)."),
    vocab_size: int = typer.Option(2048, "--vocab-size", help="Upper bound on the BPE vocabulary."),
    corpus: list[str] = typer.Option(["chatml", "tictactoe"], "--corpus", help="Corpus sources (repeatable)."),
    corpus_file: list[Path] = typer.Option([], "--corpus-file", help="Extra tokenizer corpus: text files, or "
                                           "`toolgym synth` JSONL rows (their messages, thoughts and tool schemas)."),
) -> None:
    """Build a random-weight Qwen2-style model with a locally trained tokenizer (no hub needed). The tool-calling
    base, pre-trained to call tools it has never seen, is `toolgym pretrain`."""
    import json

    from toolgym.models.tiny import init_tiny

    path = init_tiny(out, size=size, seed=seed, vocab_size=vocab_size, corpus_sources=corpus, extra_corpus_files=corpus_file)
    info = json.loads((path / "toolgym_tiny.json").read_text())
    typer.echo(f"wrote {path} ({info['params']:,} params, vocab {info['vocab_size']}); use it as hf:{path}")


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


@app.command("average")
def average_cmd(
    sources: list[Path] = typer.Argument(..., help="A training run's folder (its checkpoints/step_N/model), or two "
                                         "model folders or more."),
    out: Path = typer.Option(..., "--out", "-o", help="Directory to write the averaged model to."),
    steps: str = typer.Option("", "--steps", help="With a run folder: the steps to average, e.g. 40,50,60."),
    last: int = typer.Option(3, "--last", min=2, help="With a run folder and no --steps: its last N checkpoints."),
) -> None:
    """Average checkpoints' weights uniformly into one model (a checkpoint soup): a run's last ones, chosen steps,
    or model folders."""
    from toolgym.models.average import average_models, run_checkpoints

    try:
        chosen = [int(s) for s in steps.split(",") if s.strip()]
    except ValueError:
        raise typer.BadParameter(f"--steps takes step numbers separated by commas, got {steps!r}") from None
    try:
        if len(sources) == 1 and (sources[0] / "checkpoints").is_dir():
            models = run_checkpoints(sources[0], chosen or None, last)
        elif chosen:
            raise typer.BadParameter("--steps needs one run folder (with checkpoints/)")
        else:
            models = sources
        average_models(models, out)
    except (FileNotFoundError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {out}: the mean of {len(models)} checkpoints ({', '.join(str(m) for m in models)})")


if __name__ == "__main__":
    app()
