"""`toolgym serve`: an agent behind MCP, used through the real `mcp` SDK client (stdio subprocess and in-process)."""

import asyncio
import json
import random
import sys
import time
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from mcp_server_tictactoe import game as g
from toolgym import load_env, load_policy
from toolgym.serve import MAX_REQUEST_CHARS, build_agent_server

TOOLGYM = str(Path(sys.executable).parent / "toolgym")


def _payload(res):
    assert not res.is_error, res.content[0].text
    return res.structured_content if res.structured_content else json.loads(res.content[0].text)


def _server(policy="scripted:minimax", **kw):
    env = load_env("tictactoe", transport="inprocess")
    return build_agent_server(env, load_policy(policy, env), **kw)


def _slow(policy, delay_s, inflight=None):
    """`policy` (a scripted one) sleeping `delay_s` before each turn; `inflight`, if given, counts the policy calls
    in progress (`now`) and the most seen at once (`peak`)."""
    from toolgym import ScriptedPolicy

    class Slow(ScriptedPolicy):
        def open(self, tools, task):
            inner = policy.open(tools, task)

            class S(type(inner)):
                async def act(self_, messages):
                    if inflight is not None:
                        inflight["now"] += 1
                        inflight["peak"] = max(inflight["peak"], inflight["now"])
                    try:
                        await asyncio.sleep(delay_s)
                        return await inner.act(messages)
                    finally:
                        if inflight is not None:
                            inflight["now"] -= 1
            return S(inner.fn, tools, task)

    return Slow(policy.fn, f"slow:{policy.name}")


def test_a_client_plays_a_full_game_against_the_served_agent_over_stdio():
    async def go():
        params = StdioServerParameters(command=TOOLGYM, args=["serve", "tictactoe", "-m", "scripted:minimax",
                                                              "-a", "transport=inprocess"])
        async with Client(stdio_client(params)) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert {"run_agent", "suggest_move"} <= names
            rng, board, moves = random.Random(3), "." * 9, 0
            while not g.is_over(board):
                d = _payload(await c.call_tool("suggest_move", {"board": board}))
                assert d["valid"] and board[d["position"]] == "."
                board, moves = d["board_after"], moves + 1
                if not g.is_over(board):
                    board = g.play(board, rng.choice(g.free_cells(board)), "O")
            assert g.winner(board) != "O"  # the minimax agent never loses
            assert moves >= 3

    asyncio.run(go())


def test_bad_and_oversized_requests_are_clear_errors_and_the_server_stays_healthy():
    srv = _server()

    async def go():
        async with Client(srv) as c:
            for bad, needle in [("XXXXXXXXX", "X to move"), ("abc", "9 cells"), ("X" * 20_000, "too large"),
                                ("XXX.OO.O.", "already over")]:
                res = await c.call_tool("suggest_move", {"board": bad})
                assert res.is_error and needle in res.content[0].text, res.content[0].text
            res = await c.call_tool("suggest_move", {"board": "........."})
            assert not res.is_error
            res = await c.call_tool("run_agent", {"request": ""})
            assert res.is_error and "non-empty" in res.content[0].text
            res = await c.call_tool("run_agent", {"request": "play", "max_turns": 1000})
            assert res.is_error and "max_turns" in res.content[0].text

    asyncio.run(go())


def test_an_oversized_request_is_refused_before_any_run_and_the_server_keeps_serving():
    """`run_agent`'s request cap (MAX_REQUEST_CHARS, 8,000 characters; docs/security.md): one character over, or a
    megabyte, is a clear error result and starts no rollout; exactly at the cap runs, and so does the next client."""
    srv = _server()
    assert MAX_REQUEST_CHARS == 8_000 and srv.agent.max_request_chars == MAX_REQUEST_CHARS
    prefix = "Play a game of tic-tac-toe. "

    async def go():
        async with Client(srv) as c:
            for size in (MAX_REQUEST_CHARS + 1, 1_000_000):
                res = await c.call_tool("run_agent", {"request": prefix + "x" * (size - len(prefix))})
                assert res.is_error, res.content[0].text[:200]
                assert f"request too large: {size} characters (limit 8000)" in res.content[0].text
            assert srv.agent.stats["requests"] == 0  # refused before the agent ran
            d = _payload(await c.call_tool("run_agent", {"request": prefix + "x" * (MAX_REQUEST_CHARS - len(prefix))}))
            assert d["stop_reason"] == "game_over" and d["trace"] and all(t["ok"] for t in d["trace"])
        async with Client(srv) as c:  # a fresh client after the refusals
            d = _payload(await c.call_tool("run_agent", {"request": prefix}))
            assert d["stop_reason"] == "game_over"
            assert _payload(await c.call_tool("suggest_move", {"board": "........."}))["valid"]

    asyncio.run(go())
    assert srv.agent.stats["requests"] == 3 and srv.agent.stats["errors"] == 0


def test_max_concurrency_bounds_the_policy_calls_in_flight_and_the_rest_wait(monkeypatch):
    """`toolgym serve --max-concurrency 2` (the CLI, its transport stubbed out) and 6 clients at once on a slow agent:
    never more than 2 policy calls run at once, the other requests wait for a slot, and all 6 get their answers."""
    import toolgym.policies
    from mcp.server.mcpserver import MCPServer
    from typer.testing import CliRunner

    from toolgym.cli import app

    inflight, served, delay_s = {"now": 0, "peak": 0}, [], 0.3
    real_load_policy = toolgym.policies.load_policy
    monkeypatch.setattr(toolgym.policies, "load_policy",
                        lambda uri, env=None, **o: _slow(real_load_policy(uri, env, **o), delay_s, inflight))
    monkeypatch.setattr(MCPServer, "run", lambda self, *a, **kw: served.append(self))
    res = CliRunner().invoke(app, ["serve", "tictactoe", "-m", "scripted:minimax", "-a", "transport=inprocess",
                                   "--max-concurrency", "2"])
    assert res.exit_code == 0 and len(served) == 1, res.output
    srv = served[0]
    boards = ["........."[:i] + "O" + "........."[i + 1:] for i in range(6)]  # O started in cell i; X to move

    async def ask(b):
        async with Client(srv) as c:
            return _payload(await c.call_tool("suggest_move", {"board": b}))

    async def go():
        return await asyncio.gather(*(ask(b) for b in boards))

    t0 = time.perf_counter()
    answers = asyncio.run(go())
    elapsed = time.perf_counter() - t0
    assert [d["valid"] for d in answers] == [True] * 6
    assert all(d["board_after"][i] == "O" and d["board_after"].count("X") == 1 for i, d in enumerate(answers))
    assert inflight == {"now": 0, "peak": 2}, inflight  # 6 without the bound
    assert elapsed >= 3 * delay_s * 0.9, elapsed  # three waves of two: the others waited
    assert srv.agent.stats["requests"] == 6 and srv.agent.stats["errors"] == 0


def test_sixteen_concurrent_clients_get_correct_separate_answers():
    """Each client sends a board with a single winning move for X; every answer must be that client's move."""
    srv = _server(max_concurrency=16)
    rng = random.Random(0)
    boards = []
    while len(boards) < 16:  # random positions where X has exactly one immediate win
        b = "." * 9
        for _ in range(rng.randrange(2, 6)):
            for side in "XO":
                if not g.is_over(b):
                    b = g.play(b, rng.choice(g.free_cells(b)), side)
        if g.is_over(b) or b.count("X") != b.count("O"):
            continue
        wins = [c for c in g.free_cells(b) if g.winner(g.play(b, c, "X")) == "X"]
        if len(wins) == 1 and b not in boards:
            boards.append(b)

    async def ask(b):
        async with Client(srv) as c:
            return b, _payload(await c.call_tool("suggest_move", {"board": b}))

    async def go():
        return await asyncio.gather(*(ask(b) for b in boards))

    for b, d in asyncio.run(go()):
        win = [c for c in g.free_cells(b) if g.winner(g.play(b, c, "X")) == "X"][0]
        assert d["position"] == win and d["status"] == "agent_won" and d["board_after"] == g.play(b, win, "X")
    assert srv.agent.stats["requests"] == 16 and srv.agent.stats["errors"] == 0


def test_a_client_that_disconnects_mid_call_does_not_harm_others():
    """A slow agent; one client's call is cancelled mid-run while another client's call completes."""
    env = load_env("tictactoe", transport="inprocess")
    srv = build_agent_server(env, _slow(load_policy("scripted:minimax", env), 0.5))

    async def go():
        async with Client(srv) as c1, Client(srv) as c2:
            t1 = asyncio.create_task(c1.call_tool("suggest_move", {"board": "........."}))
            t2 = asyncio.create_task(c2.call_tool("suggest_move", {"board": "X...O...."}))
            await asyncio.sleep(0.1)
            t1.cancel()
            res = await t2
            with pytest.raises(asyncio.CancelledError):
                await t1
            return res

    d = _payload(asyncio.run(go()))
    assert d["valid"] and d["board_after"].count("X") == 2
    assert srv.agent.stats["errors"] == 0


def test_agent_run_times_out_with_a_clear_error():
    from toolgym import AssistantTurn, ScriptedPolicy

    async def never(messages, memory):  # pragma: no cover - replaced below
        raise AssertionError

    env = load_env("tictactoe", transport="inprocess")

    class Hang(ScriptedPolicy):
        def open(self, tools, task):
            class S:
                async def act(self, messages):
                    await asyncio.sleep(30)
                    return AssistantTurn()

                def token_trace(self):
                    return None

                async def aclose(self):
                    pass
            return S()

    srv = build_agent_server(env, Hang(lambda m, mem: AssistantTurn()), timeout_s=0.5)

    async def go():
        async with Client(srv) as c:
            return await c.call_tool("suggest_move", {"board": "........."})

    res = asyncio.run(go())
    assert res.is_error and "did not finish within 0.5s" in res.content[0].text
    assert srv.agent.stats["timeouts"] == 1


def test_suggest_move_for_o_goes_through_the_colour_swap():
    srv = _server()

    async def go():
        async with Client(srv) as c:
            d = _payload(await c.call_tool("suggest_move", {"board": "OO.XX.X..", "agent_plays": "O"}))
            assert d["position"] == 2 and d["status"] == "agent_won" and d["board_after"] == "OOOXX.X.."
            d = _payload(await c.call_tool("suggest_move", {"board": "XX.OO....", "agent_plays": "X"}))
            assert d["position"] == 2 and d["board_after"] == "XXXOO...."

    asyncio.run(go())
