"""Exact game results (`toolgym_tictactoe.exact`): the server's scripted opponent ties, and the walk over every line
of play through the real MCP server (in-process transport) checked against an independent computation -- the
shortcut players' exact outcomes by a walk of the game tree over boards (`shortcuts.game_outcome`) -- and against
line counts worked out by hand."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, replace
from typing import Any

import pytest
from mcp_server_tictactoe import build_server
from mcp_server_tictactoe import game as g
from tg_testutil import board_player
from toolgym_tictactoe import TicTacToeEnv
from toolgym_tictactoe.exact import exact_games, opponent_ties
from toolgym_tictactoe.shortcuts import game_outcome, move_distribution

from toolgym import ScriptedPolicy
from toolgym.mcp_bridge import MCPSession, ServerSpec

_player = board_player


def _shortcut(name: str) -> ScriptedPolicy:
    def choose(board: str) -> int:
        (cell,) = move_distribution(name, board)  # a deterministic shortcut: one cell with probability 1
        return cell

    return _player(choose, name)


def _env(**kw: Any) -> TicTacToeEnv:
    return TicTacToeEnv(transport="inprocess", **kw)


def test_scripted_ties_pick_the_nth_best_move_and_bad_scripts_change_nothing() -> None:
    async def main() -> None:
        srv = build_server()
        s = await MCPSession.open(ServerSpec.inprocess(srv), srv)
        try:
            # O first: all nine cells are equally good for it (each draws), so tie k is cell k
            for k in (0, 4, 8):
                res = (await s.call("new_game", {"seed": 1, "x_starts": False, "opponent_choices": [k]})).json()
                assert srv.games.get(res["game_id"]).board == "." * k + "O" + "." * (8 - k)
            # X takes the centre: O's equally good replies are the four corners; tie 2 is corner 6
            gid = (await s.call("new_game", {"seed": 1, "x_starts": True, "opponent_choices": [2]})).json()["game_id"]
            r = await s.call("make_move", {"game_id": gid, "position": 4})
            assert not r.is_error and "Opponent played 6." in r.text
            # a tie past the opponent's choices: an error, and the move is not played
            gid = (await s.call("new_game", {"seed": 1, "x_starts": True, "opponent_choices": [4]})).json()["game_id"]
            r = await s.call("make_move", {"game_id": gid, "position": 4})
            assert r.is_error and "4 equally good moves" in r.text
            game = srv.games.get(gid)
            assert game.board == "." * 9 and game.moves == []
            # a random opponent's choice is among the free cells: X centre, choice 7 of 0-3, 5-8 is cell 8
            gid = (await s.call("new_game", {"seed": 1, "x_starts": True, "random_move_prob": 1.0,
                                             "opponent_choices": [7]})).json()["game_id"]
            r = await s.call("make_move", {"game_id": gid, "position": 4})
            assert not r.is_error and "Opponent played 8." in r.text
            # only a perfect or a random opponent's choices can be scripted
            r = await s.call("new_game", {"seed": 1, "random_move_prob": 0.5, "opponent_choices": [0]})
            assert r.is_error and "random_move_prob 0" in r.text
        finally:
            await s.close()

    asyncio.run(main())


def test_opponent_ties_count_the_equally_good_replies() -> None:
    # O first (9 draws), X centre (O: 4 corners), ...
    assert opponent_ties(["O0", "X4"]) == [9]
    assert opponent_ties(["X4", "O0"]) == [4]
    assert opponent_ties(["X4", "O0", "X8"]) == [4]
    board = g.play(g.play(g.play(g.EMPTY * 9, 4, "X"), 0, "O"), 8, "X")
    assert opponent_ties(["X4", "O0", "X8", f"O{g.best_moves(board, 'O')[0]}"]) == [4, len(g.best_moves(board, "O"))]


@pytest.mark.parametrize(("name", "opponent"), [("copy-centre", "optimal"), ("first-free", "optimal"),
                                               ("copy-centre", "random")])
def test_exact_walk_equals_the_game_tree_over_boards(name: str, opponent: str) -> None:
    """Through the MCP server, one game per line: the same W/D/L as the board-level tree walk, to rounding."""
    result = asyncio.run(exact_games(_env(), _shortcut(name), opponent=opponent))
    w, d, lost = game_outcome(name, float(opponent == "random"))
    assert (result.win, result.draw, result.loss) == pytest.approx((w, d, lost), abs=1e-12)
    assert result.win + result.draw + result.loss == pytest.approx(1.0, abs=1e-12)
    assert sum(line.weight for line in result.lines) == pytest.approx(1.0, abs=1e-12)
    assert result.capped == result.errored == result.diverged == 0 and result.invalid_per_game == 0
    # every line is a distinct line of play
    assert len({(line.x_starts, tuple(line.moves)) for line in result.lines}) == result.games


def test_exact_walk_counts_turn_cap_games_and_their_lines() -> None:
    """A player that names the centre forever. X first: O's four corner replies, four lines of weight 1/8, each
    stuck at the turn cap. O first: nine equally good openings (1/18 each); the one that takes the centre is stuck
    at once, after each other one X takes the centre and O's n equally good replies split its 1/18 into n lines."""
    result = asyncio.run(exact_games(_env(max_turns=4), _player(lambda board: 4, "centre-forever")))
    assert g.best_moves(g.EMPTY * 9, "O") == list(range(9)) and g.best_moves("....X....", "O") == [0, 2, 6, 8]
    o_first = {o: len(g.best_moves(g.play(g.play(g.EMPTY * 9, o, "O"), 4, "X"), "O")) for o in range(9) if o != 4}
    assert result.games == 4 + 1 + sum(o_first.values())
    assert result.loss == pytest.approx(1.0) and result.capped == pytest.approx(1.0) and result.win == 0
    by_line = {(line.x_starts, tuple(line.moves)): line.weight for line in result.lines}
    assert all(by_line[True, ("X4", f"O{c}")] == pytest.approx(1 / 8) for c in (0, 2, 6, 8))
    assert by_line[False, ("O4",)] == pytest.approx(1 / 18)
    for o, n in o_first.items():
        mine = [w for (xs, moves), w in by_line.items() if not xs and moves[0] == f"O{o}"]
        assert len(mine) == n and sum(mine) == pytest.approx(1 / 18)
    assert result.invalid_per_game > 2  # every game keeps naming the taken centre


def test_exact_walk_refuses_move_tasks_and_runaway_walks() -> None:
    with pytest.raises(ValueError, match="whole games"):
        asyncio.run(exact_games(_env(task="move"), _shortcut("copy-centre")))
    with pytest.raises(ValueError, match="'optimal' or 'random'"):
        asyncio.run(exact_games(_env(), _shortcut("copy-centre"), opponent="trappy"))
    with pytest.raises(ValueError, match="passed 5 games"):
        asyncio.run(exact_games(_env(), _shortcut("copy-centre"), max_games=5))


def test_exact_curve_reads_the_walks_and_draws_the_mean(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """`examples/tictactoe/exact_curve.py` on `exact_games.py --json`-shaped files: each run's row, the mean with a
    t-interval over runs (3 runs: t 4.303), a missing checkpoint left out of its step's mean, and the PNG."""
    import json
    import math
    import sys

    from tg_testutil import example_module

    mod = example_module("examples/tictactoe/exact_curve.py")
    m, lo, hi = mod.mean_t([0.01, 0.02, 0.03])
    assert m == pytest.approx(0.02) and hi - m == pytest.approx(4.303 * 0.01 / math.sqrt(3))
    assert lo == pytest.approx(max(0.0, 0.02 - 4.303 * 0.01 / math.sqrt(3)))
    assert mod.mean_t([0.2]) == (0.2, 0.2, 0.2)
    twelve = [0.01 * i for i in range(12)]  # 11 degrees of freedom: t 2.201, not the normal 1.96
    sd = math.sqrt(sum((v - 0.055) ** 2 for v in twelve) / 11)
    assert mod.mean_t(twelve)[2] - 0.055 == pytest.approx(2.201 * sd / math.sqrt(12))

    def put(name: str, loss: float) -> None:
        (tmp_path / f"{name}.json").write_text(json.dumps({f"hf:{name}": {"loss": loss, "lines": []}}))

    put("start", 0.3)
    for run, losses in (("a", (0.2, 0.1)), ("b", (0.4, 0.05))):
        put(f"{run}-step10", losses[0])
        put(run, losses[1])
    put("c", 0.06)  # no step-10 checkpoint
    run = tmp_path / "runs" / "d"  # a run whose own periodic eval was exact (eval_exact): steps 5, 10 and 20
    run.mkdir(parents=True)
    run.joinpath("metrics.jsonl").write_text("\n".join(json.dumps(r) for r in (
        {"step": 5, "eval/exact/loss": 0.5}, {"step": 6, "loss": 0.1}, {"step": 10, "eval/exact/loss": 0.1},
        {"step": 20, "eval/exact/loss": 0.02})) + "\n")
    sys.argv = ["exact_curve.py", str(tmp_path), "a", "b", "c", str(run), "--start", "start", "--steps", "10",
                "--last", "20", "-o", str(tmp_path / "curve.png")]
    mod.main()
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in out.splitlines()
            if line.startswith("| ")}
    assert rows["run"] == ["step 0", "step 5", "step 10", "step 20"]
    assert rows["a"] == ["30.00", "-", "20.00", "10.00"] and rows["c"] == ["30.00", "-", "-", "6.00"]
    assert rows["d"] == ["30.00", "50.00", "10.00", "2.00"]
    mean = rows["mean (95 % t-interval over runs)"]
    assert mean[1] == "-"  # step 5: one run of four
    assert mean[2].startswith("23.33 (") and mean[3].startswith("5.75 (")  # step 10: a, b, d; step 20: all four
    assert (tmp_path / "curve.png").stat().st_size > 10_000
    # --kept: a run that kept its best (best_metric) reads best/value where it logged one, the eval elsewhere
    kept = tmp_path / "runs" / "e"
    kept.mkdir()
    kept.joinpath("metrics.jsonl").write_text("\n".join(json.dumps(r) for r in (
        {"step": 5, "eval/exact/loss": 0.5}, {"step": 10, "eval/exact/loss": 0.1, "best/value": 0.1},
        {"step": 20, "eval/exact/loss": 0.3, "best/value": 0.1, "best/reverted": 1.0})) + "\n")
    assert mod.in_training(kept) == {5: 0.5, 10: 0.1, 20: 0.3}
    assert mod.in_training(kept, kept=True) == {5: 0.5, 10: 0.1, 20: 0.1}


def test_exact_games_script_prints_the_table_and_fails_when_not_exact(capsys) -> None:  # type: ignore[no-untyped-def]
    """`examples/tictactoe/exact_games.py`: the minimax expert loses nothing and exits normally; the random player
    does not answer a board the same way twice, so its walk diverges and the script exits 3, saying so."""
    import sys

    from tg_testutil import example_module

    mod = example_module("examples/tictactoe/exact_games.py")
    sys.argv = ["exact_games.py", "scripted:minimax"]
    mod.main()
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| scripted:minimax"))
    assert [c.strip() for c in row.split("|")[2:6]] == ["0.00", "100.00", "0.00", "0.00"]
    sys.argv = ["exact_games.py", "scripted:random"]
    with pytest.raises(SystemExit) as stop:
        mod.main()
    assert stop.value.code == 3 and "not exact: scripted:random" in capsys.readouterr().err


def test_served_walk_asks_every_board_once_and_scores_like_the_tree_walk() -> None:
    """`examples/tictactoe/served_exact.py`'s level-by-level walk (`collect`) reaches every board a deterministic
    player faces, each asked once, and `score` then equals the shortcut tree walk to 1e-12 against both opponents; a
    player that answers one reachable board with an occupied cell forfeits exactly the lines through it."""
    from tg_testutil import example_module

    mod = example_module("examples/tictactoe/served_exact.py")
    for name in ("copy-centre", "first-free"):
        for p in (0.0, 1.0):
            asked: list[str] = []

            async def answer(board: str, name: str = name) -> int | None:
                asked.append(board)
                (cell,) = move_distribution(name, board)
                return cell

            moves = asyncio.run(mod.collect(answer, p))
            assert len(asked) == len(set(asked)) == len(moves)
            got = mod.score(moves, p)
            assert (got["win"], got["draw"], got["loss"]) == pytest.approx(game_outcome(name, p), abs=1e-12)
            assert got["forfeited"] == 0.0
    async def centre(board: str) -> int | None:
        (cell,) = move_distribution("copy-centre", board)
        return cell

    moves = asyncio.run(mod.collect(centre, 0.0))
    empty = g.EMPTY * 9  # X starts on the empty board half the time: an occupied answer there forfeits those lines
    broken = {**moves, empty: None}
    got = mod.score(broken, 0.0)
    assert got["forfeited"] == pytest.approx(0.5)  # the O-started half keeps its own outcome, which sums to 0.5
    assert got["win"] + got["draw"] + got["loss"] - got["forfeited"] == pytest.approx(0.5)
    assert 0.5 <= got["loss"] <= 0.5 + game_outcome("copy-centre", 0.0)[2]


def test_served_exact_script_asks_toolgym_serve(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """The script end to end: `toolgym serve tictactoe -m scripted:minimax` over stdio, every board sent as O with
    the colours swapped: the minimax player loses no line against the optimal opponent and the JSON holds its moves;
    the shortcut rows are printed beside it. Options after `--` go to toolgym serve."""
    import json
    import sys

    from tg_testutil import example_module

    mod = example_module("examples/tictactoe/served_exact.py")
    out = tmp_path / "served.json"
    sys.argv = ["served_exact.py", "scripted:minimax", "--side", "O", "--json", str(out)]
    assert mod.main() == 0
    printed = capsys.readouterr().out
    assert "| served scripted:minimax (as O) | 0.00 | 100.00 | 0.00 |" in printed
    assert "| shortcut copy-centre | 0.00 | 89.81 | 10.19 |" in printed
    got = json.loads(out.read_text())
    assert got["errors"] == 0 and got["loss"] == 0.0 and got["boards"] == len(got["moves"]) > 50
    assert all(m in g.free_cells(b) for b, m in got["moves"].items())
    # options after -- reach toolgym serve: a wrong env option stops the server, so the script exits 2
    assert mod.main(["scripted:minimax", "--", "-a", "suggest_turnz=2"]) == 2
    assert mod.main(["scripted:minimax", "--json", str(out), "--", "-a", "suggest_turns=1"]) == 0
    assert json.loads(out.read_text())["moves"] == got["moves"]


def test_seeded_line_replays_sampled_games_and_the_seed_draw_script_flags_another_player(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A deterministic player's walk replays its seeded games through the real server move for move (the walk alone
    says which line a seed plays), its rate over many seeds is the exact one, and games of another player are not
    replayed: `seed_draw.py` prints the table and exits 3 for them."""
    from tg_testutil import example_module
    from toolgym_tictactoe.exact import Line, seeded_line

    from toolgym.rollout import run_rollouts

    env, player = _env(), _shortcut("copy-centre")
    walk = asyncio.run(exact_games(env, player))

    def sample(policy: Any) -> list[Any]:
        jobs = [(i, 0, {"seed": 7000 + i, "x_starts": i % 2 == 0, "random_move_prob": 0.0}) for i in range(40)]

        async def go() -> list[Any]:
            env = _env()
            await env.start()
            return await run_rollouts(env, policy, jobs, 8)

        return asyncio.run(go())

    games = sample(player)
    for t in games:
        line = seeded_line(walk.lines, t.task["seed"], t.task["x_starts"], 0.0)
        assert line is not None and line.moves == t.info["result"]["moves"]
        assert (line.status == "loss") == (t.metrics["loss"] > 0)
    assert any(t.metrics["loss"] > 0 for t in games) and any(t.metrics["loss"] == 0 for t in games)
    many = [seeded_line(walk.lines, i, i % 2 == 0, 0.0) for i in range(4000)]
    rate = sum(line.status == "loss" for line in many if line) / len(many)
    assert all(many) and abs(rate - walk.loss) < 4 * (walk.loss * (1 - walk.loss) / len(many)) ** 0.5
    # lines that disagree on the player's move after one history are not one player's walk
    bad = [Line(True, [], 0.5, "draw", ["X0", "O4"]), Line(True, [], 0.5, "draw", ["X1", "O4"])]
    with pytest.raises(ValueError, match="not one player's walk"):
        seeded_line(bad, 1, True, 0.0)
    assert seeded_line(bad, 1, False, 0.0) is None  # no line for that start
    # the script: the player's own games all replayed; another player's (first-free) not
    exact_json = tmp_path / "walk.json"
    lines = [asdict(x) for x in walk.lines]
    exact_json.write_text(json.dumps({"scripted:copy-centre": {**walk.summary(), "lines": lines}}))

    def results(trajs: list[Any], name: str) -> str:
        path = tmp_path / name
        path.write_text("".join(json.dumps(t.to_dict(), default=str) + "\n" for t in trajs))  # as toolgym eval
        return str(path)

    mod = example_module("examples/tictactoe/seed_draw.py")
    assert mod.main([f"{exact_json}={results(games, 'own.jsonl')}", "--fresh", "200"]) == 0
    row = next(s for s in capsys.readouterr().out.splitlines() if s.startswith("| scripted:copy-centre |"))
    lost = sum(t.metrics["loss"] > 0 for t in games)
    assert row.split(" | ")[1:5] == ["40", "40", f"{100 * lost / 40:.2f}", f"{100 * lost / 40:.2f}"]
    other = sample(_shortcut("first-free"))
    assert mod.main([f"{exact_json}={results(other, 'other.jsonl')}", "--fresh", "10"]) == 3
    assert "not the walked player's games" in capsys.readouterr().err
    # an errored game counts as lost and is not replayed; games against two opponents are refused (exit 2)
    errored = results([replace(games[0], info={}, metrics={}, error="server died")], "errored.jsonl")
    assert mod.main([f"{exact_json}={errored}", "--fresh", "10"]) == 3
    row = next(s for s in capsys.readouterr().out.splitlines() if s.startswith("| scripted:copy-centre |"))
    assert row.split(" | ")[1:4] == ["1", "0", "100.00"]
    other_opponent = replace(games[0], example_id=10_000, task={**games[0].task, "random_move_prob": 1.0}, metrics={})
    mixed = results([*games, other_opponent], "mixed.jsonl")
    (tmp_path / "torn.jsonl").write_text("{not json\n")
    assert mod.main([f"{exact_json}={tmp_path / 'torn.jsonl'}"]) == 2  # no rollouts: one line, not a table of 0
    assert "no rollouts" in capsys.readouterr().err
    assert mod.main([f"{exact_json}={mixed}", "--fresh", "10"]) == 2
    assert "mix opponents" in capsys.readouterr().err
