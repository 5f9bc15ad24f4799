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


if __name__ == "__main__":
    app()
