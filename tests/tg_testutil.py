"""Test helpers shared by the top-level tests: paths of the test servers, process bookkeeping for orphan checks, and
the multi-server walkthrough's env with the skip mark for its third-party servers, and tic-tac-toe games of a model
policy (`run_env`, `legal_moves`) for the engine tests."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

SERVERS = Path(__file__).parent / "servers"
FLAKY = SERVERS / "flaky_server.py"
sys.path.insert(0, str(SERVERS))
ROOT = Path(__file__).resolve().parents[1]
# the multi-server walkthrough: mcp-server-time (PyPI) + the npm server-everything
MULTI_SERVER_ENV = ROOT / "examples" / "multi_server" / "env.toml"
EVERYTHING = ROOT / "examples" / "npm" / "node_modules" / ".bin" / "mcp-server-everything"
need_multi_servers = pytest.mark.skipif(
    not EVERYTHING.exists() or shutil.which("node") is None or importlib.util.find_spec("mcp_server_time") is None,
    reason="needs mcp-server-time (pip install -e '.[examples]') and the npm servers (npm ci --prefix examples/npm)")


def example_module(path: str):  # type: ignore[no-untyped-def]
    """Import a script that is not in a package (`examples/tictactoe/results_table.py`, ...), by its path from the
    repository root, as a module named after its file."""
    file = ROOT / path
    spec = importlib.util.spec_from_file_location(file.stem, file)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def children() -> set[int]:
    """PIDs of live (non-zombie) descendants of this test process."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out


def wait_no_new_children(before: set[int], timeout: float = 5.0) -> set[int]:
    """Wait until no descendant exists that was not there in `before`; return the leftovers (empty = clean)."""
    deadline = time.monotonic() + timeout
    while True:
        left = children() - before
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def flaky_command() -> list[str]:
    return [sys.executable, str(FLAKY)]


def read_jsonl(path: Path) -> list[dict]:
    """Records of a JSONL file, skipping torn or invalid lines (a killed writer); [] if the file is missing."""
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def wait_healthy(proc: subprocess.Popen, url: str, deadline: float, what: str = "server") -> None:
    """Poll `url` (e.g. a vLLM server's /health) until it answers 200, failing if `proc` exits or `deadline`
    (a `time.monotonic()` value) passes."""
    import httpx

    while True:
        assert proc.poll() is None, f"{what} exited"
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{what} did not start"
        time.sleep(2)


def free_port() -> int:
    """A TCP port free on loopback right now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, timeout: float = 30.0) -> None:
    """Wait until something accepts TCP connections on 127.0.0.1:`port` (a server just launched), at most `timeout` s."""
    import socket

    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)


def legal_moves(messages):  # type: ignore[no-untyped-def]
    """Constrain the random model to canonical `<think>` + make_move(free cell) turns: it still samples the cell."""
    from toolgym_tictactoe import board_from_messages

    from toolgym.models.formats import HermesFormat

    board = board_from_messages(messages) or "." * 9
    fmt = HermesFormat()
    return [
        fmt.render_turn(None, [{"name": "make_move", "arguments": {"position": p}}], reasoning=f"I play {p}.")
        for p, c in enumerate(board) if c == "."
    ]


def run_env(policy, n: int, concurrency: int, max_turns: int | None = None):  # type: ignore[no-untyped-def]
    from toolgym.registry import load_env
    from toolgym.rollout import run_rollouts

    env = load_env("tictactoe", transport="inprocess")
    if max_turns is not None:
        env.max_turns = max_turns

    async def go():  # type: ignore[no-untyped-def]
        async with env:
            jobs = [(i, 0, t) for i, t in enumerate(env.build_dataset(n, seed=0))]
            trajs = await run_rollouts(env, policy, jobs, concurrency=concurrency)
        await policy.aclose()
        return trajs

    return env, asyncio.run(go())


def board_player(choose, name: str):  # type: ignore[no-untyped-def]
    """A deterministic scripted tic-tac-toe X player: `choose(board) -> cell` on the board the last message shows."""
    from toolgym_tictactoe import board_from_messages

    from toolgym import AssistantTurn, ScriptedPolicy
    from toolgym.policies.scripted import call

    def act(messages, memory):  # type: ignore[no-untyped-def]
        board = board_from_messages(messages)
        assert board is not None
        return AssistantTurn(content="", reasoning="", tool_calls=[call("make_move", position=choose(board))])

    return ScriptedPolicy(act, name)


def batch_recorder():  # type: ignore[no-untyped-def]
    """(batches, run_batch): a stand-in model for the batching queues that answers each request with its first
    prompt token and records each batch as the list of those tokens."""
    from toolgym.policies.batching import GenOutput

    batches: list[list[int]] = []

    def run(reqs):  # type: ignore[no-untyped-def]
        batches.append([r.prompt_ids[0] for r in reqs])
        return [GenOutput([r.prompt_ids[0]], [0.0], "stop") for r in reqs]

    return batches, run
