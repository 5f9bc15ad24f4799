"""Config-only environments (`toolgym/config_env.py`): a TOML + JSONL wrapping the flaky test server over stdio,
each reward type, and clear errors for invalid configs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tg_testutil import FLAKY, children, wait_no_new_children

from toolgym import AssistantTurn, ScriptedPolicy, load_env
from toolgym.policies.scripted import call
from toolgym.rollout import run_rollouts

CONFIG = f"""
name = "flaky-config"
[server]
command = [{json.dumps(__import__("sys").executable)}, {json.dumps(str(FLAKY))}]
scope = "shared"
[env]
system_prompt = "Use the tools. Answer inside <answer></answer>."
max_turns = 5
hidden_tools = ["crash", "hang", "get_value", "pid", "log", "write_file", "list_files", "block", "env_length"]
tool_timeout = 5
[tasks]
path = "tasks.jsonl"
[[rewards]]
type = "answer"
mode = "numeric"
weight = 1.0
[[rewards]]
type = "call_match"
weight = 0.0
[[rewards]]
type = "called"
name = "called_add"
tool = "add"
args = {{a = "{{a}}"}}
weight = 0.5
[[rewards]]
type = "tool_result"
name = "stored"
tool = "get_value"
args = {{key = "{{key}}"}}
field = "value"
weight = 0.25
"""

TASKS = [
    {"prompt": "Add 2 and 3, store k1=v1.", "a": 2, "b": 3, "answer": 5, "key": "k1", "value": "v1",
     "expected_calls": [{"name": "add", "arguments": {"a": [2], "b": [3.0]}},
                        {"name": "set_value", "arguments": {"key": ["k1"], "value": ["v1"]}}]},
    {"prompt": "Add 10 and 0.5, store k2=v2.", "a": 10, "b": 0.5, "answer": 10.5, "key": "k2", "value": "v2",
     "expected_calls": [{"name": "add", "arguments": {"a": [10], "b": [0.5]}},
                        {"name": "set_value", "arguments": {"key": ["k2"], "value": ["v2"]}}]},
]


def _write(tmp_path: Path, config: str = CONFIG, tasks: list[dict[str, Any]] = TASKS) -> Path:
    (tmp_path / "tasks.jsonl").write_text("\n".join(json.dumps(t) for t in tasks) + "\n")
    path = tmp_path / "env.toml"
    path.write_text(config)
    return path


def _solver(wrong: bool):
    """Calls add and set_value from the task, then answers (the wrong way when `wrong`)."""

    def act(messages: list[dict[str, Any]], memory: dict[str, Any]) -> AssistantTurn:
        t, i = memory["task"], memory.setdefault("i", 0)
        memory["i"] += 1
        if i == 0:
            return AssistantTurn(tool_calls=[call("add", a=t["a"] + (1 if wrong else 0), b=t["b"])])
        if i == 1:
            return AssistantTurn(tool_calls=[call("set_value", key=t["key"], value="nope" if wrong else t["value"])])
        total = [m["content"] for m in messages if m["role"] == "tool"][0]
        return AssistantTurn(content=f"The sum is <answer>{total}</answer>")

    return act


@pytest.mark.anyio
async def test_config_env_rewards(tmp_path: Path) -> None:
    before = children()
    env = load_env(str(_write(tmp_path)))
    tasks = env.build_dataset()
    assert len(tasks) == 2 and env.name == "flaky-config"
    async with env:
        names = {t["function"]["name"] for t in env.model_tools()}
        assert names == {"echo", "add", "set_value", "fail", "sleep"}
        good = await run_rollouts(env, ScriptedPolicy(_solver(False)), [(i, 0, t) for i, t in enumerate(tasks)])
        bad = await run_rollouts(env, ScriptedPolicy(_solver(True)), [(i, 1, t) for i, t in enumerate(tasks)])
    for t in good:
        assert t.error is None, t.error
        assert t.rewards == {"answer": 1.0, "called_add": 1.0, "stored": 1.0}
        assert t.metrics["call_match"] == 1.0 and t.reward == pytest.approx(1.0 + 0.5 + 0.25)
        assert t.stop_reason == "no_tool_call" and t.messages[0]["role"] == "system"
    for t in bad:
        assert t.error is None, t.error
        assert t.rewards == {"answer": 0.0, "called_add": 0.0, "stored": 0.0} and t.metrics["call_match"] == 0.0
    assert not wait_no_new_children(before)


@pytest.mark.anyio
async def test_config_env_missing_task_field_is_a_named_error(tmp_path: Path) -> None:
    env = load_env(str(_write(tmp_path, tasks=[{k: v for k, v in TASKS[0].items() if k != "answer"}])))
    async with env:
        [t] = await run_rollouts(env, ScriptedPolicy(_solver(False)), [(0, 0, env.build_dataset()[0])])
    assert t.error and "'answer'" in t.error and "no field" in t.error


@pytest.mark.parametrize(("edit", "message"), [
    (lambda c: c.replace("[server]\ncommand", "[server]\nurl = 'http://x/mcp'\ncommand"), "exactly one of"),
    (lambda c: c.replace("max_turns = 5", "max_turns = 0"), "max_turns"),
    (lambda c: c.replace("tool_timeout = 5", "tool_timout = 5"),
     r"env.toml:\d+: env.tool_timout: unknown key \(did you mean 'tool_timeout'\?\)"),
    (lambda c: c.replace('type = "call_match"', 'type = "vibes"'), r"env.toml:\d+: rewards\[1\]\.type: Input"),
    (lambda c: c.replace('tool = "add"\n', ""), "needs `tool`"),
    (lambda c: c.split("[[rewards]]")[0], "rewards"),
    (lambda c: c.replace('[tasks]\npath = "tasks.jsonl"', ""), "tasks"),
])
def test_invalid_config_clear_error(tmp_path: Path, edit, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_env(str(_write(tmp_path, edit(CONFIG))))


def test_bad_task_file_and_missing_config(tmp_path: Path) -> None:
    path = _write(tmp_path)
    (tmp_path / "tasks.jsonl").write_text('{"prompt": "ok"}\n{"prompt": \n')
    with pytest.raises(ValueError, match=r"tasks.jsonl:2: not valid JSON"):
        load_env(str(path)).build_dataset()
    (tmp_path / "tasks.jsonl").write_text('{"question": "no prompt"}\n')
    with pytest.raises(ValueError, match=r"tasks.jsonl:1: each task needs a 'prompt'"):
        load_env(str(path)).build_dataset()
    with pytest.raises(FileNotFoundError, match="not found"):
        load_env(str(tmp_path / "missing.toml"))


HIDDEN = f"""
name = "flaky-hidden"
[server]
command = [{json.dumps(__import__("sys").executable)}, {json.dumps(str(FLAKY))}]
scope = "shared"
[env]
max_turns = 3
hidden_tools = ["crash", "hang", "pid", "log", "write_file", "list_files", "echo"]
[env.state]
slot = "key-{{key}}"
[env.hidden_args]
set_value = {{ key = "slot" }}
get_value = {{ key = "stamp" }}
[[setup]]
tool = "echo"
arguments = {{ text = "stamp-{{key}}" }}
save = "stamp"
[tasks]
path = "tasks.jsonl"
[[rewards]]
type = "tool_result"
name = "stored"
tool = "get_value"
args = {{key = "key-{{key}}"}}
field = "value"
weight = 1.0
"""


def test_config_hidden_args_come_from_env_state_and_saved_setup_results(tmp_path: Path) -> None:
    """`[env.hidden_args]` removes the arguments from the model's schema and fills them from `[env.state]` (task
    fields filled in) and from a `[[setup]]` call's `save`; the server receives them."""
    path = _write(tmp_path, HIDDEN)
    env = load_env(str(path))

    def act(messages: list[dict[str, Any]], memory: dict[str, Any]) -> AssistantTurn:
        i = memory.setdefault("i", 0)
        memory["i"] += 1
        if i == 0:
            return AssistantTurn(tool_calls=[call("set_value", value=memory["task"]["value"]), call("get_value")])
        return AssistantTurn(content="done")

    async def go():  # type: ignore[no-untyped-def]
        async with env:
            schemas = {t["function"]["name"]: t["function"]["parameters"] for t in env.model_tools()}
            trajs = await run_rollouts(env, ScriptedPolicy(act), [(i, 0, t) for i, t in enumerate(TASKS)])
        return schemas, trajs

    import asyncio

    schemas, trajs = asyncio.run(go())
    assert set(schemas["set_value"]["properties"]) == {"value"} and schemas["get_value"].get("properties") == {}
    for t, task in zip(trajs, TASKS, strict=True):
        assert t.error is None, t.error
        assert t.rewards["stored"] == 1.0  # set_value got key = state["slot"] = "key-<task key>"
        assert t.info["slot"] == f"key-{task['key']}" and t.info["stamp"] == f"stamp-{task['key']}"
        assert t.calls[1].result == ""  # get_value(key=state["stamp"]): nothing stored under the stamp


def test_a_hidden_arg_without_a_state_key_is_an_error_at_load(tmp_path: Path) -> None:
    path = _write(tmp_path, HIDDEN.replace('set_value = { key = "slot" }', 'set_value = { key = "slots" }'))
    with pytest.raises(ValueError, match=r"env\.toml:\d+: .*env\.hidden_args\.set_value: no state key 'slots'"):
        load_env(str(path))


def _keys(node: Any) -> set[str]:
    """Every key of a JSON value, except the names under `properties` (a property may be called "title")."""
    if isinstance(node, dict):
        out = set()
        for k, v in node.items():
            if k == "properties":
                for sub in v.values():
                    out |= _keys(sub)
            else:
                out |= {k} | _keys(v)
        return out
    return set().union(*(_keys(v) for v in node)) if isinstance(node, list) else set()


@pytest.mark.anyio
async def test_brief_tool_descriptions_shorten_what_the_model_sees_not_what_is_validated(tmp_path: Path) -> None:
    config = CONFIG.replace("tool_timeout = 5", 'tool_timeout = 5\ntool_descriptions = "brief"')
    env = load_env(str(_write(tmp_path, config)))
    (tmp_path / "full").mkdir()
    full_env = load_env(str(_write(tmp_path / "full")))
    assert env.tool_descriptions == "brief" and full_env.tool_descriptions == "full"
    async with env, full_env:
        brief, full = env.model_tools(), full_env.model_tools()
        assert [t["function"]["name"] for t in brief] == [t["function"]["name"] for t in full]
        assert "title" in _keys([t["function"]["parameters"] for t in full])  # the SDK titles every parameter
        assert not {"title", "$schema"} & _keys([t["function"]["parameters"] for t in brief])
        add = next(t["function"] for t in brief if t["function"]["name"] == "add")
        assert add["parameters"]["properties"]["a"] == {"type": "integer"}
        assert add["parameters"]["required"] == ["a", "b"]
        assert "title" in env.tool_schema("add")["properties"]["a"]  # validation keeps the server's schema
        tasks = env.build_dataset()
        good = await run_rollouts(env, ScriptedPolicy(_solver(False)), [(i, 0, t) for i, t in enumerate(tasks)])
    assert all(t.error is None and t.metrics["call_match"] == 1.0 for t in good)
    # the option is also an env option (-a tool_descriptions=brief) that overrides the config
    assert load_env(str(tmp_path / "full" / "env.toml"), tool_descriptions="brief").tool_descriptions == "brief"


@pytest.mark.anyio
async def test_config_env_call_similarity_reward(tmp_path: Path) -> None:
    """`type = "call_similarity"`: the expected calls score 1; calls with the right tools and one wrong value each
    (a number off, a string with nothing in common) score half."""
    config = CONFIG.replace('type = "call_match"\nweight = 0.0', 'type = "call_similarity"\nweight = 1.0')
    assert config != CONFIG
    env = load_env(str(_write(tmp_path, config)))
    tasks = env.build_dataset()
    async with env:
        good = await run_rollouts(env, ScriptedPolicy(_solver(False)), [(i, 0, t) for i, t in enumerate(tasks)])
        bad = await run_rollouts(env, ScriptedPolicy(_solver(True)), [(i, 1, t) for i, t in enumerate(tasks)])
    assert [t.rewards["call_similarity"] for t in good] == [1.0, 1.0]
    assert [t.rewards["call_similarity"] for t in bad] == [0.5, 0.5]
    assert all(t.metrics["call_match"] == 0.0 for t in bad)
