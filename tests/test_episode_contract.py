"""The episode contract: every front end drives the same `Episode`, so the same tasks played by the same scripted
model give identical rewards, metrics and tool-call records through

- `run_rollout` (the rollout engine behind eval, synth and GRPO),
- `toolgym serve` (its `Agent`, which runs each request as a rollout, unscored: the same episode without rewards),
- the TRL adapter (`TRLEnv`; TRL's tool loop is reproduced here as TRL 1.16's `GRPOTrainer._tool_call_loop` runs it:
  one turn's async tool calls created together and awaited with `asyncio.gather` on another event loop -- no model
  and no trainer, so the test stays fast),
- the verifiers export under verifiers' own `vf-eval` (slow; needs `.venv-verifiers`).

The env (`tests/contract_env.py`) has a per-rollout server whose sandbox fixture is chosen by a task field, a shared
server that the test kills between two rollouts (the next rollout's setup must replace the dead session), a turn with
two tool calls (`env_response` must run once for it), a hidden argument, a stop condition, model faults (unknown
tool, bad argument type, a smuggled hidden argument, a server error) and a metric that does not apply (None).
verifiers runs every rollout's toolset in its own process with its own server processes, so the killed shared
server has no counterpart there. Tic-tac-toe `task=move` (its `win_taken` / `blocked` metrics are None on most
positions) goes through the export too.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from contract_env import TASKS, ContractEnv, plan
from vf_testutil import ScriptedEndpoint, needs_venv, text_of, vf_eval

from toolgym import AssistantTurn, ScriptedPolicy, ToolCall
from toolgym.rollout import run_rollout
from toolgym.types import CallRecord

HERE = Path(__file__).resolve().parent


def record_view(calls: list[CallRecord] | list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What must be identical of each call record (latency aside)."""
    rows = []
    for c in calls:
        d = c if isinstance(c, dict) else c.__dict__
        rows.append((d["turn"], d["name"], json.dumps(d["arguments"], sort_keys=True), d["parse_ok"], d["name_ok"],
                     d["args_ok"], d["exec_ok"], d.get("call_match"), d["error"], d["result"], d.get("server")))
    return rows


def kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)


def scripted_policy() -> ScriptedPolicy:
    def act(messages: list[dict[str, Any]], memory: dict[str, Any]) -> AssistantTurn:
        reply = plan(messages)
        return AssistantTurn(content=reply["content"], tool_calls=[
            ToolCall(name=n, arguments=a, id=f"c{i}") for i, (n, a) in enumerate(reply["tool_calls"])])

    return ScriptedPolicy(act, "scripted:contract")


# ------------------------------------------------------------------------------------------------ front ends
def via_rollout() -> tuple[list[dict[str, Any]], list[int]]:
    env = ContractEnv()
    out, pids = [], []

    async def go() -> None:
        async with env:
            for i, task in enumerate(env.build_dataset()):
                if i == 1:
                    kill(pids[0])  # the shared server dies between two rollouts
                traj = await run_rollout(env, scripted_policy(), task, example_id=i)
                assert traj.error is None, traj.error
                pids.append(traj.info["counter_pid"])
                out.append({"rewards": traj.rewards, "metrics": traj.metrics, "records": record_view(traj.calls),
                            "responses": traj.info["calls_per_response"], "stop": traj.stop_reason})

    asyncio.run(go())
    return out, pids


def via_serve() -> tuple[list[dict[str, Any]], list[int]]:
    from toolgym.serve import build_agent_server

    env = ContractEnv()
    srv = build_agent_server(env, scripted_policy())
    out, pids = [], []

    async def go() -> None:
        try:
            for i, task in enumerate(env.build_dataset()):
                if i == 1:
                    kill(pids[0])
                traj = await srv.agent.run(task)
                pids.append(traj.info["counter_pid"])
                out.append({"rewards": traj.rewards, "metrics": traj.metrics, "records": record_view(traj.calls),
                            "responses": traj.info["calls_per_response"], "stop": traj.stop_reason})
        finally:
            await env.aclose()

    asyncio.run(go())
    return out, pids


def via_trl() -> tuple[list[dict[str, Any]], list[int]]:
    pytest.importorskip("transformers")
    from toolgym.integrations.trl import TRLEnv

    trl_loop = asyncio.new_event_loop()  # TRL runs its async tools on a loop of its own, in a thread
    thread = threading.Thread(target=trl_loop.run_forever, daemon=True)
    thread.start()
    out, pids = [], []
    try:
        with TRLEnv(ContractEnv()) as tg:
            names = tg.reward_names()
            for i, row in enumerate(tg.dataset(as_list=True)):
                if i == 1:
                    kill(pids[0])
                inst = tg.environment_factory()
                first = inst.reset(**row)
                prompt = [*row["prompt"][:-1], {"role": "user", "content": first}]
                completion: list[dict[str, Any]] = []
                for _ in range(tg.max_turns):  # GRPOTrainer(max_tool_calling_iterations=tg.max_turns)
                    reply = plan(prompt + completion)
                    calls = [{"type": "function", "function": {"name": n, "arguments": a}}
                             for n, a in reply["tool_calls"]]
                    completion.append({"role": "assistant", "content": reply["content"], "tool_calls": calls}
                                      if calls else {"role": "assistant", "content": reply["content"]})
                    if not calls:
                        break
                    coros, results = [], {}
                    for j, (n, a) in enumerate(reply["tool_calls"]):
                        method = getattr(inst, n, None)
                        if method is None:  # TRL: "Tool {name} not found." becomes the tool message
                            results[j] = {"error": f"Tool {n} not found."}
                        else:
                            coros.append((j, method(**a)))

                    async def gather(coros: list[tuple[int, Any]] = coros) -> list[Any]:
                        return await asyncio.gather(*(c for _, c in coros), return_exceptions=True)

                    for (j, _), res in zip(coros, asyncio.run_coroutine_threadsafe(gather(), trl_loop).result(),
                                           strict=True):
                        results[j] = {"error": str(res)} if isinstance(res, Exception) else res
                    for j, (n, _) in enumerate(reply["tool_calls"]):
                        completion.append({"role": "tool", "name": n, "content": str(results[j])})
                got = {n: f(completions=[completion], environments=[inst])[0]
                       for n, f in zip(names, tg.reward_funcs(), strict=True)}
                ep = tg.episode_of(inst)
                rewards, metrics, _ = next(score for e, score in tg.episodes() if e is ep)
                assert {n: v for n, v in got.items() if n in rewards} == rewards  # TRL's view of the same scores
                pids.append(ep.state["counter_pid"])
                calls = _scored_calls(ep, completion, tg.env.max_turns)
                out.append({"rewards": rewards, "metrics": metrics, "records": record_view(calls),
                            "responses": ep.state["calls_per_response"], "stop": ep.stop_reason or "no_tool_call"})
            assert tg.errors == []
    finally:
        trl_loop.call_soon_threadsafe(trl_loop.stop)
        thread.join(5)
    return out, pids


def _scored_calls(ep: Any, completion: list[dict[str, Any]], max_turns: int) -> list[CallRecord]:
    """The call records as scored: the episode's records replayed against the transcript, match flags set."""
    from toolgym.episode import accuracy_metrics, replay_transcript

    stop_after = len(ep.calls) if ep.stop_reason not in (None, "max_turns", "no_tool_call") else None
    _, turns, calls = replay_transcript(completion, ep.calls, stop_after, max_turns,
                                        {t["function"]["name"] for t in ep.env.model_tools()})
    accuracy_metrics(calls, turns, ep.task)
    return calls


# ------------------------------------------------------------------------------------------------ tests
def test_rollout_serve_and_trl_play_the_same_episodes() -> None:
    rollout, pids = via_rollout()
    assert pids[1] != pids[0] and pids[2] == pids[1]  # the dead shared server was replaced once, then shared
    # the fixture named by the task field reached each rollout's sandbox
    assert [r["records"][0][9] for r in rollout[:2]] == ["alpha note", "beta note"]
    # a turn with two calls got one env_response
    assert rollout[0]["responses"] == [2, 1] and rollout[1]["responses"] == [2, 0]
    assert rollout[0]["stop"] == "finished" and rollout[1]["stop"] == "no_tool_call"
    faults = {(r[1], r[4], r[5], r[6]) for r in rollout[2]["records"]}
    assert faults == {("nope", False, False, False), ("add", True, False, False), ("read", True, True, False)}
    assert "never" not in rollout[0]["metrics"]  # a metric that does not apply is left out
    assert rollout[0]["rewards"] == {"counted": 5.0, "read_ok": 1.0} and rollout[0]["metrics"]["call_match"] == 1.0

    served, served_pids = via_serve()
    assert served_pids[1] != served_pids[0]
    # a served request is the same episode, unscored (it has no reference to grade against): no rewards, metrics
    # or call_match flags, everything else identical
    assert all(r["rewards"] == {} and r["metrics"] == {} for r in served)
    assert served == [{**r, "rewards": {}, "metrics": {}, "records": [(*c[:7], None, *c[8:]) for c in r["records"]]}
                      for r in rollout]

    trl, trl_pids = via_trl()
    assert trl_pids[1] != trl_pids[0]
    # TRL refuses a call of a tool it was not given before the environment sees it: the call is scored as failed
    # (its record rebuilt from the transcript), but that turn's env_response saw one record, not two
    assert rollout[2]["responses"] == [2, 2, 0] and trl[2]["responses"] == [1, 2, 0]
    rollout[2].pop("responses"), trl[2].pop("responses")
    assert trl == rollout


def _vf_view(episode: dict[str, Any]) -> dict[str, Any]:
    trace = episode["traces"][0]
    assert not trace["errors"], trace["errors"]
    rewards = {k: v["score"] for k, v in trace["rewards"].items()}
    metrics = {k.removeprefix("acc_"): v for k, v in trace["metrics"].items()}
    tool_texts = [n["message"]["content"] for n in trace["nodes"] if n["message"].get("role") == "tool"]
    return {"rewards": rewards, "metrics": metrics, "stop": trace.get("stop_condition"), "tool_texts": tool_texts}


@pytest.mark.slow
@needs_venv
def test_the_verifiers_export_plays_the_same_episodes(tmp_path: Path) -> None:
    """Rewards, metrics (the accuracy rates are computed from the call records) and the tool answers the model saw
    are the rollout's. The difference verifiers' loop cannot avoid: a final turn without calls never reaches the
    toolset, so its `env_response` does not run there (toolgym's loop runs it with no records); the env's
    `env_responses` metric counts one less on the two tasks that end with an answer."""
    from toolgym.export.verifiers import export_verifiers
    from toolgym.registry import load_env

    env = ContractEnv()
    trajs = []

    async def go() -> None:
        async with env:
            for i, task in enumerate(env.build_dataset()):
                trajs.append(await run_rollout(env, scripted_policy(), task, example_id=i))

    asyncio.run(go())
    out = tmp_path / "pkg"
    pkg_dir = export_verifiers("contract_env:ContractEnv", out)
    assert load_env("contract_env:ContractEnv").name == "contract"
    endpoint = ScriptedEndpoint(lambda messages: plan([{**m, "content": text_of(m.get("content"))}
                                                       for m in messages]))
    try:
        episodes = vf_eval(out, pkg_dir.name, len(TASKS), endpoint, tmp_path, extra_path=(str(HERE),))
    finally:
        endpoint.close()
    for i, (traj, episode) in enumerate(zip(trajs, episodes, strict=True)):
        got = _vf_view(episode)
        assert got["rewards"] == traj.rewards
        want = dict(traj.metrics)
        if traj.stop_reason == "no_tool_call":  # the final answer's env_response (see the docstring)
            want["env_responses"] -= 1
        assert {k: got["metrics"].get(k) for k in want} == want, (i, got["metrics"], want)
        assert "never" not in got["metrics"]
        # the model saw the same tool answers (verifiers words its own refusal of an unknown tool; a trace keeps
        # tool answers with the next model request, so a rollout its stop ended lacks the last turn's)
        def kept(texts: list[str]) -> list[str]:
            return [t for t in texts if "unknown tool 'nope'" not in t]

        texts = kept([m["content"] for m in traj.messages if m.get("role") == "tool"])
        seen = kept(got["tool_texts"])
        last_turn = sum(1 for c in traj.calls if c.turn == traj.calls[-1].turn) if traj.calls else 0
        assert seen == texts[: len(seen)]
        assert len(seen) >= len(texts) - (last_turn if got["stop"] != "agent_completed" else 0)
    # the stop condition ended the first rollout before another model call, as toolgym's loop does
    assert _vf_view(episodes[0])["stop"] == "toolgym_stopped"


@pytest.mark.slow
@needs_venv
def test_tictactoe_move_tasks_through_the_export_match_the_rollout(tmp_path: Path) -> None:
    """`task=move` rows whose `win_taken` / `blocked` metrics are None (no win or threat on the board): the export
    leaves them out as toolgym does (it crashed on `float(None)` before), and every score matches `run_rollout`."""
    pytest.importorskip("toolgym_tictactoe")
    from toolgym_tictactoe import _minimax_player

    from toolgym.export.verifiers import export_verifiers
    from toolgym.registry import load_env
    from toolgym.rollout import run_rollouts

    n = 6
    env = load_env("tictactoe", task="move")
    tasks = env.build_dataset(n, seed=3)

    async def go() -> list[Any]:
        async with env:
            return await run_rollouts(env, ScriptedPolicy(_minimax_player(0.0, seed=0)),
                                      [(i, 0, t) for i, t in enumerate(tasks)], 2)

    want = asyncio.run(go())
    assert any("win_taken" not in t.metrics for t in want)  # the case that crashed the export
    out = tmp_path / "pkg"
    pkg_dir = export_verifiers("tictactoe", out, n=n, seed=3, env_kwargs={"task": "move"})
    act = _minimax_player(0.0, seed=0)

    def reply(messages: list[dict[str, Any]]) -> dict[str, Any]:
        msgs = [{**m, "content": text_of(m.get("content"))} for m in messages]
        turn = act(msgs, {})
        return {"content": f"<think>{turn.reasoning}</think>",
                "tool_calls": [(c.name, c.arguments) for c in turn.tool_calls]}

    endpoint = ScriptedEndpoint(reply)
    try:
        episodes = vf_eval(out, pkg_dir.name, n, endpoint, tmp_path)
    finally:
        endpoint.close()
    for traj, episode in zip(want, episodes, strict=True):
        got = _vf_view(episode)
        assert got["rewards"] == traj.rewards
        assert {k: got["metrics"].get(k) for k in traj.metrics} == traj.metrics
        assert ("win_taken" in got["metrics"]) == ("win_taken" in traj.metrics)
