"""`examples/own_server/served_check.py`: held-out tasks sent to `toolgym serve` as an MCP client sends them, and the
config env's `[env.sampling]` that makes a served model sample as the recipe's eval did.

The end-to-end test serves the real npm filesystem server's env through a real `toolgym serve` process over stdio;
the model behind it is a **fake**: `tests/servers/openai_stub.py`, an OpenAI-compatible endpoint answering with
each task's expected calls (a wrong path for some tasks), because no model that makes known calls can be trained
within a test. Skipped without node and the npm servers (setup.sh installs them)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from toolgym.registry import load_env
from toolgym.train.recipe import EVAL_SAMPLING, derive_config, generated_rewards

ROOT = Path(__file__).resolve().parents[1]
OWN = ROOT / "examples" / "own_server"
FS = ROOT / "examples" / "npm" / "node_modules" / ".bin" / "mcp-server-filesystem"
need_fs = pytest.mark.skipif(not FS.exists() or shutil.which("node") is None,
                             reason="npm filesystem server not installed")

spec = importlib.util.spec_from_file_location("served_check", OWN / "served_check.py")
assert spec and spec.loader
sc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sc)


def _call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"turn": 0, "tool": tool, "arguments": arguments, "ok": True, "result": ""}


EXPECTED = [{"name": "read_text_file", "arguments": {"path": ["a/b.txt"]}},
            {"name": "move_file", "arguments": {"source": ["a/b.txt"], "destination": ["c.txt"]}}]


def test_a_trace_matches_only_the_expected_calls_in_order():
    right = [_call("read_text_file", path="a/b.txt"), _call("move_file", source="a/b.txt", destination="c.txt")]
    assert sc.trace_matches(right, EXPECTED)
    assert not sc.trace_matches(right[::-1], EXPECTED)
    assert not sc.trace_matches(right[:1], EXPECTED)                                  # a call missing
    assert not sc.trace_matches([*right, _call("list_directory", path=".")], EXPECTED)  # an extra call
    assert not sc.trace_matches([right[0], _call("move_file", source="a/b.txt", destination="d.txt")], EXPECTED)
    assert not sc.trace_matches([{**right[0], "arguments": None}, right[1]], EXPECTED)  # did not parse
    assert sc.trace_matches([], []) and not sc.trace_matches(right[:1], [])


def test_an_errored_request_is_a_failure_in_its_rate():
    tasks = [{"expected_calls": EXPECTED[:1]}, {"expected_calls": EXPECTED[:1]}, {"expected_calls": []},
             {"expected_calls": []}]
    results = [{"trace": [_call("read_text_file", path="a/b.txt")]}, None, {"trace": []}, None]
    out = sc.score(tasks, results)
    assert out["call_match"]["rate"] == 0.5 and out["call_match"]["n"] == 2
    assert out["abstain_ok"]["rate"] == 0.5 and out["errors"] == 2
    lo, hi = out["call_match"]["ci95"]
    assert 0 < lo < 0.5 < hi < 1


def test_the_recipes_env_config_samples_as_its_eval_and_a_users_own_setting_wins(tmp_path):
    dest = derive_config(OWN / "env.toml", tmp_path / "env.json", OWN / "tasks.jsonl", generated_rewards("call_match"),
                         sampling=EVAL_SAMPLING)
    assert json.loads(dest.read_text())["env"]["sampling"] == EVAL_SAMPLING
    assert load_env(str(dest)).default_policy_options == EVAL_SAMPLING
    mine = json.loads(dest.read_text())
    mine["env"]["sampling"] = {"temperature": 0.7}
    (tmp_path / "mine.json").write_text(json.dumps(mine))
    again = derive_config(tmp_path / "mine.json", tmp_path / "again.json", OWN / "tasks.jsonl", sampling=EVAL_SAMPLING)
    assert json.loads(again.read_text())["env"]["sampling"] == {"temperature": 0.7}
    from toolgym.cli import policy_choice

    uri, options = policy_choice(load_env(str(again)), "hf:some/model", {"temperature": None, "max_tokens": 64})
    assert uri == "hf:some/model" and options == {"temperature": 0.7, "max_tokens": 64}  # a flag beats the config


@pytest.mark.parametrize("bad", [{"temperature": -1}, {"top_p": 0}, {"max_tokens": 0}, {"temprature": 0}])
def test_bad_sampling_in_a_config_is_an_error(tmp_path, bad):
    raw = json.loads(derive_config(OWN / "env.toml", tmp_path / "env.json", OWN / "tasks.jsonl").read_text())
    raw["env"]["sampling"] = bad
    (tmp_path / "bad.json").write_text(json.dumps(raw))
    with pytest.raises(Exception, match="sampling"):
        load_env(str(tmp_path / "bad.json"))


@need_fs
def test_held_out_tasks_sent_through_toolgym_serve_are_scored_by_their_traces(tmp_path, capsys, monkeypatch):
    from openai_stub import StubEndpoint

    monkeypatch.setenv("OPENAI_API_KEY", "stub")  # the served process's openai policy reads it
    tasks = [json.loads(line) for line in (OWN / "tasks.heldout.jsonl").read_text().splitlines()[:10]]
    tool = [t for t in tasks if t["expected_calls"]]
    assert len(tool) >= 6 and len(tool) < len(tasks)
    wrong = {t["prompt"] for t in tool[::3]}  # every third tool task gets a wrong path in its first call
    by_prompt = {t["prompt"]: t for t in tasks}

    def respond(_n: int, body: dict[str, Any]) -> dict[str, Any]:
        prompt = next(m["content"] for m in body["messages"] if m["role"] == "user")
        task = by_prompt[prompt]
        done = sum(m["role"] == "tool" for m in body["messages"])
        msg: dict[str, Any] = {"role": "assistant", "content": "<answer>done</answer>"}
        if done < len(task["expected_calls"]):
            call = task["expected_calls"][done]
            args = {k: (v[0] if isinstance(v, list) else v) for k, v in call["arguments"].items()}
            if prompt in wrong and done == 0:
                args = {k: (v + "-x" if isinstance(v, str) else v) for k, v in args.items()}
            msg = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{done}", "type": "function",
                 "function": {"name": call["name"], "arguments": json.dumps(args)}}]}
        return {"id": "x", "object": "chat.completion", "model": "stub",
                "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]}

    env_json = derive_config(OWN / "env.toml", tmp_path / "env.json", OWN / "tasks.jsonl",
                             generated_rewards("call_match"), sampling=EVAL_SAMPLING)
    (tmp_path / "heldout.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    with StubEndpoint(respond=respond) as stub:
        rc = sc.main([str(env_json), "-m", "openai:stub", "--tasks", str(tmp_path / "heldout.jsonl"),
                      "-o", str(tmp_path / "out.json"), "--", "--base-url", stub.url])
    out = json.loads((tmp_path / "out.json").read_text())
    assert rc == 0 and out["errors"] == 0, out["error_messages"]
    assert out["call_match"]["n"] == len(tool)
    assert out["call_match"]["rate"] == (len(tool) - len(wrong)) / len(tool)
    assert out["abstain_ok"] == {**out["abstain_ok"], "rate": 1.0, "n": len(tasks) - len(tool)}
    assert stub.bodies and all(b.get("temperature") == 0.0 for b in stub.bodies)  # [env.sampling] reached the model
    assert "call_match:" in capsys.readouterr().out


def test_a_server_that_does_not_start_is_a_clear_error_and_exit_2(tmp_path, capsys):
    env_json = derive_config(OWN / "env.toml", tmp_path / "env.json", OWN / "tasks.jsonl")
    (tmp_path / "t.jsonl").write_text((OWN / "tasks.heldout.jsonl").read_text().splitlines()[0] + "\n")
    rc = sc.main([str(env_json), "-m", "hf:/no/such/model", "--tasks", str(tmp_path / "t.jsonl")])
    assert rc == 2 and "did not answer" in capsys.readouterr().err
