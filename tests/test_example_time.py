"""The config-only walkthrough over a real third-party MCP server (mcp-server-time from PyPI, over stdio)."""

import asyncio
import shutil
from pathlib import Path

import pytest

from toolgym import AssistantTurn, ScriptedPolicy, load_env, load_policy, run_rollouts

CONFIG = Path(__file__).parents[1] / "examples" / "third_party_time" / "env.toml"
pytestmark = pytest.mark.skipif(
    shutil.which("mcp-server-time") is None and not (Path(__import__("sys").executable).parent / "mcp-server-time").exists(),
    reason="mcp-server-time is not installed (pip install -e '.[examples]')",
)


def _run(policy_factory, n=6):
    env = load_env(str(CONFIG))

    async def go():
        async with env:
            tasks = env.build_dataset(n)
            return env, await run_rollouts(env, policy_factory(env), [(i, 0, t) for i, t in enumerate(tasks)], 3)

    return asyncio.run(go())


def test_reference_player_scores_full_marks_through_the_real_server():
    env, trajs = _run(lambda env: load_policy("scripted:reference", env))
    assert [t.error for t in trajs] == [None] * 6
    assert all(t.reward == 1.0 and t.metrics["call_match"] == 1.0 for t in trajs)
    # the answer came from the server's output, which holds the converted time
    assert all(t.task["answer"] in t.calls[0].result for t in trajs)
    assert "get_current_time" not in {s["function"]["name"] for s in env.model_tools()}


def test_a_player_that_guesses_without_the_tool_scores_zero():
    def guess(messages, memory):
        return AssistantTurn(content="<answer>99:99</answer>")

    _, trajs = _run(lambda env: ScriptedPolicy(guess))
    assert all(t.error is None and t.reward == 0.0 for t in trajs)
    assert all(t.metrics["used_tool"] == 0.0 and t.metrics["call_match"] == 0.0 for t in trajs)


def test_wrong_arguments_are_counted_and_do_not_match():
    def wrong_zone(messages, memory):
        from toolgym.policies.scripted import call

        if not any(m["role"] == "tool" for m in messages):
            return AssistantTurn(content="", tool_calls=[call("convert_time", source_timezone="Mars/Base",
                                                              time="10:00", target_timezone="UTC")])
        return AssistantTurn(content="<answer>00:00</answer>")

    _, trajs = _run(lambda env: ScriptedPolicy(wrong_zone), n=3)
    for t in trajs:
        assert t.error is None
        assert t.calls[0].args_ok and not t.calls[0].exec_ok and "Invalid timezone" in t.calls[0].result
        assert t.metrics["tool_exec_ok"] == 0.0 and t.metrics["call_match"] == 0.0
