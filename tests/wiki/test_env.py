"""The wiki env: the reference player answers every bundled question through the tools, a random player scores
near 0, the rewards (exact match, F1, grounding, turn cost) score what they claim, and `toolgym eval wiki` runs."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from toolgym_wiki import WikiEnv, exact_match, f1, grounded, load_questions, token_f1
from typer.testing import CliRunner

from toolgym import AssistantTurn, ScriptedPolicy, load_policy
from toolgym.cli import app
from toolgym.policies.scripted import call
from toolgym.rollout import run_rollouts
from toolgym.types import CallRecord

pytestmark = pytest.mark.anyio


async def _run(env: WikiEnv, policy, tasks):
    async with env:
        return await run_rollouts(env, policy, [(i, 0, t) for i, t in enumerate(tasks)], concurrency=16)


@pytest.fixture(scope="module")
def bundled():
    return WikiEnv(transport="inprocess").build_dataset()


async def test_reference_player_answers_every_bundled_question(bundled) -> None:
    env = WikiEnv(transport="inprocess")
    trajs = await _run(env, load_policy("scripted:reference", env), bundled)
    assert len(trajs) == 300 and all(t.error is None for t in trajs)
    failed = [t.task["question"] for t in trajs if t.rewards.get("exact_match") != 1.0]
    assert not failed, failed[:5]
    assert all(t.metrics["grounded"] == 1.0 for t in trajs)  # the answer came from a page it read
    assert all(t.metrics["tool_exec_ok"] == 1.0 for t in trajs)
    by_hops = {h: statistics.mean(len(t.calls) for t in trajs if t.task["hops"] == h) for h in (1, 2, 3)}
    assert by_hops[1] < by_hops[2] < by_hops[3]  # it really walks the chain, page by page


async def test_random_player_scores_near_zero(bundled) -> None:
    env = WikiEnv(transport="inprocess")
    trajs = await _run(env, load_policy("scripted:random", env, seed=1), bundled)
    assert all(t.error is None for t in trajs)
    assert statistics.mean(t.reward for t in trajs) < 0.05


async def test_reference_over_stdio(bundled) -> None:
    env = WikiEnv(transport="stdio")
    trajs = await _run(env, load_policy("scripted:reference", env), bundled[:12])
    assert [t.reward for t in trajs] == [1.0] * 12


async def test_answer_from_memory_is_correct_but_not_grounded(bundled) -> None:
    """A player that knows the answer without reading gets exact match but no grounding."""
    def cheat(messages, mem):
        if len(messages) <= 2:
            return AssistantTurn(tool_calls=[call("search", query=mem["task"]["answer"])])
        return AssistantTurn(content=f"<answer>{mem['task']['answer']}</answer>")  # tagged answer, no tool

    env = WikiEnv(transport="inprocess")
    trajs = await _run(env, ScriptedPolicy(cheat, "cheat"), bundled[:9])
    assert all(t.rewards["exact_match"] == 1.0 for t in trajs)
    assert all(t.metrics["grounded"] == 0.0 for t in trajs)  # search snippets are not reading a page


def _rec(name: str, result: str, ok: bool = True) -> CallRecord:
    return CallRecord(turn=0, name=name, arguments={"title": "X"}, parse_ok=True, name_ok=True, args_ok=True,
                      exec_ok=ok, result=result)


def test_reward_functions() -> None:
    task = {"answer": "Vorsk Institute", "aliases": ["Vorsk Institute", "the Institute of Vorsk"]}
    st = {"answer": "the vorsk institute."}
    assert exact_match(st, task, []) == 1.0 and f1(st, task, []) == 1.0
    assert exact_match({"answer": "Vorsk"}, task, []) == 0.0
    assert f1({"answer": "Vorsk"}, task, []) == pytest.approx(2 / 3)
    assert token_f1("1850", "1851") == 0.0
    msgs = [{"role": "assistant", "content": "I think <answer>Institute of Vorsk</answer>"}]
    assert exact_match({}, task, msgs) == 1.0  # tagged answer, alias
    assert exact_match({}, task, [{"role": "assistant", "content": "Vorsk Institute"}]) == 0.0  # no tag, no tool
    read = [_rec("read_section", "## Foo — History\nFoo was founded by the Vorsk Institute."),
            _rec("search", "1. Bar (section: X)\n Vorsk Instituteship")]
    assert grounded(st, [], read) == 1.0
    assert grounded({"answer": "Vorsk Instituteship"}, [], read) == 0.0  # only in a search snippet
    assert grounded({"answer": "Vorsk Institute"}, [], [_rec("open_page", "Vorsk Institute", ok=False)]) == 0.0
    assert grounded({"answer": "Vorsk"}, [], read) == 1.0  # grounded, though not correct: a separate metric


async def test_turn_penalty_and_f1_weights(bundled) -> None:
    env = WikiEnv(transport="inprocess", turn_penalty=0.01, f1_weight=0.5)
    trajs = await _run(env, load_policy("scripted:reference", env), bundled[:3])
    for t in trajs:
        turns = len(t.turns)
        assert t.rewards["turn_cost"] == -turns
        assert t.reward == pytest.approx(1.0 + 0.5 - 0.01 * turns)


def test_dataset_seeds_and_user_questions(tmp_path: Path) -> None:
    env = WikiEnv(transport="inprocess")
    assert env.build_dataset(12) == env.build_dataset(12)
    other = env.build_dataset(12, seed=1)
    assert [r["question"] for r in other] != [r["question"] for r in env.build_dataset(12)]
    assert all(r["prompt"] == r["question"] and r["difficulty"] in {"easy", "medium", "hard"} for r in other)
    qf = tmp_path / "q.jsonl"
    qf.write_text(json.dumps({"question": "Who?", "answer": "Ann", "aliases": "Anne"}) + "\n\n"
                  + json.dumps({"prompt": "When?", "answer": 1901, "id": "x"}) + "\n")
    rows = load_questions(qf)
    assert [(r["id"], r["prompt"], r["answer"], r["aliases"]) for r in rows] == [
        ("q0", "Who?", "Ann", ["Anne"]), ("x", "When?", "1901", [])]
    assert WikiEnv(transport="inprocess", questions=str(qf)).build_dataset(1)[0]["answer"] == "Ann"
    qf.write_text(json.dumps({"question": "no answer"}) + "\n")
    with pytest.raises(ValueError, match="needs 'question' and 'answer'"):
        load_questions(qf)


def test_toolgym_eval_wiki_cli(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["eval", "wiki", "-n", "9", "-o", str(out), "-a", "transport=inprocess"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    recs = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines() if x.strip().startswith("{")]
    recs = [r for r in recs if "reward" in r]
    assert len(recs) == 9 and all(r["reward"] == 1.0 for r in recs), summary
