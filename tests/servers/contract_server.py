"""The MCP server of the episode contract test (`tests/test_episode_contract.py`), in one of two roles:

    python contract_server.py notes     # per rollout: reads the notes a sandbox fixture copied into ./notes
    python contract_server.py counter   # shared: counters by key, and its process id (so a test can kill it)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

ROLE = sys.argv[1] if len(sys.argv) > 1 else "notes"
srv = MCPServer(f"contract-{ROLE}", log_level="WARNING")
_counts: dict[str, int] = {}

if ROLE == "notes":

    @srv.tool()
    def read(name: str) -> str:
        """Read a note of this rollout's notes folder."""
        path = Path("notes") / name
        if "/" in name or not path.is_file():
            raise ToolError(f"no note named {name!r}")
        return path.read_text().strip()

else:

    @srv.tool()
    def add(key: str, n: int) -> str:
        """Add n to the counter `key`; says DONE once it reaches 5."""
        _counts[key] = _counts.get(key, 0) + n
        return f"{key}={_counts[key]}" + (" DONE" if _counts[key] >= 5 else "")

    @srv.tool()
    def reset(key: str) -> str:
        """Set the counter `key` to 0."""
        _counts[key] = 0
        return "ok"

    @srv.tool()
    def value(key: str) -> int:
        """The counter `key`."""
        return _counts.get(key, 0)

    @srv.tool()
    def counter_pid() -> int:
        """This server's process id."""
        return os.getpid()


if __name__ == "__main__":
    srv.run("stdio")
