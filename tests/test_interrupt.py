"""A real `toolgym eval` process interrupted (Ctrl-C) or killed mid-run: no server process outlives it, and
`--resume` completes the run without re-running finished rollouts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from tg_testutil import read_jsonl

TOOLGYM = [sys.executable, "-m", "toolgym.cli"]


def _start(out: Path, transport: str) -> tuple[subprocess.Popen, list[psutil.Process]]:
    proc = subprocess.Popen([*TOOLGYM, "eval", "tictactoe", "-n", "12", "-c", "1", "-m", "scripted:minimax",
                             "-a", f"transport={transport}", "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 60
    while len(read_jsonl(out / "results.jsonl")) < 3:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, "no rollouts finished in 60 s"
        time.sleep(0.05)
    servers = psutil.Process(proc.pid).children(recursive=True)
    assert servers, "the server should be a child process"
    return proc, servers


def _gone(procs: list[psutil.Process], timeout: float = 10.0) -> list[psutil.Process]:
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return alive


@pytest.mark.slow  # a benchmark, docs build or resume run: CI runs it (-m slow), the default suite not
@pytest.mark.parametrize(("transport", "sig"), [("stdio", signal.SIGINT), ("http", signal.SIGKILL),
                                                ("http", signal.SIGTERM)])  # SIGTERM: handled as SIGINT
def test_interrupted_eval_leaves_no_server_and_resumes(tmp_path: Path, transport: str, sig: int) -> None:
    out = tmp_path / "run"
    proc, servers = _start(out, transport)
    os.kill(proc.pid, sig)
    proc.wait(30)
    assert not _gone(servers), f"server processes outlived the eval process ({transport}, {sig!r})"
    done = {(r["example_id"], r["rollout_index"]) for r in read_jsonl(out / "results.jsonl") if r["error"] is None}
    assert len(done) >= 3
    res = subprocess.run([*TOOLGYM, "eval", "tictactoe", "-n", "12", "-c", "4", "-m", "scripted:minimax",
                          "-a", f"transport={transport}", "-o", str(out), "--resume"],
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-2000:]
    for line in (out / "results.jsonl").read_text().splitlines():
        assert isinstance(json.loads(line), dict)  # strict JSONL: no torn line left by the killed run
    recs = read_jsonl(out / "results.jsonl")
    keys = [(r["example_id"], r["rollout_index"]) for r in recs if r["error"] is None]
    assert sorted(set(keys)) == [(i, 0) for i in range(12)]
    assert len(keys) == len(set(keys)), "a finished rollout was run again"
    assert json.loads((out / "summary.json").read_text())["rollouts"] == 12


def test_sigusr1_prints_where_each_task_waits(capfd: pytest.CaptureFixture[str]) -> None:
    """`dump_tasks_on_sigusr1` (installed by `toolgym eval` inside its loop): SIGUSR1 prints every asyncio task with
    the line it waits at, to stderr, and the run goes on."""
    import asyncio

    from toolgym.journal import dump_tasks_on_sigusr1

    async def go() -> str:
        dump_tasks_on_sigusr1()
        gate = asyncio.Event()
        waiter = asyncio.create_task(gate.wait(), name="waits-for-the-gate")
        await asyncio.sleep(0.05)
        os.kill(os.getpid(), signal.SIGUSR1)
        await asyncio.sleep(0.2)
        gate.set()
        await waiter
        return "went on"

    try:
        assert asyncio.run(go()) == "went on"
    finally:
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    err = capfd.readouterr().err
    assert "--- <Task" in err and "waits-for-the-gate" in err and "locks.py" in err, err[-2000:]


_INTERRUPTIBLE = r'''
import asyncio, os, signal, sys, threading, time
from toolgym.journal import run_interruptible

sig = getattr(signal, sys.argv[1])
hits = int(sys.argv[2])
ready = threading.Event()
cleaned = []

def sender():  # from another thread, as a child watcher's would take it
    ready.wait(10)
    for _ in range(hits):
        time.sleep(0.3)
        os.kill(os.getpid(), sig)

async def main():
    ready.set()
    try:
        await asyncio.Event().wait()  # idle: nothing else would wake the loop
    finally:
        cleaned.append("finally")
        if hits > 1:
            await asyncio.sleep(60)  # a stop that hangs: only the second signal ends it

threading.Thread(target=sender, daemon=True).start()
before = signal.getsignal(signal.SIGTERM)
t0 = time.monotonic()
try:
    run_interruptible(main(), "the test")
except KeyboardInterrupt:
    print("KeyboardInterrupt", cleaned, f"{time.monotonic() - t0:.1f}", signal.getsignal(signal.SIGTERM) is before)
'''


@pytest.mark.parametrize(("sig", "hits"), [("SIGINT", 1), ("SIGTERM", 1), ("SIGINT", 2)])
def test_run_interruptible_stops_cleanly_on_a_signal_from_any_thread(sig: str, hits: int) -> None:
    """`run_interruptible`: the first SIGINT/SIGTERM cancels the main coroutine (its `finally` runs) and ends in
    KeyboardInterrupt, even with the event loop idle and the signal sent from another thread; a second one forces
    the stop while that `finally` hangs; the previous SIGTERM handler is back afterwards. A real process."""
    res = subprocess.run([sys.executable, "-c", _INTERRUPTIBLE, sig, str(hits)], capture_output=True, text=True,
                         timeout=60)
    words = res.stdout.split()
    assert words[:2] == ["KeyboardInterrupt", "['finally']"], res.stdout + res.stderr[-2000:]
    assert float(words[2]) < 20, res.stdout  # not the 60 s sleep: the second signal forced it
    assert words[3] == "True"
    assert f"{sig}: stopping the test" in res.stderr
