"""The runtime half of `toolgym export verifiers`: verifiers 0.4 (`verifiers.v1`) classes that run a toolgym env.

Imported inside the verifiers venv (verifiers pins `mcp==2.0.0`; toolgym supports it), by the thin package that
`toolgym.export.verifiers.export_verifiers` writes. Pieces, mapped onto the v1 API:

* `ToolgymTaskset` / `ToolgymTask` (`vf.Taskset`, `vf.Task`): one task per exported row. `TaskData.prompt` holds the
  env's initial messages, computed at export time by running the env's hidden setup against the real server (so
  a prompt that shows the setup's result, e.g. the opening board, is exact when the setup is deterministic given
  the task, which toolgym's seeded envs are); `TaskData.task` keeps the toolgym task row for the rewards.
* `ToolgymToolset` (`vf.Toolset`, task-scoped: one server process per rollout, run by the subprocess runtime as
  `python -m <package>.toolset`): loads the toolgym env and opens an `Episode` (`toolgym.episode`) for the rollout's
  task (`setup_task`: a session to the original server, acquired with the task so fixtures that name task fields
  work, and the env's `setup_state`), and serves the env's model-visible tools with their exact schemas (hidden
  tools absent, hidden args removed). Each call goes through the episode (schema validation, hidden arguments such
  as `game_id`, the MCP call). Turns: the task's `toolgym_turn` hook (a `@vf.stop` on each model response that
  never stops) writes how many of the response's calls will reach the toolset into the rollout's state, which the
  toolset reads before each call, so a turn's calls run as one turn and `env_response` runs once, after its last
  call (its messages appended to that call's output). Stops: the task's `toolgym_stopped` hook (a `@vf.stop` checked
  before each model call) ends the rollout once the episode is over (a toolgym `@stop`, or the env's `max_turns`),
  as toolgym's own loop does; calls that still arrive answer "the episode is over".
* Rewards: one `@vf.reward(weight=w)` per rubric function (`@vf.metric` for weight 0), built by
  `build_task_class` from the names and weights the exporter records; all read one cached scoring of the rollout
  by the env's `Rubric` (`toolgym.episode.score_rollout`, plus toolgym's `acc_*` tool-call accuracy rates as
  metrics; a metric that does not apply to a rollout is left out, as in toolgym). Functions that only need
  `env`/`state`/`task` (server-side checks such as tic-tac-toe's `game_result` or a config env's `tool_result`) run
  in the toolset process after setup and after every turn, against the live session, and reach the scorer through
  the rollout's shared `vf.State`; the rest (answer, call_match, called, format...) run in the scorer on the trace's
  messages, turns and call records rebuilt by `toolgym.episode.replay_transcript` from the toolset's records. A
  raising reward function fails the rollout's scoring (verifiers records the error), never a silent 0.
* `ToolgymChatHarness`: verifiers' own null chat program (`CHAT_PROGRAM_SOURCE`, the same script the built-in
  `null` harness runs) launched with this venv's Python instead of a `uv`-synced PEP 723 environment, so an eval
  runs offline. `--env.agent.harness.id null` selects the stock one where `uv` and an index are available.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import keyword
import logging
import sys
from pathlib import Path
from typing import Any, ClassVar

import verifiers.v1 as vf
from verifiers.v1.harnesses.null.harness import NullHarness
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE

from toolgym.env import StatefulToolEnv
from toolgym.episode import Episode, replay_transcript, score_rollout
from toolgym.export.common import server_side, wanted_params
from toolgym.rubric import RewardError
from toolgym.types import AssistantTurn, CallRecord, ToolCall, Trajectory

log = logging.getLogger("toolgym.vf")


# ---------------------------------------------------------------------------------------------------- spec
@functools.cache
def load_spec(package_dir: Path) -> dict[str, Any]:
    return json.loads((package_dir / "toolgym_export.json").read_text())


def load_env(package_dir: Path) -> StatefulToolEnv:
    """The toolgym env the package was exported from: a config file copied into the package, or an installed env
    (entry point) with the recorded kwargs."""
    from toolgym.registry import load_env as _load

    spec = load_spec(package_dir)
    src = spec["env"]
    target = str(package_dir / src["config"]) if "config" in src else src["name"]
    return _load(target, **spec.get("env_kwargs", {}))


# ---------------------------------------------------------------------------------------------------- data
class ToolgymState(vf.State):
    toolgym: dict[str, Any] = {}
    """Published by the toolset: `records` (its CallRecords), `server_rewards`, `server_errors`, `done`, `stop_at`."""
    toolgym_turn: dict[str, Any] = {}
    """Written by the task on each model response: `index` (0-based) and `calls` (how many will reach the toolset)."""


class ToolgymData(vf.TaskData):
    task: dict[str, Any] = {}
    """The toolgym task row (what the rubric reads)."""
    example_id: int = 0


class ToolgymTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class ToolgymTasksetConfig(vf.TasksetConfig):
    task: ToolgymTaskConfig = ToolgymTaskConfig()


# ---------------------------------------------------------------------------------------------------- toolset
def _json_type(prop: dict[str, Any]) -> Any:
    t = prop.get("type")
    return {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}.get(
        t if isinstance(t, str) else "", Any)


class ToolgymToolset(vf.Toolset[vf.ToolsetConfig, ToolgymState]):
    """Serves a toolgym env's model-visible tools for one rollout (see the module docstring)."""

    TOOL_PREFIX: ClassVar[str | None] = None  # the model sees the env's own tool names
    PACKAGE_DIR: ClassVar[Path]

    def __init__(self, config: vf.ToolsetConfig) -> None:
        super().__init__(config)
        self.env: StatefulToolEnv | None = None
        self.episode: Episode | None = None
        self.turn_index: int | None = None  # the open turn (verifiers' response index), its expected calls, run so far
        self.turn_calls = 0
        self.turn_run = 0
        self.published: dict[str, Any] = {}
        self.lock = asyncio.Lock()

    async def setup(self) -> None:
        self.env = load_env(self.PACKAGE_DIR)
        await self.env.start()
        self._exit_stack.push_async_callback(self._teardown)

    async def setup_task(self, task: Any) -> None:
        env = self.env
        assert env is not None
        self.episode = env.episode(dict(getattr(task, "task", {}) or {}), getattr(task, "example_id", 0))
        await self.episode.start()
        await self._server_rewards()
        # No tool call is in flight: publish through the rollout's state channel directly, so a rollout with no
        # call still carries its server-side rewards.
        await self._push(ToolgymState(toolgym=self.published))

    async def _push(self, state: ToolgymState) -> None:
        from verifiers.v1.mcp.server import _call_state

        token = _call_state.set(state)
        try:
            await self._push_state(b"")
        finally:
            _call_state.reset(token)

    async def _server_rewards(self) -> None:
        """Publish the records and, once the open turn has ended, the server-side rewards and the stop."""
        ep = self.episode
        assert ep is not None
        values: dict[str, float] = dict(self.published.get("server_rewards") or {})
        errors: dict[str, str] = dict(self.published.get("server_errors") or {})
        closed = self.turn_index is None
        if closed:
            values, errors = {}, {}
            for name, fn, _weight, _wanted in ep.env.rubric.items:
                if not server_side(fn):
                    continue
                kwargs = {"env": ep.env, "state": dict(ep.state), "task": ep.task}
                try:
                    with ep.bound():
                        value = fn(**{k: v for k, v in kwargs.items() if k in (wanted_params(fn) or kwargs)})
                        if inspect.isawaitable(value):
                            value = await value
                    values[name] = float(value)
                except Exception as exc:  # noqa: BLE001 - reported to the scorer, which fails the rollout's scoring
                    errors[name] = f"{type(exc).__name__}: {exc}"
        done = ep.stop_reason if closed else None
        self.published = {"records": [_record_dict(r) for r in ep.calls], "server_rewards": values,
                          "server_errors": errors, "done": done, "stop_at": len(ep.calls) if done else None}

    def register(self, mcp: Any) -> None:
        env = self.env
        assert env is not None
        for schema in env.model_tools():
            fn_schema = schema["function"]
            name = fn_schema["name"]
            proxy = self._proxy(name, fn_schema.get("parameters") or {})
            mcp.add_tool(self._with_state(proxy), name=name, description=fn_schema.get("description") or None)
            try:  # the server's exact schema to the model, and the model's exact arguments to the episode (which
                # validates them as toolgym does; the SDK's own model would coerce or drop some first)
                registered = mcp._tool_manager.get_tool(name)
                registered.parameters = fn_schema.get("parameters") or {"type": "object"}
                registered.fn_metadata = _PassThrough.of(registered.fn_metadata)
            except Exception:  # noqa: BLE001 - private API; the approximate schema and validation still work
                log.debug("could not set the exact schema of %s", name)

    def _proxy(self, tool: str, params: dict[str, Any]) -> Any:
        props: dict[str, Any] = params.get("properties") or {}
        required = set(params.get("required") or [])

        async def proxy(**kwargs: Any) -> str:
            return await self._call(tool, kwargs)

        sig = []
        for p in sorted(props, key=lambda p: p not in required):
            if not p.isidentifier() or keyword.iskeyword(p):
                raise ValueError(f"tool {tool!r}: argument {p!r} is not a Python identifier")
            sig.append(inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, annotation=_json_type(props[p]),
                                         default=inspect.Parameter.empty if p in required else None))
        proxy.__signature__ = inspect.Signature(sig, return_annotation=str)  # type: ignore[attr-defined]
        proxy.__name__ = tool
        proxy.__annotations__ = {p.name: p.annotation for p in sig} | {"return": str}
        return proxy

    async def _call(self, tool: str, args: dict[str, Any]) -> str:
        ep = self.episode
        assert ep is not None
        async with self.lock:  # one rollout: calls run in order, as in toolgym's own loop
            info = dict(self.state.toolgym_turn or {})
            index, expected = info.get("index"), int(info.get("calls") or 1)
            if self.turn_index is not None and index != self.turn_index:  # the last turn lost a call: close it
                await ep.end_turn()
                self.turn_index = None
            if ep.done:  # not recorded: in toolgym the rollout ended at the stop; the scorer cuts the transcript there
                return f"Error: the episode is over ({ep.stop_reason}); no more tool calls are accepted."
            call = ToolCall(name=tool, arguments=args, id=f"call_{len(ep.calls)}")
            if self.turn_index is None:
                ep.begin_turn(AssistantTurn(content="", tool_calls=[call]))
                self.turn_index = index if index is not None else -1 - len(ep.calls)
                self.turn_calls, self.turn_run = expected, 0
            else:
                ep.turns[-1].tool_calls.append(call)
            text = (await ep.call(call)).text
            self.turn_run += 1
            if self.turn_run >= self.turn_calls:
                extra = await ep.end_turn()
                self.turn_index = None
                if extra:
                    text += "".join(f"\n\n{m.get('content', '')}" for m in extra)
            await self._server_rewards()
            self.state.toolgym = self.published
            return text

    async def _teardown(self) -> None:
        env = self.env
        if env is None:
            return
        if self.episode is not None:
            await self.episode.close()
            if self.episode.cleanup_error:
                log.warning("toolgym %s", self.episode.cleanup_error)
        await env.aclose()


class _PassThrough:
    """Builds a copy of an MCP tool's argument metadata whose validation hands the arguments over unchanged."""

    @staticmethod
    def of(meta: Any) -> Any:
        class Raw(type(meta)):  # type: ignore[misc]
            def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
                return dict(arguments_to_validate)

        return Raw.model_validate(meta, from_attributes=True) if hasattr(meta, "model_validate") else meta


def _record_dict(r: CallRecord) -> dict[str, Any]:
    return {"turn": r.turn, "name": r.name, "arguments": r.arguments, "parse_ok": r.parse_ok, "name_ok": r.name_ok,
            "args_ok": r.args_ok, "exec_ok": r.exec_ok, "error": r.error, "result": r.result,
            "latency_s": r.latency_s, "server": r.server}


# ---------------------------------------------------------------------------------------------------- scoring
def _msg_dict(m: Any) -> dict[str, Any]:
    d = m.model_dump(mode="json", exclude_none=True) if hasattr(m, "model_dump") else dict(m)
    content = d.get("content")
    if isinstance(content, list):
        d["content"] = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    for tc in d.get("tool_calls") or []:  # verifiers' flat ToolCall -> OpenAI shape
        if "function" not in tc:
            tc["function"] = {"name": tc.pop("name", ""), "arguments": tc.pop("arguments", "")}
    return d


class ToolgymTask(vf.Task[ToolgymData, ToolgymState, ToolgymTaskConfig]):
    """Scores a rollout with the toolgym rubric once (`toolgym_scores`); `build_task_class` adds one `@vf.reward`
    (weight from the rubric) or `@vf.metric` (weight 0) method per rubric function, reading its entry."""

    PACKAGE_DIR: ClassVar[Path]
    TOOLSET: ClassVar[type[ToolgymToolset]]
    _env: ClassVar[StatefulToolEnv | None] = None

    @classmethod
    def toolsets(cls, config: ToolgymTaskConfig) -> list[vf.Toolset]:
        return [cls.TOOLSET(config.tools)]

    @classmethod
    def scorer_env(cls) -> StatefulToolEnv:
        """The toolgym env, loaded (not connected) in the scoring process for its rubric and attributes."""
        if cls._env is None:
            cls._env = load_env(cls.PACKAGE_DIR)
        return cls._env

    async def toolgym_scores(self, trace: vf.Trace) -> dict[str, float]:
        """All rubric values (and `acc_*` tool-call accuracy rates) for this trace, computed once per trace."""
        cache: dict[str, asyncio.Task[dict[str, float]]] = self.__dict__.setdefault("_tg_cache", {})
        if trace.id not in cache:
            cache[trace.id] = asyncio.ensure_future(self._compute(trace))
        return await asyncio.shield(cache[trace.id])

    async def _compute(self, trace: vf.Trace) -> dict[str, float]:
        env = self.scorer_env()
        shared = dict(getattr(trace.state, "toolgym", {}) or {})
        for name, error in (shared.get("server_errors") or {}).items():
            raise RewardError(f"reward function {name!r} raised in the toolset: {error}")
        server_rewards: dict[str, float] = shared.get("server_rewards") or {}
        missing = [n for n, fn, *_ in env.rubric.items if server_side(fn) and n not in server_rewards]
        if missing:
            raise RewardError(f"reward function(s) {missing} need the MCP session and the toolset published no value")
        task = dict(self.data.task)
        records = [CallRecord(**r) for r in shared.get("records") or []]
        messages, turns, calls = replay_transcript([_msg_dict(m) for m in trace.messages], records,
                                                   shared.get("stop_at"), env.max_turns,
                                                   set(load_spec(self.PACKAGE_DIR)["tools"]))
        reason = shared.get("done") or trace.stop_condition or "no_tool_call"
        traj = Trajectory(example_id=self.data.example_id, task=task, messages=messages, calls=calls,
                          stop_reason=reason)
        scored = await score_rollout(_NoSession(env), task, {"task": task, "stop_reason": reason}, traj, turns,
                                     server_rewards)
        return {**scored.rewards, **scored.metrics, **{f"acc_{k}": v for k, v in scored.accuracy.items()}}

    @vf.stop
    async def toolgym_turn(self, response: vf.Response, trace: vf.Trace) -> bool:
        """Never stops a rollout: tells the toolset, through the rollout's state, how many of this model response's
        tool calls will reach it (known tools, arguments that parse as an object): they are one toolgym turn."""
        tools = set(load_spec(self.PACKAGE_DIR)["tools"])
        n = 0
        for tc in response.message.tool_calls or []:
            try:
                n += tc.name in tools and isinstance(json.loads(tc.arguments or "{}"), dict)
            except json.JSONDecodeError:
                continue
        previous = getattr(trace.state, "toolgym_turn", None) or {}
        trace.state.toolgym_turn = {"index": int(previous.get("index", -1)) + 1, "calls": n}
        return False

    @vf.stop
    async def toolgym_stopped(self, trace: vf.Trace) -> bool:
        """Ends the rollout before the next model call once the toolgym episode is over (a toolgym `@stop` held, or
        the env's `max_turns`), as toolgym's own loop does."""
        return bool((getattr(trace.state, "toolgym", None) or {}).get("done"))

    @vf.metric
    async def toolgym_accuracy(self, trace: vf.Trace) -> dict[str, float]:
        """toolgym's tool-call accuracy rates (BFCL names) for the rollout, as metrics."""
        return {k: v for k, v in (await self.toolgym_scores(trace)).items() if k.startswith("acc_")}


_RESERVED = set(dir(ToolgymTask))


def method_name(reward: str) -> str:
    ident = "".join(c if c.isalnum() or c == "_" else "_" for c in reward)
    if not ident.isidentifier() or keyword.iskeyword(ident) or ident in _RESERVED or ident.startswith("_"):
        ident = f"reward_{ident.lstrip('_')}"
    return ident


def build_task_class(name: str, module: str, package_dir: Path, toolset: type[ToolgymToolset]) -> type[ToolgymTask]:
    """A `ToolgymTask` subclass with one `@vf.reward(weight=w)` (w != 0) or `@vf.metric` (w == 0) per rubric entry
    recorded in the package's `toolgym_export.json`."""
    spec = load_spec(package_dir)
    ns: dict[str, Any] = {"PACKAGE_DIR": package_dir, "TOOLSET": toolset, "__module__": module}
    for entry in spec["rewards"]:
        key, weight = entry["name"], float(entry["weight"])

        async def fn(self: ToolgymTask, trace: vf.Trace, _key: str = key) -> float | dict[str, float]:
            value = (await self.toolgym_scores(trace)).get(_key)
            return {} if value is None else value  # a metric that does not apply to this rollout: left out

        fn.__name__ = fn.__qualname__ = method_name(key)
        fn.__doc__ = f"toolgym rubric entry {key!r} (weight {weight})."
        ns[fn.__name__] = vf.reward(fn, weight=weight) if weight != 0.0 else vf.metric(fn)
    return type(name, (ToolgymTask,), ns)


class _NoSession:
    """The env's attributes for reward functions in the scoring process; `call` explains why it cannot work there."""

    def __init__(self, env: StatefulToolEnv) -> None:
        self._env = env

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    async def call(self, tool: str, /, **args: Any) -> Any:
        raise RuntimeError(f"hidden call {tool}() from a reward that also reads the transcript: the scorer has no MCP "
                           "session (only rewards taking just env/state/task run in the toolset)")


class ToolgymTaskset(vf.Taskset[ToolgymTask, ToolgymTasksetConfig]):
    PACKAGE_DIR: ClassVar[Path]
    TASK: ClassVar[type[ToolgymTask]]

    def load(self) -> list[ToolgymTask]:
        tasks = []
        with (self.PACKAGE_DIR / "tasks.jsonl").open() as f:
            for i, line in enumerate(f):
                if not line.strip():
                    continue
                row = json.loads(line)
                data = ToolgymData(prompt=row["prompt"], system_prompt=row.get("system_prompt"), task=row["task"],
                                   example_id=i, name=row.get("name"))
                tasks.append(self.TASK(data, self.config.task))
        return tasks


# ---------------------------------------------------------------------------------------------------- harness
class ToolgymChatHarness(NullHarness):
    """verifiers' null chat program, run with this interpreter (no `uv`): offline local evals."""

    async def setup(self, runtime: vf.Runtime) -> None:
        return None

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):  # type: ignore[no-untyped-def]
        from verifiers.v1.harnesses.utils import launch as vlaunch

        class _Local:
            """Forwards to the runtime, but prepares the chat program with this Python instead of `uv`."""

            def __init__(self, rt: Any) -> None:
                self._rt = rt

            def __getattr__(self, name: str) -> Any:
                return getattr(self._rt, name)

            async def prepare_uv_script(self, script: str | bytes, env: Any = None, *, activate: bool = True) -> list[str]:
                text = script.decode() if isinstance(script, bytes) else script
                path = "vf_chat_program.py"
                await self._rt.write(path, text.encode())
                return [sys.executable, path]

        system_prompt, prompt = self.resolve_prompt(data)
        extra = [f"--tool-interception-url={tool_interception_url}"] if tool_interception_url else []
        return await vlaunch.launch_chat_program(CHAT_PROGRAM_SOURCE, self.config, ctx, trace, _Local(runtime),
                                                 endpoint, secret, mcp_urls, system_prompt, prompt, extra_args=extra)


__all__ = ["ToolgymChatHarness", "build_task_class", "ToolgymState", "ToolgymTask", "ToolgymTaskset", "ToolgymToolset"]
