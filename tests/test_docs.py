"""The docs do not lie: every `toolgym` command in a ```bash block of docs/ and README.md parses against the real
command line (its sub-commands and options exist, its values convert), the cheap ones are run, and a ```text block
right after a one-command ```bash block is output that the command must print. The site builds with
`mkdocs build --strict` when mkdocs is installed.

Cheap, so run: `--help`, `toolgym envs`, `toolgym tools ENV`, and `toolgym eval` with a scripted player
(`-m scripted:NAME`, at most 100 examples, no endpoint). Commands with placeholders (`MODEL`, `URL`, `<name>`) and
everything that trains, serves, exports or loads a model are parsed only.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import typer

from toolgym.cli import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^( *)```(\w*)[^\n]*\n(.*?)^ *```", re.M | re.S)
_PLACEHOLDER = re.compile(r"<[^>]+>|\.\.\.|\b[A-Z][A-Z_]{2,}\b")


def _blocks(path: Path) -> list[tuple[str, str]]:
    text = path.read_text(encoding="utf-8")
    return [(m.group(2), textwrap.dedent(m.group(3))) for m in _FENCE.finditer(text)]


def _commands(block: str) -> list[list[str]]:
    """The `toolgym` commands of a bash block, as argument lists (continuations joined, comments dropped, `&&`
    chains split, a `.venv/bin/` prefix removed)."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        for part in line.split("&&"):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:
                continue
            if words and words[0].removeprefix(".venv/bin/") == "toolgym":
                out.append(words[1:])
    return out


def documented() -> list[tuple[str, list[str], str | None]]:
    """(where, argv, expected output or None) for every documented command (the first place it appears)."""
    found: list[tuple[str, list[str], str | None]] = []
    seen: set[tuple[str, ...]] = set()
    for page in PAGES:
        blocks = _blocks(page)
        for i, (lang, body) in enumerate(blocks):
            if lang not in ("bash", "sh", "shell", "console"):
                continue
            cmds = _commands(body)
            expected = blocks[i + 1][1] if len(cmds) == 1 and i + 1 < len(blocks) and blocks[i + 1][0] == "text" \
                else None
            for c in cmds:
                if tuple(c) not in seen:
                    seen.add(tuple(c))
                    found.append((f"{page.relative_to(ROOT)}: toolgym {' '.join(c)}", c, expected))
    return found


DOCUMENTED = documented()


def _resolve(argv: list[str]) -> tuple[object, list[str], list[str]]:
    """(command object, its name path, the remaining arguments) for an argv of the `toolgym` group."""
    cmd: object = typer.main.get_command(app)
    path: list[str] = []
    rest = list(argv)
    while rest and hasattr(cmd, "commands") and not rest[0].startswith("-"):
        sub = cmd.commands.get(rest[0])  # type: ignore[attr-defined]
        assert sub is not None, f"no command {' '.join(['toolgym', *path, rest[0]])}"
        cmd, path, rest = sub, [*path, rest[0]], rest[1:]
    return cmd, path, rest


def _cheap(argv: list[str]) -> bool:
    if "--help" in argv or argv[:1] == ["envs"]:
        return True
    if any(_PLACEHOLDER.search(a) for a in argv):
        return False
    if argv[:1] == ["tools"]:
        return True
    if argv[:1] == ["eval"] and "--base-url" not in argv:
        model = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-m", "--model")), "")
        n = next((int(argv[i + 1]) for i, a in enumerate(argv[:-1]) if a in ("-n", "--num-examples")), 20)
        return model.startswith("scripted:") and 0 < n <= 100
    return False


def test_the_docs_have_commands_to_check() -> None:
    assert len(DOCUMENTED) >= 20, DOCUMENTED
    assert sum(_cheap(argv) for _, argv, _ in DOCUMENTED) >= 8
    assert any(exp for *_, exp in DOCUMENTED)


@pytest.mark.parametrize(("where", "argv"), [(w, a) for w, a, _ in DOCUMENTED], ids=[w for w, _, _ in DOCUMENTED])
def test_documented_command_parses(where: str, argv: list[str]) -> None:
    cmd, path, rest = _resolve(argv)
    if "--help" in rest or hasattr(cmd, "commands"):
        return  # help and groups: run by the next test / nothing to parse
    try:
        cmd.make_context(" ".join(["toolgym", *path]), list(rest))  # type: ignore[attr-defined]
    except Exception as exc:  # click's UsageError / BadParameter: the doc names an option or value that is wrong
        pytest.fail(f"{where}: {type(exc).__name__}: {exc}")


@pytest.mark.parametrize(("where", "argv", "expected"), [d for d in DOCUMENTED if _cheap(d[1])],
                         ids=[d[0] for d in DOCUMENTED if _cheap(d[1])])
def test_cheap_documented_command_runs(where: str, argv: list[str], expected: str | None, tmp_path: Path) -> None:
    for name in ("examples", "envs", "servers"):  # relative paths in the docs are from the repository root;
        # results folders land in the temporary directory
        (tmp_path / name).symlink_to(ROOT / name)
    exe = Path(sys.executable).with_name("toolgym")  # a real process: stdio servers need real file descriptors
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "toolgym.cli"]
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TOOLGYM_WIKI_INDEX_DIR": str(tmp_path / "wiki-index")}
    proc = subprocess.run([*cmd, *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{where}\n{output}"
    for line in (expected or "").splitlines():
        if line.strip() and "..." not in line and "…" not in line:
            assert line.strip() in output, f"{where}: expected {line.strip()!r} in the output:\n{output}"


def test_cli_reference_is_generated_from_the_app() -> None:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "scripts" / "docs_hooks.py")
    hooks = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(hooks)  # type: ignore[union-attr]
    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    assert hooks.MARKER in page
    text = hooks.on_page_markdown(page, None, None, None)
    for name in ("eval", "envs", "tools", "serve", "synth", "sft", "train", "plot", "model init-tiny", "export verifiers"):
        assert f"## `toolgym {name}`" in text, name
    assert "--num-examples" in text and "--max-concurrency" in text and "Usage: toolgym eval" in text


@pytest.mark.slow  # a benchmark, docs build or resume run: CI runs it (-m slow), the default suite not
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    if any(importlib.util.find_spec(m) is None for m in ("mkdocs", "mkdocstrings", "griffe_pydantic")):
        pytest.skip("the docs packages are not installed (pip install -e '.[docs]'; setup.sh does)")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()
    assert "toolgym eval" in (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    # the API reference renders config fields (griffe-pydantic), formulas (arithmatex) and docstring tables
    training = (tmp_path / "site" / "reference" / "api" / "training" / "index.html").read_text()
    assert "Peak learning rate (AdamW)." in training and "pydantic-field" in training
    loss = training[training.index("Per-token objective"):][:6000]
    assert '<span class="arithmatex">' in loss and "<table>" in loss and "<em>A" not in loss
    core = (tmp_path / "site" / "reference" / "api" / "core" / "index.html").read_text()
    assert "<td><code>Rubric</code></td>" in core


def _results_table(text: str) -> str:
    start = text.index("| what (measured")
    return text[start : text.index("\n\n", start)]


def test_site_home_shows_the_readme_results() -> None:
    """docs/index.md repeats the README's results table (links relative to docs/): a number updated in one place
    only would leave the other stale."""
    readme = _results_table((ROOT / "README.md").read_text()).replace("](docs/", "](")
    assert _results_table((ROOT / "docs" / "index.md").read_text()) == readme
