"""`toolgym serve`: an agent behind MCP, used through the real `mcp` SDK client (stdio subprocess and in-process)."""

import asyncio
import json
import random
import sys
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from mcp_server_tictactoe import game as g
from toolgym import load_env, load_policy
from toolgym.serve import build_agent_server

TOOLGYM = str(Path(sys.executable).parent / "toolgym")


def _payload(res):
    assert not res.is_error, res.content[0].text
    return res.structured_content if res.structured_content else json.loads(res.content[0].text)


def _server(policy="scripted:minimax", **kw):
    env = load_env("tictactoe", transport="inprocess")
    return build_agent_server(env, load_policy(policy, env), **kw)


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
    from toolgym import AssistantTurn, ScriptedPolicy
    from toolgym.policies.scripted import call

    env = load_env("tictactoe", transport="inprocess")
    minimax = load_policy("scripted:minimax", env)

    class Slow(ScriptedPolicy):
        def open(self, tools, task):
            inner = minimax.open(tools, task)

            class S(type(inner)):
                async def act(self_, messages):
                    await asyncio.sleep(0.5)
                    return await inner.act(messages)
            return S(inner.fn, tools, task)

    srv = build_agent_server(env, Slow(lambda m, mem: AssistantTurn(tool_calls=[call("make_move", position=0)])))

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
