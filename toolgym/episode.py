"""`Episode`: one rollout's lifecycle in a `StatefulToolEnv`, the one object every front end drives.

    async with env.episode(task) as ep:             # acquire a session (for this task), setup_state, first messages
        while not ep.done:
            turn = await policy_session.act(ep.messages)
            await ep.run_turn(turn)                 # the turn's tool calls, env_response once, the stop checks
        traj = await ep.finish()                    # rubric + tool-call accuracy -> a `Trajectory`
    # leaving the block: cleanup (while the session lives), then release -- also on errors and cancellation

The rollout engine (`toolgym.rollout`), `toolgym serve` (through the engine), the TRL adapter, the verifiers export and
its runtime all go through this class, so acquiring (with the task, for fixtures that name task fields; a dead shared
session is replaced once), validation, hidden arguments, env tools, timeouts, call records, `env_response`, stop
conditions, scoring and cleanup are written once.

Front ends that receive a turn's tool calls one at a time (TRL's tool methods, the verifiers toolset) use the parts
of `run_turn` -- `begin_turn(turn)`, `call(call)` per call, `end_turn()` -- and score their own transcript with
`score(messages=..., turns=..., calls=...)`; `replay_transcript` rebuilds turns and call records from an OpenAI-style
transcript for them.

Hooks and reward functions reach the rollout's MCP session through `env.call(...)`; an `@env_tool` method that needs
the episode declares a parameter annotated `Episode` and gets it injected (it is not shown to the model).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

from toolgym.accuracy import match_sequence, validate_args
from toolgym.mcp_bridge import ToolCallError
from toolgym.types import AssistantTurn, CallRecord, ToolCall, Trajectory

MAX_ARG_CHARS = 20_000
"""Arguments longer than this (their raw text, or the sum of their values' lengths) are refused before validation."""


class HiddenCallError(RuntimeError):
    """A hidden (environment-side) tool call failed: the rollout cannot be set up or graded."""


class CallResult(NamedTuple):
    """One model call's outcome: its record and the text the model sees as the tool's answer."""

    record: CallRecord
    text: str


_current: contextvars.ContextVar[Episode] = contextvars.ContextVar("toolgym_episode")


def current_episode() -> Episode | None:
    """The episode whose hook, tool or reward function is running (None outside one)."""
    return _current.get(None)


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... truncated {len(text) - limit} characters]"


def _jsonable(v: Any) -> bool:
    return isinstance(v, str | int | float | bool | type(None)) or (
        isinstance(v, list | dict) and len(str(v)) < 10_000
    )


def accuracy_metrics(calls: list[CallRecord], turns: list[AssistantTurn], task: dict[str, Any],
                     match_mode: Any = "exact") -> dict[str, float]:
    """Tool-call accuracy of one rollout (BFCL names): per-call rates `tool_parse_ok`/`tool_name_ok`/`tool_args_ok`/
    `tool_exec_ok`, `turn_parse_ok`, counts, and -- when the task carries `expected_calls` -- `call_match` (or
    `abstain_ok` when no call is expected; `match_mode`: the matching mode of arguments an expected call does not
    name, `toolgym.accuracy`). Sets each record's `call_match` flag."""
    m: dict[str, float] = {"turns": float(len(turns)), "num_calls": float(len(calls))}
    if turns:
        m["turn_parse_ok"] = sum(t.parse_ok for t in turns) / len(turns)
        m["no_call_turns"] = float(sum(1 for t in turns if not t.tool_calls))
    if calls:
        for flag in ("parse_ok", "name_ok", "args_ok", "exec_ok"):
            m[f"tool_{flag}"] = sum(getattr(c, flag) for c in calls) / len(calls)
    if "expected_calls" in task:
        expected = task["expected_calls"] or []
        flags = match_sequence([(c.name, c.arguments) for c in calls], expected, match_mode)
        for c, f in zip(calls, flags, strict=True):
            c.call_match = f
        if expected:
            m["call_match"] = float(len(flags) == len(expected) and all(flags))
        else:
            m["abstain_ok"] = float(not calls)
    return m


class Episode:
    """One rollout of `env` (a `StatefulToolEnv`; this module sits below `toolgym.env`, which imports it) on `task`
    (see the module docstring). Made by `env.episode(task)`.

    Attributes: `state` (the rollout's state dict, which hooks and rewards share), `messages` (the conversation:
    the env's first messages, then what `run_turn` adds), `turns` and `calls` (the policy's turns and the model's
    call records), `stop_reason` (set once the episode is over), `timings`, `session` (the MCP session, or None
    for an env without a server), `cleanup_error` (a failed `cleanup` hook, reported, not raised)."""

    def __init__(self, env: Any, task: dict[str, Any], example_id: int = 0, rollout_index: int = 0,
                 max_turns: int | None = None) -> None:
        if max_turns is not None and max_turns < 1:
            raise ValueError("max_turns must be >= 1")
        self.env, self.task = env, task
        self.example_id, self.rollout_index = example_id, rollout_index
        self.max_turns = max_turns or env.max_turns
        self.state: dict[str, Any] = {"task": task, "example_id": example_id, "rollout_index": rollout_index}
        self.session: Any = None
        self.messages: list[dict[str, Any]] = []
        self.turns: list[AssistantTurn] = []
        self.calls: list[CallRecord] = []
        self.stop_reason: str | None = None
        self.timings: dict[str, float] = {"setup_s": 0.0, "tools_s": 0.0, "scoring_s": 0.0}
        self.cleanup_error: str | None = None
        self._turn_calls: list[CallRecord] | None = None
        self._started = self._closed = False

    # ------------------------------------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> Episode:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    @contextlib.contextmanager
    def bound(self) -> Iterator[None]:
        """Make this the current episode (what `env.call` and injected tools use) for the block."""
        token = _current.set(self)
        try:
            yield
        finally:
            _current.reset(token)

    async def start(self) -> None:
        """Acquire a session for the task, run `setup_state` and take the env's first messages. A shared session found
        dead during setup (its server died while idle) is replaced once. On failure the episode is closed (cleanup,
        release) and the error raised."""
        if self._started:
            raise RuntimeError("an episode starts once")
        self._started = True
        env, provider = self.env, self.env.provider
        if provider is None and (env.server is not None or env.servers):
            raise RuntimeError(f"{env.name}: start the env (`await env.start()` or `async with env:`) before opening "
                               "an episode")
        t0 = time.perf_counter()
        try:
            for attempt in range(2):
                self.session = await provider.acquire(self.task) if provider is not None else None
                try:
                    with self.bound():
                        await env.setup_state(self.state, self.task)
                    break
                except ToolCallError:
                    if attempt or self.session is None or provider is None or not self.session.broken:
                        raise
                    await provider.release(self.session)
                    self.session = None
            self.messages = env.initial_messages(self.task, self.state)
            self.stop_reason = await self._check_stop()
        except BaseException:
            await self.close()
            raise
        self.timings["setup_s"] = time.perf_counter() - t0

    async def close(self) -> None:
        """Run `cleanup` (unless the session is broken) and release the session, even when cancelled meanwhile.
        A raising `cleanup` is kept in `cleanup_error`. Idempotent."""
        if self._closed:
            return
        self._closed = True
        session, provider = self.session, self.env.provider
        try:
            if self._started and (session is None or not session.broken):
                try:
                    with self.bound():
                        await self.env.cleanup(self.state)
                except Exception as exc:  # noqa: BLE001 - reported on the trajectory, never hides the rollout's error
                    self.cleanup_error = f"cleanup failed: {type(exc).__name__}: {exc}"
        finally:
            self.session = None
            if session is not None and provider is not None:
                await provider.release(session)

    # ------------------------------------------------------------------------------------------------ turns
    @property
    def done(self) -> bool:
        """Whether the episode is over (a stop condition held, no call under `on_no_call="stop"`, or the turn cap)."""
        return self.stop_reason is not None

    async def run_turn(self, turn: AssistantTurn) -> list[dict[str, Any]]:
        """Play one policy turn: its message, each tool call in order, `env_response` once, then the stop checks.
        Returns the messages added to `messages` (the assistant message, tool results, env messages, a nudge)."""
        self.begin_turn(turn)
        added = [turn.to_message()]
        for call in turn.tool_calls:
            res = await self.call(call)
            added.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": res.text})
        added.extend(await self.end_turn())
        self.messages.extend(added)
        return added

    def begin_turn(self, turn: AssistantTurn) -> None:
        """Open the policy's next turn (its calls follow through `call`, then `end_turn`)."""
        if self.done:
            raise RuntimeError(f"the episode is over ({self.stop_reason})")
        if self._turn_calls is not None:
            raise RuntimeError("the previous turn was not ended (end_turn)")
        self.turns.append(turn)
        self._turn_calls = []

    async def call(self, call: ToolCall) -> CallResult:
        """Validate and run one model call of the open turn (see `execute`), and record it."""
        if self._turn_calls is None:
            raise RuntimeError("call() outside a turn: begin_turn first")
        t0 = time.perf_counter()
        try:
            res = await self.execute(call, len(self.turns) - 1)
        finally:
            self.timings["tools_s"] += time.perf_counter() - t0
        self.calls.append(res.record)
        self._turn_calls.append(res.record)
        return res

    async def end_turn(self) -> list[dict[str, Any]]:
        """Close the open turn: `env_response` (once, with all its call records), the stop checks, `on_no_call`
        and the turn cap. Returns the extra messages (the env's, a nudge) to add before the next policy turn."""
        if self._turn_calls is None:
            raise RuntimeError("end_turn() without an open turn")
        records, self._turn_calls = self._turn_calls, None
        turn = self.turns[-1]
        with self.bound():
            extra = list(await self.env.env_response(self.state, turn, records) or [])
        self.stop_reason = await self._check_stop()
        if self.stop_reason is None and not turn.tool_calls:
            if self.env.on_no_call == "stop":
                self.stop_reason = "no_tool_call"
            else:
                why = f" (your output could not be parsed: {turn.parse_error})" if turn.parse_error else ""
                extra.append({"role": "user", "content": self.env.nudge_message + why})
        if self.stop_reason is None and len(self.turns) >= self.max_turns:
            self.stop_reason = "max_turns"
        return extra

    async def _check_stop(self) -> str | None:
        with self.bound():
            return await self.env.is_done(self.state)

    async def execute(self, call: ToolCall, turn: int = 0) -> CallResult:
        """Run one model call without recording it: parse check, visibility, size cap, arguments against the schema
        (hidden arguments may not be smuggled in), then the env tool or -- with the hidden arguments injected by
        `update_tool_args` -- the MCP call under `tool_timeout`. A model error becomes an error text the model sees;
        a failed connection raises `ToolCallError` (the rollout fails)."""
        env = self.env
        rec = CallRecord(turn=turn, name=call.name, arguments=call.arguments, parse_ok=call.parse_ok,
                         name_ok=False, args_ok=False, exec_ok=False)
        if not call.parse_ok:
            rec.error = f"could not parse the arguments of {call.name or 'the call'}: {call.parse_error or 'invalid JSON'}"
            return CallResult(rec, f"Error: {rec.error}. Arguments must be a JSON object.")
        rec.name_ok = env.is_visible(call.name)
        rec.server = env.server_of(call.name) if rec.name_ok else None  # a multi-server env: where the call goes
        if not rec.name_ok:
            names = ", ".join(t["function"]["name"] for t in env.model_tools())
            rec.error = f"unknown tool {call.name!r}"
            return CallResult(rec, f"Error: unknown tool {call.name!r}. Available tools: {names}.")
        raw_len = len(call.raw_arguments or "") or sum(len(str(v)) for v in (call.arguments or {}).values())
        if raw_len > MAX_ARG_CHARS:
            rec.error = f"arguments too large ({raw_len} characters, limit {MAX_ARG_CHARS})"
            return CallResult(rec, f"Error: {rec.error}.")
        args = dict(call.arguments or {})
        smuggled = set(env.hidden_arg_sources(call.name)) & set(args)
        invalid = validate_args(env.tool_schema(call.name), args) if not smuggled else \
            f"unexpected arguments {sorted(smuggled)}"
        rec.args_ok = invalid is None
        if invalid is not None:
            rec.error = f"invalid arguments for {call.name}: {invalid}"
            return CallResult(rec, f"Error: {rec.error}.")
        t0 = time.perf_counter()
        if env.is_env_tool(call.name):
            try:
                with self.bound():
                    text = await env.run_env_tool(call.name, args, self.state, self)
                rec.exec_ok = True
            except Exception as exc:  # noqa: BLE001 - an env tool error is shown to the model
                text, rec.error = f"Error: {exc}", str(exc)
        else:
            if self.session is None:
                raise ToolCallError(f"no MCP session for tool {call.name!r} (the env has no server)")
            full_args = env.update_tool_args(call.name, args, self.state)
            result = await self.session.call(call.name, full_args, timeout=env.tool_timeout)  # ToolCallError propagates
            # exec_ok: the server ran the call without reporting an error -- by its MCP error flag, or (servers that
            # answer errors as plain text) by a text matching one of the server's `error_patterns`
            failed = result.is_error or env.is_error_text(call.name, result.text)
            text, rec.exec_ok = result.text, not failed
            if failed:
                rec.error = result.text
                text = result.text if result.text.lower().startswith("error") else f"Error: {result.text}"
        rec.latency_s = time.perf_counter() - t0
        text = _truncate(text, env.max_tool_output_chars)
        rec.result = text
        return CallResult(rec, text)

    async def hidden_call(self, tool: str, /, **args: Any) -> Any:
        """A hidden call on this episode's session (what `env.call` does inside a hook). Raises `HiddenCallError`
        when the server reports an error, `ToolCallError` when the connection fails."""
        if self.session is None:
            raise RuntimeError(f"hidden call {tool}(): the env {self.env.name!r} has no MCP server")
        res = await self.session.call(tool, args, timeout=self.env.tool_timeout)
        if res.is_error or self.env.is_error_text(tool, res.text):
            raise HiddenCallError(f"hidden call {tool}({args}) failed: {res.text}")
        return res

    # ------------------------------------------------------------------------------------------------ scoring
    async def score(self, messages: list[dict[str, Any]] | None = None, turns: list[AssistantTurn] | None = None,
                    calls: list[CallRecord] | None = None, stop_reason: str | None = None,
                    values: dict[str, float] | None = None) -> tuple[dict[str, float], dict[str, float], float]:
        """The rubric and the tool-call accuracy metrics: `(rewards, metrics, total)`. Scores the episode's own
        messages/turns/calls unless a front end passes its transcript's (`replay_transcript`); `stop_reason`
        overrides the episode's (it is written to `state["stop_reason"]` before the rubric runs). `values`: rubric
        entries already computed elsewhere (the verifiers toolset's server-side rewards). Raises `RewardError`."""
        messages = self.messages if messages is None else messages
        turns = self.turns if turns is None else turns
        calls = self.calls if calls is None else calls
        reason = stop_reason or self.stop_reason or "max_turns"
        self.state["stop_reason"] = reason
        t0 = time.perf_counter()
        try:
            traj = Trajectory(example_id=self.example_id, rollout_index=self.rollout_index, task=self.task,
                              messages=messages, calls=calls, stop_reason=reason)
            with self.bound():
                scored = await score_rollout(self.env, self.task, self.state, traj, turns, values)
            return scored.rewards, {**scored.accuracy, **scored.metrics}, scored.total
        finally:
            self.timings["scoring_s"] += time.perf_counter() - t0

    async def finish(self) -> Trajectory:
        """Score the episode and return its `Trajectory` (messages, turns, calls, rewards, metrics, stop reason)."""
        rewards, metrics, total = await self.score()
        traj = self.trajectory()
        traj.rewards, traj.reward, traj.metrics = rewards, total, metrics
        return traj

    def trajectory(self) -> Trajectory:
        """The record so far (no rewards): what `finish` returns before scoring, and what a failed rollout keeps."""
        return Trajectory(
            example_id=self.example_id, rollout_index=self.rollout_index, task=self.task, messages=self.messages,
            turns=[{"index": i, "content": t.content, "reasoning": t.reasoning, "parse_ok": t.parse_ok,
                    "parse_error": t.parse_error, "raw_text": t.raw_text, "num_calls": len(t.tool_calls),
                    "finish_reason": t.finish_reason} for i, t in enumerate(self.turns)],
            calls=self.calls, stop_reason=self.stop_reason, timings=dict(self.timings), info=self.info())

    def info(self) -> dict[str, Any]:
        """The JSON-friendly part of the state (what a trajectory keeps in `info`)."""
        return {k: v for k, v in self.state.items() if k != "task" and _jsonable(v)}


class RolloutScore(NamedTuple):
    """A scored rollout: the rubric's rewards, its metrics (weight 0), the weighted total, and the tool-call accuracy
    metrics (`accuracy_metrics`)."""

    rewards: dict[str, float]
    metrics: dict[str, float]
    total: float
    accuracy: dict[str, float]


async def score_rollout(env: Any, task: dict[str, Any], state: dict[str, Any], traj: Trajectory,
                        turns: list[AssistantTurn], values: dict[str, float] | None = None) -> RolloutScore:
    """Score a finished rollout: tool-call accuracy of `traj.calls` (flags set on them) and the env's rubric over
    `state`, `task`, `traj` and `turns`. Used by `Episode.score` and by the verifiers scorer, which has a transcript
    but no session (`env` may be a stand-in exposing the env's attributes; `values`: entries computed in the
    toolset). Raises `RewardError`."""
    accuracy = accuracy_metrics(traj.calls, turns, task, env.call_match_mode)
    rewards, metrics, total = await env.rubric.score(
        state=state, task=task, trajectory=traj, calls=traj.calls, messages=traj.messages, turns=turns, env=env,
        values=values)
    return RolloutScore(rewards, metrics, total, accuracy)


# ---------------------------------------------------------------------------------------------------- transcripts
def turns_from_messages(messages: list[dict[str, Any]]) -> list[tuple[dict[str, Any], AssistantTurn]]:
    """`(message, AssistantTurn)` for each assistant message of an OpenAI-style transcript: content (a `<think>` block
    split off as reasoning unless the message carries `reasoning_content`), and its `tool_calls` parsed (arguments as
    a JSON string or an object; unparsable ones keep their text and a parse error)."""
    import re

    think_re = re.compile(r"<think>(.*?)</think>", re.S)
    out = []
    for m in messages:
        if m.get("role") != "assistant":
            continue
        content = m.get("content") or ""
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        reasoning = m.get("reasoning_content") or m.get("reasoning") or None
        think = think_re.findall(content)
        if think and not reasoning:
            reasoning = "\n".join(t.strip() for t in think)
            content = think_re.sub("", content).strip()
        calls = []
        for i, tc in enumerate(m.get("tool_calls") or []):
            fn = tc.get("function", tc)
            raw = fn.get("arguments")
            args: Any = raw
            err = None
            if isinstance(raw, str):
                try:
                    args = json.loads(raw) if raw.strip() else {}
                except json.JSONDecodeError as exc:
                    args, err = None, f"invalid JSON: {exc}"
            if err is None and not isinstance(args, dict):
                args, err = None, "the arguments are not a JSON object"
            calls.append(ToolCall(name=fn.get("name", ""), arguments=args, id=tc.get("id") or f"c{i}",
                                  raw_arguments=raw if isinstance(raw, str) else None, parse_error=err))
        parse_ok = not ("<tool_call>" in content and not calls)
        out.append((m, AssistantTurn(content=content, tool_calls=calls, reasoning=reasoning, parse_ok=parse_ok,
                                     parse_error=None if parse_ok else "unparsed <tool_call> markup")))
    return out


def _refusal(call: ToolCall, tools: set[str] | None) -> str:
    """Why a call never reached the episode, in the words `Episode.execute` uses."""
    if not call.parse_ok:
        return f"could not parse the arguments of {call.name or 'the call'}: {call.parse_error or 'invalid JSON'}"
    if tools is not None and call.name not in tools:
        return f"unknown tool {call.name!r}"
    return "the call did not reach the environment"


def replay_transcript(messages: list[dict[str, Any]], records: list[CallRecord], stop_after: int | None = None,
                      max_turns: int | None = None, tools: set[str] | None = None,
                      ) -> tuple[list[dict[str, Any]], list[AssistantTurn], list[CallRecord]]:
    """What toolgym's own loop would have scored, from a transcript a front end's harness wrote (TRL's completion,
    verifiers' trace) and the episode's call records (in the order they ran): `(messages, turns, calls)`.

    The transcript is cut before the next assistant turn once `stop_after` recorded calls made a stop condition hold
    (toolgym would have ended the rollout there), and after `max_turns` assistant turns. Each transcript call takes
    the next record with its name and arguments; a call that never reached the episode (unparsable arguments, a tool
    the harness does not offer: not in `tools`, the model-visible names) gets the record the episode would have
    written; a recorded call the transcript does not show (the harness dropped its message) still counts, after the
    others: the environment ran it."""
    pending = list(records)
    kept: list[dict[str, Any]] = []
    turns: list[AssistantTurn] = []
    calls: list[CallRecord] = []
    by_id = {id(m): t for m, t in turns_from_messages(messages)}
    stopped = stop_after == 0
    for m in messages:
        if m.get("role") == "assistant" and (stopped or (max_turns is not None and len(turns) >= max_turns)):
            break
        kept.append(m)
        turn = by_id.get(id(m))
        if turn is None:
            continue
        index = len(turns)
        turns.append(turn)
        for tc in turn.tool_calls:
            rec = next((r for r in pending if r.name == tc.name and r.arguments == tc.arguments), None)
            if rec is not None:
                pending.remove(rec)
                rec = CallRecord(**{**rec.__dict__, "turn": index})
                if stop_after is not None and len(records) - len(pending) >= stop_after:
                    stopped = True
            else:
                rec = CallRecord(turn=index, name=tc.name, arguments=tc.arguments, parse_ok=tc.parse_ok, name_ok=False,
                                 args_ok=False, exec_ok=False, error=_refusal(tc, tools))
            calls.append(rec)
    calls.extend(pending[: max(0, stop_after - (len(records) - len(pending)))] if stop_after is not None else pending)
    return kept, turns, calls


__all__ = ["CallResult", "Episode", "HiddenCallError", "MAX_ARG_CHARS", "RolloutScore", "accuracy_metrics",
           "current_episode", "replay_transcript", "score_rollout", "turns_from_messages"]
