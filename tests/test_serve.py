"""`toolgym serve`: an agent behind MCP, used through the real `mcp` SDK client (stdio subprocess and in-process)."""

import asyncio
import json
import os
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


def _params(*args: str) -> StdioServerParameters:
    """`toolgym serve ARGS` over stdio, with this process's environment (the SDK's default passes only a few
    variables, which would drop a PYTHONPATH pointing at the code under test)."""
    return StdioServerParameters(command=TOOLGYM, args=["serve", *args], env=dict(os.environ))


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
        async with Client(stdio_client(_params("tictactoe", "-m", "scripted:minimax"))) as c:
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
            for args, needle in [  # strict types, one line each; tic-tac-toe's run_agent takes no free text
                ({"max_turns": 1000}, "invalid argument max_turns=1000: Input should be less than or equal to 100"),
                ({"max_turns": True}, "invalid argument max_turns=true: Input should be a valid integer"),
                ({"max_turns": "3"}, 'invalid argument max_turns="3": Input should be a valid integer'),
                ({"seed": 1.5}, "invalid argument seed=1.5"),
                ({"opponent_random_move_prob": 2}, "less than or equal to 1"),
                ({"request": "What is 2+2? Do not play."}, "run_agent takes no argument 'request'; it takes: seed, "
                                                           "agent_starts, opponent_random_move_prob, max_turns"),
            ]:
                res = await c.call_tool("run_agent", args)
                assert res.is_error and needle in res.content[0].text, (args, res.content[0].text)
                assert "\n" not in res.content[0].text
            res = await c.call_tool("suggest_move", {"board": ".........", "agentplays": "O"})
            assert res.is_error and "suggest_move takes no argument 'agentplays'" in res.content[0].text
            assert not (await c.call_tool("run_agent", {"seed": 3, "max_turns": 2})).is_error  # and it still plays

    asyncio.run(go())


def _echo_wiki_server(**kw):
    """The wiki env (in-process server) served with a scripted agent that answers with the request it was given:
    what a free-text `run_agent` does with its text is visible in the answer."""
    from toolgym import AssistantTurn, ScriptedPolicy

    env = load_env("wiki", transport="inprocess")

    def echo(messages, memory):
        asked = next(m["content"] for m in messages if m["role"] == "user")
        return AssistantTurn(content=f"<answer>you asked: {asked}</answer>")

    return build_agent_server(env, ScriptedPolicy(echo, "scripted:echo"), **kw)


def test_an_oversized_request_is_refused_before_any_run_and_the_server_keeps_serving():
    """`run_agent`'s request cap (MAX_REQUEST_CHARS, 8,000 characters; docs/security.md): one character over, or a
    megabyte, is a clear error result and starts no rollout; exactly at the cap runs, and so does the next client.
    An env that takes free text (wiki: the default `serve_task`), so `run_agent` has a `request`."""
    srv = _echo_wiki_server()
    assert MAX_REQUEST_CHARS == 8_000 and srv.agent.max_request_chars == MAX_REQUEST_CHARS
    prefix = "Who founded the oldest city? "

    async def go():
        async with Client(srv) as c:
            for size in (MAX_REQUEST_CHARS + 1, 1_000_000):
                res = await c.call_tool("run_agent", {"request": prefix + "x" * (size - len(prefix))})
                assert res.is_error, res.content[0].text[:200]
                assert f"request too large: {size} characters (limit 8000)" in res.content[0].text
            res = await c.call_tool("run_agent", {"request": "  "})
            assert res.is_error and "request must be a non-empty string" in res.content[0].text
            assert srv.agent.stats["requests"] == 0  # refused before the agent ran
            d = _payload(await c.call_tool("run_agent", {"request": prefix + "x" * (MAX_REQUEST_CHARS - len(prefix))}))
            assert d["outcome"] == "answered" and d["answer"].startswith("you asked: " + prefix)
        async with Client(srv) as c:  # a fresh client after the refusals
            d = _payload(await c.call_tool("run_agent", {"request": prefix}))
            assert d["answer"] == "you asked: " + prefix.strip()

    asyncio.run(go())
    assert srv.agent.stats["requests"] == 2 and srv.agent.stats["errors"] == 0


def test_run_agent_request_text_and_seed_reach_the_episode():
    """Free text goes to the agent as the task's prompt (its answer shows it), and the request's seed seeds the
    episode: the same arguments are the same task, other ones another."""
    srv = _echo_wiki_server()
    seen = []
    run = srv.agent.run

    async def spy(task, max_turns=None, seed=None):
        seen.append(task)
        return await run(task, max_turns, seed)

    srv.agent.run = spy

    async def go():
        async with Client(srv) as c:
            a = _payload(await c.call_tool("run_agent", {"request": "What is 2+2? Do not play."}))
            b = _payload(await c.call_tool("run_agent", {"request": "Name the capital.", "seed": 7}))
            return a, b

    a, b = asyncio.run(go())
    assert a["answer"] == "you asked: What is 2+2? Do not play." and b["answer"] == "you asked: Name the capital."
    assert a["outcome"] == "answered" and a["turns"] == 1
    assert seen == [{"prompt": "What is 2+2? Do not play.", "seed": 0}, {"prompt": "Name the capital.", "seed": 7}]


def test_run_agent_plays_the_game_its_arguments_describe():
    """Tic-tac-toe's `run_agent` (its `serve_task`): the seed, who starts and the opponent's strength shape the game;
    different seeds give different games, the same arguments the same game; the result is typed and complete."""
    srv = _server()

    async def go():
        async with Client(srv) as c:
            games = {seed: _payload(await c.call_tool("run_agent", {"seed": seed})) for seed in range(6)}
            again = _payload(await c.call_tool("run_agent", {"seed": 3}))
            first = _payload(await c.call_tool("run_agent", {"seed": 0, "agent_starts": True}))
            second = _payload(await c.call_tool("run_agent", {"seed": 0, "agent_starts": False}))
            weak = [_payload(await c.call_tool("run_agent", {"seed": s, "opponent_random_move_prob": 1.0}))
                    for s in range(6)]
            return games, again, first, second, weak

    games, again, first, second, weak = asyncio.run(go())
    assert len({tuple(d["moves"]) for d in games.values()}) >= 4  # the seed reaches the opponent and who starts
    assert again == games[3]  # reproducible
    for d in [*games.values(), first, second, *weak]:
        assert d["answer"].strip() and d["outcome"] in ("win", "draw") and d["stop_reason"] == "game_over"
        assert len(d["board"]) == 9 and d["board"].count("X") == sum(m[0] == "X" for m in d["moves"])
        assert d["turns"] == len(d["trace"]) and all(t["ok"] for t in d["trace"])
        assert g.is_over(d["board"]) and [int(m[1]) for m in d["moves"] if m[0] == "X"] == \
            [t["arguments"]["position"] for t in d["trace"]]
    assert first["agent_started"] and first["moves"][0][0] == "X"
    assert not second["agent_started"] and second["moves"][0][0] == "O"
    assert all(d["outcome"] == "draw" for d in games.values())  # the minimax agent vs the optimal opponent
    assert sum(d["outcome"] == "win" for d in weak) >= 4  # ... and against a random one


def test_a_scripted_player_that_samples_replays_its_game_from_the_request_seed():
    """`-m scripted:random`: the request's seed seeds the player's own draws too (`Policy.open_seeded` ->
    `rollout_rng`), so a request replays whatever was asked before it; before, a scripted player drew from how many
    rollouts it had opened (the same request answered with other moves on every call). Unseeded rollouts
    (`toolgym synth`'s teacher games) keep drawing by their open count, so teacher data is unchanged."""
    srv = _server("scripted:random")

    async def go():
        async with Client(srv) as c:
            first = [_payload(await c.call_tool("run_agent", {"seed": s, "agent_starts": True})) for s in range(6)]
            again = [_payload(await c.call_tool("run_agent", {"seed": s, "agent_starts": True}))
                     for s in reversed(range(6))][::-1]
            return first, again

    first, again = asyncio.run(go())
    assert [d["moves"] for d in again] == [d["moves"] for d in first]
    assert len({tuple(d["moves"]) for d in first}) >= 4  # other seeds, other games

    from toolgym.policies.scripted import ScriptedSession, rollout_rng

    unseeded = [rollout_rng(ScriptedSession(lambda m, mem: None, [], {}, i).memory, "0").random() for i in range(3)]
    assert unseeded == [random.Random(f"0:{i}").random() for i in range(3)]  # synth's draws, as before


def test_every_served_tool_has_a_typed_output_schema():
    """`outputSchema` names every field of the result and its type (not a bare object), for run_agent (the generic
    fields and the env's) and for suggest_move; structured results validate against it."""
    import jsonschema

    srv = _server()

    async def go():
        async with Client(srv) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            out = {n: t.output_schema for n, t in tools.items()}
            res = {"run_agent": (await c.call_tool("run_agent", {"seed": 1})).structured_content,
                   "suggest_move": (await c.call_tool("suggest_move", {"board": "X...O...."})).structured_content}
            return out, res

    schemas, results = asyncio.run(go())
    ra = schemas["run_agent"]
    assert set(ra["required"]) == {"answer", "outcome", "stop_reason", "turns", "trace", "board", "moves",
                                   "agent_started"}
    assert ra["properties"]["outcome"]["enum"] == ["win", "draw", "loss", "unfinished"]
    assert ra["properties"]["moves"] == {**ra["properties"]["moves"], "type": "array", "items": {"type": "string"}}
    for name, schema in schemas.items():
        assert schema["type"] == "object" and schema["properties"], name
        for field, prop in schema["properties"].items():
            assert prop.get("description") and ("type" in prop or "anyOf" in prop or "$ref" in prop), (name, field)
        jsonschema.validate(results[name], schema)
    assert schemas["suggest_move"]["properties"]["status"]["anyOf"][0]["enum"] == ["agent_won", "draw", "in_progress"]


def test_the_default_serves_in_process_and_spawns_no_process_per_request(tmp_path):
    """Plain `toolgym serve tictactoe` (no -a): the env's server runs in the serving process (its `serve_defaults`),
    so 30 requests start no process at all; `-a transport=stdio` starts one env server for all of them (the env's
    shared session), not one each. Process trees sampled every 10 ms while the calls run (psutil)."""
    import threading

    psutil = pytest.importorskip("psutil")

    def descendants_during(*args: str, calls: int = 30) -> tuple[set[int], str]:
        me, seen, stop = psutil.Process(), set(), threading.Event()

        def sample():
            while not stop.is_set():
                seen.update(p.pid for p in me.children(recursive=True))
                time.sleep(0.01)

        async def go():
            errlog = tmp_path / f"serve-{len(args)}.log"
            with errlog.open("w") as err:
                async with Client(stdio_client(_params("tictactoe", "-m", "scripted:minimax", *args),
                                               errlog=err)) as c:
                    for i in range(calls):
                        tool, a = ("run_agent", {"seed": i}) if i % 2 else ("suggest_move", {"board": "O........"})
                        assert not (await c.call_tool(tool, a)).is_error
            return errlog.read_text()

        t = threading.Thread(target=sample)
        t.start()
        try:
            log = asyncio.run(go())
        finally:
            stop.set()
            t.join()
        return seen, log

    pids, log = descendants_during()
    assert len(pids) == 1, pids  # the serve process itself, nothing below it
    assert "env server inprocess" in log and "ready: stdio" in log, log
    pids, log = descendants_during("-a", "transport=stdio")
    assert len(pids) == 2, pids  # serve + one mcp-server-tictactoe for every request
    assert "env server stdio:mcp-server-tictactoe" in log and "shared sessions" in log, log


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
    res = CliRunner().invoke(app, ["serve", "tictactoe", "-m", "scripted:minimax", "--max-concurrency", "2"])
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


def test_board_errors_speak_of_the_clients_colours_and_sizes():
    """An error names the side the client plays and what it sent: `O........` with O to play is "not a position
    with O to move: 1 O and 0 X" (not the server's swapped view), and a long board gives its real length."""
    srv = _server()

    async def go():
        async with Client(srv) as c:
            out = {}
            for board, side in [("O........", "O"), ("X........", "X"), ("OO.X.....", "O"), ("X" * 250, "X"),
                                ("X..|.O.|...|..", "X"), ("XXXOO.O..", "O")]:
                res = await c.call_tool("suggest_move", {"board": board, "agent_plays": side})
                assert res.is_error
                out[(board[:14], side)] = res.content[0].text
            return out

    errors = asyncio.run(go())
    assert errors[("O........", "O")].endswith("not a position with O to move: 1 O and 0 X")
    assert errors[("X........", "X")].endswith("not a position with X to move: 1 X and 0 O")
    assert errors[("OO.X.....", "O")].endswith("not a position with O to move: 2 O and 1 X")
    assert errors[("X" * 14, "X")].endswith("board too long: 250 characters (a board is 9 cells, at most 200 "
                                            "characters with separators)")
    assert "a board has 9 cells (X, O or . for empty), got 11" in errors[("X..|.O.|...|..", "X")]
    assert errors[("XXXOO.O..", "O")].endswith("the game on that board is already over")


def test_the_queue_wait_counts_inside_the_timeout():
    """One run slot, a slow agent (0.6 s a turn), a 1 s timeout: the first of two requests finishes, the second
    waits for the slot and times out within the same second -- it does not wait forever, and says it waited."""
    env = load_env("tictactoe", transport="inprocess")
    srv = build_agent_server(env, _slow(load_policy("scripted:minimax", env), 0.6), timeout_s=1.0, max_concurrency=1)

    async def go():
        async with Client(srv) as c1, Client(srv) as c2:
            t0 = time.perf_counter()
            a, b = await asyncio.gather(c1.call_tool("suggest_move", {"board": "........."}),
                                        c2.call_tool("suggest_move", {"board": "O........"}))
            return a, b, time.perf_counter() - t0

    a, b, elapsed = asyncio.run(go())
    assert not a.is_error and b.is_error, (a.content[0].text, b.content[0].text)
    assert "did not finish within 1s" in b.content[0].text and "waiting for one of the 1 run slots" in b.content[0].text
    assert elapsed < 1.6, elapsed
    assert srv.agent.stats["timeouts"] == 1


BAD_OPTIONS = [
    (["--max-concurrency", "0"], "error: --max-concurrency must be an integer >= 1 (agent runs in flight at once), got 0"),
    (["--max-concurrency", "-1"], "error: --max-concurrency must be an integer >= 1"),
    (["--timeout", "0"], "error: --timeout must be a positive number of seconds, got 0"),
    (["--timeout", "nan"], "error: --timeout must be a positive number of seconds, got nan"),
    (["--transport", "http"], "error: --transport must be stdio or streamable-http, got 'http'"),
    (["--transport", "streamable-http", "--port", "70000"], "error: --port must be from 1 to 65535, got 70000"),
    (["-a", "max_turns=true"], "error: tictactoe: option max_turns='true': a boolean is not a number (int, >= 1)"),
    (["-m", "hf:/no/such/model"], "error: no such model folder"),
]


@pytest.mark.parametrize("argv, message", BAD_OPTIONS)
def test_bad_serve_options_are_one_line_errors_before_anything_starts(argv, message, monkeypatch):
    """Each bad option is one line and exit code 2, before a server starts (the CLI with its transport recorded)."""
    from mcp.server.mcpserver import MCPServer
    from typer.testing import CliRunner

    from toolgym.cli import app

    served = []
    monkeypatch.setattr(MCPServer, "run", lambda self, *a, **kw: served.append(self))
    res = CliRunner().invoke(app, ["serve", "tictactoe", "-m", "scripted:minimax", *argv], terminal_width=300)
    out = res.output.strip()
    assert res.exit_code == 2 and not served, out
    assert out.startswith(message) and len(out.splitlines()) == 1, out
    assert "Traceback" not in out and "ready:" not in out


def test_a_bad_serve_option_is_one_line_on_a_real_terminal():
    """The real command (a subprocess): `--max-concurrency 0` prints one line and exits 2 at once (it used to start
    and hang every call forever)."""
    import subprocess

    proc = subprocess.run([TOOLGYM, "serve", "tictactoe", "--max-concurrency", "0"], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "300"})
    out = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 2 and out == BAD_OPTIONS[0][1], out


def test_ready_line_on_stderr_for_stdio_and_http(tmp_path):
    """A client or a wrapper script knows when to connect: `ready: stdio` / `ready: http://HOST:PORT/mcp` on stderr
    (stdout stays the MCP channel), and the HTTP server answers right after it."""
    import subprocess

    from toolgym.sandbox import free_port

    def wait_ready(proc):
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("ready: "):
                return line.strip(), "".join(lines)
        raise AssertionError("".join(lines))

    proc = subprocess.Popen([TOOLGYM, "serve", "tictactoe", "-m", "scripted:minimax"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line, log = wait_ready(proc)
        assert line.startswith("ready: stdio (") and "policy scripted:minimax" in log
    finally:
        proc.kill()
        proc.wait()
    port = free_port()
    proc = subprocess.Popen([TOOLGYM, "serve", "tictactoe", "-m", "scripted:minimax", "--transport", "streamable-http",
                             "--port", str(port)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line, _ = wait_ready(proc)
        url = f"http://127.0.0.1:{port}/mcp"
        assert line.startswith(f"ready: {url} (")

        async def call():
            async with Client(url) as c:
                return _payload(await c.call_tool("suggest_move", {"board": "O........"}))

        assert asyncio.run(call())["valid"]
    finally:
        proc.terminate()
        proc.wait(10)


def _clumsy(bad_turns: int):
    """A scripted tic-tac-toe player that calls make_move on an occupied cell on its first `bad_turns` turns (reading
    the server's error each time), then on the first free cell, with a reasoning line naming the turn."""
    from toolgym import ScriptedPolicy
    from toolgym.policies.scripted import call
    from toolgym.types import AssistantTurn

    def fn(messages, memory):
        board = memory["task"]["board"]
        memory["turn"] = memory.get("turn", 0) + 1
        cell = board.index("X") if memory["turn"] <= bad_turns else board.index(".")
        return AssistantTurn(content="", reasoning=f"turn {memory['turn']}",
                             tool_calls=[call("make_move", position=cell)])

    return ScriptedPolicy(fn, f"clumsy{bad_turns}")


@pytest.mark.parametrize("turns", [None, 1, 5])
def test_suggest_move_lets_the_agent_recover_from_a_rejected_move(turns):
    """As in a game, a move the server rejects goes back to the agent with the error and it moves again: the first
    legal move is the suggestion (`attempts` counts the calls), within `suggest_turns` turns (3 unless the env
    option says otherwise; 1 returns the first move as it is); after that many rejections the answer is invalid with
    the server's error. The rollout stops at the legal move (the agent is not asked to play on)."""
    board = "X...O...."
    n = turns or 3

    async def ask(policy):
        env = load_env("tictactoe", transport="inprocess", **({"suggest_turns": turns} if turns else {}))
        async with Client(build_agent_server(env, policy)) as c:
            return _payload(await c.call_tool("suggest_move", {"board": board}))

    first = asyncio.run(ask(_clumsy(0)))
    assert (first["position"], first["valid"], first["attempts"], first["reasoning"]) == (1, True, 1, "turn 1")
    again = asyncio.run(ask(_clumsy(n - 1)))
    assert (again["position"], again["valid"], again["attempts"]) == (1, True, n)
    assert again["reasoning"] == f"turn {n}" and again["board_after"] == "XX..O...."
    lost = asyncio.run(ask(_clumsy(n)))
    assert (lost["position"], lost["valid"], lost["attempts"]) == (None, False, n)
    assert "occupied" in lost["error"].lower() or "taken" in lost["error"].lower(), lost["error"]


@pytest.mark.parametrize("board,first", [(".........", "New game. You move first."),
                                         ("....O....", "New game. The opponent moved first."),
                                         ("X...O....", "A game in progress."),
                                         ("O........", "New game. The opponent moved first.")])
def test_suggest_move_poses_a_board_that_tells_its_history_as_a_game_does(board, first):
    """A served board that alone tells its history (empty: X moves first; one O and no X: the opponent moved first)
    reaches the agent as a game's first turn does, so the served model sees the prompt its games showed it; any other
    board is a game in progress. The scripted player echoes the first line of the user message it was given. With
    agent_plays=O the colours are swapped before the rule applies."""
    from toolgym import ScriptedPolicy
    from toolgym.policies.scripted import call
    from toolgym.types import AssistantTurn

    def echo(messages, memory):
        user = next(m["content"] for m in messages if m["role"] == "user")
        return AssistantTurn(content="", reasoning=user.splitlines()[0],
                             tool_calls=[call("make_move", position=memory["task"]["board"].index("."))])

    async def ask(b, side):
        env = load_env("tictactoe", transport="inprocess")
        async with Client(build_agent_server(env, ScriptedPolicy(echo, "echo"))) as c:
            return _payload(await c.call_tool("suggest_move", {"board": b, "agent_plays": side}))

    assert asyncio.run(ask(board, "X"))["reasoning"] == first
    swapped = board.translate(str.maketrans("XO", "OX"))
    assert asyncio.run(ask(swapped, "O"))["reasoning"] == first
