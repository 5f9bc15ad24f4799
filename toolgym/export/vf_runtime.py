"""The runtime half of `toolgym export verifiers`: verifiers 0.4 (`verifiers.v1`) classes that run a toolgym env.

Imported inside the verifiers venv (verifiers pins `mcp==2.0.0`; toolgym supports it), by the thin package that
`toolgym.export.verifiers.export_verifiers` writes. Pieces, mapped onto the v1 API:

* `ToolgymTaskset` / `ToolgymTask` (`vf.Taskset`, `vf.Task`): one task per exported row. `TaskData.prompt` holds the
  env's initial messages, computed at export time by running the env's hidden setup against the real server (so
  a prompt that shows the setup's result, e.g. the opening board, is exact when the setup is deterministic given
  the task, which toolgym's seeded envs are); `TaskData.task` keeps the toolgym task row for the rewards.
* `ToolgymToolset` (`vf.Toolset`, task-scoped: one server process per rollout, run by the subprocess runtime as
  `python -m <package>.toolset`): loads the toolgym env, opens its MCP session to the original server, runs the
  env's `setup_state` for the rollout's task (`setup_task`), and serves the env's model-visible tools with their
  exact schemas (hidden tools absent, hidden args removed). Each call goes through toolgym's own `_execute_call`
  (schema validation, `update_tool_args` injecting hidden args such as `game_id`, the MCP call), then
  `env_response` and the `@stop` checks (after a stop, calls answer "the episode is over"). verifiers' chat loop
  has no hook for toolgym's stop conditions, so that is the closest equivalent.
* Rewards: one `@vf.reward(weight=w)` per rubric function (`@vf.metric` for weight 0), built by
  `build_task_class` from the names and weights the exporter records; all read one cached scoring of the rollout
  by the env's `Rubric` functions (plus toolgym's `acc_*` tool-call accuracy rates as metrics). Functions that only need `env`/`state`/`task` (server-side checks such as
  tic-tac-toe's `game_result` or a config env's `tool_result`) run in the toolset process after setup and after
  every call, against the live session, and reach the scorer through the rollout's shared `vf.State`; the rest
  (answer, call_match, called, format...) run in the scorer on the trace's messages, with `CallRecord`s rebuilt
  from the trace's tool calls and the toolset's records. A raising reward function fails the rollout's scoring
  (verifiers records the error), never a silent 0.
* `ToolgymChatHarness`: verifiers' own null chat program (`CHAT_PROGRAM_SOURCE`, the same script the built-in
  `null` harness runs) launched with this venv's Python instead of a `uv`-synced PEP 723 environment, so an eval
  runs offline. `--env.agent.harness.id null` selects the stock one where `uv` and an index are available.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import keyword
import logging
import re
import sys
from pathlib import Path
from typing import Any, ClassVar

import verifiers.v1 as vf
from verifiers.v1.harnesses.null.harness import NullHarness
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE

from toolgym.env import StatefulToolEnv, bind_rollout, unbind_rollout
from toolgym.export.common import server_side, wanted_params as _params
from toolgym.rollout import _accuracy_metrics, _execute_call
from toolgym.types import AssistantTurn, CallRecord, ToolCall, Trajectory

log = logging.getLogger("toolgym.vf")
_THINK = re.compile(r"<think>(.*?)</think>", re.S)



# ---------------------------------------------------------------------------------------------------- spec
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
    """Published by the toolset: `records` (its CallRecords), `server_rewards`, `server_errors`, `done`."""


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
        self.session: Any = None
        self.tg_state: dict[str, Any] = {}
        self.task: dict[str, Any] = {}
        self.records: list[CallRecord] = []
        self.done: str | None = None
        self.published: dict[str, Any] = {}
        self.lock = asyncio.Lock()

    async def setup(self) -> None:
        self.env = load_env(self.PACKAGE_DIR)
        await self.env.start()
        self._exit_stack.push_async_callback(self._teardown)

    async def setup_task(self, task: Any) -> None:
        env = self.env
        assert env is not None
        self.task = dict(getattr(task, "task", {}) or {})
        self.tg_state = {"task": self.task, "example_id": getattr(task, "example_id", 0), "rollout_index": 0}
        self.session = await env.provider.acquire() if env.provider is not None else None
        token = bind_rollout(self.session, self.tg_state)
        try:
            await env.setup_state(self.tg_state, self.task)
            self.done = await env.is_done(self.tg_state)
            await self._server_rewards()
        finally:
            unbind_rollout(token)
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
        env = self.env
        assert env is not None
        values: dict[str, float] = {}
        errors: dict[str, str] = {}
        for name, fn, _weight, _wanted in env.rubric.items:
            if not server_side(fn):
                continue
            kwargs = {"env": env, "state": dict(self.tg_state), "task": self.task}
            try:
                value = fn(**{k: v for k, v in kwargs.items() if k in (_params(fn) or kwargs)})
                if inspect.isawaitable(value):
                    value = await value
                values[name] = float(value)
            except Exception as exc:  # noqa: BLE001 - reported to the scorer, which fails the rollout's scoring
                errors[name] = f"{type(exc).__name__}: {exc}"
        self.published = {"records": [_record_dict(r, i) for i, r in enumerate(self.records)],
                          "server_rewards": values, "server_errors": errors, "done": self.done,
                          "stop_at": len(self.records) if self.done else None}

    def register(self, mcp: Any) -> None:
        env = self.env
        assert env is not None
        for schema in env.model_tools():
            fn_schema = schema["function"]
            name = fn_schema["name"]
            proxy = self._proxy(name, fn_schema.get("parameters") or {})
            mcp.add_tool(self._with_state(proxy), name=name, description=fn_schema.get("description") or None)
            try:  # advertise the server's exact schema (the generated signature only approximates nested types)
                mcp._tool_manager.get_tool(name).parameters = fn_schema.get("parameters") or {"type": "object"}
            except Exception:  # noqa: BLE001 - private API; the approximate schema still works
                log.debug("could not set the exact schema of %s", name)

    def _proxy(self, tool: str, params: dict[str, Any]) -> Any:
        props: dict[str, Any] = params.get("properties") or {}
        required = set(params.get("required") or [])

        async def proxy(**kwargs: Any) -> str:
            return await self._call(tool, {k: v for k, v in kwargs.items() if not (k not in required and v is None)})

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
        env = self.env
        assert env is not None
        async with self.lock:  # one rollout: calls run in order, as in toolgym's own loop
            if self.done:  # not recorded: in toolgym the rollout ended at the stop; the scorer cuts the transcript there
                return f"Error: the episode is over ({self.done}); no more tool calls are accepted."
            call = ToolCall(name=tool, arguments=args, id=f"call_{len(self.records)}")
            token = bind_rollout(self.session, self.tg_state)
            try:
                rec, text = await _execute_call(env, call, self.tg_state, len(self.records), self.session)
                self.records.append(rec)
                extra = await env.env_response(self.tg_state, AssistantTurn(content="", tool_calls=[call]), [rec])
                if extra:
                    text += "".join(f"\n\n{m.get('content', '')}" for m in extra)
                self.done = await env.is_done(self.tg_state)
                await self._server_rewards()
            finally:
                unbind_rollout(token)
            self.state.toolgym = self.published
            return text

    async def _teardown(self) -> None:
        env = self.env
        if env is None:
            return
        if self.session is not None and not self.session.broken:
            token = bind_rollout(self.session, self.tg_state)
            try:
                await env.cleanup(self.tg_state)
            except Exception as exc:  # noqa: BLE001
                log.warning("toolgym cleanup failed: %s", exc)
            finally:
                unbind_rollout(token)
        if self.session is not None and env.provider is not None:
            await env.provider.release(self.session)
        await env.aclose()


def _record_dict(r: CallRecord, index: int) -> dict[str, Any]:
    return {"index": index, "name": r.name, "arguments": r.arguments, "parse_ok": r.parse_ok, "name_ok": r.name_ok,
            "args_ok": r.args_ok, "exec_ok": r.exec_ok, "error": r.error, "result": r.result}


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


def calls_and_turns(
    messages: list[dict[str, Any]], records: list[dict[str, Any]], stop_at: int | None = None
) -> tuple[list[dict[str, Any]], list[CallRecord], list[AssistantTurn]]:
    """toolgym messages, CallRecords and AssistantTurns from a verifiers transcript. Each call's outcome comes from
    the toolset's record of it (matched in order); calls that never reached the toolset (unknown tool, unparsable
    arguments) get failed flags. When a toolgym `@stop` condition held after `stop_at` recorded calls, the transcript
    is cut before the next assistant turn, as toolgym's own loop would have ended the rollout there."""
    pending = list(records)
    calls: list[CallRecord] = []
    turns: list[AssistantTurn] = []
    kept: list[dict[str, Any]] = []
    stopped = stop_at == 0
    for m in messages:
        if m.get("role") == "assistant" and stopped:
            break
        kept.append(m)
        if m.get("role") != "assistant":
            continue
        turn_idx = len(turns)
        tcs = []
        for i, tc in enumerate(m.get("tool_calls") or []):
            fn = tc["function"]
            raw = fn.get("arguments")
            try:
                args = json.loads(raw) if isinstance(raw, str) else raw
                err = None if isinstance(args, dict) else "not a JSON object"
            except json.JSONDecodeError as exc:
                args, err = None, str(exc)
            call = ToolCall(name=fn.get("name", ""), arguments=args if err is None else None, id=tc.get("id", f"c{i}"),
                            raw_arguments=raw if isinstance(raw, str) else None, parse_error=err)
            tcs.append(call)
            rec = next((r for r in pending if r["name"] == call.name and r["arguments"] == call.arguments), None)
            if rec is not None:
                pending.remove(rec)
                calls.append(CallRecord(turn=turn_idx, name=call.name, arguments=call.arguments,
                                        parse_ok=rec["parse_ok"], name_ok=rec["name_ok"], args_ok=rec["args_ok"],
                                        exec_ok=rec["exec_ok"], error=rec["error"], result=rec["result"]))
                if stop_at is not None and rec.get("index") == stop_at - 1:
                    stopped = True
            else:
                calls.append(CallRecord(turn=turn_idx, name=call.name, arguments=call.arguments, parse_ok=call.parse_ok,
                                        name_ok=False, args_ok=False, exec_ok=False,
                                        error="the call did not reach the toolgym toolset"))
        content = m.get("content") or ""
        reasoning = m.get("reasoning_content") or None
        think = _THINK.findall(content)
        if think and not reasoning:
            reasoning = "\n".join(t.strip() for t in think)
            content = _THINK.sub("", content).strip()
        turns.append(AssistantTurn(content=content, tool_calls=tcs, reasoning=reasoning))
    return kept, calls, turns


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
        server_rewards: dict[str, float] = shared.get("server_rewards", {})
        server_errors: dict[str, str] = shared.get("server_errors", {})
        task = dict(self.data.task)
        messages, calls, turns = calls_and_turns([_msg_dict(m) for m in trace.messages], shared.get("records", []),
                                                 shared.get("stop_at"))
        traj = Trajectory(example_id=self.data.example_id, task=task, messages=messages, calls=calls)
        traj.stop_reason = shared.get("done") or trace.stop_condition or "no_tool_call"
        state = {"task": task, "stop_reason": traj.stop_reason}
        inputs = {"state": state, "task": task, "trajectory": traj, "calls": calls, "messages": messages,
                  "turns": turns, "env": _NoSession(env)}
        out: dict[str, float] = {}
        for name, fn, _weight, wanted in env.rubric.items:
            if name in server_errors:
                raise RuntimeError(f"reward function {name!r} raised in the toolset: {server_errors[name]}")
            if server_side(fn):
                if name not in server_rewards:
                    raise RuntimeError(f"reward function {name!r} needs the MCP session and the toolset published "
                                       "no value for it")
                out[name] = server_rewards[name]
                continue
            value = fn(**(inputs if wanted is None else {k: inputs[k] for k in wanted}))
            if inspect.isawaitable(value):
                value = await value
            out[name] = float(value)
        for key, value in _accuracy_metrics(traj, turns, task).items():
            out[f"acc_{key}"] = value
        return out

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

        async def fn(self: ToolgymTask, trace: vf.Trace, _key: str = key) -> float:
            return (await self.toolgym_scores(trace))[_key]

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
