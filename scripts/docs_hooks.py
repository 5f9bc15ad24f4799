"""mkdocs hooks (`hooks:` in mkdocs.yml): the CLI reference, generated at build time from the typer app, and the
figures the docs show, taken from where the examples write them (no copies in docs/).

`cli_reference()` renders `toolgym [COMMAND ...] --help` for every command and sub-command of `toolgym.cli:app`, as
the terminal shows it (100 columns, no colour), under one heading per command; `docs/reference/cli.md` holds the
marker it replaces. The same function backs `tests/test_docs.py`, so the page and the CLI cannot drift apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- toolgym-cli-reference -->"
FIGURES = {"assets/tictactoe-curves.png": ROOT / "examples" / "tictactoe" / "curves.png"}
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


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **_: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, cli_reference())
    return markdown


def on_files(files: Any, config: Any, **_: Any) -> Any:
    from mkdocs.structure.files import File

    for uri, src in FIGURES.items():
        if src.is_file():
            files.append(File.generated(config, uri, abs_src_path=str(src)))
    return files
