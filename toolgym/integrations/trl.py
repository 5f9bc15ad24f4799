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
* `reset(**row)` is called with every column of the dataset row before a rollout. Here it closes the previous
  rollout's `Episode` (`toolgym.episode`: cleanup, release) and opens one for the row's task -- acquire a session
  (with the task, so sandbox fixtures that name task fields work; a dead shared session is replaced), the env's
  `setup_state` (hidden calls such as `new_game`) -- and returns the text of the env's first user message (TRL
  appends it to the row's prompt, whose user message is left empty for that reason).
* A tool call runs through the episode (visibility, JSON-schema validation, hidden-argument injection, the MCP call,
  error text shown to the model) and is recorded as a `CallRecord`. TRL 1.16 runs one assistant turn's async tool
  calls together (`asyncio.gather`): the calls that arrive in the same event-loop pass form one turn, run in order,
  then `env_response` runs once for the turn; messages it returns are appended to the turn's last tool output (TRL
  only appends tool messages). Once a `@stop` condition holds, later calls answer "the episode is over" and are not
  recorded, and scoring cuts the completion after the turn that made the stop hold (toolgym's own loop would have
  ended there; TRL's loop stops when the model stops calling tools or after `max_tool_calling_iterations`) and
  after the env's `max_turns` turns.
* Reward functions receive `environments` (TRL passes the rollout's instances); each rollout is scored once by the
  env's `Rubric` (all functions see `state`, `task`, `calls`, `messages`, `turns`, `trajectory`, `env` as in
  toolgym), and each returned function reads one entry. Weight-0 entries and the tool-call accuracy rates
  (`tool_name_ok`, `tool_args_ok`, `tool_exec_ok`, `call_match`) get weight 0: TRL logs them every step.
* A raising reward function, a failed setup or a server that died mid-rollout cannot fail one rollout inside TRL: it
  is logged (warning), counted in `TRLEnv.errors`, and that rollout's rewards are `None` (TRL excludes them, it does
  not count them as 0).

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
from typing import Any, ClassVar, Literal

from toolgym.env import StatefulToolEnv
from toolgym.episode import Episode, replay_transcript
from toolgym.types import AssistantTurn, ToolCall

log = logging.getLogger("toolgym.trl")

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
        return await self._call_in_turn(tool_name, kwargs)

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


class _Turn:
    """The calls of one assistant turn, as they arrive from TRL's tool loop, and their answers once run."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.sealed = False
        self.texts: list[str] | None = None


class _TRLEnvBase:
    """Base of the generated per-env classes. Public methods other than `reset` are tools: keep helpers private."""

    _adapter: ClassVar[TRLEnv]

    def __init__(self) -> None:
        self._episode: Episode | None = None
        self._turn: _Turn | None = None
        self._score: tuple[dict[str, float], dict[str, float], float] | None = None
        self._error: str | None = None
        self._lock: asyncio.Lock | None = None
        self._adapter._instances.append(self)

    # ---------------------------------------------------------------- TRL contract
    def reset(self, **row: Any) -> str | None:
        a = self._adapter
        a.run(self._finish())
        task = json.loads(row["toolgym_task"]) if "toolgym_task" in row else {
            k: v for k, v in row.items() if k != "prompt"}
        self._score, self._error, self._turn = None, None, None
        self._episode = a.env.episode(task, int(row.get("toolgym_example_id", 0)))
        try:
            a.run(self._episode.start())
        except Exception as exc:  # noqa: BLE001 - the rollout is failed (rewards None), TRL goes on
            self._fail(f"setup failed: {type(exc).__name__}: {exc}")
            return None
        non_system = [m for m in self._episode.messages if m.get("role") != "system"]
        return "\n\n".join(str(m.get("content") or "") for m in non_system) or None

    # ---------------------------------------------------------------- tool calls (on TRL's loop)
    async def _call_in_turn(self, name: str, args: dict[str, Any]) -> str:
        """Run one tool call of the current turn: calls TRL starts together (one turn's, gathered) are run in order
        as one turn on the adapter's loop, then `env_response` once; returns this call's answer."""
        turn = self._turn
        if turn is None or turn.sealed:
            turn = self._turn = _Turn()
        index = len(turn.calls)
        turn.calls.append(ToolCall(name=name, arguments=args, id=f"call_{index}"))
        await asyncio.sleep(0)  # the other calls TRL gathered for this turn register before any runs
        turn.sealed = True
        texts = await self._adapter.wrap(self._run_turn(turn))
        return texts[index]

    async def _run_turn(self, turn: _Turn) -> list[str]:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if turn.texts is None:
                turn.texts = await self._play(turn.calls)
        return turn.texts

    async def _play(self, calls: list[ToolCall]) -> list[str]:
        ep = self._episode
        if ep is None:
            raise RuntimeError("a tool was called before reset()")
        if self._error is not None:
            return [f"Error: the episode failed ({self._error})"] * len(calls)
        if ep.done:
            return [f"Error: the episode is over ({ep.stop_reason}); no more tool calls are accepted."] * len(calls)
        ep.begin_turn(AssistantTurn(content="", tool_calls=list(calls)))
        texts = []
        try:
            for call in calls:
                texts.append((await ep.call(call)).text)
            extra = await ep.end_turn()
        except Exception as exc:  # noqa: BLE001 - a dead server or a failing hook fails this rollout only
            self._fail(f"{type(exc).__name__}: {exc}")
            return texts + [f"Error: the episode failed ({self._error})"] * (len(calls) - len(texts))
        if extra and texts:
            texts[-1] += "".join(f"\n\n{m.get('content', '')}" for m in extra)
        return texts

    def _fail(self, error: str) -> None:
        self._error = error
        self._adapter.errors.append(error)
        log.warning("toolgym rollout failed (its rewards are None): %s", error)

    # ---------------------------------------------------------------- scoring and cleanup (on the adapter's loop)
    async def _scored(self, completion: list[dict[str, Any]] | str
                     ) -> tuple[dict[str, float], dict[str, float], float] | None:
        """The rollout's (rewards, metrics, total) from TRL's completion, computed once; None when it failed."""
        if self._score is not None or self._error is not None:
            return self._score
        ep = self._episode
        if ep is None:
            return None
        if isinstance(completion, str):
            completion = [{"role": "assistant", "content": completion}]
        stop_after = len(ep.calls) if ep.done else None
        tools = {t["function"]["name"] for t in ep.env.model_tools()}
        messages, turns, calls = replay_transcript(list(completion), ep.calls, stop_after, ep.max_turns, tools)
        try:
            if not ep.done and turns and not turns[-1].tool_calls:  # the final answer: no call reached the episode
                ep.begin_turn(turns[-1])  # its env_response, stop checks and on_no_call, as toolgym's loop runs them
                await ep.end_turn()
            reason = ep.stop_reason or ("max_turns" if turns and turns[-1].tool_calls else "no_tool_call")
            self._score = await ep.score([*ep.messages, *messages], turns, calls, reason)
        except Exception as exc:  # noqa: BLE001 - reported and counted, never a silent 0
            self._fail(str(exc))
            return None
        return self._score

    async def _finish(self) -> None:
        """Close the previous rollout's episode (env.cleanup, release the session)."""
        ep, self._episode = self._episode, None
        if ep is not None:
            await ep.close()
            if ep.cleanup_error:
                log.warning("toolgym %s", ep.cleanup_error)


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
        self.run(env.start())
        methods: dict[str, Any] = {"_adapter": self}
        for schema in env.model_tools():
            tool_name = schema["function"]["name"]
            method = _identifier(tool_name)
            if method in ("reset", "get_reward") or method in methods:
                raise ValueError(f"tool {tool_name!r} clashes with a name TRL reserves or another tool ({method!r})")
            methods[method] = _make_tool(method, tool_name, schema)
        cls_name = re.sub(r"\W", "", env.name.title()) or "Env"
        self.env_class: type[_TRLEnvBase] = type(f"{cls_name}TRLEnv", (_TRLEnvBase,), methods)

    @property
    def max_turns(self) -> int:
        return self.env.max_turns

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        """Run `coro` on the adapter's event loop (where the MCP sessions live) and return its result."""
        return self._loop.run(coro, timeout)

    async def wrap(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Await `coro` on the adapter's event loop from another loop (TRL's)."""
        return await self._loop.wrap(coro)

    def episodes(self) -> list[tuple[Episode, tuple[dict[str, float], dict[str, float], float] | None]]:
        """The current rollout of every environment instance TRL made: its `Episode` (task, state, call records,
        first messages, stop reason) and its score `(rewards, metrics, total)` once the reward functions ran (else
        None). For logging and benchmarks; `reset` replaces an instance's episode with the next one."""
        return [(inst._episode, inst._score) for inst in self._instances if inst._episode is not None]

    def episode_of(self, instance: Any) -> Episode | None:
        """The current `Episode` of one environment instance (None before its first `reset`)."""
        return instance._episode  # type: ignore[no-any-return]

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
            for score in self.run(all_scores()):
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
