"""A one-turn toy env the tiny random model can learn in seconds: the reward is the share of digit characters in
what the model writes (its whole raw output). An in-process MCP server with one tool keeps the real rollout path."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from toolgym import Rubric, ServerSpec, StatefulToolEnv


def _server() -> MCPServer:
    srv = MCPServer("toy")

    @srv.tool()
    async def submit(text: str) -> str:
        """Submit an answer."""
        return "ok"

    return srv


def digit_share(turns) -> float:  # type: ignore[no-untyped-def]
    text = "".join(t.raw_text or "" for t in turns)
    return sum(c.isdigit() for c in text) / max(1, len(text))


class DigitsEnv(StatefulToolEnv):
    name = "digits"
    max_turns = 1
    on_no_call = "stop"
    session_scope = "shared"  # one MCP session serves every rollout (no per-rollout handshake)
    system_prompt = "Write numbers."

    def __init__(self, **options: Any) -> None:
        super().__init__(server=ServerSpec.inprocess(_server()), **options)

    def build_dataset(self, n: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
        return [{"seed": seed * 1000 + i, "group": 0} for i in range(n or 8)]

    def initial_messages(self, task: dict[str, Any], state: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": f"Go {task['seed']}."}]

    def build_rubric(self) -> Rubric:
        return Rubric([(digit_share, 1.0)])
