"""Issue 33 (hardening, second round) in toolgym and the tic-tac-toe server, through real runs: the eval CLI with the
real HTTP policy path against a local OpenAI-compatible endpoint (`openai_stub`: the real thing -- a model server
returning these exact answers -- cannot be made to on demand), the rollout engine with real MCP servers over
streamable HTTP and in memory. docs/security.md lists the findings and these tests:

6. tool-call arguments of any depth never end a run: the parsers bound depth (and size), and a record that cannot be
   written fails only its rollout; `--resume` continues past it;
7. a stopped (SIGSTOP) or hung HTTP server is noticed by a ping with a deadline and replaced fast;
9. one tic-tac-toe client cannot evict or end another client's game in use;
10. an answer with `choices: []` is an error of its rollout, so `--resume` runs it again.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import anyio
import mcp
import psutil
import pytest
from openai_stub import StubEndpoint
from tg_testutil import read_jsonl
from typer.testing import CliRunner

from toolgym import AssistantTurn, ScriptedPolicy, ToolCall, load_env, load_policy
from toolgym.cli import app
from toolgym.eval import evaluate

runner = CliRunner()


def _eval(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, ["eval", "tictactoe", *args], catch_exceptions=False)
    return res.exit_code, res.output


def _deep(depth: int) -> dict:
    value: dict = {"position": 4}
    for _ in range(depth):
        value = {"a": value}
    return value


def _answer(tool_calls: list[dict] | None = None, choices: list | None = None) -> dict:
    msg = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    return {"id": "cmpl", "object": "chat.completion", "model": "stub",
            "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls"}] if choices is None else choices}


# ------------------------------------------------------------------------------------------- 6. deep arguments
def test_deeply_nested_arguments_never_end_a_run(tmp_path: Path) -> None:
    """Finding 6: an endpoint's tool call whose arguments nest 600 deep (1,200 characters) raised RecursionError in
    `dataclasses.asdict` while the result was written: the run exited with 0 results, and `--resume` died the same
    way. Now the call is a parse error of its own ("nested deeper than 32 levels", the model is told and plays on),
    every rollout is written, and --resume finds the run complete."""
    deep = json.dumps(_deep(600))
    assert len(deep) < 8000
    call = {"id": "c1", "type": "function", "function": {"name": "make_move", "arguments": deep}}
    out = tmp_path / "run"
    args = ["-n", "3", "-c", "1", "-m", "openai:stub", "-a", "transport=inprocess", "-o", str(out)]
    with StubEndpoint(respond=lambda n, body: _answer([call]) if n == 1 else None) as stub:
        code, text = _eval(*args, "--base-url", stub.url)
        assert code == 0, text
        recs = read_jsonl(out / "results.jsonl")
        assert len(recs) == 3 and all(r["error"] is None for r in recs), [r["error"] for r in recs]
        bad = [c for r in recs for c in r["calls"] if not c["parse_ok"]]
        assert len(bad) == 1 and "nested deeper than 32 levels" in bad[0]["error"], bad
        code, text = _eval(*args, "--base-url", stub.url, "--resume")
        assert code == 0, text
        assert len(read_jsonl(out / "results.jsonl")) == 3


@pytest.mark.anyio
async def test_arguments_that_skip_the_parser_are_written_and_resume_continues(tmp_path: Path) -> None:
    """Finding 6, the writer: a policy that hands the engine arguments nested 600 deep directly (no parser in
    between: what crashed `dataclasses.asdict`) gets its call refused by the schema and recorded as it came; every
    rollout is written and a resumed run finds them all."""
    from toolgym_tictactoe import minimax_player

    env = load_env("tictactoe", transport="inprocess")
    tasks = env.build_dataset(3)
    minimax = minimax_player(None, seed=0).fn
    sent = {"n": 0}

    def act(messages, memory):  # the very first turn of the run: 600 levels of arguments
        sent["n"] += 1
        if sent["n"] == 1:
            return AssistantTurn(content="", tool_calls=[ToolCall("make_move", _deep(600), id="c1")])
        return minimax(messages, memory)

    out = tmp_path / "run"
    try:
        _, summary = await evaluate(env, ScriptedPolicy(act, "scripted:deep"), tasks, concurrency=1, out_dir=out)
    finally:
        await env.aclose()
    recs = read_jsonl(out / "results.jsonl")
    assert len(recs) == 3 and summary["rollouts"] == 3 and summary["errors"] == 0, [r["error"] for r in recs]
    first = next(c for r in recs if r["example_id"] == 0 for c in r["calls"])
    assert not first["args_ok"] and nesting(first["arguments"]) == 601
    env = load_env("tictactoe", transport="inprocess")
    try:
        _, summary = await evaluate(env, load_policy("scripted:minimax", env), tasks, concurrency=1, out_dir=out,
                                    resume=True)
    finally:
        await env.aclose()
    assert summary["errors"] == 0 and summary["rollouts"] == 3 and len(read_jsonl(out / "results.jsonl")) == 3


def nesting(value) -> int:
    from toolgym.types import nesting_depth

    return nesting_depth(value, 10_000)


def test_a_record_that_cannot_be_written_becomes_an_error_of_its_rollout() -> None:
    """The writer's last line of defence: a trajectory the JSON encoder cannot write (here a value nested 5,000
    deep in its state) is recorded as an error of the same (example, rollout) -- which --resume runs again --
    instead of raising out of the run."""
    from toolgym.journal import record_line
    from toolgym.types import Trajectory

    traj = Trajectory(example_id=4, rollout_index=1, task={"seed": 4}, info={"deep": _deep(5000)}, reward=1.0)
    line, written = record_line(traj)
    rec = json.loads(line)
    assert (rec["example_id"], rec["rollout_index"]) == (4, 1) and rec["task"] == {"seed": 4}
    assert "could not be written" in rec["error"] and "RecursionError" in rec["error"]
    assert written.error == rec["error"] and not written.ok


# ------------------------------------------------------------------------------------------- 10. choices: []
def test_an_answer_without_choices_fails_its_rollout_and_resume_runs_it_again(tmp_path: Path) -> None:
    """Finding 10: a 200 answer with `choices: []` was scored as a clean rollout that made no call (reward 0), so
    --resume never ran it again. Now it is an error of that rollout, which --resume runs again."""
    out = tmp_path / "run"
    args = ["-n", "3", "-c", "1", "-m", "openai:stub", "-a", "transport=inprocess", "-o", str(out)]
    with StubEndpoint(respond=lambda n, body: _answer(choices=[]) if n == 1 else None) as stub:
        code, text = _eval(*args, "--base-url", stub.url)
        assert code == 0, text
        recs = {r["example_id"]: r for r in read_jsonl(out / "results.jsonl")}
        assert recs[0]["error"] and "without a choice" in recs[0]["error"], recs[0]["error"]
        assert recs[1]["error"] is None and recs[2]["error"] is None
        code, text = _eval(*args, "--base-url", stub.url, "--resume")
        assert code == 0, text
    recs = read_jsonl(out / "results.jsonl")
    assert len(recs) == 3 and all(r["error"] is None and r["metrics"]["draw"] == 1.0 for r in recs)


# ------------------------------------------------------------------------------------------- 7. a stopped HTTP server
def _server_procs(name: str) -> list[psutil.Process]:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if name in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


@pytest.mark.anyio
async def test_a_stopped_http_server_is_replaced_fast() -> None:
    """Finding 7: SIGSTOP an HTTP MCP server mid-run and it still counted as alive, so every later rollout failed
    after the 60 s connect timeout. Now the session that hung (tool_timeout 2 s) makes the server suspect, the next
    session pings it, gets no answer within 5 s, and the server is stopped and relaunched: at most the rollout that
    met the stopped server fails, every later one succeeds, and the run takes seconds, not a minute per rollout."""
    env = load_env("tictactoe", transport="http", tool_timeout=2)
    policy = load_policy("scripted:minimax", env)
    tasks = env.build_dataset(8)
    stopped: list[psutil.Process] = []
    finished: list[int] = []

    def progress(t) -> None:
        finished.append(t.example_id)
        if len(finished) == 2:
            procs = _server_procs("mcp-server-tictactoe")
            assert len(procs) == 1, procs
            procs[0].send_signal(signal.SIGSTOP)
            stopped.append(procs[0])

    t0 = time.monotonic()
    try:
        with anyio.fail_after(55):  # the old behaviour: 60 s per rollout after the stop
            trajs, summary = await evaluate(env, policy, tasks, concurrency=1, on_progress=progress)
        elapsed = time.monotonic() - t0
        assert stopped, "the server was never stopped"
        # the rollout that met the stopped server fails, or succeeds on the replacement (the episode retries a
        # shared session that died during setup); every later one succeeds
        errors = [t.example_id for t in trajs if t.error]
        assert len(errors) <= 1 and all(e == 2 for e in errors), [(t.example_id, t.error) for t in trajs]
        assert summary["server_restarts"] >= 1
        assert elapsed < 45, elapsed
        assert not stopped[0].is_running() or stopped[0].status() == psutil.STATUS_ZOMBIE, "the hung server lives on"
        assert len(_server_procs("mcp-server-tictactoe")) == 1  # its replacement
    finally:
        for p in stopped:
            if p.is_running():
                p.send_signal(signal.SIGCONT)
                p.kill()
        await env.aclose()


# ------------------------------------------------------------------------------------------- 9. game quotas
@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "sessionless"])
async def test_one_client_cannot_evict_or_end_another_clients_game(mode: str) -> None:
    """Finding 9: 50 new tic-tac-toe games evicted a game still in use (with a 50-game table). Now a game with a
    call within idle_s is never evicted -- a full table refuses new games --, a client holds at most half the table
    (clients with a transport session each; sessionless clients share that quota), and only the client that started
    a game may end it."""
    from mcp_server_tictactoe import build_server

    srv = build_server(max_games=50)
    kwargs = {"mode": "legacy"} if mode == "legacy" else {}
    async with mcp.Client(srv, **kwargs) as a, mcp.Client(srv, **kwargs) as b:
        r = await a.call_tool("new_game", {"seed": 1, "x_starts": True})
        gid = json.loads(r.content[0].text)["game_id"]
        assert not (await a.call_tool("make_move", {"game_id": gid, "position": 4})).is_error
        results = [await b.call_tool("new_game", {"seed": i, "x_starts": True}) for i in range(50)]
        started = [r for r in results if not r.is_error]
        refused = [r.content[0].text for r in results if r.is_error]
        assert refused and len(started) == (25 if mode == "legacy" else 24), (len(started), refused[:1])
        assert "the most one client may hold" in refused[0], refused[0]
        res = await a.call_tool("get_board", {"game_id": gid})
        assert not res.is_error and "X: 4." in res.content[0].text, res.content[0].text
        if mode == "legacy":  # distinct transport sessions: b may not end a's game
            res = await b.call_tool("end_game", {"game_id": gid})
            assert res.is_error and "another client" in res.content[0].text
            async with mcp.Client(srv, mode="legacy") as c:  # fills the table; every game is in use
                got = [await c.call_tool("new_game", {"seed": i, "x_starts": True}) for i in range(25)]
                assert [g.is_error for g in got].count(False) == 24 and got[-1].is_error
                assert "every one is in use" in got[-1].content[0].text
        assert not (await a.call_tool("make_move", {"game_id": gid, "position": 0})).is_error
        assert not (await a.call_tool("end_game", {"game_id": gid})).is_error
