"""Bad input and failing servers. Each case must be counted (call flags / metrics / trajectory.error), come with a
clear message, leave the run able to go on (later rollouts succeed, the server is restarted when it died) and leave
no process behind."""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

import psutil
import pytest
from tg_testutil import children, flaky_command, wait_no_new_children
from toolgym_tictactoe import TicTacToeEnv, minimax_player

from toolgym import AssistantTurn, ScriptedPolicy, ServerSpec, StatefulToolEnv, stop
from toolgym.sandbox import free_port
from toolgym.policies.openai_http import parse_completion
from toolgym.policies.scripted import call
from toolgym.episode import MAX_ARG_CHARS
from toolgym.rollout import run_rollouts


def _raw_call(name: str, arguments: str) -> AssistantTurn:
    """A turn parsed from an OpenAI response whose tool call carries the raw argument string `arguments`."""
    return parse_completion({"choices": [{"message": {"content": "", "reasoning_content": "hmm", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]}}]})


def _turn(*calls: Any, content: str = "") -> AssistantTurn:
    return AssistantTurn(content=content, reasoning="hmm", tool_calls=list(calls))


# case -> (bad turns played first, flag expected False on the bad call (None: no call), text the model must see)
CASES: dict[str, tuple[list[AssistantTurn], str | None, str]] = {
    "malformed_json": ([_raw_call("make_move", '{"position": 4')], "parse_ok", "could not parse the arguments"),
    "args_not_object": ([_raw_call("make_move", "[4]")], "parse_ok", "not an object"),
    "unknown_tool": ([_turn(call("fly_away", position=4))], "name_ok", "unknown tool 'fly_away'. Available tools:"),
    "hidden_tool": ([_turn(call("new_game", seed=1))], "name_ok", "unknown tool 'new_game'"),
    "wrong_type": ([_turn(call("make_move", position="four"))], "args_ok", "'four' is not of type 'integer'"),
    "float_cell": ([_turn(call("make_move", position=4.5))], "args_ok", "is not of type 'integer'"),
    "no_arguments": ([_turn(call("make_move"))], "args_ok", "'position' is a required property"),
    "extra_argument": ([_turn(call("make_move", position=4, colour="red"))], "args_ok", "colour"),
    "smuggled_hidden_arg": ([_turn(call("make_move", position=4, game_id="x"))], "args_ok", "unexpected arguments"),
    "out_of_range": ([_turn(call("make_move", position=9))], "exec_ok", "invalid position 9"),
    "negative_cell": ([_turn(call("make_move", position=-1))], "exec_ok", "invalid position -1"),
    "occupied": ([_turn(call("make_move", position=4)), _turn(call("make_move", position=4))], "exec_ok",
                 "cell 4 is already taken"),
    "enormous_argument": ([_raw_call("make_move", json.dumps({"position": "4" * 200_000}))], "args_ok",
                          f"arguments too large (200016 characters, limit {MAX_ARG_CHARS})"),
    "no_call": ([_turn(content="Let me think about it.")], None, "You must make your move by calling make_move"),
}


def _bad_then_minimax(bad: list[AssistantTurn]):
    play = minimax_player(None, seed=0).fn

    def act(messages: list[dict[str, Any]], memory: dict[str, Any]) -> AssistantTurn:
        i = memory.setdefault("i", 0)
        memory["i"] += 1
        return bad[i] if i < len(bad) else play(messages, memory)

    return act


@pytest.mark.anyio
@pytest.mark.parametrize("case", sorted(CASES))
async def test_bad_model_input(case: str) -> None:
    bad, flag, message = CASES[case]
    env = TicTacToeEnv(transport="inprocess")
    task = {"seed": 5, "x_starts": True, "random_move_prob": 0.0}
    async with env:
        trajs = await run_rollouts(env, ScriptedPolicy(_bad_then_minimax(bad)), [(0, 0, task), (1, 0, task)])
        good = await run_rollouts(env, minimax_player(None, seed=0), [(2, 0, task)])
    t = trajs[0]
    assert t.error is None, t.error
    assert t.stop_reason == "game_over" and t.metrics["loss"] == 0.0  # the game went on to its end
    seen = "\n".join(str(m.get("content")) for m in t.messages if m["role"] in ("tool", "user"))
    assert message in seen
    if flag is None:
        assert t.metrics["no_call_turns"] == 1.0
        assert t.rewards["format_ok"] < 1.0
    else:
        rec = t.calls[len(bad) - 1]
        assert getattr(rec, flag) is False and rec.error
        assert t.metrics[f"tool_{flag}"] < 1.0
        assert t.metrics["invalid_moves"] >= 1.0
        assert t.rewards["invalid_move_penalty"] == pytest.approx(-0.1)
        tool_msgs = [m for m in t.messages if m["role"] == "tool"]
        assert tool_msgs[len(bad) - 1]["content"].startswith("Error")
        assert len(tool_msgs[len(bad) - 1]["content"]) < 2_000  # the echo of a huge argument is not sent back
        if flag == "exec_ok":
            assert t.info["result"]["invalid_moves"] >= 1  # the server counted it too
    assert trajs[1].error is None and good[0].error is None and good[0].rewards["invalid_move_penalty"] == 0.0


def _server_children(marker: str) -> list[psutil.Process]:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if any(marker in part for part in p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


def _killer(marker: str, memory_flag: dict[str, Any]):
    """Minimax, except that the first rollout kills the server process before its second move."""
    play = minimax_player(None, seed=0).fn

    def act(messages: list[dict[str, Any]], memory: dict[str, Any]) -> AssistantTurn:
        memory["turn"] = memory.get("turn", 0) + 1
        if memory["session_index"] == 0 and memory["turn"] == 2:
            victims = _server_children(marker)
            memory_flag["killed"] = [p.pid for p in victims]
            for p in victims:
                os.kill(p.pid, signal.SIGKILL)
            for p in victims:
                p.wait(5)
        return play(messages, memory)

    return act


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_server_killed_mid_game(transport: str) -> None:
    before = children()
    env = TicTacToeEnv(transport=transport, tool_timeout=10)
    tasks = env.build_dataset(4, seed=1)
    info: dict[str, Any] = {}
    async with env:
        trajs = await run_rollouts(env, ScriptedPolicy(_killer("mcp-server-tictactoe", info)),
                                   [(i, 0, t) for i, t in enumerate(tasks)], concurrency=1)
        assert len(info["killed"]) == 1
        assert env.provider.restarts == 1
        assert _server_children("mcp-server-tictactoe")[0].pid not in info["killed"]  # a fresh server
    first = trajs[0]
    assert first.error and ("connection" in first.error.lower() or "closed" in first.error.lower()), first.error
    assert first.calls and first.calls[0].exec_ok  # it died mid-game, after a good move
    assert all(t.error is None and t.stop_reason == "game_over" for t in trajs[1:]), [t.error for t in trajs]
    assert not wait_no_new_children(before)


class FlakyEnv(StatefulToolEnv):
    """The flaky server as an env: each task lists the calls to make, one per turn."""

    name = "flaky"
    max_turns = 4

    @stop
    def enough(self, state: dict[str, Any]) -> bool:
        return len(state.get("seen", [])) >= len(state["task"]["plan"])

    async def env_response(self, state, turn, records):  # type: ignore[no-untyped-def]
        state.setdefault("seen", []).extend(r.result for r in records)


def _plan_player(messages: list[dict[str, Any]], memory: dict[str, Any]) -> AssistantTurn:
    i = memory.setdefault("i", 0)
    memory["i"] += 1
    name, args = memory["task"]["plan"][i]
    return _turn(call(name, **args))


def _flaky_spec(transport: str) -> ServerSpec:
    if transport == "stdio":
        return ServerSpec.stdio(flaky_command())
    port = free_port()
    return ServerSpec.http(f"http://127.0.0.1:{port}/mcp",
                           launch=[*flaky_command(), "--transport", "streamable-http", "--port", str(port)])


@pytest.mark.anyio
@pytest.mark.parametrize(("transport", "scope"), [("stdio", "rollout"), ("stdio", "shared"), ("http", "shared")])
async def test_server_hangs_past_timeout(transport: str, scope: str) -> None:
    before = children()
    env = FlakyEnv(server=_flaky_spec(transport), tool_timeout=0.5, session_scope=scope)
    tasks = [{"plan": [["echo", {"text": "a"}], ["hang", {}]]}, {"plan": [["echo", {"text": "b"}]]},
             {"plan": [["sleep", {"seconds": 0.05}], ["echo", {"text": "c"}]]}]
    if scope == "rollout":
        tasks = tasks[:2]  # a process per rollout: keep the spawns few
    async with env:
        trajs = await run_rollouts(env, ScriptedPolicy(_plan_player), [(i, 0, t) for i, t in enumerate(tasks)],
                                   concurrency=1)
        assert env.provider.restarts == 1
    assert "'hang' timed out after 0.5s" in trajs[0].error
    assert trajs[0].calls[0].exec_ok and trajs[0].timings["total_s"] < 30  # the hang is 3600 s
    assert trajs[1].error is None and trajs[1].info["seen"] == ["b"]
    if scope == "shared":
        assert trajs[2].error is None and trajs[2].info["seen"] == ["slept 0.05", "c"]
    assert not wait_no_new_children(before)


@pytest.mark.anyio
async def test_server_crash_tool_then_recovery() -> None:
    before = children()
    env = FlakyEnv(server=ServerSpec.stdio(flaky_command()), tool_timeout=5, session_scope="shared")
    tasks = [{"plan": [["crash", {}]]}, {"plan": [["fail", {"message": "nope"}]]}, {"plan": [["add", {"a": 2, "b": 3}]]},
             {"plan": [["echo", {"text": "y" * 15_000}]]}]
    env.max_tool_output_chars = 500
    async with env:
        trajs = await run_rollouts(env, ScriptedPolicy(_plan_player), [(i, 0, t) for i, t in enumerate(tasks)],
                                   concurrency=1)
        assert env.provider.restarts == 1
    assert "crash" in trajs[0].error and "connection" in trajs[0].error.lower()
    # a tool error is the model's problem, not the run's: shown, flagged, rollout fine
    assert trajs[1].error is None and trajs[1].calls[0].exec_ok is False and "fail: nope" in trajs[1].calls[0].result
    assert trajs[1].metrics["tool_exec_ok"] == 0.0
    assert trajs[2].error is None and trajs[2].info["seen"] == ["5.0"]
    # an enormous tool result is cut before the model sees it, and says so
    big = trajs[3].messages[-1]["content"]
    assert trajs[3].error is None and big.startswith("y" * 500) and "[... truncated 14500 characters]" in big
    assert not wait_no_new_children(before)


@pytest.mark.anyio
async def test_unreachable_server_is_a_clear_error() -> None:
    env = FlakyEnv(server=ServerSpec.stdio([sys.executable, "-c", "import sys; sys.exit(4)"]))
    with pytest.raises(Exception, match="could not connect to MCP server"):
        await env.start()
    await env.aclose()


@pytest.mark.anyio
async def test_server_killed_while_idle_is_replaced_transparently() -> None:
    """A shared stdio server that dies between rollouts: the next rollout gets a fresh server, no rollout fails."""
    before = children()
    env = TicTacToeEnv(transport="stdio")
    tasks = env.build_dataset(3, seed=4)
    policy = minimax_player(None, seed=0)
    async with env:
        first = await run_rollouts(env, policy, [(0, 0, tasks[0])])
        [victim] = _server_children("mcp-server-tictactoe")
        victim.kill()
        victim.wait(5)
        rest = await run_rollouts(env, policy, [(i, 0, t) for i, t in enumerate(tasks)][1:], concurrency=1)
        assert env.provider.restarts == 1
    assert all(t.error is None and t.stop_reason == "game_over" for t in first + rest), [t.error for t in rest]
    assert not wait_no_new_children(before)


@pytest.mark.anyio
async def test_launched_http_server_stderr_never_blocks_it() -> None:
    """A launched server that logs a lot (uvicorn access logs, tool errors) must not hang on a full stderr pipe."""
    before = children()
    env = FlakyEnv(server=_flaky_spec("http"), tool_timeout=10, session_scope="shared")
    async with env:
        [t] = await run_rollouts(env, ScriptedPolicy(_plan_player), [(0, 0, {"plan": [["log", {"kilobytes": 512}]]})])
    assert t.error is None and t.info["seen"] == ["logged 512 KB"], t.error
    assert not wait_no_new_children(before)


@pytest.mark.anyio
async def test_launched_server_that_exits_reports_its_stderr() -> None:
    port = free_port()
    spec = ServerSpec.http(f"http://127.0.0.1:{port}/mcp", launch=[
        sys.executable, "-c", "import sys; sys.stderr.write('bad config: no port\\n'); sys.exit(3)"])
    env = FlakyEnv(server=spec)
    with pytest.raises(Exception, match=r"exited with 3 while starting: bad config: no port"):
        await env.start()
    await env.aclose()
