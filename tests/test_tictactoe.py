"""Tic-tac-toe must-holds: the minimax expert never loses, the optimal opponent never loses, identical positions get
identical replies, and the opponent's tie-break is not biased to one cell."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import pytest
from mcp_server_tictactoe import build_server
from mcp_server_tictactoe import game as g
from toolgym_tictactoe import TicTacToeEnv

from toolgym import load_policy
from toolgym.mcp_bridge import MCPSession, ServerSpec
from toolgym.rollout import run_rollouts


def _x_never_loses(board: str) -> bool:
    """X to move, choosing any of `best_moves`; O answers with every legal move (any opponent at all)."""
    if g.is_over(board):
        return g.winner(board) != "O"
    for x in g.best_moves(board, "X"):
        b = g.play(board, x, "X")
        if g.is_over(b):
            if g.winner(b) == "O":
                return False
            continue
        if not all(_x_never_loses(g.play(b, o, "O")) for o in g.free_cells(b)):
            return False
    return True


def test_minimax_expert_never_loses_to_any_opponent_exhaustive() -> None:
    assert _x_never_loses(g.EMPTY * 9)  # X starts
    assert all(_x_never_loses(g.play(g.EMPTY * 9, o, "O")) for o in range(9))  # O starts anywhere


def _o_outcomes(board: str, seed: int, to_move: str, out: Counter) -> None:
    """Every X strategy (all X moves) against the seeded optimal opponent (random_move_prob 0)."""
    if g.is_over(board):
        out[g.winner(board) or "draw"] += 1
        return
    if to_move == "O":
        _o_outcomes(g.play(board, g.opponent_move(board, seed, 0.0), "O"), seed, "X", out)
    else:
        for x in g.free_cells(board):
            _o_outcomes(g.play(board, x, "X"), seed, "O", out)


@pytest.mark.parametrize("x_starts", [True, False])
def test_optimal_opponent_never_loses_to_any_x_strategy(x_starts: bool) -> None:
    for seed in range(8):
        out: Counter = Counter()
        _o_outcomes(g.EMPTY * 9, seed, "X" if x_starts else "O", out)
        assert out["X"] == 0, (seed, out)
        assert out["O"] > 0 and out["draw"] > 0  # the tree really was explored


def test_tie_break_covers_all_cells() -> None:
    """O's first move on an empty board (prob 0): all 9 cells are equally good; the choice must spread over them."""
    counts = Counter(g.opponent_move(g.EMPTY * 9, seed, 0.0) for seed in range(900))
    assert set(counts) == set(range(9)), counts
    assert max(counts.values()) < 160 and min(counts.values()) > 50, counts  # ~100 each


def test_tie_break_is_among_best_moves_and_varies() -> None:
    board = g.play(g.EMPTY * 9, 4, "X")  # X in the centre: O's best replies are the 4 corners
    replies = Counter(g.opponent_move(board, seed, 0.0) for seed in range(400))
    assert set(replies) == {0, 2, 6, 8}, replies
    assert max(replies.values()) < 160


def test_trappy_opponent_plays_best_moves_that_set_traps() -> None:
    """trap_moves on constructed positions (O opened, X took the centre): the best moves after which X has no win, no
    block and a losing cell; the trappy opponent plays only those (uniformly), and none when there is no trap."""
    after_corner = g.play(g.play(g.EMPTY * 9, 0, "O"), 4, "X")
    assert g.best_moves(after_corner, "O") == [1, 2, 3, 5, 6, 7, 8]
    assert g.trap_moves(after_corner, "O") == [5, 7, 8]  # far edges and the opposite corner: X's corner loses there
    assert g.trap_moves(g.play(g.play(g.EMPTY * 9, 1, "O"), 4, "X"), "O") == [3, 5, 6, 8]
    x_centre = g.play(g.EMPTY * 9, 4, "X")
    assert g.trap_moves(x_centre, "O") == []  # after X's centre every O corner leaves X only drawing moves
    replies = Counter(g.opponent_move(after_corner, seed, 0.0, "O", "trappy") for seed in range(300))
    assert set(replies) == {5, 7, 8} and min(replies.values()) > 60, replies
    assert set(g.opponent_move(x_centre, seed, 0.0, "O", "trappy") for seed in range(200)) == {0, 2, 6, 8}


@pytest.mark.anyio
async def test_trappy_opponent_draws_the_expert_and_sets_its_traps_in_env_games() -> None:
    """Through the env: still optimal (the minimax expert draws every game), and every reply of the p=0 trappy
    opponent to a forced-move player (wins and blocks right, quiet moves random) is a trap move when one exists. The
    task rows carry the style, so a run's env plays the opponent of its task pool (a `task_schedule` phase's)."""
    tasks = TicTacToeEnv(opponent_style="trappy").build_dataset(60, seed=21)
    assert {t["opponent_style"] for t in tasks} == {"trappy"}
    assert "opponent_style" not in TicTacToeEnv().build_dataset(5, seed=21)[0]
    env = TicTacToeEnv(transport="inprocess")
    async with env:
        expert = await run_rollouts(env, load_policy("scripted:minimax", env), [(i, 0, t) for i, t in enumerate(tasks[:30])])
        forced = await run_rollouts(env, load_policy("scripted:imperfect", env, mistake_prob=1.0, mistakes="quiet",
                                                     seed=4), [(i, 0, t) for i, t in enumerate(tasks)])
    assert _outcomes(expert) == Counter({"draw": 30})
    trapped = 0
    for t in forced:
        assert t.error is None and t.info["result"]["style"] == "trappy"
        board = g.EMPTY * 9
        for m in t.info["result"]["moves"]:
            side, cell = m[0], int(m[1])
            if side == "O":
                traps = g.trap_moves(board, "O")
                assert cell in (traps or g.best_moves(board, "O")), (board, m)
                trapped += bool(traps)
            board = g.play(board, cell, side)
    assert trapped > 30
    with pytest.raises(ValueError, match="opponent_style"):
        TicTacToeEnv(opponent_style="sneaky")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_an_invalid_move_forfeits_the_game_only_with_invalid_move_forfeit() -> None:
    """A player that plays an occupied cell once (on its second turn) and otherwise the first free cell: with the
    default `retry` the game goes on after the error; with `forfeit` (carried by the task rows) it ends there,
    unfinished, scored as a loss with the invalid-move penalty."""
    from toolgym_tictactoe import board_from_messages

    from toolgym.policies.scripted import ScriptedPolicy, call
    from toolgym.types import AssistantTurn

    def act(messages, memory):  # type: ignore[no-untyped-def]
        board = board_from_messages(messages)
        memory["turns"] = memory.get("turns", 0) + 1
        taken = [i for i, c in enumerate(board) if c != g.EMPTY]
        cell = taken[0] if memory["turns"] == 2 and taken else g.free_cells(board)[0]
        return AssistantTurn(content="", reasoning="move", tool_calls=[call("make_move", position=cell)])

    results = {}
    for mode in ("retry", "forfeit"):
        tasks = TicTacToeEnv(invalid_move=mode).build_dataset(6, seed=2)
        assert ("invalid_move" in tasks[0]) == (mode == "forfeit")
        env = TicTacToeEnv(transport="inprocess")  # the run's env: the rows say what an invalid move costs
        async with env:
            results[mode] = await run_rollouts(env, ScriptedPolicy(act), [(i, 0, t) for i, t in enumerate(tasks)])
    for t in results["retry"]:
        assert t.metrics["invalid_moves"] == 1 and len(t.calls) > 2  # the game went on
    for t in results["forfeit"]:
        assert t.error is None and len(t.calls) == 2 and not t.calls[-1].exec_ok
        assert t.metrics["loss"] == 1.0 and t.info["result"]["status"] == "in_progress"
        assert t.rewards["outcome"] == 0.0 and t.rewards["invalid_move_penalty"] < 0
    with pytest.raises(ValueError, match="invalid_move"):
        TicTacToeEnv(invalid_move="ignore")  # type: ignore[arg-type]


def test_trappy_opponent_beats_the_shortcuts_more_often_exactly() -> None:
    """Over the whole game tree: the copy-centre habit that every valid RL run sat at loses about twice as often to
    the trappy optimal opponent (19.9 %) as to the uniform one (10.2 %)."""
    from toolgym_tictactoe.shortcuts import game_outcome

    uniform, trappy = game_outcome("copy-centre", 0.0)[2], game_outcome("copy-centre", 0.0, "trappy")[2]
    assert abs(uniform - 0.102) < 0.001 and abs(trappy - 0.199) < 0.001
    assert game_outcome("copy", 0.0, "trappy")[2] > game_outcome("copy", 0.0)[2] + 0.05
    assert game_outcome("copy", 1.0, "trappy") == game_outcome("copy", 1.0)  # a random opponent has no style


def test_same_position_same_reply_through_the_server() -> None:
    """Two games of one seed reaching the same board get the same reply, even with a noisy opponent."""

    async def play(seed: int, xs: list[int]) -> list[str]:
        s = await MCPSession.open(ServerSpec.inprocess(build_server()), build_server())
        try:
            gid = (await s.call("new_game", {"seed": seed, "x_starts": True, "random_move_prob": 0.5})).json()["game_id"]
            texts = []
            for x in xs:
                r = await s.call("make_move", {"game_id": gid, "position": x})
                texts.append(r.text)
                if r.is_error or "Game over" in r.text:
                    break
            return texts
        finally:
            await s.close()

    async def main() -> None:
        seen_diff = False
        for seed in range(6):
            a, b = await play(seed, [4, 0, 8, 2, 6, 1, 3, 5, 7]), await play(seed, [4, 0, 8, 2, 6, 1, 3, 5, 7])
            assert a == b
            c = await play(seed + 100, [4, 0, 8, 2, 6, 1, 3, 5, 7])
            seen_diff |= a != c
        assert seen_diff  # the reply really depends on the seed

    asyncio.run(main())


def test_piece_lists_agree_with_the_grid() -> None:
    """Every board the server shows lists X's and O's cells ('X: 0, 4. O: 2, 8.') exactly where the grid has them."""
    import re

    from toolgym_tictactoe import parse_board

    async def main() -> None:
        s = await MCPSession.open(ServerSpec.inprocess(build_server()), build_server())
        try:
            seen = 0
            for seed in range(4):
                start = await s.call("new_game", {"seed": seed, "x_starts": seed % 2 == 0, "random_move_prob": 0.5})
                gid, texts = start.json()["game_id"], [start.json()["board"]]
                for x in [4, 0, 8, 2, 6, 1, 3, 5, 7]:
                    r = await s.call("make_move", {"game_id": gid, "position": x})
                    if not r.is_error:
                        texts.append(r.text)
                    if "Game over" in r.text:
                        break
                for text in texts:
                    board = parse_board(text)
                    xs, os_ = re.search(r"X: ([\d, ]+|none)\. O: ([\d, ]+|none)\.", text).groups()
                    want = {side: ", ".join(str(i) for i, c in enumerate(board) if c == side) or "none"
                            for side in "XO"}
                    assert (xs, os_) == (want["X"], want["O"]), text
                    seen += 1
            assert seen > 12
        finally:
            await s.close()

    asyncio.run(main())
    assert g.pieces(".........") == "X: none. O: none."


def test_game_table_evicts_the_oldest_games_past_max_games() -> None:
    """The game table is bounded (docs/security.md): past `max_games` the least recently used idle games are evicted
    (here every game is idle at once: idle_s=0), a call on an evicted id is a clear error result, the newest games
    play on and the table never holds more than the cap."""
    from mcp_server_tictactoe.server import MAX_GAMES

    assert build_server().games.max_games == MAX_GAMES == 100_000  # the default the security page states
    cap = 3
    srv = build_server(max_games=cap, max_client_games=cap, idle_s=0)

    async def main() -> None:
        s = await MCPSession.open(ServerSpec.inprocess(srv), srv)
        try:
            ids = []
            for seed in range(40):
                r = await s.call("new_game", {"seed": seed, "x_starts": True})
                ids.append(r.json()["game_id"])
                assert len(srv.games.games) == min(seed + 1, cap)
            assert list(srv.games.games) == ids[-cap:]  # the newest survive, in creation order
            for gid in (ids[0], ids[-cap - 1]):
                for tool, args in [("get_board", {}), ("make_move", {"position": 4}), ("game_result", {})]:
                    r = await s.call(tool, {"game_id": gid, **args})
                    assert r.is_error and f"unknown game_id {gid!r}" in r.text and "new_game" in r.text, r.text
            for gid in ids[-cap:]:
                r = await s.call("make_move", {"game_id": gid, "position": 4})
                assert not r.is_error and "You played 4." in r.text, r.text
        finally:
            await s.close()

    asyncio.run(main())


def _outcomes(trajs):
    assert all(t.error is None for t in trajs), [t.error for t in trajs if t.error][:3]
    return Counter(max(("win", "draw", "loss"), key=lambda k: t.metrics[k]) for t in trajs)


@pytest.mark.anyio
async def test_minimax_player_never_loses_across_opponent_strengths() -> None:
    env = TicTacToeEnv(transport="inprocess", min_random_move_prob=0.0, max_random_move_prob=1.0, num_groups=10)
    tasks = env.build_dataset(120, seed=3)
    assert min(t["random_move_prob"] for t in tasks) < 0.1 and max(t["random_move_prob"] for t in tasks) > 0.9
    async with env:
        trajs = await run_rollouts(env, load_policy("scripted:minimax", env), [(i, 0, t) for i, t in enumerate(tasks)])
    out = _outcomes(trajs)
    assert out["loss"] == 0 and out["win"] > 20, out
    assert all(t.reward >= 0.5 + 0.2 - 1e-9 for t in trajs)  # draw or win, full format credit, no penalty


@pytest.mark.anyio
async def test_minimax_vs_optimal_opponent_always_draws() -> None:
    env = TicTacToeEnv(transport="inprocess")
    tasks = env.build_dataset(60, seed=7)
    assert {t["x_starts"] for t in tasks} == {True, False}
    async with env:
        trajs = await run_rollouts(env, load_policy("scripted:minimax", env),
                                   [(i, r, t) for i, t in enumerate(tasks) for r in range(2)])
    assert _outcomes(trajs) == Counter({"draw": 120})


@pytest.mark.anyio
async def test_random_player_never_beats_optimal_opponent() -> None:
    env = TicTacToeEnv(transport="inprocess")
    tasks = env.build_dataset(80, seed=11)
    async with env:
        trajs = await run_rollouts(env, load_policy("scripted:random", env, seed=5),
                                   [(i, r, t) for i, t in enumerate(tasks) for r in range(2)])
    out = _outcomes(trajs)
    assert out["win"] == 0 and out["loss"] > 40, out


@pytest.mark.anyio
async def test_rollouts_of_one_example_get_identical_replies() -> None:
    """Across 8 rollouts of each example (noisy opponent, imperfect player), a board always gets the same reply."""
    env = TicTacToeEnv(transport="inprocess", min_random_move_prob=0.5, max_random_move_prob=0.5)
    tasks = env.build_dataset(6, seed=1)
    async with env:
        trajs = await run_rollouts(env, load_policy("scripted:imperfect", env, mistake_prob=0.7, seed=2),
                                   [(i, r, t) for i, t in enumerate(tasks) for r in range(8)])
    assert all(t.error is None for t in trajs)
    reply: dict[tuple[int, str], str] = {}
    shared = 0
    for t in trajs:
        moves = t.info["result"]["moves"]
        board = g.EMPTY * 9
        for m in moves:
            side, cell = m[0], int(m[1])
            if side == "O":
                key = (t.example_id, board)
                if key in reply:
                    shared += 1
                    assert reply[key] == m, (key, reply[key], m)
                reply[key] = m
            board = g.play(board, cell, side)
    assert shared > 20  # positions really were revisited


def test_dataset_stratified_and_validated() -> None:
    env = TicTacToeEnv(min_random_move_prob=0.2, max_random_move_prob=0.6, num_groups=4)
    rows = env.build_dataset(8)
    for i, r in enumerate(rows):
        lo = 0.2 + (i % 4) * 0.1
        assert lo - 1e-9 <= r["random_move_prob"] <= lo + 0.1 + 1e-9
    assert env.build_dataset(8) == rows  # deterministic
    with pytest.raises(ValueError, match="random_move_prob"):
        TicTacToeEnv(min_random_move_prob=0.7, max_random_move_prob=0.2)
    with pytest.raises(ValueError, match="transport"):
        TicTacToeEnv(transport="carrier-pigeon")


def _x_to_move_positions() -> set[str]:
    """Every legal non-terminal position with X to move (either side may have started)."""
    seen: set[str] = set()

    def walk(board: str, to_move: str) -> None:
        if g.is_over(board):
            return
        if to_move == "X":
            if board in seen:
                return
            seen.add(board)
        for c in g.free_cells(board):
            walk(g.play(board, c, to_move), g.other(to_move))

    walk(g.EMPTY * 9, "X")
    walk(g.EMPTY * 9, "O")
    return seen


def test_teacher_reasons_are_true_and_moves_are_best() -> None:
    """The expert's think block (what SFT imitates) states a true reason, and the move it names is minimax-best."""
    from toolgym_tictactoe import completing_cells, explain_best_move, scan_lines

    kinds: Counter = Counter()
    for board in _x_to_move_positions():
        cell, why = explain_best_move(board)
        assert cell in g.best_moves(board, "X"), (board, cell)
        *scan, verdict = why.split("\n")
        assert "\n".join(scan) == scan_lines(board) and verdict.endswith(f"I play {cell}."), why
        assert [item.split(":")[0] for item in scan] == ["".join(map(str, line)) for line in g.LINES]
        for item in scan:  # every line lists its three cells' contents (free cells by number) and its threat
            cells, rest = item.split(": ")
            contents, mark = rest.split()[:3], rest.split()[3:]
            assert [board[int(c)] if board[int(c)] != "." else c for c in cells] == contents, item
            expected: list[str] = []  # a mark exactly on lines one move from three, naming the free cell
            for side, word in (("X", "win"), ("O", "block")):
                if contents.count(side) == 2 and any(c.isdigit() for c in contents):
                    expected = [word, next(c for c in contents if c.isdigit())]
            assert mark == expected, item
        if verdict.startswith("I win"):
            kinds["win"] += 1
            assert g.winner(g.play(board, cell, "X")) == "X"
        elif verdict.startswith("O wins"):
            kinds["block"] += 1
            assert not completing_cells(board, "X") and g.winner(g.play(board, cell, "O")) == "O"
        else:
            kinds["quiet"] += 1
            assert not completing_cells(board, "X") and not completing_cells(board, "O")
    assert min(kinds.values()) > 50, kinds  # all three kinds of reason occur


def test_teacher_random_tie_break_spreads_over_best_moves() -> None:
    """With an RNG the teacher draws its quiet move among all minimax-best moves (the same text otherwise), so SFT on
    its games leaves RL more than one good move to choose from; a bad `tie_break` is refused up front."""
    import random

    from toolgym_tictactoe import explain_best_move, minimax_player

    rng, differs, spread = random.Random(0), 0, Counter()
    for board in _x_to_move_positions():
        fixed = explain_best_move(board)
        cell, why = explain_best_move(board, "random", rng)
        assert cell in g.best_moves(board, "X") and why.endswith(f"I play {cell}.")
        assert why.split("\n")[:-1] == fixed[1].split("\n")[:-1]  # the scan is the same text
        if not why.endswith("No threats. I play %d." % cell):
            assert (cell, why) == fixed  # a win or a block has one answer
        differs += cell != fixed[0]
        if board == "." * 9:
            spread.update(explain_best_move(board, "random", rng)[0] for _ in range(200))
    assert differs > 100 and len(spread) == 9, (differs, spread)  # every opening cell draws (all are minimax-best)
    with pytest.raises(ValueError, match="tie_break"):
        minimax_player(None, seed=0, tie_break="centre")


def test_teacher_exploit_tie_break_plays_the_best_safe_move() -> None:
    """`tie_break="exploit"`: every quiet move is minimax-best (never loses to optimal play) and has the highest
    expected reward vs a random opponent among those, so its value from the empty board is the exact best-safe
    value `ceiling.py` computes independently; it differs from the fixed preference somewhere."""
    import importlib.util
    from pathlib import Path

    from toolgym_tictactoe import explain_best_move, safe_value

    changed = 0
    for board in _x_to_move_positions():
        cell, why = explain_best_move(board, "exploit")
        assert cell in g.best_moves(board, "X") and why.endswith(f"I play {cell}.")
        if why.endswith(f"No threats. I play {cell}."):
            after = safe_value(g.play(board, cell, "X"), False)
            assert all(after >= safe_value(g.play(board, c, "X"), False) - 1e-12 for c in g.best_moves(board, "X"))
        changed += cell != explain_best_move(board)[0]
    assert changed > 20
    path = Path(__file__).parents[1] / "examples" / "tictactoe" / "ceiling.py"
    spec = importlib.util.spec_from_file_location("ceiling", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    exact = (safe_value("." * 9, True) + safe_value("." * 9, False)) / 2
    assert exact == pytest.approx(mod._score(mod.exact_outcome("best-safe", 1.0)))
    assert exact > mod._score(mod.exact_outcome("teacher", 1.0)) + 0.02


def test_think_report_scores_the_teacher_perfectly_and_a_random_player_not(tmp_path) -> None:
    """`examples/tictactoe/think_report.py` on real eval output: the minimax teacher's own games check out 100 % on
    every column; the random player (which writes the scan, then `I'll play somewhere free.`) has every scan right
    and no verdict."""
    import importlib.util
    from pathlib import Path

    from typer.testing import CliRunner

    from toolgym.cli import app

    path = Path(__file__).parents[1] / "examples" / "tictactoe" / "think_report.py"
    spec = importlib.util.spec_from_file_location("think_report", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    stats = {}
    for name, player, extra in (("minimax", "minimax", []), ("minimax-tb", "minimax", ["--model-arg", "tie_break=random"]),
                                ("track", "minimax", ["--model-arg", "think=track", "--model-arg", "tie_break=exploit"]),
                                ("random", "random", [])):
        out = tmp_path / name
        res = CliRunner().invoke(app, ["eval", "tictactoe", "-m", f"scripted:{player}", *extra, "-n", "40", "-a",
                                       "transport=inprocess", "-a", "max_random_move_prob=1", "-a",
                                       "min_random_move_prob=1", "-o", str(out)], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        stats[name] = mod.report([out], "track" if name == "track" else "scan")
    for teacher in (stats["minimax"], stats["minimax-tb"], stats["track"]):  # either tie-break: every quiet verdict names a best move
        assert set(teacher) == {"win", "block", "quiet"}
        for c in teacher.values():
            assert c["turns"] > 0 and all(c[k] == c["turns"] for k in ("scan_ok", "verdict_ok", "move_as_said", "legal", "best"))
    rnd = sum(stats["random"].values(), Counter())
    assert rnd["legal"] == rnd["scan_ok"] == rnd["move_as_said"] == rnd["turns"] > 0
    assert rnd["verdict_ok"] == 0 and rnd["best"] < rnd["turns"]


def test_ceiling_walks_the_envs_game_tree(tmp_path) -> None:
    """`examples/tictactoe/ceiling.py`: exact outcome probabilities sum to one, no minimax player loses, the safe
    best-response is at least as good as either teacher, and the exact teacher numbers agree with the real env (200
    sampled games of `scripted:minimax` vs the random opponent, through the server)."""
    import importlib.util
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from toolgym.cli import app

    path = Path(__file__).parents[1] / "examples" / "tictactoe" / "ceiling.py"
    spec = importlib.util.spec_from_file_location("ceiling", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for p in (0.0, 0.45, 1.0):
        res = {name: mod.exact_outcome(name, p) for name in mod.PLAYERS}
        for w, d, lo in res.values():
            assert abs(w + d + lo - 1) < 1e-9 and lo < 1e-12
        assert mod._score(res["best-safe"]) >= max(mod._score(res["teacher"]), mod._score(res["teacher-random"]))
    assert mod.exact_outcome("teacher", 0.0)[1] == pytest.approx(1.0)
    assert mod.exact_outcome("best-safe", 1.0)[0] > mod.exact_outcome("teacher", 1.0)[0] + 0.03
    with pytest.raises(ValueError, match="player"):
        mod.exact_outcome("oracle", 1.0)
    out = tmp_path / "mm"
    r = CliRunner().invoke(app, ["eval", "tictactoe", "-m", "scripted:minimax", "-n", "200", "-a", "transport=inprocess",
                                 "-a", "max_random_move_prob=1", "-a", "min_random_move_prob=1", "-o", str(out)],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    wins = [json.loads(line)["metrics"]["win"] for line in (out / "results.jsonl").read_text().splitlines()]
    assert abs(sum(wins) / len(wins) - mod.exact_outcome("teacher", 1.0)[0]) < 0.07  # 3.3 standard errors


@pytest.mark.anyio
async def test_imperfect_teacher_calls_an_occupied_cell_then_recovers() -> None:
    """`invalid_prob`: on some moves the teacher first calls an occupied cell, then, after the server's error, plays
    the move it would have played; games still finish, never with two invalid calls in a row; 0 keeps the old games."""
    env = TicTacToeEnv(transport="inprocess")
    tasks = env.build_dataset(12, seed=5)
    async with env:
        trajs = await run_rollouts(env, load_policy("scripted:imperfect", env, mistake_prob=0.0, invalid_prob=0.5, seed=1),
                                   [(i, 0, t) for i, t in enumerate(tasks)])
        clean = await run_rollouts(env, load_policy("scripted:imperfect", env, mistake_prob=0.0, seed=1),
                                   [(i, 0, t) for i, t in enumerate(tasks)])
    assert sum(t.metrics["invalid_moves"] for t in trajs) > 5 and all(t.metrics["invalid_moves"] == 0 for t in clean)
    for t in trajs:
        assert t.error is None and t.info["result"]["status"] != "in_progress"
        ok = [c.exec_ok for c in t.calls if c.name == "make_move"]
        assert ok[-1] and not any(not a and not b for a, b in zip(ok, ok[1:], strict=False))
    assert _outcomes(clean)["loss"] == 0  # the minimax expert underneath
    with pytest.raises(ValueError, match="invalid_prob"):
        load_policy("scripted:imperfect", env, invalid_prob=1.5)


@pytest.mark.anyio
async def test_imperfect_teacher_invalid_last_prob_acts_on_one_cell_boards_only() -> None:
    """`invalid_last_prob`: the invalid-call probability on a board with one free cell. With it 1 and
    `invalid_prob` 0, every game that leaves the teacher one cell shows a taken cell there, the error, then that
    cell; no other move is invalid."""
    from toolgym_tictactoe import positions_shown

    env = TicTacToeEnv(transport="inprocess")
    tasks = [t for t in env.build_dataset(40, seed=3) if t["x_starts"]]
    async with env:
        trajs = await run_rollouts(env, load_policy("scripted:imperfect", env, mistake_prob=1.0, invalid_prob=0.0,
                                                    invalid_last_prob=1.0, seed=2), [(i, 0, t) for i, t in enumerate(tasks)])
    reached = 0
    for t in trajs:
        assert t.error is None and t.info["result"]["status"] != "in_progress"
        one_cell = any(b.count(".") == 1 for b in positions_shown(t.messages))  # X to move with one cell
        reached += one_cell
        ok = [c.exec_ok for c in t.calls if c.name == "make_move"]
        assert ok.count(False) == (1 if one_cell else 0) and (not one_cell or ok[-2:] == [False, True])
    assert reached >= 3
    with pytest.raises(ValueError, match="invalid_last_prob"):
        load_policy("scripted:imperfect", env, invalid_last_prob=-0.1)


@pytest.mark.anyio
async def test_imperfect_teacher_free_list_names_the_free_cells_before_a_random_cell() -> None:
    """`free_list=true`: every random cell's think text lists exactly the free cells of the board it was shown, then
    plays one of them (an invalid call before a retry names a taken one); forced moves keep their verdict; without
    it the text is the old one."""
    import re

    from toolgym_tictactoe import board_from_messages

    env = TicTacToeEnv(transport="inprocess")
    tasks = env.build_dataset(10, seed=4)
    async with env:
        trajs = await run_rollouts(env, load_policy("scripted:imperfect", env, mistake_prob=1.0, mistakes="quiet",
                                                    think="track", invalid_prob=0.3, free_list=True, seed=3),
                                   [(i, 0, t) for i, t in enumerate(tasks)])
    listed = invalid = 0
    for t in trajs:
        assert t.error is None
        for i, m in enumerate(t.messages):
            if m["role"] != "assistant" or not m.get("tool_calls"):
                continue
            text = m.get("reasoning_content") or ""
            cell = json.loads(m["tool_calls"][0]["function"]["arguments"])["position"]
            board = board_from_messages(t.messages[:i])
            if (found := re.search(r"somewhere free: ([0-9 ]+)\. I play (\d)\.$", text)) is None:
                assert "I win at" in text or "I block" in text, text
                continue
            listed += 1
            assert [int(c) for c in found.group(1).split()] == [j for j, c in enumerate(board) if c == "."]
            invalid += cell not in [int(c) for c in found.group(1).split()]
    assert listed > 20 and 0 < invalid < listed
    from toolgym_tictactoe import unreasoned_think

    board = "XO.OX.XO."
    assert unreasoned_think(board, "track", 5).endswith("\nI'll play somewhere free. I play 5.")
    assert unreasoned_think(board, "track", 5, free_list=True).endswith("\nI'll play somewhere free: 2 5 8. I play 5.")
    assert unreasoned_think(board, "none", 5, free_list=True) == "Free: 2 5 8. I play 5."
    assert unreasoned_think(board, "none", 5, free_list=True, order=[8, 2, 5]) == "Free: 8 2 5. I play 5."


@pytest.mark.anyio
async def test_imperfect_teacher_free_order_shuffled_lists_the_free_cells_in_random_orders() -> None:
    """`free_order=shuffled`: each listed set is still exactly the board's free cells, but in orders that vary, and
    the played cell is not tied to a place in the list (the board order made the first listed cell the lowest free
    one, a habit RL sharpened). Without `free_list` the option is refused."""
    import re

    from toolgym_tictactoe import board_from_messages

    env = TicTacToeEnv(transport="inprocess")
    tasks = env.build_dataset(24, seed=5)
    async with env:
        trajs = await run_rollouts(env, load_policy("scripted:imperfect", env, mistake_prob=1.0, mistakes="quiet",
                                                    think="track", free_list=True, free_order="shuffled", seed=3),
                                   [(i, 0, t) for i, t in enumerate(tasks)])
    listed = ascending = first = 0
    for t in trajs:
        assert t.error is None
        for i, m in enumerate(t.messages):
            found = re.search(r"somewhere free: ([0-9 ]+)\. I play (\d)\.$", m.get("reasoning_content") or "")
            if m["role"] != "assistant" or found is None:
                continue
            cells = [int(c) for c in found.group(1).split()]
            board = board_from_messages(t.messages[:i])
            assert sorted(cells) == [j for j, c in enumerate(board) if c == "."]
            if len(cells) >= 3:
                listed += 1
                ascending += cells == sorted(cells)
                first += int(found.group(2)) == cells[0]
    assert listed > 30
    assert ascending < listed / 2 and first < listed / 2  # board order: every list ascending
    with pytest.raises(ValueError, match="free_order"):
        load_policy("scripted:imperfect", env, free_order="shuffled")
    with pytest.raises(ValueError, match="free_order"):
        load_policy("scripted:imperfect", env, free_list=True, free_order="sorted")
