"""A deliberately misbehaving MCP server for the tests: tools that echo, add, keep per-process state, fail, sleep,
hang forever, flood stderr, crash the process, write and list files in its working directory, and tell the length
of an environment variable it got. The value of the environment variable `ROLLOUT` it was started with (the sandbox
tests pass `{rollout_id}`) is stored under the key `ROLLOUT`, so `get_value("ROLLOUT")` tells a client what the server received.

    python flaky_server.py                              # stdio
    python flaky_server.py --transport streamable-http --port 8123
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

srv = MCPServer("flaky")
_store: dict[str, str] = {"ROLLOUT": os.environ["ROLLOUT"]} if "ROLLOUT" in os.environ else {}


@srv.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@srv.tool()
def add(a: int, b: float, round_to: int | None = None) -> str:
    """Add two numbers."""
    total = a + b
    return str(round(total, round_to) if round_to is not None else total)


@srv.tool()
def set_value(key: str, value: str) -> str:
    """Store a value under a key (per server process)."""
    _store[key] = value
    return "ok"


@srv.tool()
def get_value(key: str) -> str:
    """Read a stored value ('' when missing)."""
    return _store.get(key, "")


@srv.tool()
def fail(message: str = "boom") -> str:
    """Always fail with a tool error."""
    raise ToolError(f"fail: {message}")


@srv.tool()
async def sleep(seconds: float) -> str:
    """Sleep, then answer."""
    await anyio.sleep(seconds)
    return f"slept {seconds}"


@srv.tool()
def block(seconds: float) -> str:
    """Sleep synchronously (in the SDK's worker thread, which a closed stdin does not interrupt: a server busy in a
    blocking call, that outlives its client unless something kills it)."""
    time.sleep(seconds)
    return f"blocked {seconds}"


@srv.tool()
async def hang() -> str:
    """Never answer."""
    await anyio.sleep(3600)
    return "unreachable"


@srv.tool()
def crash() -> str:
    """Kill the server process at once (no reply)."""
    os._exit(3)


@srv.tool()
def log(kilobytes: int) -> str:
    """Write this many kilobytes to stderr (a client that does not drain the pipe would block us here)."""
    for _ in range(kilobytes):
        sys.stderr.write("x" * 1023 + "\n")
    sys.stderr.flush()
    return f"logged {kilobytes} KB"


@srv.tool()
def write_file(filename: str, text: str) -> str:
    """Write a file in the server's working directory (a per-rollout sandbox in the sandbox tests)."""
    with open(filename, "w") as f:
        f.write(text)
    return "ok"


@srv.tool()
def list_files() -> str:
    """The names of the files in the server's working directory, comma-separated and sorted."""
    return ",".join(sorted(os.listdir(".")))


@srv.tool()
def env_length(name: str) -> str:
    """The length of environment variable `name` in this server's environment ('unset' when it has none): tells a
    client what the server received without revealing a value. (Its argument is called `name` on purpose.)"""
    return str(len(os.environ[name])) if name in os.environ else "unset"


@srv.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--transport", default="stdio", choices=["stdio", "streamable-http"])
    p.add_argument("--port", type=int, default=8123)
    a = p.parse_args()
    if a.transport == "stdio":
        srv.run("stdio")
    else:
        srv.run("streamable-http", host="127.0.0.1", port=a.port)
