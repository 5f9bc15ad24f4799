"""`StatefulToolEnv`: an MCP server turned into a multi-turn RL environment.

A subclass names its server, the tools and arguments hidden from the model, and overrides a few hooks:

    class TicTacToe(StatefulToolEnv):
        name = "tictactoe"
        server = ServerSpec.stdio("mcp-server-tictactoe")
        session_scope = "shared"                       # games are keyed by id: one session serves many rollouts
        hidden_tools = {"new_game", "game_result", "end_game"}
        hidden_args = {"make_move": ["game_id"], "get_board": ["game_id"]}

        async def setup_state(self, state, task):
            res = await self.call("new_game", seed=task["seed"])          # a hidden call on this rollout's session
            state["game_id"] = res.json()["game_id"]

        def update_tool_args(self, tool, args, state):
            return {**args, "game_id": state["game_id"]}

        @stop
        async def game_over(self, state) -> bool:
            return state.get("status", "in_progress") != "in_progress"

One `state` dict per rollout. Hooks run in this order: `setup_state` → loop { policy turn → tool calls
(`update_tool_args`, `call_tool`) → `env_response` → `@stop` checks } → rubric → `cleanup`.
Tools the env implements itself (e.g. a final-answer tool) are methods marked `@env_tool`.
"""

from __future__ import annotations

import contextvars
import inspect
import json
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal

import pydantic

from toolgym.mcp_bridge import (
    MCPSession,
    MultiProvider,
    ServerBinding,
    ServerSpec,
    SessionProvider,
    ToolCallError,
    ToolInfo,
    ToolResult,
)
from toolgym.options import class_defaults
from toolgym.rubric import Rubric
from toolgym.tool_schema import described_signature
from toolgym.types import AssistantTurn, CallRecord


class HiddenCallError(RuntimeError):
    """A hidden (environment-side) tool call failed: the rollout cannot be set up or graded."""


def stop(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a method `(self, state) -> bool` (sync or async) as a stop condition, checked after every turn."""
    fn._toolgym_stop = True  # type: ignore[attr-defined]
    return fn


def env_tool(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a method `(self, state, **args) -> str` as a tool the env implements itself and shows to the model.

    Its JSON schema is derived from the typed signature (after `state`), each parameter described by
    `Annotated[T, Field(description=...)]` or by the docstring's `Args:` section; its description is the docstring
    without its sections. Raise an exception to return an error to the model."""
    fn._toolgym_env_tool = True  # type: ignore[attr-defined]
    return fn


class _Rollout:
    """What the env needs to reach the current rollout's MCP session from hooks and reward functions."""

    def __init__(self, session: MCPSession | None, state: dict[str, Any]) -> None:
        self.session, self.state = session, state


_current: contextvars.ContextVar[_Rollout] = contextvars.ContextVar("toolgym_rollout")


def _env_tool_schema(fn: Callable[..., Any]) -> tuple[str, dict[str, Any], type[pydantic.BaseModel]]:
    """Description, JSON schema and argument model of an `@env_tool` method: parameter descriptions from
    `Annotated[..., Field(description=...)]` or the docstring's `Args:` section (`toolgym.tool_schema`)."""
    description, sig = described_signature(fn)
    fields: dict[str, Any] = {}
    for name, p in list(sig.parameters.items())[2:]:  # skip self, state
        fields[name] = (p.annotation, ... if p.default is inspect.Parameter.empty else p.default)
    model = pydantic.create_model(f"{fn.__name__}_args", __config__=pydantic.ConfigDict(extra="forbid"), **fields)
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return description, schema, model


class StatefulToolEnv:
    """Base class of toolgym environments. See the module docstring for the hook order."""

    name: ClassVar[str] = "env"
    server: ClassVar[ServerSpec | None] = None
    servers: ClassVar[list[ServerBinding] | None] = None  # several servers instead of `server` (see ServerBinding)
    session_scope: ClassVar[Literal["rollout", "shared"]] = "rollout"
    hidden_tools: ClassVar[set[str]] = set()
    visible_tools: ClassVar[set[str] | None] = None
    hidden_args: ClassVar[dict[str, list[str]]] = {}
    system_prompt: ClassVar[str | None] = None
    default_policy: ClassVar[str | None] = None  # the policy `toolgym eval ENV` uses with no --model
    default_policy_options: ClassVar[dict[str, Any]] = {}  # its sampling options (CLI flags override them)
    report_by: ClassVar[tuple[str, ...]] = ()  # task fields eval breaks results down by (e.g. difficulty)
    report_metrics: ClassVar[tuple[str, ...] | None] = None  # the columns of those tables (default: the rubric's)
    max_turns: int = 10
    tool_timeout: float = 30.0
    on_no_call: Literal["stop", "nudge"] = "stop"
    nudge_message: str = "Please continue by calling one of the tools."
    max_tool_output_chars: int = 20_000

    @class_defaults("max_turns", "tool_timeout", "on_no_call", "session_scope")
    def __init__(
        self,
        server: ServerSpec | None = None,
        servers: list[ServerBinding] | None = None,
        max_turns: Annotated[int, pydantic.Field(ge=1)] | None = None,
        tool_timeout: Annotated[float, pydantic.Field(gt=0)] | None = None,
        on_no_call: Literal["stop", "nudge"] | None = None,
        session_scope: Literal["rollout", "shared"] | None = None,
    ) -> None:
        """Options every env takes (a subclass declares its own in its `__init__` and forwards `**options` here;
        `toolgym.options` reads the chain). `None` keeps the class attribute of the same name.

        Args:
            server: The MCP server to bind instead of the env's own (Python API: a `ServerSpec`).
            servers: Several MCP servers to bind instead (Python API: `ServerBinding`s; their tools are merged).
            max_turns: Model turns a rollout may take before it is stopped.
            tool_timeout: Seconds one tool call may take before it fails.
            on_no_call: What a model turn without a tool call does: end the rollout, or get a nudge and go on.
            session_scope: One MCP session per rollout, or one shared by all rollouts.
        """
        if server is not None and servers is not None:
            raise ValueError("pass either server or servers, not both")
        if server is not None:
            self.server = server  # type: ignore[misc]
        if servers is not None:
            self.servers = list(servers)  # type: ignore[misc]
        for key, value in (("max_turns", max_turns), ("tool_timeout", tool_timeout), ("on_no_call", on_no_call),
                           ("session_scope", session_scope)):
            if value is not None:
                setattr(self, key, value)
        self.rubric: Rubric = self.build_rubric()
        self.tools: dict[str, ToolInfo] = {}
        self._provider: SessionProvider | MultiProvider | None = None
        self._env_tools = {
            n: m for n, m in inspect.getmembers(type(self), predicate=callable) if getattr(m, "_toolgym_env_tool", False)
        }
        self._env_tool_schemas = {n: _env_tool_schema(m) for n, m in self._env_tools.items()}
        self._stops = [
            getattr(self, n)
            for n, m in inspect.getmembers(type(self), predicate=callable)
            if getattr(m, "_toolgym_stop", False)
        ]

    # ---------------------------------------------------------------- hooks a subclass overrides
    def build_dataset(self, n: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
        """The task rows. Each has a `prompt` (a string or a message list) and whatever the rewards need."""
        raise NotImplementedError(f"{type(self).__name__} has no dataset; override build_dataset")

    def build_rubric(self) -> Rubric:
        """The reward functions (default: none, the reward is 0)."""
        return Rubric()

    def scripted_players(self) -> dict[str, Callable[..., Any]]:
        """Scripted policies this env ships, by name (`scripted:NAME`): factories `f(env, **options) -> Policy`."""
        return {}

    def initial_messages(self, task: dict[str, Any], state: dict[str, Any]) -> list[dict[str, Any]]:
        prompt = task.get("prompt", "")
        messages: list[dict[str, Any]] = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        if isinstance(prompt, list):
            messages.extend(dict(m) for m in prompt)
        else:
            messages.append({"role": "user", "content": str(prompt)})
        return messages

    async def setup_state(self, state: dict[str, Any], task: dict[str, Any]) -> None:
        """Prepare the rollout (hidden setup calls through `self.call`)."""

    def update_tool_args(self, tool: str, args: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        """Inject hidden arguments before a model call reaches the server."""
        return args

    async def env_response(
        self, state: dict[str, Any], turn: AssistantTurn, records: list[CallRecord]
    ) -> list[dict[str, Any]] | None:
        """Called after the tool calls of a turn ran; may update `state` and return extra messages (e.g. a user
        message) to append before the next policy turn."""
        return None

    async def cleanup(self, state: dict[str, Any]) -> None:
        """Release per-rollout server state (runs after scoring, also after errors while the session lives)."""

    # ---------------------------------------------------------------- framework side
    async def start(self) -> None:
        """Connect to the server (once) and learn its tools."""
        if self._provider is not None:
            return
        if self.servers:
            multi = MultiProvider(self.servers)
            self._provider = multi
            await multi.start()
            hidden = {b.prefix + t for b in self.servers for t in b.hidden_tools}
            self.hidden_tools = set(self.hidden_tools) | hidden  # type: ignore[misc]
        elif self.server is None:
            if not self._env_tools:
                raise ValueError(f"{type(self).__name__} has no server and no env tools")
            return
        else:
            self._provider = SessionProvider(self.server, self.session_scope)
        session = await self._provider.acquire()
        try:
            self.tools = {t.name: t for t in await session.list_tools()}
        finally:
            await self._provider.release(session)  # type: ignore[arg-type]
        missing = [t for t in (self.visible_tools or set()) if t not in self.tools]
        if missing:
            raise ValueError(f"visible_tools {missing} are not offered by {self._describe_servers()}")
        await self._provider.prestart_now()  # a warm pool (`ServerSpec.prestart`): full before the first rollout

    async def aclose(self) -> None:
        if self._provider is not None:
            await self._provider.aclose()
            self._provider = None

    async def __aenter__(self) -> StatefulToolEnv:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    @property
    def provider(self) -> SessionProvider | MultiProvider | None:
        return self._provider

    def server_of(self, tool: str) -> str | None:
        """The name of the server a tool call goes to, in a multi-server env (else None)."""
        return self._provider.server_of(tool) if isinstance(self._provider, MultiProvider) else None

    def _describe_servers(self) -> str:
        if self.servers:
            return "the servers " + ", ".join(f"{b.name}={b.spec.describe()}" for b in self.servers)
        return f"the server {self.server.describe()}" if self.server else "no server"

    def is_visible(self, tool: str) -> bool:
        if tool in self._env_tools:
            return True
        if tool not in self.tools or tool in self.hidden_tools:
            return False
        return self.visible_tools is None or tool in self.visible_tools

    def tool_schema(self, tool: str) -> dict[str, Any]:
        """The argument schema the model sees for `tool` (hidden args removed)."""
        return self._schemas()[tool]["function"]["parameters"]

    def model_tools(self) -> list[dict[str, Any]]:
        """OpenAI-style schemas of the tools the model may call."""
        return list(self._schemas().values())

    def _schemas(self) -> dict[str, dict[str, Any]]:
        """Model-visible tool schemas by name, computed once per connected tool list."""
        key = tuple(self.tools)
        cached = getattr(self, "_schema_cache", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        out = {n: t.to_openai(self.hidden_args.get(n, [])) for n, t in self.tools.items() if self.is_visible(n)}
        for n in self._env_tools:
            desc, params, _ = self._env_tool_schemas[n]
            out[n] = {"type": "function", "function": {"name": n, "description": desc, "parameters": params}}
        self._schema_cache = (key, out)
        return out

    async def call(self, tool: str, /, **args: Any) -> ToolResult:
        """A hidden call on the current rollout's session (from hooks and reward functions). Raises
        `HiddenCallError` when the server reports an error, `ToolCallError` when the connection fails."""
        ctx = _current.get(None)
        if ctx is None or ctx.session is None:
            raise RuntimeError("env.call() is only available inside a rollout of an env with a server")
        res = await ctx.session.call(tool, args, timeout=self.tool_timeout)
        if res.is_error:
            raise HiddenCallError(f"hidden call {tool}({args}) failed: {res.text}")
        return res

    async def is_done(self, state: dict[str, Any]) -> str | None:
        """The name of the first stop condition that holds, else None."""
        if state.get("done"):
            return str(state.get("stop_reason", "done"))
        for check in self._stops:
            value = check(state)
            if inspect.isawaitable(value):
                value = await value
            if value:
                return check.__name__
        return None

    async def run_env_tool(self, name: str, args: dict[str, Any], state: dict[str, Any]) -> str:
        _, _, model = self._env_tool_schemas[name]
        validated = model.model_validate(args)
        value = getattr(self, name)(state, **validated.model_dump())
        if inspect.isawaitable(value):
            value = await value
        return value if isinstance(value, str) else json.dumps(value)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self._describe_servers()}>"


def bind_rollout(session: MCPSession | None, state: dict[str, Any]) -> contextvars.Token[_Rollout]:
    return _current.set(_Rollout(session, state))


def unbind_rollout(token: contextvars.Token[_Rollout]) -> None:
    _current.reset(token)


__all__ = [
    "HiddenCallError",
    "StatefulToolEnv",
    "ToolCallError",
    "bind_rollout",
    "env_tool",
    "stop",
    "unbind_rollout",
]
