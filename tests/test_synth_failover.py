"""`toolgym synth` (teacher data) over several OpenAI-compatible endpoints, one SIGKILLed mid-run.

The endpoints are `tests/servers/openai_stub.py`: a **fake model** (an HTTP stub that replays the tic-tac-toe env's
scripted minimax player over the OpenAI wire format), not a real LLM server -- it exercises the HTTP policy path
(requests, failover, cool-down, stats) and synth's bookkeeping, not model quality. The real-server version of this
check for `eval` is tests/models/test_vllm.py (needs vLLM).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from openai_stub import StubEndpoint, free_port
from typer.testing import CliRunner

from toolgym.cli import app

SERVERS = Path(__file__).parent / "servers"

# Endpoint A runs in a process of its own and SIGKILLs itself when its (K+1)-th request arrives, having answered K:
# no graceful shutdown, that request is cut off in flight and every later connection is refused. Killing from inside
# puts the kill at the same point of every run (a kill from the test on a timer or on B's count could land before A
# answered anything on a loaded machine).
_STUB_PROCESS = """
import os, signal, sys, time
sys.path.insert(0, sys.argv[1])
from openai_stub import StubEndpoint

class DiesAfter(StubEndpoint):
    async def chat(self, request):
        if self.served >= int(sys.argv[3]):
            os.kill(os.getpid(), signal.SIGKILL)
        return await super().chat(request)

with DiesAfter(port=int(sys.argv[2])) as stub:
    print("ready", flush=True)
    while True:
        time.sleep(3600)
"""


def _start_dying_stub(port: int, answers: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", _STUB_PROCESS, str(SERVERS), str(port), str(answers)],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if line.strip() != "ready":
        proc.kill()
        proc.wait(10)
        raise RuntimeError(f"stub endpoint process did not start (said {line!r}, exit {proc.poll()})")
    return proc


def test_synth_on_two_endpoints_survives_one_killed_mid_run(tmp_path: Path) -> None:
    """Fake model (openai_stub, a scripted minimax player behind HTTP), two endpoints A,B: `toolgym synth -n 16 -c 2
    --base-url A,B`; A is SIGKILLed at its 5th request (of ~75 in the run), with that request in flight. The run exits
    0, every game is written exactly once (example ids 0..15, none lost, none duplicated), no errored rollout
    (errors 0, played = kept = 16), and the outage is in teacher.summary.json's policy_stats (failovers >= 1,
    endpoint_errors >= 1): every request the policy sent was answered by A (its 4), by B, or is an endpoint error."""
    n, answers = 16, 4
    out = tmp_path / "teacher.jsonl"
    port_a = free_port()
    victim = _start_dying_stub(port_a, answers)
    try:
        with StubEndpoint() as stub_b:
            res = CliRunner().invoke(app, [
                "synth", "tictactoe", "-m", "openai:stub", "--base-url", f"http://127.0.0.1:{port_a}/v1,{stub_b.url}",
                "-n", str(n), "-c", "2", "-a", "transport=inprocess", "--drop-if", "loss", "--require-valid",
                "--teacher-arg", "backoff_s=0.01", "-o", str(out)], catch_exceptions=False)
            served_b = stub_b.served
        try:
            killed = victim.wait(5)
        except subprocess.TimeoutExpired:
            killed = None  # still alive: the kill never came
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait(10)
    assert res.exit_code == 0, res.output
    assert killed == -signal.SIGKILL  # A really died during the run, not at its end

    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["example_id"] for r in rows) == list(range(n))  # each game exactly once: none lost or doubled
    assert all(r["metrics"]["loss"] == 0 and r["tools"] and r["messages"][0]["role"] == "system" for r in rows)

    summary: dict[str, Any] = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["played"] == n and summary["kept"] == n and summary["errors"] == 0
    stats = summary["policy_stats"]
    assert stats["failovers"] >= 1 and stats["endpoint_errors"] >= 1, stats
    # A carried part of the load before it died (least-in-flight spreads two rollouts over A and B), B all the rest
    assert stats["requests"] == answers + served_b + stats["endpoint_errors"], (stats, served_b)
