"""mkdocs hooks (`hooks:` in mkdocs.yml): the CLI reference, generated at build time from the typer app, and the
figures the docs show, taken from where the examples write them (no copies in docs/).

`cli_reference()` renders `toolgym [COMMAND ...] --help` for every command and sub-command of `toolgym.cli:app`, as
the terminal shows it (100 columns, no colour), under one heading per command; `docs/reference/cli.md` holds the
marker it replaces. The same function backs `tests/test_docs.py`, so the page and the CLI cannot drift apart.
`env_options_reference()` does the same for the options every installed env declares (`docs/reference/env-options.md`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- toolgym-cli-reference -->"
ENV_MARKER = "<!-- toolgym-env-options -->"
FIGURES = {"assets/tictactoe-curves.png": ROOT / "examples" / "tictactoe" / "curves.png",
           "assets/multi-server-heldout.png": ROOT / "examples" / "multi_server" / "heldout.png",
           "assets/tictactoe-weak-grpo.png": ROOT / "examples" / "tictactoe" / "weak_curves.png",
           "assets/tictactoe-gpu-sweep.png": ROOT / "examples" / "tictactoe" / "gpu_sweep.png",
           "assets/tictactoe-noisy-grpo.png": ROOT / "examples" / "tictactoe" / "noisy_curves.png",
           "assets/tictactoe-reader-grpo.png": ROOT / "examples" / "tictactoe" / "reader_curves.png",
           "assets/multi-server-grpo.png": ROOT / "examples" / "multi_server" / "grpo_curves.png",
           "assets/tictactoe-forced-grpo.png": ROOT / "examples" / "tictactoe" / "forced_curves.png",
           "assets/tictactoe-forced-arms.png": ROOT / "examples" / "tictactoe" / "forced_arms.png",
           "assets/tictactoe-forced-trappy.png": ROOT / "examples" / "tictactoe" / "forced_trappy.png",
           "assets/tictactoe-forced-restart.png": ROOT / "examples" / "tictactoe" / "forced_restart.png",
           "assets/multi-server-base-heldout.png": ROOT / "examples" / "multi_server" / "base_heldout.png",
           "assets/multi-server-base-grpo.png": ROOT / "examples" / "multi_server" / "base_grpo_curves.png",
           "assets/own-server-grpo.png": ROOT / "examples" / "own_server" / "grpo_curves.png",
           "assets/own-server-grpo-quoting.png": ROOT / "examples" / "own_server" / "grpo_quoting_curves.png",
           "assets/multi-server-quote-heldout.png": ROOT / "examples" / "multi_server" / "quote_heldout.png",
           "assets/multi-server-quote-grpo.png": ROOT / "examples" / "multi_server" / "quote_grpo_curves.png",
           "assets/tictactoe-forced-retry.png": ROOT / "examples" / "tictactoe" / "forced_retry.png",
           "assets/tictactoe-forced-late.png": ROOT / "examples" / "tictactoe" / "forced_late.png",
           "assets/tictactoe-forced-replay.png": ROOT / "examples" / "tictactoe" / "forced_replay.png",
           "assets/tictactoe-forced-optimal.png": ROOT / "examples" / "tictactoe" / "forced_optimal.png",
           "assets/tictactoe-forced-decisive.png": ROOT / "examples" / "tictactoe" / "forced_decisive.png",
           "assets/tictactoe-forced-anneal.png": ROOT / "examples" / "tictactoe" / "forced_anneal.png",
           "assets/tictactoe-forced-shuffled.png": ROOT / "examples" / "tictactoe" / "forced_shuffled.png",
           "assets/tictactoe-forced-ema.png": ROOT / "examples" / "tictactoe" / "forced_ema.png",
           "assets/tictactoe-forced-slow.png": ROOT / "examples" / "tictactoe" / "forced_slow.png",
           "assets/tictactoe-forced-block.png": ROOT / "examples" / "tictactoe" / "forced_block.png",
           "assets/tictactoe-forced-temp.png": ROOT / "examples" / "tictactoe" / "forced_temp.png",
           "assets/tictactoe-forced-opt.png": ROOT / "examples" / "tictactoe" / "forced_opt.png",
           "assets/tictactoe-forced-sym.png": ROOT / "examples" / "tictactoe" / "forced_sym.png",
           "assets/tictactoe-forced-sym3.png": ROOT / "examples" / "tictactoe" / "forced_sym3.png",
           "assets/tictactoe-forced-probe.png": ROOT / "examples" / "tictactoe" / "forced_probe.png",
           "assets/tictactoe-forced-exact.png": ROOT / "examples" / "tictactoe" / "forced_exact.png",
           "assets/tictactoe-forced-best.png": ROOT / "examples" / "tictactoe" / "forced_best.png",
           "assets/tictactoe-forced-mix.png": ROOT / "examples" / "tictactoe" / "forced_mix.png",
           "assets/tictactoe-forced-keep100.png": ROOT / "examples" / "tictactoe" / "forced_keep100.png",
           "assets/tictactoe-forced-frontier.png": ROOT / "examples" / "tictactoe" / "forced_frontier.png",
           "assets/notes-grpo-rewards.png": ROOT / "benchmarks" / "results" / "notes_grpo_rewards.png"}
HELP_ENV = {"COLUMNS": "100", "NO_COLOR": "1", "TERM": "dumb"}


def commands() -> list[tuple[list[str], Any]]:
    """Every command of the CLI as (path of names, command object), parents before their sub-commands."""
    import typer

    from toolgym.cli import app

    out: list[tuple[list[str], Any]] = []

    def walk(path: list[str], cmd: Any) -> None:
        out.append((path, cmd))
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            if not getattr(sub, "hidden", False):
                walk([*path, name], sub)

    walk([], typer.main.get_command(app))
    return out


def help_text(path: list[str]) -> str:
    """`toolgym PATH --help` as printed (trailing spaces and blank edges removed)."""
    from typer.testing import CliRunner

    from toolgym.cli import app

    res = CliRunner().invoke(app, [*path, "--help"], prog_name="toolgym", env=HELP_ENV, color=False)
    if res.exit_code != 0:
        raise RuntimeError(f"toolgym {' '.join(path)} --help exited {res.exit_code}: {res.output}")
    return "\n".join(line.rstrip() for line in res.output.splitlines()).strip("\n")


def _summary(cmd: Any) -> str:
    return " ".join((getattr(cmd, "help", None) or getattr(cmd, "short_help", None) or "").split("\n\n")[0].split())


def cli_reference() -> str:
    """Markdown: a table of the commands, then each command's help."""
    cmds = commands()
    rows = ["| command | what it does |", "| --- | --- |"]
    rows += [f"| [`toolgym {' '.join(p)}`](#{'-'.join(['toolgym', *p])}) | {_summary(c)} |" for p, c in cmds if p]
    sections = []
    for path, _ in cmds:
        name = " ".join(["toolgym", *path])
        anchor = "-".join(["toolgym", *path])
        sections.append(f"## `{name}` {{#{anchor}}}\n\n```text\n{help_text(path)}\n```")
    return "\n".join(rows) + "\n\n" + "\n\n".join(sections) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def env_options_reference() -> str:
    """Markdown: one table per installed env of the options it declares (`toolgym.options`), as `toolgym envs`
    prints them."""
    from toolgym.registry import available_envs, env_options

    sections = []
    for name in available_envs():
        opts = env_options(name)
        if opts is None:
            sections.append(f"## `{name}`\n\nOptions not declared: values are passed unchecked.")
            continue
        rows = ["| option | type | default | description |", "| --- | --- | --- | --- |"]
        for o in opts.values():
            desc = o.description + (f" [{o.range}]" if o.range else "")
            rows.append(f"| `{o.name}` | `{_cell(o.type_name)}` | `{_cell(o.default_text())}` | {_cell(desc)} |")
        sections.append(f"## `{name}`\n\n" + "\n".join(rows))
    return "\n\n".join(sections) + "\n"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **_: Any) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, cli_reference())
    if ENV_MARKER in markdown:
        markdown = markdown.replace(ENV_MARKER, env_options_reference())
    return markdown


def on_files(files: Any, config: Any, **_: Any) -> Any:
    from mkdocs.structure.files import File

    for uri, src in FIGURES.items():
        if src.is_file():
            files.append(File.generated(config, uri, abs_src_path=str(src)))
    return files
