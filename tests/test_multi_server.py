"""Several MCP servers in one env (`[[servers]]`, `ServerBinding`, `MultiProvider`): the union of their tools,
calls routed by name (with optional prefixes), tool-call accuracy per server. Real third-party servers over stdio:
`mcp-server-time` (PyPI, the `examples` extra) and the npm `server-everything` (`examples/npm`, installed by
setup.sh); those tests skip without them. The clash test uses the suite's own stdio server."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from toolgym import ScriptedPolicy, ServerSpec, StatefulToolEnv, load_env, run_rollouts
from toolgym.mcp_bridge import ServerBinding
from toolgym.policies.scripted import call
from toolgym.stats import summarize
from toolgym.types import AssistantTurn

from tg_testutil import FLAKY
from tg_testutil import MULTI_SERVER_ENV as ENV
from tg_testutil import need_multi_servers as need_servers


def _run(env: StatefulToolEnv, policy: Any, tasks: list[dict[str, Any]]) -> list[Any]:
    async def go() -> list[Any]:
        await env.start()
        try:
            return await run_rollouts(env, policy, [(i, 0, t) for i, t in enumerate(tasks)], 4)
        finally:
            await env.aclose()

    return asyncio.run(go())


@need_servers
def test_reference_player_scores_full_marks_across_both_servers() -> None:
    env = load_env(str(ENV), tasks="heldout.jsonl")
    tasks = env.build_dataset(24)
    assert {t["kind"] for t in tasks} == {"time", "sum", "both", "none"}
    trajs = _run(env, env.scripted_players()["reference"](env), tasks)
    assert all(t.error is None for t in trajs)
    assert [t.rewards["correct"] for t in trajs] == [1.0] * 24 and [t.rewards["call_match"] for t in trajs] == [1.0] * 24
    servers = {c.name: c.server for t in trajs for c in t.calls}
    assert servers == {"convert_time": "time", "get-sum": "everything"}  # each call went to the server offering it
    by_server = summarize(trajs)["tool_accuracy_by_server"]
    assert by_server["time"]["calls"] == 12 and by_server["everything"]["calls"] == 12  # 6 time, 6 sum, 6 both


@need_servers
def test_unknown_or_hidden_tools_are_counted_and_abstention_is_scored() -> None:
    env = load_env(str(ENV), tasks="heldout.jsonl")
    tasks = env.build_dataset(4)  # one of each kind: time, sum, both, none
    bad = ["get_current_time", "echo", "no_such_tool"]  # hidden on time, not visible on everything, nowhere

    def act(messages: list[dict[str, Any]], memory: dict[str, Any]) -> AssistantTurn:
        step = memory.setdefault("step", 0)
        memory["step"] = step + 1
        if step < len(bad):
            return AssistantTurn(content="", tool_calls=[call(bad[step], message="hi", timezone="UTC")])
        if step == len(bad):  # then a good call: the rollout went on after the bad ones
            return AssistantTurn(content="", tool_calls=[call("get-sum", a=1, b=2)])
        return AssistantTurn(content=f"<answer>{memory['task']['answer']}</answer>")

    env.max_turns = 6
    trajs = _run(env, ScriptedPolicy(act, "scripted:bad"), tasks)
    for t in trajs:
        assert t.error is None and [c.name_ok for c in t.calls] == [False, False, False, True]
        assert t.calls[-1].exec_ok and t.calls[-1].server == "everything" and t.calls[0].server is None
        assert t.rewards["correct"] == 1.0 and t.rewards["call_match"] == 0.0
    none = next(t for t in trajs if t.task["kind"] == "none")
    assert none.metrics["abstain_ok"] == 0.0  # a call on a no-tool task is a failure
    acc = summarize(trajs)["tool_accuracy_by_server"]
    assert acc["<none>"]["calls"] == 12 and acc["<none>"]["name_ok"] == 0.0 and acc["everything"]["name_ok"] == 1.0


def _binding(name: str, prefix: str = "") -> ServerBinding:
    return ServerBinding(name, ServerSpec.stdio([sys.executable, str(FLAKY)]), "shared", prefix)


class _Two(StatefulToolEnv):
    name = "two"
    max_turns = 2

    def build_dataset(self, n: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
        return [{"prompt": "go"}]


def test_clashing_tool_names_need_a_prefix_and_prefixes_route() -> None:
    with pytest.raises(ValueError, match="tool 'echo' is offered by servers 'a' and 'b': give one of them a prefix"):
        asyncio.run(_Two(servers=[_binding("a"), _binding("b")]).start())
    env = _Two(servers=[_binding("a"), _binding("b", prefix="b_")])

    def act(messages: list[dict[str, Any]], memory: dict[str, Any]) -> AssistantTurn:
        if memory.setdefault("n", 0) == 0:
            memory["n"] = 1
            return AssistantTurn(content="", tool_calls=[call("echo", text="x"), call("b_echo", text="y"),
                                                         call("b_pid"), call("pid")])
        return AssistantTurn(content="done")

    (t,) = _run(env, ScriptedPolicy(act, "scripted:two"), env.build_dataset())
    assert t.error is None and [c.server for c in t.calls] == ["a", "b", "b", "a"]
    assert [c.result for c in t.calls[:2]] == ["x", "y"]
    assert t.calls[2].result != t.calls[3].result  # two different server processes
    assert {"echo", "b_echo", "pid", "b_pid"} <= {s["function"]["name"] for s in env.model_tools()}


def test_config_needs_one_server_section(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text('{"prompt": "go"}\n')
    cfg = tmp_path / "env.toml"
    cfg.write_text('[tasks]\npath = "t.jsonl"\n[[rewards]]\ntype = "call_match"\n')
    with pytest.raises(ValueError, match=r"either one \[server\] or several \[\[servers\]\]"):
        load_env(str(cfg))
    cfg.write_text(cfg.read_text() + f'[[servers]]\nname = "a"\ncommand = ["{sys.executable}", "{FLAKY}"]\n'
                                      f'[[servers]]\nname = "a"\ncommand = ["{sys.executable}", "{FLAKY}"]\n')
    with pytest.raises(ValueError, match="distinct names"):
        asyncio.run(load_env(str(cfg)).start())


@need_servers
def test_reference_teacher_can_answer_concisely_for_sft_data() -> None:
    from toolgym import load_policy

    env = load_env(str(ENV))
    tasks = env.build_dataset(4)
    trajs = _run(env, load_policy("scripted:reference", env, answer_from="task"), tasks)
    for t in trajs:
        assert t.messages[-1]["content"] == f"<answer>{t.task['answer']}</answer>" and t.rewards["correct"] == 1.0
    assert any(t.calls and t.calls[-1].result != t.task["answer"] for t in trajs)  # not the raw tool output
    with pytest.raises(ValueError, match="answer_from must be"):
        load_policy("scripted:reference", env, answer_from="oracle")


@need_servers
def test_reference_teacher_quotes_the_result_line_that_holds_the_answer() -> None:
    """answer_from="quote": the answer turn first copies the last line of the tool result holding the answer (the
    target zone's datetime for a time task, not the source's), then answers; tasks without a call just answer."""
    from toolgym import load_policy

    env = load_env(str(ENV))
    tasks = env.build_dataset(8)
    trajs = _run(env, load_policy("scripted:reference", env, answer_from="quote"), tasks)
    for t in trajs:
        quote, _, answer = t.messages[-1]["content"].rpartition("\n")
        assert answer == f"<answer>{t.task['answer']}</answer>" and t.rewards["correct"] == 1.0
        if t.calls:
            assert quote and quote in t.calls[-1].result and t.task["answer"] in quote
        else:
            assert quote == ""
        if t.task["kind"] == "time":
            target = t.calls[-1].result.split('"target"')[1]
            assert quote in target


def test_evidence_line_is_the_last_line_holding_the_answer() -> None:
    from toolgym.config_env import evidence_line

    out = 'a: 13:00\n  "datetime": "2026-01-01T13:00:00+08:00",\nend'
    assert evidence_line(out, "13:00") == '"datetime": "2026-01-01T13:00:00+08:00",'
    assert evidence_line(out, "14:00") is None and evidence_line(out, "") is None


def test_heldout_split_shares_no_prompt_or_arguments_with_training(tmp_path: Path) -> None:
    """The held-out split measures unseen argument combinations: no held-out prompt, call-argument set, zone pair,
    operand pair or word occurs in a 4,000-task training set (the size run.sh trains on)."""
    import json
    import subprocess

    subprocess.run([sys.executable, str(ENV.parent / "make_tasks.py"), "4000", "240", str(tmp_path)], check=True,
                   capture_output=True)
    train = [json.loads(x) for x in (tmp_path / "tasks.jsonl").read_text().splitlines()]
    held = [json.loads(x) for x in (tmp_path / "heldout.jsonl").read_text().splitlines()]
    assert len(train) == 4000 and len(held) == 240
    assert {t["kind"] for t in held} == {"time", "sum", "both", "none"}

    def keys(t: dict[str, Any]) -> set[str]:
        out = {t["prompt"]} | {json.dumps(c["arguments"], sort_keys=True) for c in t["expected_calls"]}
        for c in t["expected_calls"]:
            a = c["arguments"]
            out.add(f"zones {a['source_timezone']} {a['target_timezone']}" if c["name"] == "convert_time"
                    else f"operands {a['a']} {a['b']}")
        if not t["expected_calls"]:
            out.add(f"word {t['answer']}")
        return out

    seen = set().union(*(keys(t) for t in train))
    leaks = [t["id"] for t in held if keys(t) & seen]
    assert leaks == []
    # the committed files are what the generator writes (defaults: 800 training tasks)
    subprocess.run([sys.executable, str(ENV.parent / "make_tasks.py"), "800", "240", str(tmp_path)], check=True,
                   capture_output=True)
    for name in ("tasks.jsonl", "heldout.jsonl"):
        assert (tmp_path / name).read_text() == (ENV.parent / name).read_text()
