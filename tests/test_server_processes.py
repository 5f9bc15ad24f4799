"""Launched HTTP servers die with everything they spawned: a launch command that is a wrapper (a shell script, `npx`
starting `node`) leaves no grandchild behind when toolgym closes it. Real processes: a shell that starts the
tic-tac-toe MCP server as its child, so the server is toolgym's grandchild."""

from __future__ import annotations

import asyncio
import shutil
import socket
import sys
from pathlib import Path

import psutil
import pytest
from tg_testutil import free_port

from toolgym.mcp_bridge import ManagedProcess

pytestmark = pytest.mark.skipif(sys.platform != "linux" or not shutil.which("sh"), reason="POSIX process groups")


def server_exe() -> str:
    exe = shutil.which("mcp-server-tictactoe") or str(Path(sys.executable).with_name("mcp-server-tictactoe"))
    assert Path(exe).exists(), exe
    return exe


def test_terminate_reaches_the_servers_own_children() -> None:
    port = free_port()
    # `& wait`: the shell forks the server instead of exec'ing it, so the server is the shell's child
    cmd = ["sh", "-c", f"{server_exe()} --transport streamable-http --port {port} & wait"]
    managed = ManagedProcess(cmd, f"http://127.0.0.1:{port}/mcp", log_name="grandchild-test")
    asyncio.run(managed.ensure_running())
    assert managed.proc is not None
    shell = psutil.Process(managed.proc.pid)
    kids = shell.children(recursive=True)
    assert kids and any("mcp-server-tictactoe" in " ".join(k.cmdline()) for k in kids), kids
    managed.terminate()
    _gone, alive = psutil.wait_procs(kids, timeout=5)
    assert not alive, f"left running after terminate(): {[p.cmdline() for p in alive]}"
    assert managed.proc is None
    with socket.socket() as s:  # the port is free again: nothing listens there
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_terminate_kills_a_server_that_ignores_sigterm() -> None:
    """A server that traps SIGTERM (a shell here, whose child sleeps) is SIGKILLed with its children after the grace
    period."""
    port = free_port()
    script = f"trap '' TERM; {server_exe()} --transport streamable-http --port {port} & while true; do sleep 0.2; done"
    cmd = ["sh", "-c", script]
    managed = ManagedProcess(cmd, f"http://127.0.0.1:{port}/mcp", log_name="grandchild-test")
    asyncio.run(managed.ensure_running())
    assert managed.proc is not None
    tree = [psutil.Process(managed.proc.pid), *psutil.Process(managed.proc.pid).children(recursive=True)]
    managed.terminate()
    _gone, alive = psutil.wait_procs(tree, timeout=5)
    assert not alive, [p.cmdline() for p in alive]
