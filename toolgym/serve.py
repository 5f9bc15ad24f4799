"""Serve an agent (a policy + its environment's tools) as an MCP server, so any MCP client can use it.

Tools of the served server:
- `run_agent(request, max_turns)`: run the agent's own tool loop on a free-form request against the env's server
  and return its answer with a compact trace of the calls it made;
- whatever the environment offers through its optional `serve_tools(agent)` hook (tic-tac-toe: `suggest_move`,
  the agent's move on a board the client gives).

Every tool describes itself to the client: a short description and a `description` on each parameter, taken from
`Annotated[T, Field(description=...)]` or from the function's Google-style `Args:` docstring section
(`toolgym.tool_schema`).

Every request runs as its own rollout with its own MCP session to the env server (the env is switched to
`session_scope="rollout"`), under a timeout and a bound on concurrent runs; inputs are validated (size caps, board
syntax) and failures come back as MCP tool errors, never as a crashed server. A client that disconnects mid-call
cancels only its own rollout, whose session is released.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from toolgym.env import StatefulToolEnv
from toolgym.policies import Policy, PolicyUnavailable
from toolgym.rollout import run_rollout
from toolgym.tool_schema import for_mcp
from toolgym.types import Trajectory

MAX_REQUEST_CHARS = 8_000
Request = Annotated[str, Field(description="What the agent should do, in plain language (at most 8,000 characters).")]
MaxTurns = Annotated[int | None, Field(description="Cap on the agent's turns, 1 to 100 (default: the environment's).")]


class Agent:
    """Runs tasks as rollouts of `policy` in `env`, bounded and timed out; shared by all client requests."""

    def __init__(self, env: StatefulToolEnv, policy: Policy, timeout_s: float = 120.0, max_concurrency: int = 16,
                 max_request_chars: int = MAX_REQUEST_CHARS) -> None:
        env.session_scope = "rollout"  # type: ignore[misc]  # each request gets its own MCP session
        self.env, self.policy = env, policy
        self.timeout_s, self.max_request_chars = timeout_s, max_request_chars
        self._sem = asyncio.Semaphore(max_concurrency)
        self._started = False
        self._start_lock = asyncio.Lock()
        self._counter = 0
        self.stats = {"requests": 0, "errors": 0, "timeouts": 0, "cancelled": 0, "unavailable": 0}

    async def _ensure_started(self) -> None:
        async with self._start_lock:
            if not self._started:
                await self.env.start()
                self._started = True

    async def run(self, task: dict[str, Any], max_turns: int | None = None) -> Trajectory:
        """One rollout for one request. Raises `ToolError` (shown to the client) on timeout or failure."""
        await self._ensure_started()
        self.stats["requests"] += 1
        self._counter += 1
        if max_turns is not None and not 1 <= max_turns <= 100:
            raise ToolError("max_turns must be between 1 and 100")
        async with self._sem:
            try:  # one Episode per request (through the rollout engine), with the request's turn cap
                traj = await asyncio.wait_for(
                    run_rollout(self.env, self.policy, task, example_id=self._counter, max_turns=max_turns),
                    self.timeout_s)
            except TimeoutError:
                self.stats["timeouts"] += 1
                raise ToolError(f"the agent did not finish within {self.timeout_s}s") from None
            except PolicyUnavailable as exc:  # fails at once while the model endpoint is down, then probes again
                self.stats["errors"] += 1
                self.stats["unavailable"] += 1
                raise ToolError(f"the agent's model is unavailable: {exc}") from None
            except asyncio.CancelledError:
                self.stats["cancelled"] += 1
                raise
        if traj.error:
            self.stats["errors"] += 1
            raise ToolError(f"the agent's run failed: {traj.error}")
        return traj

    def check_text(self, text: str, what: str = "request") -> str:
        if not isinstance(text, str) or not text.strip():
            raise ToolError(f"{what} must be a non-empty string")
        if len(text) > self.max_request_chars:
            raise ToolError(f"{what} too large: {len(text)} characters (limit {self.max_request_chars})")
        return text


def trace(traj: Trajectory, limit: int = 400) -> list[dict[str, Any]]:
    """A compact trace: each call with its arguments, outcome and the start of its result."""
    return [{"turn": c.turn, "tool": c.name, "arguments": c.arguments, "ok": c.exec_ok,
             "result": c.result[:limit] + ("…" if len(c.result) > limit else "")} for c in traj.calls]


def final_text(traj: Trajectory) -> str:
    for m in reversed(traj.messages):
        if m.get("role") == "assistant" and m.get("content"):
            return str(m["content"])
    return ""


def build_agent_server(env: StatefulToolEnv, policy: Policy, timeout_s: float = 120.0, max_concurrency: int = 16,
                       name: str | None = None) -> MCPServer:
    """An MCP server exposing the agent. Use `.run("stdio")` / `.run("streamable-http", ...)` or in-process."""
    agent = Agent(env, policy, timeout_s, max_concurrency)
    srv = MCPServer(name or f"toolgym-agent-{env.name}",
                    instructions=f"A {policy.name} agent trained on the {env.name} environment.",
                    log_level="WARNING")  # per-request INFO lines through rich cost ~30 % of a call's CPU

    async def run_agent(request: Request, max_turns: MaxTurns = None) -> dict[str, Any]:
        """Run the agent on a request: it uses its own tools until done and returns its answer, why it stopped,
        its turn count and a trace of its tool calls."""
        agent.check_text(request)
        traj = await agent.run({"prompt": request}, max_turns)
        return {"answer": final_text(traj), "stop_reason": traj.stop_reason, "turns": len(traj.turns),
                "trace": trace(traj)}

    for tool_name, fn in {"run_agent": run_agent, **env.serve_tools(agent)}.items():
        fn, description = for_mcp(fn)  # parameter descriptions from Annotated[..., Field(...)] or the docstring
        srv.add_tool(fn, name=tool_name, description=description)
    srv.agent = agent  # type: ignore[attr-defined]  # for tests and introspection
    return srv
