"""`toolgym export verifiers`: the exported package runs under verifiers' own local eval (`vf-eval`, verifiers 0.4.0,
subprocess runtime, `--no-push`, no platform account) in `.venv-verifiers` (verifiers pins `mcp==2.0.0`; create it
with `scripts/setup_verifiers_venv.sh`).

The model is scripted: a tiny OpenAI-compatible chat endpoint (stdlib HTTP server in a thread of this test
process, streaming and non-streaming) that replays moves decided from the request's messages — the task's expected
call then its answer, a guess without a tool, a call with a bad zone; for tic-tac-toe the minimax player shipped by
`toolgym_tictactoe`. verifiers' interception server, its null chat program (run by the exported harness), the
per-rollout Toolset process (proxying the env's real MCP server: `mcp-server-time`, `mcp-server-tictactoe` over
stdio) and its scorer all run for real; the assertions read the rewards verifiers wrote to `traces.jsonl`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from vf_testutil import TIME_ENV, ScriptedEndpoint, needs_time_server, needs_venv, text_of, vf_eval, vf_scores

@needs_time_server
def test_export_writes_a_verifiers_package(tmp_path: Path) -> None:
    from toolgym.export.verifiers import export_verifiers

    pkg_dir = export_verifiers(str(TIME_ENV), tmp_path / "pkg", n=3)
    assert pkg_dir.name == "time_conversion_vf"
    for f in ("__init__.py", "taskset.py", "toolset.py", "harness.py", "tasks.jsonl", "toolgym_export.json",
              "env/env.json", "env/tasks.jsonl"):
        assert (pkg_dir / f).is_file(), f
    assert (tmp_path / "pkg" / "pyproject.toml").is_file()
    spec = json.loads((pkg_dir / "toolgym_export.json").read_text())
    assert spec["tools"] == ["convert_time"] and spec["hidden_tools"] == ["get_current_time"]
    assert [(r["name"], r["weight"], r["runs_in"]) for r in spec["rewards"]] == [
        ("correct", 1.0, "scorer"), ("call_match", 0.0, "scorer"), ("used_tool", 0.0, "scorer")]
    rows = [json.loads(x) for x in (pkg_dir / "tasks.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and rows[0]["system_prompt"].startswith("You answer questions about time zones")
    assert rows[0]["prompt"] == [{"role": "user", "content": rows[0]["task"]["prompt"]}]
    with pytest.raises(FileExistsError):
        export_verifiers(str(TIME_ENV), tmp_path / "pkg", n=3)


@pytest.mark.slow
@needs_venv
@needs_time_server
def test_time_env_under_vf_eval(tmp_path: Path) -> None:
    from toolgym.export.verifiers import export_verifiers

    out = tmp_path / "pkg"
    pkg_dir = export_verifiers(str(TIME_ENV), out, n=3)
    tasks = [json.loads(x)["task"] for x in (pkg_dir / "tasks.jsonl").read_text().splitlines()]

    def plan(messages: list[dict[str, Any]]) -> dict[str, Any]:
        user = next(text_of(m["content"]) for m in messages if m["role"] == "user")
        i = next(i for i, t in enumerate(tasks) if t["prompt"] == user)
        called = any(m["role"] == "tool" for m in messages)
        expected = {k: v[0] for k, v in tasks[i]["expected_calls"][0]["arguments"].items()}
        if i == 0:  # the reference: the expected call, then the answer
            return {"tool_calls": [("convert_time", expected)]} if not called else {
                "content": f"<answer>{tasks[i]['answer']}</answer>"}
        if i == 1:  # a guess without the tool
            return {"content": "<answer>00:00</answer>"}
        # a failing call (unknown zone), then the right answer anyway
        return {"tool_calls": [("convert_time", {**expected, "source_timezone": "Nowhere/City"})]} if not called else {
            "content": f"<answer>{tasks[i]['answer']}</answer>"}

    endpoint = ScriptedEndpoint(plan)
    try:
        episodes = vf_eval(out, pkg_dir.name, 3, endpoint, tmp_path)
    finally:
        endpoint.close()
    assert [e["task"]["data"]["idx"] for e in episodes] == [0, 1, 2]
    # the model saw the visible tool only (get_current_time is hidden), under its own name
    tool_names = {t.get("function", t).get("name") for r in endpoint.requests for t in r.get("tools") or []}
    assert tool_names == {"convert_time"}

    r0, m0 = vf_scores(episodes[0])
    assert r0 == {"correct": 1.0}
    assert m0["call_match"] == 1.0 and m0["used_tool"] == 1.0 and m0["acc_tool_exec_ok"] == 1.0

    r1, m1 = vf_scores(episodes[1])
    assert r1 == {"correct": 0.0}
    assert m1["used_tool"] == 0.0 and m1["call_match"] == 0.0 and "acc_tool_exec_ok" not in m1

    r2, m2 = vf_scores(episodes[2])
    assert r2 == {"correct": 1.0}
    assert m2["used_tool"] == 0.0 and m2["call_match"] == 0.0
    assert m2["acc_tool_name_ok"] == 1.0 and m2["acc_tool_exec_ok"] == 0.0  # the server's error reached the scorer
    assert episodes[0]["traces"][0]["rewards"]["correct"]["weight"] == 1.0


@pytest.mark.slow
@needs_venv
def test_tictactoe_under_vf_eval(tmp_path: Path) -> None:
    """Hidden setup (`new_game` with the task's seed), hidden args (`game_id`) and server-side rewards
    (`game_result`) all run in the exported Toolset; minimax against the perfect opponent draws."""
    pytest.importorskip("toolgym_tictactoe")
    from toolgym_tictactoe import minimax_player

    from toolgym.export.verifiers import export_verifiers

    out = tmp_path / "pkg"
    pkg_dir = export_verifiers("tictactoe", out, n=2)
    act = minimax_player(None, seed=0).fn

    def plan(messages: list[dict[str, Any]]) -> dict[str, Any]:
        msgs = [{**m, "content": text_of(m.get("content"))} for m in messages]
        last_tool = next((m["content"] for m in reversed(msgs) if m["role"] == "tool"), "")
        if "Game over" in last_tool:
            return {"content": "Good game."}
        turn = act(msgs, {})
        return {"content": f"<think>{turn.reasoning}</think>",
                "tool_calls": [(c.name, c.arguments) for c in turn.tool_calls]}

    endpoint = ScriptedEndpoint(plan)
    try:
        episodes = vf_eval(out, pkg_dir.name, 2, endpoint, tmp_path)
    finally:
        endpoint.close()
    tool_names = {t.get("function", t).get("name") for r in endpoint.requests for t in r.get("tools") or []}
    assert tool_names == {"get_board", "make_move"}
    make_move = next(t for r in endpoint.requests for t in r.get("tools") or []
                     if t.get("function", t).get("name") == "make_move")
    assert "game_id" not in json.dumps(make_move)  # the hidden argument is not in the schema the model sees
    for episode in episodes:
        rewards, metrics = vf_scores(episode)
        assert rewards == {"outcome": 0.5, "format_ok": 1.0, "invalid_move_penalty": 0.0}, (rewards, metrics)
        assert metrics["draw"] == 1.0 and metrics["invalid_moves"] == 0.0 and metrics["moves"] >= 4
        assert metrics["acc_tool_exec_ok"] == 1.0
