"""`toolgym synth` journals every finished game (`<out stem>.games.jsonl`) and `--resume` plays only the rest: a run
SIGKILLed mid-way and resumed writes the same data file as an uninterrupted run. Real tic-tac-toe MCP server
(in-process transport), scripted minimax teacher (deterministic on one-move tasks)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolgym.registry import load_env
from toolgym.train.synth import journal_path, synth

ARGS = ["-a", "task=move", "-a", "split=train", "-a", "transport=inprocess", "--teacher", "scripted:minimax",
        "-c", "1", "-n", "1500"]


def _synth_cli(out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "toolgym.cli", "synth", "tictactoe", *ARGS, "-o", str(out), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow  # a benchmark, docs build or resume run: CI runs it (-m slow), the default suite not
def test_a_killed_synth_resumes_to_the_same_data(tmp_path: Path) -> None:
    ref = tmp_path / "ref" / "data.jsonl"
    p = _synth_cli(ref)
    assert p.wait(timeout=240) == 0, p.stdout.read() if p.stdout else ""
    assert not journal_path(ref).exists()  # removed once the data file is written

    out = tmp_path / "run" / "data.jsonl"
    journal = journal_path(out)
    p = _synth_cli(out)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        if journal.exists() and journal.read_text().count("\n") > 200:
            break
        time.sleep(0.01)
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=30)
    games = journal.read_text().count("\n") - 1  # minus the run line
    assert 200 <= games < 1500 and not out.exists(), games

    p = _synth_cli(out)  # without --resume: refuses to start over the unfinished run
    assert p.wait(timeout=120) == 2
    assert "--resume" in (p.stdout.read() if p.stdout else "")

    p = _synth_cli(out, "--resume")
    assert p.wait(timeout=240) == 0, p.stdout.read() if p.stdout else ""
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["played"] == 1500 and summary["resumed"] >= games - 1  # a torn last line is played again
    assert _rows(out) == _rows(ref)
    assert not journal.exists()


def _rows(path: Path) -> list:  # type: ignore[type-arg]
    """The data rows without tool-call ids (a scripted teacher numbers its calls per process)."""

    def strip(x):  # type: ignore[no-untyped-def]
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in ("id", "tool_call_id")}
        return [strip(v) for v in x] if isinstance(x, list) else x

    return [strip(json.loads(line)) for line in path.read_text().splitlines()]


def _env():  # type: ignore[no-untyped-def]
    return load_env("tictactoe", transport="inprocess", task="move", split="train")


def _run(out: Path, n: int, stop_after: int | None = None, resume: bool = False, info: dict | None = None):  # type: ignore[no-untyped-def]
    from toolgym.policies import load_policy

    env = _env()
    policy = load_policy("scripted:minimax", env)
    tasks = env.build_dataset(n, seed=0)
    seen = []

    def on_done(t) -> None:  # type: ignore[no-untyped-def]
        seen.append(t.example_id)
        if stop_after is not None and len(seen) >= stop_after:
            raise RuntimeError("crash (simulated)")

    async def go():  # type: ignore[no-untyped-def]
        try:
            return await synth(env, policy, tasks, out, concurrency=2, on_done=on_done, resume=resume,
                               run_info=info or {"env": "tictactoe", "seed": 0})
        finally:
            await env.aclose()

    return asyncio.run(go()), seen


def test_resume_keeps_finished_games_checks_the_run_and_replays_errors(tmp_path: Path) -> None:
    out = tmp_path / "d.jsonl"
    with pytest.raises(RuntimeError, match="simulated"):
        _run(out, 30, stop_after=12)
    journal = journal_path(out)
    lines = journal.read_text().splitlines()
    assert json.loads(lines[0])["synth_run"] == {"env": "tictactoe", "seed": 0, "n": 30}
    assert len(lines) - 1 >= 12 and not out.exists()
    # a torn last line and an errored game: both are played again
    recs = [json.loads(x) for x in lines[1:]]
    recs[0]["error"] = "endpoint down (simulated)"
    journal.write_text("\n".join([lines[0], *map(json.dumps, recs[:-1])]) + "\n" + lines[-1][: len(lines[-1]) // 2])
    kept_before = {r["example_id"] for r in recs[1:-1]}

    with pytest.raises(FileExistsError, match="--resume"):
        _run(out, 30)
    with pytest.raises(ValueError, match="different run"):
        _run(out, 30, resume=True, info={"env": "tictactoe", "seed": 1})
    with pytest.raises(ValueError, match="different run"):
        _run(out, 31, resume=True)

    res, seen = _run(out, 30, resume=True)
    replayed = seen[len(kept_before):]  # on_done sees the kept games first, then the ones played now
    assert res["played"] == 30 and res["resumed"] == len(kept_before) and res["errors"] == 0
    assert set(replayed) == set(range(30)) - kept_before
    assert recs[0]["example_id"] in replayed and recs[-1]["example_id"] in replayed  # the errored and the torn one
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(r["example_id"] for r in rows) == list(range(30))
    assert not journal.exists()
