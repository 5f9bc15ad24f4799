"""The rollout engine: play a `Policy` against a `StatefulToolEnv` and record a `Trajectory`.

One rollout: acquire an MCP session → `setup_state` → loop { policy turn → parse check → for each call: visible?
arguments valid against the schema? → inject hidden args → call over MCP → tool message } → `env_response` →
stop checks → rubric → `cleanup` → release the session. Failures of the model (bad JSON, unknown tool, bad arguments,
server-side errors) are recorded on the call and shown to the model as a tool error; failures of the infrastructure
(dead or hung server, failing hidden call, raising reward function) end that rollout with `trajectory.error` set,
and the engine goes on with the next one. A session found dead during `setup_state` (a shared server that died while
idle) is replaced once before the rollout counts as failed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from toolgym.accuracy import match_sequence, validate_args
from toolgym.env import HiddenCallError, StatefulToolEnv, bind_rollout, unbind_rollout
from toolgym.mcp_bridge import ToolCallError
from toolgym.policies.base import PolicyUnavailable
from toolgym.policies import Policy
from toolgym.rubric import RewardError
from toolgym.types import AssistantTurn, CallRecord, ToolCall, Trajectory

MAX_ARG_CHARS = 20_000


def _truncate(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... truncated {len(text) - limit} characters]"


async def _execute_call(
    env: StatefulToolEnv, call: ToolCall, state: dict[str, Any], turn: int, session: Any
) -> tuple[CallRecord, str]:
    """Validate and run one model call; return its record and the text the model sees."""
    rec = CallRecord(turn=turn, name=call.name, arguments=call.arguments, parse_ok=call.parse_ok,
                     name_ok=False, args_ok=False, exec_ok=False)
    if not call.parse_ok:
        rec.error = f"could not parse the arguments of {call.name or 'the call'}: {call.parse_error or 'invalid JSON'}"
        return rec, f"Error: {rec.error}. Arguments must be a JSON object."
    rec.name_ok = env.is_visible(call.name)
    rec.server = env.server_of(call.name) if rec.name_ok else None  # a multi-server env: where the call goes
    if not rec.name_ok:
        names = ", ".join(t["function"]["name"] for t in env.model_tools())
        rec.error = f"unknown tool {call.name!r}"
        return rec, f"Error: unknown tool {call.name!r}. Available tools: {names}."
    raw_len = len(call.raw_arguments or "") or sum(len(str(v)) for v in (call.arguments or {}).values())
    if raw_len > MAX_ARG_CHARS:
        rec.error = f"arguments too large ({raw_len} characters, limit {MAX_ARG_CHARS})"
        return rec, f"Error: {rec.error}."
    args = dict(call.arguments or {})
    hidden = set(env.hidden_args.get(call.name, []))
    smuggled = hidden & set(args)
    invalid = validate_args(env.tool_schema(call.name), args) if not smuggled else f"unexpected arguments {sorted(smuggled)}"
    rec.args_ok = invalid is None
    if invalid is not None:
        rec.error = f"invalid arguments for {call.name}: {invalid}"
        return rec, f"Error: {rec.error}."
    t0 = time.perf_counter()
    if call.name in env._env_tools:
        try:
            text = await env.run_env_tool(call.name, args, state)
            rec.exec_ok = True
        except Exception as exc:  # noqa: BLE001 - an env tool error is shown to the model
            text, rec.error = f"Error: {exc}", str(exc)
    else:
        full_args = env.update_tool_args(call.name, args, state)
        result = await session.call(call.name, full_args, timeout=env.tool_timeout)  # ToolCallError propagates
        text, rec.exec_ok = result.text, not result.is_error
        if result.is_error:
            rec.error = result.text
            text = result.text if result.text.lower().startswith("error") else f"Error: {result.text}"
    rec.latency_s = time.perf_counter() - t0
    text = _truncate(text, env.max_tool_output_chars)
    rec.result = text
    return rec, text


def _accuracy_metrics(traj: Trajectory, turns: list[AssistantTurn], task: dict[str, Any]) -> dict[str, float]:
    m: dict[str, float] = {"turns": float(len(turns)), "num_calls": float(len(traj.calls))}
    if turns:
        m["turn_parse_ok"] = sum(t.parse_ok for t in turns) / len(turns)
        m["no_call_turns"] = float(sum(1 for t in turns if not t.tool_calls))
    if traj.calls:
        n = len(traj.calls)
        for flag in ("parse_ok", "name_ok", "args_ok", "exec_ok"):
            m[f"tool_{flag}"] = sum(getattr(c, flag) for c in traj.calls) / n
    if "expected_calls" in task:
        expected = task["expected_calls"] or []
        flags = match_sequence([(c.name, c.arguments) for c in traj.calls], expected)
        for c, f in zip(traj.calls, flags, strict=True):
            c.call_match = f
        if expected:
            m["call_match"] = float(len(flags) == len(expected) and all(flags))
        else:
            m["abstain_ok"] = float(not traj.calls)
    return m


async def run_rollout(
    env: StatefulToolEnv,
    policy: Policy,
    task: dict[str, Any],
    example_id: int = 0,
    rollout_index: int = 0,
) -> Trajectory:
    """Play one rollout. Never raises for model or server failures: they land in the trajectory -- except
    `PolicyUnavailable` (the policy cannot answer at all), which stops the run."""
    traj = Trajectory(example_id=example_id, rollout_index=rollout_index, task=task)
    state: dict[str, Any] = {"task": task, "example_id": example_id, "rollout_index": rollout_index}
    timings = {"generation_s": 0.0, "tools_s": 0.0, "setup_s": 0.0, "scoring_s": 0.0}
    t_start = time.perf_counter()
    turns: list[AssistantTurn] = []
    provider = env.provider
    session = None
    psession = None
    token = None
    try:
        t0 = time.perf_counter()
        for attempt in range(2):
            session = await provider.acquire(task) if provider is not None else None
            token = bind_rollout(session, state)
            try:
                await env.setup_state(state, task)
                break
            except ToolCallError:
                # a shared session whose server died while idle is only found dead on use: retry once on a fresh one
                if attempt or session is None or provider is None or not session.broken:
                    raise
                unbind_rollout(token)
                token = None
                await provider.release(session)
                session = None
        messages = env.initial_messages(task, state)
        timings["setup_s"] = time.perf_counter() - t0
        psession = policy.open(env.model_tools(), task)
        traj.messages = messages
        stop_reason = await env.is_done(state)
        for turn_idx in range(env.max_turns):
            if stop_reason:
                break
            t0 = time.perf_counter()
            turn = await psession.act(messages)
            timings["generation_s"] += time.perf_counter() - t0
            turns.append(turn)
            messages.append(turn.to_message())
            traj.turns.append({"index": turn_idx, "content": turn.content, "reasoning": turn.reasoning,
                               "parse_ok": turn.parse_ok, "parse_error": turn.parse_error, "raw_text": turn.raw_text,
                               "num_calls": len(turn.tool_calls), "finish_reason": turn.finish_reason})
            t0 = time.perf_counter()
            records = []
            for call in turn.tool_calls:
                rec, text = await _execute_call(env, call, state, turn_idx, session)
                records.append(rec)
                traj.calls.append(rec)
                messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": text})
            timings["tools_s"] += time.perf_counter() - t0
            extra = await env.env_response(state, turn, records)
            if extra:
                messages.extend(extra)
            stop_reason = await env.is_done(state)
            if not turn.tool_calls and not stop_reason:
                if env.on_no_call == "stop":
                    stop_reason = "no_tool_call"
                else:
                    why = f" (your output could not be parsed: {turn.parse_error})" if turn.parse_error else ""
                    messages.append({"role": "user", "content": env.nudge_message + why})
        traj.stop_reason = stop_reason or "max_turns"
        state["stop_reason"] = traj.stop_reason
        t0 = time.perf_counter()
        traj.metrics = _accuracy_metrics(traj, turns, task)
        rewards, metrics, total = await env.rubric.score(
            state=state, task=task, trajectory=traj, calls=traj.calls, messages=messages, turns=turns, env=env
        )
        traj.rewards, traj.reward = rewards, total
        traj.metrics.update(metrics)
        timings["scoring_s"] = time.perf_counter() - t0
    except PolicyUnavailable:
        raise  # the policy cannot answer at all: the run stops (iter_rollouts re-raises it) instead of failing all
    except (ToolCallError, HiddenCallError, RewardError) as exc:
        traj.error = str(exc)
    except Exception as exc:  # noqa: BLE001 - a bug in a hook or policy fails this rollout, not the run
        traj.error = f"{type(exc).__name__}: {exc}"
    finally:
        try:
            if psession is not None:
                trace = psession.token_trace()
                if trace is not None:
                    traj.tokens = trace
                try:
                    await psession.aclose()
                except Exception as exc:  # noqa: BLE001
                    traj.error = traj.error or f"policy session close failed: {exc}"
            if session is not None and not session.broken:
                try:
                    await env.cleanup(state)
                except Exception as exc:  # noqa: BLE001
                    traj.error = traj.error or f"cleanup failed: {type(exc).__name__}: {exc}"
        finally:  # even when a cancellation interrupts the cleanup above: the session goes back (and its sandbox)
            if token is not None:
                unbind_rollout(token)
            if session is not None and provider is not None:
                await provider.release(session)
            traj.info.update({k: v for k, v in state.items() if k not in ("task",) and _jsonable(v)})
            timings["total_s"] = time.perf_counter() - t_start
            traj.timings = timings
    return traj


def _jsonable(v: Any) -> bool:
    return isinstance(v, str | int | float | bool | type(None)) or (
        isinstance(v, list | dict) and len(str(v)) < 10_000
    )


async def run_rollouts(
    env: StatefulToolEnv,
    policy: Policy,
    jobs: Iterable[tuple[int, int, dict[str, Any]]],
    concurrency: int = 8,
    on_done: Callable[[Trajectory], Any] | None = None,
) -> list[Trajectory]:
    """Run (example_id, rollout_index, task) jobs with at most `concurrency` in flight; results in job order."""
    jobs = list(jobs)
    results: list[Trajectory | None] = [None] * len(jobs)
    async for i, traj in iter_rollouts(env, policy, jobs, concurrency):
        results[i] = traj
        if on_done is not None:
            on_done(traj)
    return [r for r in results if r is not None]


async def iter_rollouts(
    env: StatefulToolEnv, policy: Policy, jobs: list[tuple[int, int, dict[str, Any]]], concurrency: int = 8
) -> AsyncIterator[tuple[int, Trajectory]]:
    """Yield (job index, trajectory) as rollouts finish, at most `concurrency` in flight."""
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    queue: asyncio.Queue[tuple[int, Trajectory | Exception]] = asyncio.Queue()
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int, ex: int, r: int, task: dict[str, Any]) -> None:
        async with sem:
            try:
                await queue.put((i, await run_rollout(env, policy, task, ex, r)))
            except Exception as exc:  # noqa: BLE001 - PolicyUnavailable (or an engine bug): stop the run with it
                await queue.put((i, exc))

    tasks = [asyncio.create_task(one(i, ex, r, t)) for i, (ex, r, t) in enumerate(jobs)]
    try:
        for _ in range(len(tasks)):
            i, item = await queue.get()
            if isinstance(item, Exception):
                raise item
            yield i, item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
