"""`StatefulToolEnv`: an MCP server turned into a multi-turn RL environment.

A subclass names its server, the tools and arguments hidden from the model, and overrides a few hooks:

    class TicTacToe(StatefulToolEnv):
        name = "tictactoe"
        server = ServerSpec.stdio("mcp-server-tictactoe")
        session_scope = "shared"                       # games are keyed by id: one session serves many rollouts
        hidden_tools = {"new_game", "game_result", "end_game"}
        hidden_args = {"make_move": ["game_id"], "get_board": ["game_id"]}   # filled from state["game_id"]

        async def setup_state(self, state, task):
            res = await self.call("new_game", seed=task["seed"])          # a hidden call on this rollout's session
            state["game_id"] = res.json()["game_id"]

        @stop
        async def game_over(self, state) -> bool:
            return state.get("status", "in_progress") != "in_progress"

One `state` dict per rollout. Hooks run in this order: `setup_state` → loop { policy turn → tool calls
(`update_tool_args`, `call_tool`) → `env_response` (once per turn) → `@stop` checks } → rubric → `cleanup`.
`env.episode(task)` runs that lifecycle (`toolgym.episode.Episode`); every front end (eval, training, serve, the TRL
adapter, the verifiers export) drives it. Tools the env implements itself (e.g. a final-answer tool) are methods
marked `@env_tool`. Every attribute and hook an env may set is declared below with a one-line docstring; the table in
docs/concepts.md lists them.
"""

from __future__ import annotations

import inspect
import json
import random
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Literal

import pydantic

from toolgym.episode import Episode, HiddenCallError, current_episode
from toolgym.mcp_bridge import (
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
from toolgym.tool_schema import brief_tool, described_signature
from toolgym.types import AssistantTurn, CallRecord, Trajectory


def stop(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a method `(self, state) -> bool` (sync or async) as a stop condition, checked after every turn."""
    fn._toolgym_stop = True  # type: ignore[attr-defined]
    return fn


def env_tool(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a method `(self, state, **args) -> str` as a tool the env implements itself and shows to the model.

    Its JSON schema is derived from the typed signature (after `state`), each parameter described by
    `Annotated[T, Field(description=...)]` or by the docstring's `Args:` section; its description is the docstring
    without its sections. A parameter annotated `Episode` is not shown to the model: the running episode is passed
    (to make hidden calls, read its calls so far). Raise an exception to return an error to the model."""
    fn._toolgym_env_tool = True  # type: ignore[attr-defined]
    return fn


def _episode_params(fn: Callable[..., Any]) -> set[str]:
    """The parameters of an `@env_tool` method annotated `Episode` (injected, hidden from the model)."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - unresolvable annotations: fall back to their text
        hints = {}
    out = set()
    for name, p in inspect.signature(fn).parameters.items():
        ann = hints.get(name, p.annotation)
        if ann is Episode or (isinstance(ann, str) and ann.rsplit(".", 1)[-1] == "Episode"):
            out.add(name)
    return out


def _env_tool_schema(fn: Callable[..., Any]) -> tuple[str, dict[str, Any], type[pydantic.BaseModel]]:
    """Description, JSON schema and argument model of an `@env_tool` method: parameter descriptions from
    `Annotated[..., Field(description=...)]` or the docstring's `Args:` section (`toolgym.tool_schema`)."""
    description, sig = described_signature(fn)
    injected = _episode_params(fn)
    fields: dict[str, Any] = {}
    for name, p in list(sig.parameters.items())[2:]:  # skip self, state
        if name in injected:
            continue
        fields[name] = (p.annotation, ... if p.default is inspect.Parameter.empty else p.default)
    model = pydantic.create_model(f"{fn.__name__}_args", __config__=pydantic.ConfigDict(extra="forbid"), **fields)
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return description, schema, model


class StatefulToolEnv:
    """Base class of toolgym environments. See the module docstring for the hook order.

    The class attributes below are everything an env can set (class attributes, or constructor options where the
    `__init__` takes them); the framework reads no other attribute of an env."""

    name: ClassVar[str] = "env"
    """The env's name (run folders, reports, the served MCP server's name)."""
    server: ClassVar[ServerSpec | None] = None
    """The MCP server to bind (`ServerSpec.stdio`/`.http`/`.inprocess`), or None for an env of env tools only."""
    servers: ClassVar[list[ServerBinding] | None] = None
    """Several MCP servers instead of `server`: their tools are merged, calls routed (see `ServerBinding`)."""
    session_scope: ClassVar[Literal["rollout", "shared"]] = "rollout"
    """One MCP session per rollout (a fresh server state), or one shared by all rollouts (state keyed by ids)."""
    hidden_tools: ClassVar[set[str]] = set()
    """Server tools the model never sees (setup and grading tools the env calls itself through `call`)."""
    visible_tools: ClassVar[set[str] | None] = None
    """If set, only these server tools are shown to the model (an allow-list; `hidden_tools` still applies)."""
    hidden_args: ClassVar[dict[str, list[str] | dict[str, str]]] = {}
    """Per tool, arguments removed from the model's schema and filled from the rollout's state: a list of names
    (each filled from the state key of the same name) or `{argument: state key}`; the default `update_tool_args`
    injects them."""
    tool_descriptions: Literal["full", "brief"] = "full"
    """How the model sees the servers' tools: `full`, as the servers describe them; `brief`, each tool and parameter
    description cut to its first sentence and the `$schema`/`title` keywords dropped (`tool_schema.brief_tool`: a
    prompt about half as long for a small model; arguments are still validated against the full schema)."""
    system_prompt: ClassVar[str | None] = None
    """A system message put before each task's prompt by the default `initial_messages`."""
    default_policy: ClassVar[str | None] = None
    """The policy URI `toolgym eval ENV` uses without `--model` (e.g. an embedded model or a reference player)."""
    default_policy_options: ClassVar[dict[str, Any]] = {}
    """Sampling options of `default_policy` (command-line flags override them; with `--model`, its sampling options
    -- temperature, top_p, max_tokens, seed -- still apply)."""
    serve_defaults: ClassVar[dict[str, Any]] = {}
    """Env options `toolgym serve` uses where the command line gives none (tic-tac-toe: `{"transport": "inprocess"}`,
    so a request starts no server process)."""
    report_by: ClassVar[tuple[str, ...]] = ()
    """Task fields `toolgym eval` breaks its results down by (tables with CIs and a plot)."""
    report_metrics: ClassVar[tuple[str, ...] | None] = None
    """The columns of those breakdown tables (default: the rubric's entries)."""
    num_groups: int = 1
    """Difficulty groups of the dataset (task i is in group i % num_groups): GRPO draws every batch across them."""
    max_turns: int = 10
    """Model turns a rollout may take before it is stopped (`stop_reason = "max_turns"`)."""
    tool_timeout: float = 30.0
    """Seconds one tool call (model or hidden) may take before it fails."""
    on_no_call: Literal["stop", "nudge"] = "stop"
    """What a model turn without a tool call does: end the rollout, or get `nudge_message` and go on."""
    nudge_message: str = "Please continue by calling one of the tools."
    """The user message a turn without a call gets under `on_no_call = "nudge"`."""
    max_tool_output_chars: int = 20_000
    """Tool results longer than this are truncated (with a note) before the model sees them."""
    call_match_mode: str | dict[str, Any] = "exact"
    """How arguments of a task's `expected_calls` compare when the expected call's `match` does not say
    (`toolgym.accuracy.MATCH_MODES`: exact, case_insensitive, normalized, numeric, regex, set)."""
    error_reward: float = 0.0
    """The reward an errored rollout counts with in eval statistics (means, CIs, pass@k): a failure, at this floor."""
    rubric: Rubric
    """The reward functions (built once per env by `build_rubric`)."""
    tools: dict[str, ToolInfo]
    """The connected servers' tools by name (filled by `start`; hidden ones included)."""

    @class_defaults("max_turns", "tool_timeout", "on_no_call", "session_scope", "tool_descriptions")
    def __init__(
        self,
        server: ServerSpec | None = None,
        servers: list[ServerBinding] | None = None,
        max_turns: Annotated[int, pydantic.Field(ge=1)] | None = None,
        tool_timeout: Annotated[float, pydantic.Field(gt=0)] | None = None,
        on_no_call: Literal["stop", "nudge"] | None = None,
        session_scope: Literal["rollout", "shared"] | None = None,
        tool_descriptions: Literal["full", "brief"] | None = None,
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
            tool_descriptions: How the model sees the servers' tools: as they describe them, or `brief` (each
                description's first sentence, no `$schema`/`title`).
        """
        if server is not None and servers is not None:
            raise ValueError("pass either server or servers, not both")
        if server is not None:
            self.server = server  # type: ignore[misc]
        if servers is not None:
            self.servers = list(servers)  # type: ignore[misc]
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

    def restart_tasks(self, trajectories: list[Trajectory], n: int, rng: random.Random) -> list[dict[str, Any]]:
        """Up to `n` task rows that restart an episode from a state `trajectories` reached (GRPO's
        `restart_share`: a group of samples from one mid-episode state credits the decision taken there). With GRPO's
        `probe_games`, `trajectories` also holds greedy episodes of the current weights, marked `probe` in their task
        (states where the delivered policy fails: prefer them). Only an env whose server can start from a given state
        can; the default says so. Use `rng` for every choice (seeded per step)."""
        raise NotImplementedError(f"{type(self).__name__} cannot restart episodes from a reached state; override "
                                  "restart_tasks to use GRPO's restart_share")

    def symmetric_images(self, messages: list[dict[str, Any]], k: int, rng: random.Random) -> list[list[dict[str, Any]]]:
        """Up to `k` conversations equivalent to the finished episode `messages` under a symmetry of the task (a
        rotated or mirrored board): the same decisions, each written as the model would have written it there, whose
        episode is exactly as likely and scores the same reward (GRPO's `symmetry_images` trains on them with the
        episode's advantage). [] where none can be written faithfully. Only an env whose task has symmetries can;
        the default says so. Use `rng` for every choice (seeded per step)."""
        raise NotImplementedError(f"{type(self).__name__} declares no symmetries; override symmetric_images to use "
                                  "GRPO's symmetry_images")

    async def exact_eval(self, policy: Any) -> dict[str, float]:
        """The exact value of `policy`'s metrics on this env, where the env can compute one instead of sampling
        episodes: every episode a deterministic (greedy) policy can meet, each weighted by its chance, as metric ->
        value (GRPO's `eval_exact` logs them as `eval/exact/...`; `toolgym eval --exact` prints them). Report
        `errored` (the probability of episodes that errored) and `diverged` (episodes that did not replay what they
        were asked to) where a walk can go wrong: above 0, `toolgym eval --exact` exits 3. Only an env whose
        episodes can be enumerated can; the default says so. The env is started by the caller."""
        raise NotImplementedError(f"{type(self).__name__} has no exact evaluation; override exact_eval to use "
                                  "GRPO's eval_exact")

    def check_exact_eval(self) -> None:
        """Raise `ValueError` (with the reason) if `exact_eval` cannot walk this env's configuration, before anything
        starts: GRPO checks it for every `eval_exact` eval (`eval_env_args` and each of `eval_sets`) before the run
        and `toolgym eval --exact` before it loads the model. The default accepts; an env whose walk has conditions
        (an opponent it can enumerate, whole episodes) states them here and calls it from `exact_eval`."""

    def restart_options(self) -> list[str]:
        """The options set on this env that act only through `restart_tasks` (default: none). GRPO refuses them
        without `restart_share`, where they would change nothing."""
        return []

    def restart_state(self) -> Any:
        """What `restart_tasks` keeps from one call to the next (a replay buffer, counters), picklable: GRPO saves it
        in each checkpoint and hands it to `load_restart_state` on `--resume`, so a resumed run restarts from the
        same states an unbroken one would. Default: None (nothing kept)."""
        return None

    def load_restart_state(self, state: Any) -> None:
        """Put back what `restart_state` returned (GRPO's `--resume`). Default: nothing to put back."""

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
        """The arguments a model call of `tool` reaches the server with: by default the model's, plus each hidden
        argument of `hidden_args[tool]` from the state key that fills it. Override to compute them otherwise."""
        sources = self.hidden_arg_sources(tool)
        if not sources:
            return args
        missing = {a: k for a, k in sources.items() if k not in state}
        if missing:
            raise HiddenCallError(f"hidden argument(s) of {tool}: the rollout's state has no "
                                  f"{', '.join(repr(k) for k in missing.values())} (set it in setup_state, or "
                                  "override update_tool_args)")
        return {**args, **{a: state[k] for a, k in sources.items()}}

    def serve_task(self, request: str, seed: int = 0) -> dict[str, Any]:
        """The task row of one `toolgym serve` `run_agent` request, from its arguments: this method's typed, documented
        parameters are the tool's (beside `max_turns`), so an env whose episodes take no free text declares what
        they do take (tic-tac-toe: who starts, the opponent's strength, a seed). Default: the request's text is the
        task's prompt.

        Args:
            request: What the agent should do, in plain language.
            seed: Seeds the episode (and the agent's sampling, when it samples): the same request and seed give the
                same answer.
        """
        return {"prompt": request, "seed": seed}

    def serve_result(self, trajectory: Trajectory) -> Mapping[str, Any]:
        """Fields `run_agent` returns beside the generic ones (`answer`, `outcome`, `stop_reason`, `turns`, `trace`),
        read from the finished request's trajectory (`trajectory.info` holds what the hooks left in the state). The
        return annotation, a `TypedDict`, types them in the tool's output schema; a field named like a generic one
        replaces it (tic-tac-toe: `outcome` win/draw/loss, the final `board`, the `moves`). Default: none."""
        return {}

    def serve_tools(self, agent: Any) -> dict[str, Callable[..., Any]]:
        """Extra tools `toolgym serve` offers beside `run_agent`, by name: typed, documented async functions built
        around `agent` (a `toolgym.serve.Agent`; e.g. tic-tac-toe's `suggest_move`). Default: none."""
        return {}

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
            self._provider = SessionProvider(self.server, self.session_scope, self.name)
        session = await self._provider.acquire(rollout=False)
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

    def episode(self, task: dict[str, Any], example_id: int = 0, rollout_index: int = 0,
                max_turns: int | None = None) -> Episode:
        """One rollout on `task` (an async context manager; see `toolgym.episode`). `max_turns` caps this rollout's
        turns instead of the env's."""
        return Episode(self, task, example_id, rollout_index, max_turns)

    def hidden_arg_sources(self, tool: str) -> dict[str, str]:
        """`{argument: state key}` of the hidden arguments of `tool` (from `hidden_args`)."""
        spec = self.hidden_args.get(tool) or {}
        return dict(spec) if isinstance(spec, dict) else {a: a for a in spec}

    def is_env_tool(self, tool: str) -> bool:
        """Whether `tool` is implemented by the env itself (an `@env_tool` method)."""
        return tool in self._env_tools

    def server_of(self, tool: str) -> str | None:
        """The name of the server a tool call goes to, in a multi-server env (else None)."""
        return self._provider.server_of(tool) if isinstance(self._provider, MultiProvider) else None

    def _describe_servers(self) -> str:
        if self.servers:
            return "the servers " + ", ".join(f"{b.name}={b.spec.describe()}" for b in self.servers)
        return f"the server {self.server.describe()}" if self.server else "no server"

    def is_error_text(self, tool: str, text: str) -> bool:
        """Whether a tool result's text is an error by the `error_patterns` of the server that offers `tool` (for
        servers that answer errors as ordinary text, without the MCP error flag)."""
        if self.servers:
            name = self.server_of(tool)
            spec = next((b.spec for b in self.servers if b.name == name), None)
        else:
            spec = self.server
        return spec is not None and spec.is_error_text(text)

    def task_source(self, index: int) -> str:
        """Where task `index` of the last `build_dataset` comes from, for messages (`FILE:LINE` for a task file);
        default `task #index`."""
        return f"task #{index}"

    def is_visible(self, tool: str) -> bool:
        """Whether the model may call `tool` (an env tool, or a server tool neither hidden nor outside
        `visible_tools`)."""
        if tool in self._env_tools:
            return True
        if tool not in self.tools or tool in self.hidden_tools:
            return False
        return self.visible_tools is None or tool in self.visible_tools

    def tool_schema(self, tool: str) -> dict[str, Any]:
        """The argument schema of `tool` that calls are validated against (hidden args removed; in full, whatever
        `tool_descriptions` shows the model)."""
        return self._schemas()[tool]["function"]["parameters"]

    def model_tools(self) -> list[dict[str, Any]]:
        """OpenAI-style schemas of the tools the model may call, as it sees them (`tool_descriptions`)."""
        schemas = list(self._schemas().values())
        if self.tool_descriptions == "brief":
            return [s if s["function"]["name"] in self._env_tools else brief_tool(s) for s in schemas]
        return schemas

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
        """A hidden call on the current episode's session (from hooks and reward functions). Raises
        `HiddenCallError` when the server reports an error, `ToolCallError` when the connection fails."""
        episode = current_episode()
        if episode is None or episode.env is not self:
            raise RuntimeError("env.call() is only available inside an episode of this env (a hook, an env tool or "
                               "a reward function)")
        return await episode.hidden_call(tool, **args)

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

    async def run_env_tool(self, name: str, args: dict[str, Any], state: dict[str, Any],
                           episode: Episode | None = None) -> str:
        """Run the `@env_tool` `name` with validated `args` (parameters annotated `Episode` get `episode`)."""
        _, _, model = self._env_tool_schemas[name]
        validated = model.model_validate(args)
        injected = {p: episode for p in _episode_params(self._env_tools[name])}
        value = getattr(self, name)(state, **validated.model_dump(), **injected)
        if inspect.isawaitable(value):
            value = await value
        return value if isinstance(value, str) else json.dumps(value)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {self._describe_servers()}>"


__all__ = [
    "Episode",
    "HiddenCallError",
    "StatefulToolEnv",
    "ToolCallError",
    "env_tool",
    "stop",
]
