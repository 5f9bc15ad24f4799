"""docs/getting-started.md works as written in a new terminal: every command of its ```bash blocks runs, in page
order, in `bash -c` with a clean environment (HOME in a temporary folder, PATH without the venv: nothing activated,
so a bare `toolgym` would fail with "command not found"), from a checkout-like folder whose `.venv` is the venv these
tests run in. A ```text block after a one-command block is output that must appear (`...` in a line matches
anything). The ```python client block is saved as the file the next command runs (`call.py`); `toolgym serve` runs in
the background until the page ends, on a free port written in place of the page's 8770 (so parallel runs do not
collide), its `ready:` line awaited.

Two commands are not run, on purpose: `./setup.sh` (CI runs it on its fresh clone before the tests: the venv under
test is its result; running it here would reinstall into that venv) and `python -m pytest` (this suite). The default
suite runs the quick steps (envs, tools; `tests/test_docs.py` runs the scripted eval); `-m slow` runs every step --
the default-model eval, the training tour, serve and its client included -- and prints each step's time.

Outside a plain checkout (a git worktree run with PYTHONPATH pointing at its code), that PYTHONPATH is kept, so the
code under test is what runs; a plain checkout has none.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "getting-started.md"
_FENCE = re.compile(r"^( *)```(\w*)[^\n]*\n(.*?)^ *```", re.M | re.S)
NOT_RUN = {"./setup.sh": "CI runs it on the fresh clone before the tests; the venv under test is its result",
           ".venv/bin/python -m pytest -n 2": "the test suite itself"}
HEAVY = re.compile(r"toolgym (model|synth|sft)\b|toolgym eval tictactoe($| -m hf:)")
SERVES = re.compile(r"toolgym serve\b|python call\.py")  # the embedded model loads: 10-40 s
QUICK = re.compile(r"toolgym (envs|tools)\b")  # what the default suite runs (test_docs runs the scripted eval too)


@dataclass
class Step:
    command: str
    expected: str | None = None
    file: tuple[str, str] | None = None  # (name, text): write this file first (the page's python block)


def steps() -> list[Step]:
    blocks = [(m.group(2), textwrap.dedent(m.group(3))) for m in _FENCE.finditer(PAGE.read_text(encoding="utf-8"))]
    out: list[Step] = []
    pending_file: str | None = None
    for i, (lang, body) in enumerate(blocks):
        if lang == "python":
            pending_file = body
            continue
        if lang != "bash":
            continue
        commands = [c.strip() for c in body.replace("\\\n", " ").splitlines() if c.strip()
                    and not c.strip().startswith("#")]
        expected = blocks[i + 1][1] if len(commands) == 1 and i + 1 < len(blocks) and blocks[i + 1][0] == "text" \
            else None
        for c in commands:
            step = Step(c, expected)
            m = re.search(r"python (\S+\.py)\b", c)
            if m and pending_file is not None:
                step.file, pending_file = (m.group(1), pending_file), None
            out.append(step)
    return out


STEPS = steps()


def fresh_env(home: Path) -> dict[str, str]:
    env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "COLUMNS": "200",
           "NO_COLOR": "1", "TERM": "dumb"}
    if os.environ.get("PYTHONPATH"):  # a worktree under test (see the module docstring)
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def checkout(tmp: Path) -> Path:
    """A folder that looks like the repository's root to the page's commands, with `.venv` the venv under test."""
    repo = tmp / "repo"
    repo.mkdir()
    for name in ("envs", "servers", "examples", "toolgym", "docs", "setup.sh", "pyproject.toml"):
        (repo / name).symlink_to(ROOT / name)
    (repo / ".venv").symlink_to(Path(sys.executable).parent.parent)  # bin/python -> the venv's root
    (tmp / "home").mkdir()
    return repo


def matches(expected: str, output: str) -> list[str]:
    """Lines of `expected` missing from `output` (each line stripped; `...` matches anything)."""
    missing = []
    for line in expected.splitlines():
        line = line.strip()
        if not line:
            continue
        pattern = ".*?".join(re.escape(p) for p in line.split("..."))
        if not re.search(pattern, output):
            missing.append(line)
    return missing


def run_page(tmp: Path, include_heavy: bool) -> list[tuple[str, float]]:
    """Run the page's steps in order (all of them with `include_heavy`, else only the `QUICK` ones); returns
    (command, seconds) for each step run."""
    from toolgym.sandbox import free_port

    repo, env = checkout(tmp), fresh_env(tmp / "home")
    port = str(free_port())
    servers: list[subprocess.Popen[str]] = []
    times: list[tuple[str, float]] = []
    try:
        for step in STEPS:
            if step.command in NOT_RUN or (not include_heavy and not QUICK.search(step.command)):
                continue
            command = step.command.replace("8770", port)
            if step.file is not None:
                (repo / step.file[0]).write_text(step.file[1].replace("8770", port))
            t0 = time.perf_counter()
            if " serve " in f" {command} ":
                proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=repo, env=env, text=True,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                servers.append(proc)
                lines = []
                assert proc.stderr is not None
                for line in proc.stderr:
                    lines.append(line)
                    if line.startswith("ready: "):
                        break
                output = "".join(lines)
                assert "ready: " in output, f"{step.command}: no ready line\n{output}"
            else:
                res = subprocess.run(["bash", "-c", command], cwd=repo, env=env, capture_output=True, text=True,
                                     timeout=900, stdin=subprocess.DEVNULL)
                output = res.stdout + res.stderr
                assert res.returncode == 0, f"{step.command} (exit {res.returncode})\n{output[-3000:]}"
            times.append((step.command, time.perf_counter() - t0))
            missing = matches((step.expected or "").replace("8770", port), output)
            assert not missing, f"{step.command}: expected {missing} in the output:\n{output[-3000:]}"
    finally:
        for proc in servers:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return times


def test_the_page_calls_programs_by_their_venv_path() -> None:
    """No bare `toolgym`/`python`: a new terminal has no venv on its PATH."""
    assert len(STEPS) >= 10
    for step in STEPS:
        first = shlex.split(step.command)[0]
        assert first.startswith((".venv/bin/", "./")), step.command
    assert {s.command for s in STEPS} >= set(NOT_RUN)
    assert any(s.file for s in STEPS) and any(" serve " in f" {s.command} " for s in STEPS)
    setup = (ROOT / "setup.sh").read_text()
    assert os.access(ROOT / "setup.sh", os.X_OK) and "-m venv .venv" in setup and "-e \".[train" in setup


def test_quick_steps_work_in_a_fresh_shell(tmp_path: Path) -> None:
    times = run_page(tmp_path, include_heavy=False)
    ran = " ".join(c for c, _ in times)
    assert "toolgym envs" in ran and "toolgym tools" in ran and len(times) == 2


@pytest.mark.slow  # the default model's 20 games and the training tour: several minutes
@pytest.mark.timeout(1800)
def test_every_step_works_in_a_fresh_shell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    times = run_page(tmp_path, include_heavy=True)
    assert sum(HEAVY.search(c) is not None for c, _ in times) == 5
    assert sum(SERVES.search(c) is not None for c, _ in times) == 2
    with capsys.disabled():
        print("\ngetting-started.md, seconds per step:")
        for command, seconds in times:
            print(f"  {seconds:7.1f}  {command}")
