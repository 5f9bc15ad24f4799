"""A toolgym environment as a TRL `GRPOTrainer` environment (`environment_factory`) plus reward functions.

    from trl import GRPOConfig, GRPOTrainer
    from toolgym.integrations.trl import TRLEnv

    tg = TRLEnv("examples/third_party_time/env.toml")        # or an env name ("tictactoe") or a StatefulToolEnv
    trainer = GRPOTrainer(
        model="Qwen/Qwen3-0.6B",
        train_dataset=tg.dataset(),                             # rows: {"prompt": [...], "toolgym_task": "<json>"}
        environment_factory=tg.environment_factory,             # one instance per rollout, pooled and reset by TRL
        reward_funcs=tg.reward_funcs(),                         # one function per rubric entry (+ accuracy metrics)
        args=GRPOConfig(..., reward_weights=tg.reward_weights(), max_tool_calling_iterations=tg.max_turns),
    )
    trainer.train()
    tg.close()

TRL then owns generation, the tool-calling loop, the loss and the distribution (accelerate / DeepSpeed / FSDP,
many GPUs and nodes, vLLM server or colocate mode); toolgym owns the MCP session, the hidden setup, the hidden
arguments and the rewards. The contract (read from TRL 1.16's `GRPOTrainer`):

* `environment_factory()` returns an instance whose public methods are the tools. Their JSON schemas are derived by
  transformers' `get_json_schema` from signatures and Google-style docstrings, so this module builds one class per
  env with one async method per model-visible tool, whose signature and docstring are generated from the tool's MCP
  `inputSchema` (hidden arguments removed; enums become `Literal`, other nested schemas `list`/`dict`/`Any`).
* `reset(**row)` is called with every column of the dataset row before a rollout. Here it acquires an MCP session,
  runs the env's `setup_state` (hidden calls such as `new_game`) and returns the text of the env's first user
  message (TRL appends it to the row's prompt, whose user message is left empty for that reason).
* A tool call runs through toolgym's own `_execute_call` (visibility, JSON-schema validation, hidden-argument
  injection via `update_tool_args`, the MCP call, error text shown to the model) and is recorded as a `CallRecord`.
  `env_response` runs after each call; messages it returns are appended to that call's tool output (TRL only
  appends tool messages). Once a `@stop` condition holds, later calls answer "the episode is over" and are not
  recorded, and scoring cuts the completion after the turn that made the stop hold (toolgym's own loop would have
  ended there; TRL's loop stops when the model stops calling tools or after `max_tool_calling_iterations`).
* Reward functions receive `environments` (TRL passes the rollout's instances); each rollout is scored once by the
  env's `Rubric` (all functions see `state`, `task`, `calls`, `messages`, `turns`, `trajectory`, `env` as in
  toolgym), and each returned function reads one entry. Weight-0 entries and the tool-call accuracy rates
  (`tool_name_ok`, `tool_args_ok`, `tool_exec_ok`, `call_match`) get weight 0: TRL logs them every step.
* A raising reward function cannot fail one rollout inside TRL: it is logged (warning), counted in
  `TRLEnv.errors`, and that rollout's rewards are `None` (TRL excludes them, it does not count them as 0).

All MCP work runs on one background event loop per process (sessions are bound to the loop that opened them);
TRL's async tool calls hop onto it, its synchronous `reset` and reward calls block on it.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import keyword
import logging
import re
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Literal

from toolgym.env import StatefulToolEnv, bind_rollout, unbind_rollout
from toolgym.rollout import _accuracy_metrics, _execute_call
from toolgym.types import AssistantTurn, CallRecord, ToolCall, Trajectory

log = logging.getLogger("toolgym.trl")

_THINK = re.compile(r"<think>(.*?)</think>", re.S)
_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list,
                               "object": dict}
ACCURACY_METRICS = ("tool_name_ok", "tool_args_ok", "tool_exec_ok", "call_match")


class _Loop:
    """A daemon thread running one asyncio loop; `run` blocks on a coroutine there, `wrap` awaits it from another loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="toolgym-trl-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def wrap(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


def _py_type(prop: dict[str, Any]) -> Any:
    if isinstance(prop.get("enum"), list) and prop["enum"] and all(
            isinstance(v, str | int | float | bool) for v in prop["enum"]):
        return Literal[tuple(prop["enum"])]  # type: ignore[misc]
    t = prop.get("type")
    if isinstance(t, list):
        types = [_JSON_TYPES[x] for x in t if x in _JSON_TYPES]
        if len(types) == 1:
            return types[0]
        return Any
    return _JSON_TYPES.get(t, Any) if isinstance(t, str) else Any


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _identifier(name: str) -> str:
    ident = re.sub(r"\W", "_", name)
    if not ident or ident[0].isdigit() or keyword.iskeyword(ident):
        ident = f"tool_{ident}"
    return ident


def _make_tool(method_name: str, tool_name: str, schema: dict[str, Any]) -> Callable[..., Any]:
    """An async method `method_name(self, **args)` whose signature and docstring describe the tool to transformers'
    `get_json_schema` (the model sees this), and whose body forwards the call to the rollout's MCP session."""
    fn_schema = schema["function"]
    params = fn_schema.get("parameters") or {}
    props: dict[str, Any] = params.get("properties") or {}
    required = set(params.get("required") or [])

    async def tool(self: _TRLEnvBase, **kwargs: Any) -> str:
        return await self._adapter._loop.wrap(self._call_tool(tool_name, kwargs))

    sig_params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    arg_docs = []
    for pname in sorted(props, key=lambda p: p not in required):  # required first: no default before them
        if not pname.isidentifier() or keyword.iskeyword(pname):
            raise ValueError(f"tool {tool_name!r}: argument name {pname!r} is not a Python identifier; TRL derives tool "
                             "schemas from Python signatures")
        ann = _py_type(props[pname])
        default = inspect.Parameter.empty if pname in required else None
        sig_params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann))
        annotations[pname] = ann
        arg_docs.append(f"    {pname}: {_one_line(props[pname].get('description') or pname)}")
    tool.__name__ = tool.__qualname__ = method_name
    tool.__signature__ = inspect.Signature(sig_params, return_annotation=str)  # type: ignore[attr-defined]
    tool.__annotations__ = annotations
    desc = _one_line(fn_schema.get("description") or tool_name) or tool_name
    tool.__doc__ = desc + ("\n\nArgs:\n" + "\n".join(arg_docs) if arg_docs else "") + "\n\nReturns:\n    The tool output."
    return tool


class _TRLEnvBase:
    """Base of the generated per-env classes. Public methods other than `reset` are tools: keep helpers private."""

    _adapter: TRLEnv

    def __init__(self) -> None:
        self._session: Any = None
        self._state: dict[str, Any] | None = None
        self._task: dict[str, Any] = {}
        self._initial: list[dict[str, Any]] = []
        self._records: list[CallRecord] = []
        self._done: str | None = None
        self._score: tuple[dict[str, float], dict[str, float], float] | None = None
        self._error: str | None = None
        self._stop_at: int | None = None
        self._adapter._instances.append(self)

    # ---------------------------------------------------------------- TRL contract
    def reset(self, **row: Any) -> str | None:
        a = self._adapter
        a._loop.run(self._finish())
        task = json.loads(row["toolgym_task"]) if "toolgym_task" in row else {
            k: v for k, v in row.items() if k != "prompt"}
        self._task, self._records, self._done, self._score, self._error = task, [], None, None, None
        self._stop_at = None
        self._state = {"task": task, "example_id": int(row.get("toolgym_example_id", 0)), "rollout_index": 0}
        a._loop.run(self._setup())
        non_system = [m for m in self._initial if m.get("role") != "system"]
        return "\n\n".join(str(m.get("content") or "") for m in non_system) or None

    # ---------------------------------------------------------------- on the adapter's loop
    async def _setup(self) -> None:
        env = self._adapter.env
        provider = env.provider
        self._session = await provider.acquire() if provider is not None else None
        token = bind_rollout(self._session, self._state)  # type: ignore[arg-type]
        try:
            await env.setup_state(self._state, self._task)  # type: ignore[arg-type]
            self._initial = env.initial_messages(self._task, self._state)  # type: ignore[arg-type]
            self._done = await env.is_done(self._state)  # type: ignore[arg-type]
            self._stop_at = 0 if self._done else None
        finally:
            unbind_rollout(token)

    async def _call_tool(self, name: str, args: dict[str, Any]) -> str:
        env, state = self._adapter.env, self._state
        if state is None:
            raise RuntimeError("a tool was called before reset()")
        if self._done:
            return f"Error: the episode is over ({self._done}); no more tool calls are accepted."
        call = ToolCall(name=name, arguments=args, id=f"call_{len(self._records)}")
        token = bind_rollout(self._session, state)
        try:
            rec, text = await _execute_call(env, call, state, len(self._records), self._session)
            self._records.append(rec)
            turn = AssistantTurn(content="", tool_calls=[call])
            extra = await env.env_response(state, turn, [rec])
            if extra:
                text += "".join(f"\n\n{m.get('content', '')}" for m in extra)
            self._done = await env.is_done(state)
            if self._done:
                self._stop_at = len(self._records)
        finally:
            unbind_rollout(token)
        return text

    async def _scored(self, completion: list[dict[str, Any]] | str) -> tuple[dict[str, float], dict[str, float], float] | None:
        if self._score is not None or self._error is not None:
            return self._score
        env, state = self._adapter.env, self._state
        if state is None:
            return None
        names = self._adapter.env_class._tool_names  # type: ignore[attr-defined]
        completion = _cut_at_stop(completion, self._stop_at, set(names) | set(names.values()))
        turns = _turns_from_completion(completion)
        messages = [*self._initial, *completion]
        traj = Trajectory(example_id=state.get("example_id", 0), task=self._task, messages=messages,
                          calls=list(self._records))
        traj.stop_reason = self._done or ("max_turns" if turns and turns[-1].tool_calls else "no_tool_call")
        state["stop_reason"] = traj.stop_reason
        traj.metrics = _accuracy_metrics(traj, turns, self._task)
        token = bind_rollout(self._session, state)
        try:
            rewards, metrics, total = await env.rubric.score(state=state, task=self._task, trajectory=traj,
                                                             calls=traj.calls, messages=messages, turns=turns, env=env)
        except Exception as exc:  # noqa: BLE001 - reported and counted, never a silent 0
            self._error = str(exc)
            self._adapter.errors.append(self._error)
            log.warning("toolgym reward failed on a rollout (its rewards are None): %s", exc)
            return None
        finally:
            unbind_rollout(token)
        self._score = (rewards, {**traj.metrics, **metrics}, total)
        return self._score

    async def _finish(self) -> None:
        """Clean up the previous rollout (env.cleanup, release the session)."""
        env, session, state = self._adapter.env, self._session, self._state
        self._session = None
        if session is None:
            return
        if not session.broken and state is not None:
            token = bind_rollout(session, state)
            try:
                await env.cleanup(state)
            except Exception as exc:  # noqa: BLE001
                log.warning("toolgym cleanup failed: %s", exc)
            finally:
                unbind_rollout(token)
        if env.provider is not None:
            await env.provider.release(session)


def _cut_at_stop(completion: list[dict[str, Any]] | str, stop_at: int | None, tools: set[str]) -> list[dict[str, Any]]:
    """The completion up to the turn whose call made a toolgym `@stop` hold (`stop_at` recorded calls): toolgym's own
    loop would have ended the rollout there, so later turns are not scored."""
    if isinstance(completion, str):
        completion = [{"role": "assistant", "content": completion}]
    if stop_at is None:
        return list(completion)
    out, seen = [], 0
    for m in completion:
        if m.get("role") == "assistant" and seen >= stop_at:
            break
        out.append(m)
        if m.get("role") == "assistant":
            seen += sum(1 for tc in m.get("tool_calls") or [] if tc.get("function", tc).get("name") in tools)
    return out


def _turns_from_completion(completion: list[dict[str, Any]] | str) -> list[AssistantTurn]:
    """toolgym `AssistantTurn`s from TRL's completion messages (assistant turns with parsed `tool_calls`)."""
    if isinstance(completion, str):
        completion = [{"role": "assistant", "content": completion}]
    turns = []
    for m in completion:
        if m.get("role") != "assistant":
            continue
        content = m.get("content") or ""
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        reasoning = m.get("reasoning_content") or m.get("reasoning")
        think = _THINK.findall(content)
        if think and not reasoning:
            reasoning = "\n".join(t.strip() for t in think)
            content = _THINK.sub("", content).strip()
        calls = []
        for i, tc in enumerate(m.get("tool_calls") or []):
            fn = tc.get("function", tc)
            args = fn.get("arguments")
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except json.JSONDecodeError:
                    calls.append(ToolCall(name=fn.get("name", ""), arguments=None, id=f"c{i}", raw_arguments=args,
                                          parse_error="invalid JSON"))
                    continue
            calls.append(ToolCall(name=fn.get("name", ""), arguments=args if isinstance(args, dict) else None,
                                  id=f"c{i}", parse_error=None if isinstance(args, dict) else "not an object"))
        parse_ok = not ("<tool_call>" in content and not calls)
        turns.append(AssistantTurn(content=content, tool_calls=calls, reasoning=reasoning, parse_ok=parse_ok,
                                   parse_error=None if parse_ok else "unparsed <tool_call> markup"))
    return turns


class TRLEnv:
    """Adapter from a toolgym env to TRL's `GRPOTrainer` (see the module docstring).

    `env`: a `StatefulToolEnv`, an installed env name or a config-file path (`load_env` kwargs in `env_kwargs`).
    `accuracy_metrics`: also return weight-0 reward functions for the tool-call accuracy rates, so TRL logs them."""

    def __init__(self, env: StatefulToolEnv | str, accuracy_metrics: bool = True, **env_kwargs: Any) -> None:
        if isinstance(env, str):
            from toolgym.registry import load_env

            env = load_env(env, **env_kwargs)
        self.env = env
        self.accuracy_metrics = accuracy_metrics
        self.errors: list[str] = []
        self._instances: list[_TRLEnvBase] = []
        self._loop = _Loop()
        self._loop.run(env.start())
        methods: dict[str, Any] = {"_adapter": self, "_tool_names": {}}
        for schema in env.model_tools():
            tool_name = schema["function"]["name"]
            method = _identifier(tool_name)
            if method in ("reset", "get_reward") or method in methods:
                raise ValueError(f"tool {tool_name!r} clashes with a name TRL reserves or another tool ({method!r})")
            methods[method] = _make_tool(method, tool_name, schema)
            methods["_tool_names"][method] = tool_name
        cls_name = re.sub(r"\W", "", env.name.title()) or "Env"
        self.env_class: type[_TRLEnvBase] = type(f"{cls_name}TRLEnv", (_TRLEnvBase,), methods)

    @property
    def max_turns(self) -> int:
        return self.env.max_turns

    def environment_factory(self) -> _TRLEnvBase:
        """Pass as `GRPOTrainer(environment_factory=...)`: a new instance, one per concurrent rollout."""
        return self.env_class()

    def dataset(self, n: int | None = None, seed: int = 0, as_list: bool = False) -> Any:
        """The env's tasks as TRL rows: `prompt` (the system prompt + an empty user message that `reset` fills) and
        `toolgym_task` (the task row as JSON, so heterogeneous rows survive Arrow). A `datasets.Dataset` unless
        `as_list`."""
        rows = []
        for i, task in enumerate(self.env.build_dataset(n, seed)):
            prompt = [{"role": "system", "content": self.env.system_prompt}] if self.env.system_prompt else []
            prompt.append({"role": "user", "content": ""})
            rows.append({"prompt": prompt, "toolgym_task": json.dumps(task), "toolgym_example_id": i})
        if as_list:
            return rows
        from datasets import Dataset

        return Dataset.from_list(rows)

    def reward_names(self) -> list[str]:
        names = [n for n, *_ in self.env.rubric.items]
        if self.accuracy_metrics:
            names += [m for m in ACCURACY_METRICS if m not in names]
        return names

    def reward_weights(self) -> list[float]:
        """Pass as `GRPOConfig(reward_weights=...)`, in the order of `reward_funcs()`."""
        weights = self.env.rubric.weights
        return [weights.get(n, 0.0) for n in self.reward_names()]

    def reward_funcs(self) -> list[Callable[..., list[float | None]]]:
        """One TRL reward function per rubric entry (raw values; weights via `reward_weights()`), plus the accuracy
        rates when `accuracy_metrics`."""
        rubric_names = {n for n, *_ in self.env.rubric.items}
        return [self._reward_func(n, n in rubric_names) for n in self.reward_names()]

    def _reward_func(self, name: str, from_rubric: bool) -> Callable[..., list[float | None]]:
        def reward(completions: list[Any], environments: list[_TRLEnvBase] | None = None, **_: Any) -> list[float | None]:
            if environments is None:
                raise ValueError("toolgym reward functions need TRL's `environments` (use environment_factory)")

            async def all_scores() -> list[Any]:
                return [await e._scored(c) for e, c in zip(environments, completions, strict=True)]

            out: list[float | None] = []
            for score in self._loop.run(all_scores()):
                if score is None:
                    out.append(None)
                elif from_rubric:
                    rewards, metrics, _ = score
                    out.append(rewards.get(name, metrics.get(name)))
                else:
                    out.append(score[1].get(name))
            return out

        reward.__name__ = reward.__qualname__ = name
        return reward

    def close(self) -> None:
        """Clean up live rollouts, close the MCP sessions and stop the loop."""
        async def shutdown() -> None:
            for inst in self._instances:
                await inst._finish()
            await self.env.aclose()

        try:
            self._loop.run(shutdown(), timeout=60)
        finally:
            self._loop.stop()

    def __enter__(self) -> TRLEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["ACCURACY_METRICS", "TRLEnv"]
