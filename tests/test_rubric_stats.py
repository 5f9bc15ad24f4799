"""`Rubric` (takes what it names, weight-0 metrics, errors) and `stats` (pass@k / pass^k, mean_ci, summaries)."""

from __future__ import annotations

import asyncio
import math

import pytest

from toolgym import Rubric, RewardError, ScriptedPolicy, StatefulToolEnv, env_tool, run_rollout
from toolgym.policies.scripted import call
from toolgym.stats import (breakdown, clustered_interval, mean_ci, pass_at_k, pass_hat_k, summarize, tool_accuracy,
                           wilson)
from toolgym.types import AssistantTurn, CallRecord, Trajectory


def test_rubric_passes_what_each_function_names() -> None:
    got = {}

    def a(task):
        got["a"] = task
        return 1.0

    async def b(state, calls):
        got["b"] = (state, calls)
        return 0.5

    def c(**everything):
        got["c"] = set(everything)
        return 2

    def d(task, scale=3.0):
        return scale

    rub = Rubric([(a, 1.0), (b, 2.0), (c, 0.0), d])
    rewards, metrics, total = asyncio.run(rub.score(state={"s": 1}, task={"t": 1}, trajectory=None, calls=[],
                                                    messages=[], turns=[], env=None))
    assert got["a"] == {"t": 1} and got["b"] == ({"s": 1}, [])
    assert got["c"] == {"state", "task", "trajectory", "calls", "messages", "turns", "env"}
    assert rewards == {"a": 1.0, "b": 0.5, "d": 3.0} and metrics == {"c": 2.0}  # weight 0: a metric
    assert total == pytest.approx(1.0 + 2 * 0.5 + 3.0)
    assert rub.weights == {"a": 1.0, "b": 2.0, "c": 0.0, "d": 1.0}


def test_rubric_rejects_unknown_parameter_and_duplicates() -> None:
    def bad(task, answer_key):
        return 0.0

    with pytest.raises(ValueError, match=r"'bad' asks for \['answer_key'\]"):
        Rubric([bad])

    def a(task):
        return 0.0

    with pytest.raises(ValueError, match="duplicate"):
        Rubric([a, a])


@pytest.mark.parametrize(("value", "message"), [(ZeroDivisionError("x"), "raised ZeroDivisionError"),
                                                 ("not a number", "raised ValueError"),
                                                 (float("nan"), "returned NaN")])
def test_rubric_errors_name_the_function(value, message) -> None:
    def flaky_reward(task):
        if isinstance(value, Exception):
            raise value
        return value

    with pytest.raises(RewardError, match=f"'flaky_reward' {message}"):
        asyncio.run(Rubric([flaky_reward]).score(task={}))


class _Echo(StatefulToolEnv):
    """An env without a server: one env tool."""

    name = "echo"
    max_turns = 2

    def __init__(self, rubric: Rubric, **kw) -> None:
        self._rub = rubric
        super().__init__(**kw)

    def build_rubric(self) -> Rubric:
        return self._rub

    @env_tool
    def shout(self, state, text: str, times: int = 1) -> str:
        """Shout the text."""
        if times > 3:
            raise ValueError("too loud")
        return (text.upper() + " ") * times


def _player(messages, memory):
    task = memory["task"]
    i = memory.setdefault("i", 0)
    memory["i"] += 1
    plan = task.get("plan", [])
    return AssistantTurn(content="done") if i >= len(plan) else AssistantTurn(tool_calls=[call("shout", **plan[i])])


def test_raising_reward_is_a_rollout_error_not_zero() -> None:
    def broken_reward(calls):
        raise KeyError("missing")

    async def go():
        env = _Echo(Rubric([broken_reward]))
        async with env:
            return await run_rollout(env, ScriptedPolicy(_player), {"prompt": "hi", "plan": [{"text": "a"}]})

    t = asyncio.run(go())
    assert t.error and "broken_reward" in t.error and "KeyError" in t.error
    assert t.rewards == {}


def test_env_tool_and_call_match_metrics() -> None:
    def loud(calls):
        return float(any("A A" in c.result for c in calls))

    async def go(task):
        env = _Echo(Rubric([loud]))
        async with env:
            assert [t["function"]["name"] for t in env.model_tools()] == ["shout"]
            return await run_rollout(env, ScriptedPolicy(_player), task)

    exp = [{"name": "shout", "arguments": {"text": ["a"], "times": [2, ""]}}]
    t = asyncio.run(go({"prompt": "x", "plan": [{"text": "a", "times": 2}], "expected_calls": exp}))
    assert t.error is None and t.reward == 1.0 and t.metrics["call_match"] == 1.0 and t.calls[0].call_match is True
    t = asyncio.run(go({"prompt": "x", "plan": [{"text": "b"}], "expected_calls": exp}))
    assert t.metrics["call_match"] == 0.0 and t.calls[0].call_match is False
    t = asyncio.run(go({"prompt": "x", "plan": [{"text": "a"}, {"text": "a"}], "expected_calls": exp}))
    assert t.metrics["call_match"] == 0.0 and [c.call_match for c in t.calls] == [True, False]
    t = asyncio.run(go({"prompt": "x", "plan": [], "expected_calls": []}))
    assert t.metrics["abstain_ok"] == 1.0 and "call_match" not in t.metrics
    t = asyncio.run(go({"prompt": "x", "plan": [{"text": "a"}], "expected_calls": []}))
    assert t.metrics["abstain_ok"] == 0.0
    t = asyncio.run(go({"prompt": "x", "plan": [{"text": "a"}]}))
    assert "call_match" not in t.metrics and "abstain_ok" not in t.metrics and t.calls[0].call_match is None
    # an env tool that raises: an error shown to the model, not a rollout error
    t = asyncio.run(go({"prompt": "x", "plan": [{"text": "a", "times": 9}]}))
    assert t.error is None and not t.calls[0].exec_ok and "too loud" in t.messages[-2]["content"]
    t = asyncio.run(go({"prompt": "x", "plan": [{"text": "a", "times": "many"}]}))
    assert not t.calls[0].args_ok and "integer" in t.calls[0].error


def test_pass_at_k_by_hand() -> None:
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(5, 0, 3) == 0.0 and pass_at_k(5, 3, 3) == 1.0  # n - c < k: one success is certain
    assert pass_hat_k(5, 2, 2) == pytest.approx(1 / 10)  # C(2,2)/C(5,2)
    assert pass_hat_k(4, 4, 4) == 1.0 and pass_hat_k(4, 3, 4) == 0.0
    assert math.isnan(pass_hat_k(2, 2, 3))


def test_mean_ci_by_hand() -> None:
    r = mean_ci([1.0, 2.0, 3.0])
    assert r["mean"] == 2.0 and r["n"] == 3 and r["ci95"] == pytest.approx(1.96 * 1 / math.sqrt(3))
    assert r["lo"] == pytest.approx(2.0 - r["ci95"]) and r["hi"] == pytest.approx(2.0 + r["ci95"])
    assert mean_ci([5.0]) == {"mean": 5.0, "ci95": 0.0, "n": 1, "lo": 5.0, "hi": 5.0}
    assert math.isnan(mean_ci([])["mean"])


def test_clustered_interval_by_hand() -> None:
    # one sample per cluster: Wilson's interval at n - 1 (the variance's C / (C - 1) factor)
    p, lo, hi = clustered_interval([(1, 1)] * 30 + [(0, 1)] * 70)
    assert p == pytest.approx(0.3) and (lo, hi) == pytest.approx(wilson(0.3 * 99, 99))
    # each sample counted twice (two models that answer every task alike): the same interval, not a narrower one
    assert clustered_interval([(2, 2)] * 30 + [(0, 2)] * 70) == pytest.approx((p, lo, hi))
    assert wilson(60, 200)[1] - wilson(60, 200)[0] < 0.8 * (hi - lo)
    # clusters that all hold the same rate: no spread between them, so no narrower than the samples independent
    assert clustered_interval([(1, 2)] * 50) == pytest.approx((0.5, *wilson(50, 100)))
    # at 0 %: not empty, each cluster one sample
    assert clustered_interval([(0, 3)] * 10) == pytest.approx((0.0, *wilson(0, 10)))
    assert all(math.isnan(v) for v in clustered_interval([(1, 1)])) and math.isnan(clustered_interval([])[0])


def test_rates_get_wilson_intervals() -> None:
    # 8 of 10: Wilson 95 % interval (0.4902, 0.9433), by the textbook formula
    r = mean_ci([1.0] * 8 + [0.0] * 2)
    assert (r["lo"], r["hi"]) == (pytest.approx(0.4902, abs=1e-4), pytest.approx(0.9433, abs=1e-4))
    # 100 % of 50 is not a zero-width interval (the normal approximation would say [1, 1])
    full = mean_ci([1.0] * 50)
    assert full["ci95"] == 0.0 and full["lo"] == pytest.approx(0.9287, abs=1e-4) and full["hi"] == 1.0
    assert wilson(0, 20)[0] == 0.0 and wilson(0, 20)[1] == pytest.approx(0.1611, abs=1e-4)


def test_breakdown_groups_by_task_field() -> None:
    ts = [_traj(i, 0, float(i % 2)) for i in range(6)]
    for i, t in enumerate(ts):
        t.task = {"level": "hard" if i < 2 else "easy", **({"n": i} if i else {})}
        t.metrics = {"solved": float(i % 2)} if i != 5 else {}
    by = breakdown(ts, ["level", "n"])
    assert by["level"]["hard"]["n"] == 2 and by["level"]["easy"]["n"] == 4
    assert by["level"]["easy"]["reward"]["mean"] == 0.5
    assert by["level"]["easy"]["solved"]["n"] == 3  # the rollout without the metric is left out of its mean
    assert list(by["n"]) == ["1", "2", "3", "4", "5"]  # numeric order, the task without the field left out


def _traj(ex, r, reward, error=None, calls=()):
    return Trajectory(example_id=ex, rollout_index=r, reward=reward, error=error, rewards={"w": reward},
                      metrics={"win": float(reward == 1), "draw": 0.0, "loss": float(reward == 0)},
                      calls=list(calls), stop_reason="done")


def test_summarize() -> None:
    ok = CallRecord(0, "move", {}, True, True, True, True)
    bad = CallRecord(0, "move", {}, True, True, False, False, error="x")
    other = CallRecord(0, "look", None, False, False, False, False)
    trajs = [_traj(0, 0, 1.0, calls=[ok, bad]), _traj(0, 1, 0.0), _traj(1, 0, 1.0, calls=[other]), _traj(1, 1, 1.0),
             _traj(2, 0, 0.0, error="ToolCallError: boom")]
    s = summarize(trajs)
    assert s["rollouts"] == 5 and s["errors"] == 1 and s["error_kinds"] == {"ToolCallError": 1}
    assert s["error_rate"] == pytest.approx(0.2) and s["error_rate_ci"]["lo"] < 0.2 < s["error_rate_ci"]["hi"]
    # every rollout counts, the errored one as a failure at reward 0
    assert s["reward"]["mean"] == pytest.approx(0.6) and s["reward"]["n"] == 5
    assert s["reward_finished"]["mean"] == pytest.approx(0.75) and s["reward_finished"]["n"] == 4
    assert s["rewards"]["w"]["n"] == 4  # a reward function's mean: over the rollouts that produced it
    assert s["pass_at_k"]["1"] == pytest.approx((0.5 + 1.0 + 0.0) / 3)
    assert s["outcomes"] == pytest.approx({"win": 0.6, "draw": 0.0, "loss": 0.4})  # the errored one is a loss
    assert s["stop_reasons"] == {"done": 4, "error": 1}
    even = summarize(trajs[:4] + [_traj(2, 0, 1.0), _traj(2, 1, 0.0, error="KeyError: x")])
    assert even["pass_at_k"]["2"] == pytest.approx(1.0) and even["pass_hat_k"]["2"] == pytest.approx(1 / 3)
    acc = tool_accuracy(trajs)
    assert acc["*"]["calls"] == 3 and acc["*"]["exec_ok"] == pytest.approx(1 / 3)
    assert acc["move"]["args_ok"] == 0.5 and acc["look"]["parse_ok"] == 0.0


def test_metric_may_not_apply_but_a_reward_must() -> None:
    def only_even(task):  # type: ignore[no-untyped-def]
        return None if task["i"] % 2 else 1.0

    rub = Rubric([(only_even, 0.0)])
    _, metrics, _ = asyncio.run(rub.score(task={"i": 1}))
    assert "only_even" not in metrics
    _, metrics, _ = asyncio.run(rub.score(task={"i": 2}))
    assert metrics == {"only_even": 1.0}
    with pytest.raises(RewardError, match="only_even"):
        asyncio.run(Rubric([(only_even, 1.0)]).score(task={"i": 1}))


def test_one_errored_rollout_of_five_is_a_failure_not_left_out() -> None:
    """Issue 30: with 1 of 5 rollouts errored the mean was 1.0 (n = 4) and pass@1 1.0; it is 0.8 over all five."""
    trajs = [_traj(i, 0, 1.0) for i in range(4)] + [_traj(4, 0, 0.0, error="KeyError: 'x'")]
    s = summarize(trajs)
    assert s["reward"]["mean"] == pytest.approx(0.8) and s["reward"]["n"] == 5
    assert s["pass_at_k"]["1"] == pytest.approx(0.8)
    assert s["reward"]["lo"] < 0.8 < s["reward"]["hi"] <= 1.0  # a rate: the Wilson interval over all five
    floor = summarize(trajs, error_reward=-1.0)  # an env whose rewards go below 0 sets its floor
    assert floor["reward"]["mean"] == pytest.approx(0.6) and floor["error_reward"] == -1.0


def test_all_errored_is_a_number_not_nan() -> None:
    s = summarize([_traj(i, 0, 0.0, error="TypeError: bad") for i in range(10)])
    assert s["errors"] == 10 and s["error_rate"] == 1.0 and s["reward"]["mean"] == 0.0
    assert s["pass_at_k"]["1"] == 0.0 and s["reward_finished"]["n"] == 0


def test_breakdown_counts_errored_rollouts() -> None:
    ts = [_traj(i, 0, 1.0) for i in range(4)]
    for i, t in enumerate(ts):
        t.task = {"kind": "a" if i < 2 else "b"}
    ts[3].error = "ToolCallError: boom"
    by = breakdown(ts, ["kind"])
    assert by["kind"]["a"]["errors"] == 0 and by["kind"]["a"]["reward"]["mean"] == 1.0
    assert by["kind"]["b"]["n"] == 2 and by["kind"]["b"]["errors"] == 1 and by["kind"]["b"]["reward"]["mean"] == 0.5
