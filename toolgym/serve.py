"""Serve an agent (a policy + its environment's tools) as an MCP server, so any MCP client can use it.

Tools of the served server:
- `run_agent(..., max_turns)`: run one episode of the agent's own tool loop and return its result. Its inputs are
  the env's `serve_task` parameters (default: a free-form `request`, the task's prompt, and a `seed`; tic-tac-toe,
  whose games take no free text: who starts, the opponent's strength and a seed); its result is typed: the agent's
  `answer` (its last words), the `outcome`, the stop reason, the turn count and a trace of its calls, plus the env's
  `serve_result` fields (tic-tac-toe: win/draw/loss, the final board, the moves);
- whatever the environment offers through its optional `serve_tools(agent)` hook (tic-tac-toe: `suggest_move`,
  the agent's move on a board the client gives).

Every tool describes itself to the client: a short description, a `description` on each parameter (from
`Annotated[T, Field(description=...)]` or the function's Google-style `Args:` section, `toolgym.tool_schema`) and an
`outputSchema` derived from its return annotation (a `TypedDict`). Arguments are validated strictly: `true` is not
an integer and `"3"` is not 3.

Every request runs as its own rollout (an `Episode`), seeded by its arguments -- the same request gives the same
answer, whatever else is running -- under `--timeout` (which includes the wait for a free slot among
`--max-concurrency`, and for the model while it loads) and unscored (a served request has no reference to grade
against). The env's server is reached as the env says: an env with `serve_defaults = {"transport": "inprocess"}`
(tic-tac-toe) runs its server in this process, so a request starts no process; a per-rollout server that is a process
(stdio, launched HTTP) gets a warm pool of pre-started sessions (`ServerSpec.prestart`). Inputs are validated (size
caps, board syntax) and failures come back as MCP tool errors, never as a crashed server. A client that disconnects
mid-call cancels only its own rollout, whose session is released.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import math
import random
import sys
import time
import types
import typing
from collections.abc import Callable
from concurrent.futures import Future
from typing import Annotated, Any

import pydantic
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field
from typing_extensions import TypedDict, is_typeddict

from toolgym.env import StatefulToolEnv
from toolgym.policies import Policy, PolicyUnavailable
from toolgym.rollout import run_rollout
from toolgym.tool_schema import described_signature, for_mcp
from toolgym.types import Trajectory

MAX_REQUEST_CHARS = 8_000
MAX_TURNS_LIMIT = 100
WARM_SESSIONS = 4
"""Sessions kept started ahead for an env whose per-request server is a process (at most `--max-concurrency`)."""

MaxTurns = Annotated[int | None, Field(strict=True, ge=1, le=MAX_TURNS_LIMIT, description=(
    f"Cap on the agent's turns, 1 to {MAX_TURNS_LIMIT} (default: the environment's)."))]


class TraceCall(TypedDict):
    """One tool call the agent made."""

    turn: Annotated[int, Field(description="The agent's turn (0 first).")]
    tool: Annotated[str, Field(description="The tool it called.")]
    arguments: Annotated[dict[str, Any] | None, Field(description="Its arguments (null: they did not parse).")]
    ok: Annotated[bool, Field(description="Whether the call ran without error.")]
    result: Annotated[str, Field(description="The start of the tool's answer (at most 400 characters).")]


class AgentResult(TypedDict):
    """What `run_agent` returns for every env (an env's `serve_result` adds fields or narrows these)."""

    answer: Annotated[str, Field(description="The agent's last words: its final message, or the thinking of its "
                                             "last turn when that turn was only a tool call.")]
    outcome: Annotated[str, Field(description="How the episode ended: 'answered' (the agent replied without a "
                                              "tool call), 'turn_limit', or the name of the stop condition that "
                                              "held.")]
    stop_reason: Annotated[str, Field(description="The episode's stop reason, as toolgym records it.")]
    turns: Annotated[int, Field(description="The agent's turns.")]
    trace: Annotated[list[TraceCall], Field(description="Its tool calls, in order.")]


class ServeOptionError(ValueError):
    """A serve option out of range (`--timeout 0`, `--max-concurrency 0`): raised before anything starts."""


def check_serve_options(timeout_s: float, max_concurrency: int) -> None:
    """Raise `ServeOptionError` (one line) for a timeout that is not a positive number of seconds or a concurrency
    bound below 1."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or not math.isfinite(timeout_s) \
            or timeout_s <= 0:
        shown = f"{timeout_s:g}" if isinstance(timeout_s, float) else repr(timeout_s)
        raise ServeOptionError(f"--timeout must be a positive number of seconds, got {shown}")
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) or max_concurrency < 1:
        raise ServeOptionError(f"--max-concurrency must be an integer >= 1 (agent runs in flight at once), got "
                               f"{max_concurrency!r}")


def request_seed(task: dict[str, Any], base: int | None = None) -> int:
    """The sampling seed of a served request: a function of its task row (and of serve's `--seed`, `base`) alone, so
    the same request (same arguments) is sampled the same whatever else is running."""
    text = json.dumps(task, sort_keys=True, default=str)
    return random.Random(f"toolgym-serve:{base}:{text}").getrandbits(62)


class Agent:
    """Runs tasks as rollouts of `policy` in `env`, bounded and timed out; shared by all client requests.

    `policy` may be a `concurrent.futures.Future` of one (a model loading in a background thread while the server
    already answers `initialize` and `tools/list`): requests wait for it, within their timeout."""

    def __init__(self, env: StatefulToolEnv, policy: Policy | Future[Policy], timeout_s: float = 120.0,
                 max_concurrency: int = 16, max_request_chars: int = MAX_REQUEST_CHARS, seed: int | None = None
                 ) -> None:
        check_serve_options(timeout_s, max_concurrency)
        spec = env.server
        if env.session_scope == "rollout" and spec is not None and spec.kind != "inprocess" and not spec.prestart:
            # a process per request: keep a few started ahead (the env's own server object is left untouched)
            env.server = dataclasses.replace(spec, prestart=min(WARM_SESSIONS, max_concurrency))  # type: ignore[misc]
        self.env, self.seed = env, seed  # `seed`: mixed into every request's sampling seed (`--seed`)
        self._policy = policy
        self.timeout_s, self.max_concurrency, self.max_request_chars = timeout_s, max_concurrency, max_request_chars
        self._sem = asyncio.Semaphore(max_concurrency)
        self._started = False
        self._start_lock = asyncio.Lock()
        self._counter = 0
        self.stats = {"requests": 0, "errors": 0, "timeouts": 0, "cancelled": 0, "unavailable": 0}

    @property
    def policy(self) -> Policy | None:
        """The policy, once loaded (None while it loads or if loading failed)."""
        if isinstance(self._policy, Future):
            return self._policy.result() if self._policy.done() and self._policy.exception() is None else None
        return self._policy

    async def _get_policy(self) -> Policy:
        if not isinstance(self._policy, Future):
            return self._policy
        try:
            return await asyncio.wrap_future(self._policy)
        except Exception as exc:  # noqa: BLE001 - the load failed: every request says why
            raise ToolError(f"the agent's model failed to load: {type(exc).__name__}: {exc}") from None

    async def _ensure_started(self) -> None:
        async with self._start_lock:
            if not self._started:
                await self.env.start()
                self._started = True

    async def run(self, task: dict[str, Any], max_turns: int | None = None, seed: int | None = None) -> Trajectory:
        """One rollout for one request (sampling seeded by `seed`, default `request_seed(task, self.seed)`), within the timeout
        -- the wait for a free slot and for the model included. Raises `ToolError` (shown to the client) on timeout or
        failure."""
        if max_turns is not None and (isinstance(max_turns, bool) or not isinstance(max_turns, int)
                                      or not 1 <= max_turns <= MAX_TURNS_LIMIT):
            raise ToolError(f"max_turns must be an integer from 1 to {MAX_TURNS_LIMIT}, got {max_turns!r}")
        self.stats["requests"] += 1
        self._counter += 1
        t0 = time.perf_counter()
        waited = {"s": 0.0}
        try:
            seed = request_seed(task, self.seed) if seed is None else seed
            traj = await asyncio.wait_for(self._run(task, max_turns, seed, t0, waited), self.timeout_s)
        except TimeoutError:
            self.stats["timeouts"] += 1
            queue = f" ({waited['s']:.1f}s of it waiting for one of the {self.max_concurrency} run slots)" \
                if waited["s"] >= 0.05 * self.timeout_s else ""
            raise ToolError(f"the agent did not finish within {self.timeout_s:g}s{queue}") from None
        except PolicyUnavailable as exc:  # fails at once while the model endpoint is down, then probes again
            self.stats["errors"] += 1
            self.stats["unavailable"] += 1
            raise ToolError(f"the agent's model is unavailable: {exc}") from None
        except ToolError:
            self.stats["errors"] += 1
            raise
        except asyncio.CancelledError:
            self.stats["cancelled"] += 1
            raise
        if traj.error:
            self.stats["errors"] += 1
            raise ToolError(f"the agent's run failed: {traj.error}")
        return traj

    async def _run(self, task: dict[str, Any], max_turns: int | None, seed: int, t0: float,
                   waited: dict[str, float]) -> Trajectory:
        policy = await self._get_policy()
        await self._ensure_started()
        async with self._sem:
            waited["s"] = time.perf_counter() - t0
            # one Episode per request (through the rollout engine), with the request's turn cap and seed
            return await run_rollout(self.env, policy, task, example_id=self._counter, max_turns=max_turns,
                                     sampling_seed=seed, score=False)

    def check_text(self, text: str, what: str = "request", required: bool = True) -> str:
        """`text` if it is a string within the size cap (and non-empty when `required`), else a `ToolError`."""
        if not isinstance(text, str) or (required and not text.strip()):
            raise ToolError(f"{what} must be a non-empty string")
        if len(text) > self.max_request_chars:
            raise ToolError(f"{what} too large: {len(text)} characters (limit {self.max_request_chars})")
        return text

    def result(self, traj: Trajectory) -> dict[str, Any]:
        """The `run_agent` result of a finished request: the generic fields, then the env's `serve_result`."""
        reason = traj.stop_reason or "unknown"
        out: dict[str, Any] = {"answer": final_text(traj), "outcome": OUTCOMES.get(reason, reason),
                               "stop_reason": reason, "turns": len(traj.turns), "trace": trace(traj)}
        out.update(self.env.serve_result(traj))
        return out


OUTCOMES = {"no_tool_call": "answered", "max_turns": "turn_limit"}


def trace(traj: Trajectory, limit: int = 400) -> list[dict[str, Any]]:
    """A compact trace: each call with its arguments, outcome and the start of its result."""
    return [{"turn": c.turn, "tool": c.name, "arguments": c.arguments, "ok": c.exec_ok,
             "result": c.result[:limit] + ("…" if len(c.result) > limit else "")} for c in traj.calls]


def final_text(traj: Trajectory) -> str:
    """The agent's last words: the last assistant message's text, else the thinking of its last turn."""
    for m in reversed(traj.messages):
        if m.get("role") == "assistant" and m.get("content"):
            return str(m["content"])
    for t in reversed(traj.turns):
        if t.get("reasoning"):
            return str(t["reasoning"])
    return ""


def _strict(annotation: Any) -> Any:
    """`annotation` with its scalars validated strictly (no `true` for an int, no `"3"` for 3), metadata kept."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return Annotated[(_strict(args[0]), *annotation.__metadata__)]
    if annotation in (int, float, bool, str):
        return Annotated[annotation, pydantic.Strict()]
    if origin in (typing.Union, types.UnionType):
        return typing.Union[tuple(_strict(a) for a in args)]  # noqa: UP007 - built from a tuple
    if origin is list and args:
        return list[_strict(args[0])]  # type: ignore[misc]
    return annotation  # Literal, None, models: validated as declared


def strict_tool(fn: Callable[..., Any]) -> tuple[Callable[..., Any], str]:
    """`for_mcp(fn)` with every parameter validated strictly."""
    fn, description = for_mcp(fn)
    sig = inspect.signature(fn)
    fn.__signature__ = sig.replace(parameters=[p.replace(annotation=_strict(p.annotation))  # type: ignore[attr-defined]
                                               for p in sig.parameters.values()])
    return fn, description


def result_type(env: StatefulToolEnv) -> Any:
    """`run_agent`'s return type: `AgentResult` with the fields of the env's `serve_result` return annotation (a
    `TypedDict`) added or replacing those of the same name."""
    try:
        ret = typing.get_type_hints(type(env).serve_result, include_extras=True).get("return")
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: the generic fields only
        ret = None
    if ret is None or not is_typeddict(ret):
        return AgentResult
    fields = {**typing.get_type_hints(AgentResult, include_extras=True),
              **typing.get_type_hints(ret, include_extras=True)}
    merged = TypedDict(f"{type(env).__name__}AgentResult", fields)  # type: ignore[operator]
    merged.__doc__ = AgentResult.__doc__
    return merged


DEFAULT_RUN_AGENT = ("Run the agent on a request: it uses its own tools until it is done and returns its answer, the "
                     "outcome, its turn count and a trace of its tool calls.")


def run_agent_tool(agent: Agent) -> tuple[Callable[..., Any], str]:
    """The `run_agent` tool: the env's `serve_task` parameters (strictly typed, described) plus `max_turns`; a typed
    result (`result_type`). Its description is the env's `serve_task` docstring where the env overrides it."""
    env = agent.env
    description, sig = described_signature(env.serve_task)
    if type(env).serve_task is StatefulToolEnv.serve_task:
        description = DEFAULT_RUN_AGENT
    params = [p.replace(annotation=_strict(p.annotation), kind=inspect.Parameter.KEYWORD_ONLY)
              for p in sig.parameters.values()]
    params.append(inspect.Parameter("max_turns", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=MaxTurns))
    texts = {p.name: p.default is inspect.Parameter.empty for p in params if _is_str(p.annotation)}

    async def run_agent(**arguments: Any) -> dict[str, Any]:
        max_turns = arguments.pop("max_turns", None)
        for name, required in texts.items():
            if arguments.get(name) is not None:
                agent.check_text(arguments[name], name, required)
        try:
            task = env.serve_task(**arguments)
        except ValueError as exc:
            raise ToolError(str(exc)) from None
        return agent.result(await agent.run(task, max_turns))

    run_agent.__signature__ = inspect.Signature(params, return_annotation=result_type(env))  # type: ignore[attr-defined]
    return run_agent, description


def _is_str(annotation: Any) -> bool:
    base = typing.get_args(annotation)[0] if typing.get_origin(annotation) is Annotated else annotation
    return base is str or (typing.get_origin(base) in (typing.Union, types.UnionType) and str in typing.get_args(base))


def output_model(td: Any) -> type[pydantic.BaseModel]:
    """A pydantic model with the fields of the `TypedDict` `td`, their `Annotated` descriptions and its docstring.
    A tool returning a `TypedDict` is registered with this model as its return type: mcp 2.0 builds the
    `outputSchema` of a `TypedDict` from hints without their `Annotated` metadata (the field descriptions vanish),
    while every mcp 2.x takes a model's schema as it is. The tool still returns a plain dict (validated into it)."""
    hints = typing.get_type_hints(td, include_extras=True)
    required = getattr(td, "__required_keys__", set(hints))
    fields: dict[str, Any] = {name: (hint, ... if name in required else None) for name, hint in hints.items()}
    return pydantic.create_model(td.__name__, __doc__=td.__doc__, **fields)


class AgentServer(MCPServer):
    """The served agent's MCP server: an `MCPServer` whose tools refuse arguments they do not take (a client's typo,
    or free text sent to a tool that takes none, is an error, not silently dropped) and report invalid arguments in
    one line (`invalid argument max_turns=true: Input should be a valid integer`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.accepted: dict[str, list[str]] = {}  # tool -> the argument names it takes

    def add_tool(self, fn: Callable[..., Any], name: str | None = None, *args: Any, **kwargs: Any) -> None:
        sig = inspect.signature(fn)
        ret = sig.return_annotation
        if isinstance(ret, str):
            try:
                ret = typing.get_type_hints(fn, include_extras=True).get("return")
            except Exception:  # noqa: BLE001 - an annotation that does not resolve: mcp decides what it makes of it
                ret = None
        if ret is not None and is_typeddict(ret):
            fn.__signature__ = sig.replace(return_annotation=output_model(ret))  # type: ignore[attr-defined]
        super().add_tool(fn, name, *args, **kwargs)
        self.accepted[name or fn.__name__] = list(inspect.signature(fn).parameters)

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        known = self.accepted.get(name)
        unknown = sorted(set(arguments) - set(known)) if known is not None else []
        if unknown:
            raise ToolError(f"{name} takes no argument{'s' if len(unknown) > 1 else ''} "
                            f"{', '.join(map(repr, unknown))}; it takes: {', '.join(known) or 'none'}")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, pydantic.ValidationError):
                raise ToolError(_one_line(cause, arguments)) from cause
            raise


def _one_line(exc: pydantic.ValidationError, arguments: dict[str, Any]) -> str:
    """`invalid argument max_turns=true: Input should be a valid integer` (the first error; JSON spelling)."""
    err = exc.errors()[0]
    loc = [str(p) for p in err.get("loc", ())]
    field = ".".join(loc) or "arguments"
    value = arguments.get(loc[0]) if loc else None
    shown = json.dumps(value, default=str)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"invalid argument {field}={shown}: {err.get('msg', 'invalid')}{more}"


def build_agent_server(env: StatefulToolEnv, policy: Policy | Future[Policy], timeout_s: float = 120.0,
                       max_concurrency: int = 16, name: str | None = None, policy_name: str | None = None,
                       seed: int | None = None) -> MCPServer:
    """An MCP server exposing the agent. Use `.run("stdio")`, `serve_http(...)` or a client in-process (`policy` may
    be the `Future` of a policy loading in the background; `policy_name` then names it; `seed` is mixed into every
    request's sampling seed)."""
    agent = Agent(env, policy, timeout_s, max_concurrency, seed=seed)
    who = policy_name or getattr(policy, "name", "policy")
    srv = AgentServer(name or f"toolgym-agent-{env.name}",
                    instructions=f"A {who} agent trained on the {env.name} environment.",
                    log_level="WARNING")  # per-request INFO lines through rich cost ~30 % of a call's CPU
    run_agent, description = run_agent_tool(agent)
    srv.add_tool(run_agent, name="run_agent", description=description)
    for tool_name, fn in env.serve_tools(agent).items():
        fn, description = strict_tool(fn)  # parameter descriptions from Annotated[..., Field(...)] or the docstring
        srv.add_tool(fn, name=tool_name, description=description)
    srv.agent = agent  # type: ignore[attr-defined]  # for tests and introspection
    return srv


def serve_http(srv: MCPServer, host: str, port: int, on_ready: Callable[[str], None] | None = None) -> None:
    """Run `srv` over streamable HTTP at `http://host:port/mcp`; `on_ready(url)` once the port accepts connections."""
    import uvicorn

    app = srv.streamable_http_app(host=host)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    url = f"http://{host}:{port}/mcp"

    async def main() -> None:
        task = asyncio.create_task(server.serve())
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started and on_ready is not None:
            on_ready(url)
        await task

    asyncio.run(main())


def port_problem(host: str, port: int) -> str | None:
    """Why `host:port` cannot be served on (in use, not an address here), or None."""
    import socket

    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as exc:
        return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    return None


def log(message: str) -> None:
    """A line on stderr (stdout is the MCP channel under stdio)."""
    print(message, file=sys.stderr, flush=True)


__all__ = ["Agent", "AgentResult", "AgentServer", "MAX_REQUEST_CHARS", "ServeOptionError", "TraceCall", "build_agent_server",
           "check_serve_options", "final_text", "port_problem", "request_seed", "result_type", "run_agent_tool",
           "serve_http", "strict_tool", "trace"]
