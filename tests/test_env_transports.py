"""The same env suite over the three transports (in-process object, stdio child, launched streamable-HTTP server):
tool hiding, full games, isolation of concurrent rollouts, and no process left behind."""

from __future__ import annotations

import json

import pytest
from tg_testutil import children, wait_no_new_children
from toolgym_tictactoe import TicTacToeEnv

from toolgym import load_policy
from toolgym.rollout import run_rollout, run_rollouts

TRANSPORTS = ["inprocess", "stdio", "http"]


@pytest.mark.anyio
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_env_suite(transport: str) -> None:
    before = children()
    env = TicTacToeEnv(transport=transport, min_random_move_prob=0.0, max_random_move_prob=1.0, num_groups=4)
    tasks = env.build_dataset(8, seed=2)
    async with env:
        # the model sees only the player tools, without game_id
        tools = {t["function"]["name"]: t["function"]["parameters"] for t in env.model_tools()}
        assert set(tools) == {"make_move", "get_board"}
        assert set(tools["make_move"]["properties"]) == {"position"} and tools["make_move"]["required"] == ["position"]
        assert "game_id" not in tools["get_board"].get("properties", {})
        assert "game_id" not in json.dumps(env.model_tools())  # nor in the descriptions
        assert tools["make_move"]["properties"]["position"]["description"].startswith("The cell to play")
        if transport != "inprocess":
            assert children() - before, "the server should run in a child process"

        # 8 games at once on one shared session: each rollout sees only its own game
        trajs = await run_rollouts(env, load_policy("scripted:imperfect", env, mistake_prob=0.5, seed=1),
                                   [(i, 0, t) for i, t in enumerate(tasks)], concurrency=8)
        assert len(trajs) == 8
        for t in trajs:
            assert t.error is None, t.error
            assert t.stop_reason == "game_over"
            result = t.info["result"]
            played = [f"X{c.arguments['position']}" for c in t.calls if c.exec_ok]
            assert [m for m in result["moves"] if m[0] == "X"] == played
            assert result["x_starts"] == t.task["x_starts"]
            assert result["random_move_prob"] == t.task["random_move_prob"]
            assert t.metrics["tool_exec_ok"] == 1.0 and t.metrics["moves"] == len(played)
            assert sum(t.metrics[k] for k in ("win", "draw", "loss")) == 1.0
            assert t.reward == pytest.approx(sum(t.rewards[k] * env.rubric.weights[k] for k in t.rewards))
        # games are freed after each rollout (cleanup ran end_game)
        if transport == "inprocess":
            assert len(env.server.target.games.games) == 0
        one = await run_rollout(env, load_policy("scripted:minimax", env), tasks[0])
        assert one.error is None and one.metrics["loss"] == 0.0
    assert not wait_no_new_children(before), "server process left behind after env.aclose()"


@pytest.mark.anyio
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_bad_input_suite(transport: str) -> None:
    """Every bad-input case of test_bad_input as concurrent rollouts of one run: each flagged, each game finished."""
    from test_bad_input import CASES, _bad_then_minimax

    from toolgym import ScriptedPolicy

    class PerTask(ScriptedPolicy):
        def open(self, tools, task):  # type: ignore[no-untyped-def]
            return ScriptedPolicy(_bad_then_minimax(CASES[task["case"]][0])).open(tools, task)

    before = children()
    env = TicTacToeEnv(transport=transport)
    names = sorted(CASES)
    tasks = [{"seed": 5 + i, "x_starts": True, "random_move_prob": 0.0, "case": c} for i, c in enumerate(names)]
    async with env:
        trajs = await run_rollouts(env, PerTask(lambda m, s: None), [(i, 0, t) for i, t in enumerate(tasks)],
                                   concurrency=4)
    for t in trajs:
        bad, flag, message = CASES[t.task["case"]]
        assert t.error is None and t.stop_reason == "game_over" and t.metrics["loss"] == 0.0, (t.task, t.error)
        assert message in "\n".join(str(m.get("content")) for m in t.messages), t.task["case"]
        if flag is not None:
            assert getattr(t.calls[len(bad) - 1], flag) is False
            assert t.rewards["invalid_move_penalty"] < 0
    assert not wait_no_new_children(before)
