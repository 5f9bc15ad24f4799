"""The exact tic-tac-toe state space and the position-accuracy evaluation built on it: position counts, the
held-out split, the O side through the colour swap, one-move tasks graded against the game tree, and the eval's
breakdown by position kind / pieces / split. Every game here goes through the real MCP server (in-process)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from mcp_server_tictactoe import game as g
from toolgym_tictactoe import TicTacToeEnv, explain_best_move, fork_cells
from toolgym_tictactoe import positions as P

from toolgym import load_policy
from toolgym.eval import evaluate


def test_state_space_counts() -> None:
    boards = P.reachable_positions()
    assert len(boards) == 4520 and len(set(boards)) == 4520
    assert sum(len(P.analyze(b).legal) for b in boards) == 16167  # (position, X move) pairs
    kinds = Counter(P.analyze(b).kind for b in boards)
    assert kinds == {"win": 2358, "block": 1484, "quiet": 467, "free": 211}
    # every position is legal and X is to move; the empty board and all 9 one-O boards are in it
    assert all(b.count("X") in (b.count("O"), b.count("O") - 1) and not g.is_over(b) for b in boards)
    assert "." * 9 in boards and all(g.play("." * 9, c, "O") in boards for c in range(9))


def test_analysis_agrees_with_brute_force() -> None:
    for b in P.reachable_positions()[::7]:
        pos = P.analyze(b)
        # game value of each move by a plain negamax over win/draw/loss, written independently of the server
        def value(board: str, side: str) -> int:
            w = g.winner(board)
            if w:
                return 1 if w == side else -1
            if "." not in board:
                return 0
            return max(-value(g.play(board, c, side), g.other(side)) for c in g.free_cells(board))

        vals = {c: -value(g.play(b, c, "X"), "O") for c in g.free_cells(b)}
        assert pos.optimal == tuple(c for c in sorted(vals) if vals[c] == max(vals.values())), b
        assert pos.value == max(vals.values())
        assert set(pos.fastest) <= set(pos.optimal)
        assert pos.wins == tuple(c for c in g.free_cells(b) if g.winner(g.play(b, c, "X")) == "X")


def test_heldout_split_is_fixed_and_about_a_fifth() -> None:
    train, held = P.positions("train"), P.positions("heldout")
    assert len(train) + len(held) == 4520 and not set(train) & set(held)
    assert len(held) == 937  # fixed by the hash: a change here changes every reported held-out number
    # whole symmetry classes are held out: no rotation or reflection of a held-out board is trained on
    assert not {P.canonical(b) for b in held} & {P.canonical(b) for b in train}
    assert all(P.canonical(P.canonical(b)) == P.canonical(b) for b in held[:50])
    eligible = [b for b in P.reachable_positions() if 9 - b.count(".") >= 2]
    assert 0.17 < len(held) / len(eligible) < 0.23
    assert all(9 - b.count(".") >= 2 for b in held)  # the opening positions start every game: always trained on
    kinds = Counter(P.analyze(b).kind for b in held)
    assert all(kinds[k] > 20 for k in P.KINDS)


def test_o_side_analysis_is_the_colour_swap() -> None:
    for b in P.reachable_positions()[::5]:
        o_board = P.swap_colours(b)
        x, o = P.analyze(b), P.analyze(o_board, "O")
        assert (x.optimal, x.kind, x.wins, x.threats, x.heldout) == (o.optimal, o.kind, o.wins, o.threats, o.heldout)
    with pytest.raises(ValueError, match="not a position with O to move"):
        P.analyze("O" + "." * 8, "O")  # O has already moved: X to move


def test_heldout_visits_replays_the_moves() -> None:
    held = P.positions("heldout")[0]
    # a game that starts two plies before a held-out position and walks through it
    moves = []
    board = held
    for side in ("O", "X"):  # undo the last O and X pieces
        cell = max(i for i, c in enumerate(board) if c == side)
        board = board[:cell] + "." + board[cell + 1 :]
        moves.insert(0, f"{side}{cell}")
    visits = P.heldout_visits(board, moves)
    assert visits == int(P.is_heldout(board)) + 1


def test_forks_teacher_names_true_forks_and_plays_best() -> None:
    for b in P.reachable_positions():
        pos = P.analyze(b)
        cell, why = explain_best_move(b, "exploit", think="forks")
        assert cell in pos.fastest, b
        if pos.kind in ("quiet", "free"):
            brute = {s: [c for c in g.free_cells(b) if len(P.completing(g.play(b, c, s), s)) >= 2] for s in "XO"}
            assert fork_cells(b, "X") == brute["X"] and fork_cells(b, "O") == brute["O"], b
            verdict = why.splitlines()[-1]
            assert verdict.startswith("No threats. X forks: ") and verdict.endswith(f"I play {cell}."), why
    with pytest.raises(ValueError, match="think must be one of"):
        explain_best_move("." * 9, think="poetry")


def test_no_think_teacher_plays_the_scan_teachers_move_and_says_only_that() -> None:
    """think="none": the same move as the scan teacher on every position, and the reason is the bare verdict."""
    for b in P.reachable_positions():
        cell, why = explain_best_move(b, "exploit", think="none")
        assert (cell, why) == (explain_best_move(b, "exploit", think="scan")[0], f"I play {cell}."), b
        assert cell in P.analyze(b).optimal, b


def test_move_dataset_covers_splits_in_fixed_order() -> None:
    env = TicTacToeEnv(task="move", split="heldout", transport="inprocess")
    rows = env.build_dataset(None)
    assert [r["board"] for r in rows] == P.positions("heldout")
    assert env.max_turns == 1 and set(env.report_by) == {"kind", "pieces", "split"}
    sample = env.build_dataset(50, seed=3)
    assert len({r["board"] for r in sample}) == 50 and sample == env.build_dataset(50, seed=3)
    assert sample != env.build_dataset(50, seed=4)
    big = TicTacToeEnv(task="move", split="heldout", transport="inprocess").build_dataset(1000)
    assert Counter(r["board"] for r in big).most_common(1)[0][1] == 2  # a second reshuffled pass
    quiet = TicTacToeEnv(task="move", kinds=["quiet", "free"]).build_dataset(None)
    assert len(quiet) == 467 + 211 and {r["kind"] for r in quiet} == {"quiet", "free"}
    openings = TicTacToeEnv(starts="openings", split="train", opening_moves=6).build_dataset(200)
    assert all(not P.is_heldout(r["board"]) for r in openings)
    assert {r["x_starts"] for r in openings} == {True, False} and max(r["pieces"] for r in openings) >= 5
    plain = TicTacToeEnv(min_random_move_prob=0.0, max_random_move_prob=1.0, num_groups=4).build_dataset(400, seed=2)
    mix = TicTacToeEnv(min_random_move_prob=0.0, max_random_move_prob=1.0, num_groups=4, position_share=0.5,
                       split="train", kinds="quiet").build_dataset(400, seed=2)
    from_pos = [r for r in mix if "board" in r]
    assert 150 <= len(from_pos) <= 250 and mix == TicTacToeEnv(  # seeded: the same pool again
        min_random_move_prob=0.0, max_random_move_prob=1.0, num_groups=4, position_share=0.5, split="train",
        kinds="quiet").build_dataset(400, seed=2)
    assert all(r["kind"] == "quiet" and not P.is_heldout(r["board"]) for r in from_pos)
    # the opponent's strength by group is untouched by the mixture; empty-board games keep their own coin
    assert [(r["seed"], r["group"], r["random_move_prob"]) for r in mix] == \
        [(r["seed"], r["group"], r["random_move_prob"]) for r in plain]
    assert all({**r, "start": "empty"} == {**p, "start": "empty"} for r, p in zip(mix, plain, strict=True)
               if "board" not in r)
    assert {r["start"] for r in from_pos} == {"position"} and {r["start"] for r in mix} == {"position", "empty"}
    assert TicTacToeEnv(position_share=0.5, split="train", kinds="quiet").report_by[0] == "start"
    for bad, msg in [({"position_share": 0.5, "task": "move"}, "position_share mixes"),
                     ({"position_share": 0.5, "starts": "positions"}, "position_share mixes"),
                     ({"task": "chess"}, "task must be"), ({"split": "dev", "task": "move"}, "split must be"),
                     ({"split": "train"}, "split applies to"), ({"agent_plays": "O"}, "agent_plays"),
                     ({"kinds": ["quiet"]}, "position starts only"),
                     ({"task": "move", "kinds": ["dull"]}, "kinds must be")]:
        with pytest.raises(ValueError, match=msg):
            TicTacToeEnv(**bad)


def test_position_pieces_keeps_position_starts_to_boards_with_that_many_marks() -> None:
    """`position_pieces`: position starts (and `position_share` games) only from boards with those mark counts; the
    quiet 3-mark training boards include the opponent's replies to the centre (the traps of the recipe's fifth
    round); an empty selection or a use without position starts is refused."""
    three = TicTacToeEnv(task="move", split="train", kinds="quiet", position_pieces=[3]).build_dataset(None)
    all_quiet = TicTacToeEnv(task="move", split="train", kinds="quiet").build_dataset(None)
    assert len(three) == sum(r["pieces"] == 3 for r in all_quiet) > 0
    assert {r["pieces"] for r in three} == {3} and {r["kind"] for r in three} == {"quiet"}
    assert "..O.X.O.." in {r["board"] for r in three}  # opposite corners around the centre: play an edge
    mix = TicTacToeEnv(min_random_move_prob=0.0, max_random_move_prob=1.0, num_groups=4, position_share=0.5,
                       split="train", kinds="quiet", position_pieces=[3, 4]).build_dataset(400, seed=2)
    from_pos = [r for r in mix if r["start"] == "position"]
    assert 150 <= len(from_pos) <= 250 and {r["pieces"] for r in from_pos} == {3, 4}
    for bad, msg in [({"position_pieces": [3]}, "position starts only"),
                     ({"position_share": 0.5, "position_pieces": []}, "non-empty")]:
        with pytest.raises(ValueError, match=msg):
            TicTacToeEnv(**bad)
    with pytest.raises(ValueError, match="no train position"):  # no win to take with one mark on the board
        TicTacToeEnv(task="move", split="train", kinds="win", position_pieces=[1]).build_dataset(None)


def _eval(env: TicTacToeEnv, uri: str, n: int | None, out: Path | None = None, **opts):  # type: ignore[no-untyped-def]
    async def go():  # type: ignore[no-untyped-def]
        policy = load_policy(uri, env, **opts)
        try:
            return await evaluate(env, policy, env.build_dataset(n), concurrency=32, out_dir=out)
        finally:
            await env.aclose()
            await policy.aclose()

    return asyncio.run(go())


def test_minimax_scores_100_percent_on_every_position(tmp_path: Path) -> None:
    env = TicTacToeEnv(task="move", transport="inprocess")
    trajs, summary = _eval(env, "scripted:minimax", None, tmp_path / "ev")
    assert len(trajs) == 4520 and summary["errors"] == 0
    for name in ("legal", "optimal", "fastest", "win_taken", "blocked"):
        key = "rewards" if name == "optimal" else "metrics"
        assert summary[key][name]["mean"] == 1.0, name
    assert summary["metrics"]["win_taken"]["n"] == 2358 and summary["metrics"]["blocked"]["n"] == 1484
    by = summary["by"]
    assert set(by["kind"]) == set(P.KINDS) and by["kind"]["quiet"]["n"] == 467
    assert [int(k) for k in by["pieces"]] == list(range(9)) and by["split"]["heldout"]["n"] == 937
    assert (tmp_path / "ev" / "breakdown.png").stat().st_size > 10_000
    saved = json.loads((tmp_path / "ev" / "summary.json").read_text())
    assert saved["by"]["kind"]["win"]["optimal"]["lo"] > 0.99


def test_random_player_scores_the_exact_expected_rates() -> None:
    """A uniformly random legal move is optimal with probability |optimal| / |legal|; over all 4,520 positions the
    expectation is exact, and the seeded player's rate must sit within 4 standard errors of it."""
    env = TicTacToeEnv(task="move", transport="inprocess")
    trajs, summary = _eval(env, "scripted:random", None, seed=11)
    expect = sum(len(P.analyze(b).optimal) / len(P.analyze(b).legal) for b in P.reachable_positions()) / 4520
    assert expect == pytest.approx(0.5797, abs=1e-4)
    se = (expect * (1 - expect) / 4520) ** 0.5
    assert abs(summary["rewards"]["optimal"]["mean"] - expect) < 4 * se
    assert summary["metrics"]["legal"]["mean"] == 1.0
    wins = [P.analyze(b) for b in P.reachable_positions() if P.analyze(b).kind == "win"]
    expect_win = sum(len(p.wins) / len(p.legal) for p in wins) / len(wins)
    assert abs(summary["metrics"]["win_taken"]["mean"] - expect_win) < 4 * (expect_win / len(wins)) ** 0.5


def test_o_side_through_the_colour_swap() -> None:
    """O boards reach the server (and the model) colour-swapped, and are graded on the O board itself."""
    env = TicTacToeEnv(task="move", agent_plays="O", transport="inprocess")
    rows = env.build_dataset(300, seed=1)
    assert all(r["board"].count("O") in (r["board"].count("X"), r["board"].count("X") - 1) for r in rows)
    trajs, summary = _eval(env, "scripted:minimax", 300)
    assert summary["rewards"]["optimal"]["mean"] == 1.0 and summary["errors"] == 0
    for t in trajs[:20]:  # the model saw the X view of the O board
        assert P.swap_colours(t.task["board"]) == t.info["start"]


def test_position_eval_cli_on_a_sample(tmp_path: Path) -> None:
    out = tmp_path / "pe"
    proc = subprocess.run([sys.executable, "-m", "toolgym.cli", "eval", "tictactoe", "-m", "scripted:minimax", "-n",
                           "60", "-a", "task=move", "-a", "split=heldout", "-a", "transport=inprocess", "-o", str(out)],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "by kind" in proc.stdout and "breakdown.png" in proc.stdout
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 60 and all(json.loads(x)["task"]["split"] == "heldout" for x in lines)


def test_synth_drops_games_through_heldout_positions(tmp_path: Path) -> None:
    out = tmp_path / "games.jsonl"
    proc = subprocess.run([sys.executable, "-m", "toolgym.cli", "synth", "tictactoe", "--teacher", "scripted:minimax",
                           "-n", "60", "-a", "transport=inprocess", "-a", "max_random_move_prob=1",
                           "--drop-if", "heldout_visits", "-o", str(out)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert 5 < len(rows) < 60  # some games were dropped, some kept
    from toolgym_tictactoe import parse_board

    for r in rows:
        for m in r["messages"]:
            board = parse_board(m["content"]) if m["role"] in ("user", "tool") else None
            if board and not g.is_over(board):
                assert not P.is_heldout(board), board


def _recipe_script(name: str):  # type: ignore[no-untyped-def]
    """A script of examples/tictactoe (not a package) loaded as a module."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "examples" / "tictactoe" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_recipe_focus_data_weights_quiet_rows_and_refuses_heldout() -> None:
    """`examples/tictactoe/focus_data.py` (the recipe's focus phase): every game and every five-move draw twice (a
    shorter draw not at all), every quiet training position six times, free twice, 800 win/block replay rows; a
    held-out position row in the input is refused (the focus phase must not see held-out positions)."""
    mod = _recipe_script("focus_data")
    rows = [{"task": t} for t in TicTacToeEnv(task="move", split="train").build_dataset(None)]
    count = lambda data, kind: sum(r["task"].get("kind") == kind for r in data)  # noqa: E731
    quiet, free = count(rows, "quiet"), count(rows, "free")

    def game(i: int, moves: int) -> dict:  # type: ignore[type-arg]
        return {"task": {"seed": i}, "messages": [{"role": "assistant"}] * moves}

    games, draws = [game(0, 3), game(1, 4)], [game(2, 5), game(3, 4)]
    data = mod.build(rows, games, draws)
    assert (count(data, "quiet"), count(data, "free")) == (6 * quiet, 2 * free)
    assert sum(r["task"].get("kind") in ("win", "block") for r in data) == 800
    assert [r["task"]["seed"] for r in data if "kind" not in r["task"]] == [0, 1, 0, 1, 2, 2]
    held = [{"task": t} for t in TicTacToeEnv(task="move", split="heldout").build_dataset(3)]
    with pytest.raises(SystemExit):
        mod.build(rows + held, games, draws)


def test_recipe_late_data_repeats_late_positions_and_refuses_heldout() -> None:
    """`examples/tictactoe/late_data.py` (the ninth round's start): every game once, every training position with one
    or two free cells twice, every other position once (or a seeded sample of `REPLAY`); a held-out row is refused."""
    mod = _recipe_script("late_data")
    rows = [{"task": t} for t in TicTacToeEnv(task="move", split="train").build_dataset(None)]
    late = [r for r in rows if r["task"]["board"].count(".") <= 2]
    games = [{"task": {"seed": i}, "messages": []} for i in range(3)]
    data = mod.build(rows, games)
    assert data[:3] == games and len(late) > 100
    from_pos = [r for r in data if "board" in r["task"]]
    assert sum(r["task"]["board"].count(".") <= 2 for r in from_pos) == 2 * len(late)
    replay = [r for r in from_pos if r["task"]["board"].count(".") > 2]
    assert len(replay) == len(rows) - len(late) == len({r["task"]["board"] for r in replay})
    mod.REPLAY = 800
    assert sum(r["task"]["board"].count(".") > 2 for r in mod.build(rows, games) if "board" in r["task"]) == 800
    held = [{"task": t} for t in TicTacToeEnv(task="move", split="heldout").build_dataset(3)]
    with pytest.raises(SystemExit):
        mod.build(rows + held, games)


def test_recipe_best_step_picks_the_fewest_periodic_eval_losses() -> None:
    """`examples/tictactoe/best_step.py`: the step with the fewest periodic-eval losses, then the fewest invalid
    calls, then the later step; training rows without an eval are ignored, and a run without one is refused."""
    mod = _recipe_script("best_step")

    def ev(step: int, loss: float, invalid: float) -> dict:  # type: ignore[type-arg]
        return {"step": step, "eval/metrics/loss": loss, "eval/metrics/invalid_moves": invalid}

    rows = [{"step": 5, "metrics/loss": 0.0}, ev(10, 0.3, 0.1), ev(20, 0.2, 0.5), ev(30, 0.2, 0.2), ev(40, 0.2, 0.2)]
    assert mod.best_step(rows) == 40
    assert mod.best_step(rows + [ev(50, 0.19, 2.0)]) == 50
    with pytest.raises(SystemExit):
        mod.best_step([{"step": 5, "metrics/loss": 0.0}])


def test_recipe_best_step_validation_picks_the_fewest_lost_games_over_the_validation_evals(tmp_path: Path) -> None:
    """`best_step.py --validation`: lost games summed over each step's eval folders (an errored rollout is a lost
    game: toolgym eval's outcomes count it so), the fewest wins, ties go to the later step; a missing folder or a
    template without {step} is refused."""
    mod = _recipe_script("best_step")

    def folder(name: str, loss: float, n: int = 200) -> None:
        d = tmp_path / name
        d.mkdir()
        (d / "summary.json").write_text(json.dumps({"rollouts": n, "outcomes": {"win": 0.0, "draw": 1 - loss,
                                                                                  "loss": loss}}))

    for step, (a, b) in {30: (0.10, 0.05), 40: (0.04, 0.06), 50: (0.06, 0.04), 60: (0.2, 0.0)}.items():
        folder(f"s{step}-a", a)
        folder(f"s{step}-b", b)
    t = [str(tmp_path / "s{step}-a"), str(tmp_path / "s{step}-b")]
    step, table = mod.best_validated(t, [30, 40, 50, 60])
    assert table == {30: (30, 400), 40: (20, 400), 50: (20, 400), 60: (40, 400)} and step == 50
    assert mod.best_validated(t[:1], [30, 40, 50, 60])[0] == 40  # one seed alone picks otherwise
    with pytest.raises(SystemExit, match="no summary.json"):
        mod.best_validated(t, [70])
    with pytest.raises(SystemExit, match="step"):
        mod.best_validated([str(tmp_path / "s30-a")], [30])


def test_recipe_decisions_counts_sampled_moves_by_class_and_window() -> None:
    """`examples/tictactoe/decisions.py`: a move counts for its board's symmetry class and its step's window, and
    is value-keeping when it is among the position's optimal moves (opposite corners around the centre: edges keep
    the draw, corners lose) and counted apart when it is the lowest free cell; games from a restarted board replay
    from that board; other classes are ignored."""
    mod = _recipe_script("decisions")
    trap = "..O.X.O.."
    assert P.analyze(trap).optimal == (1, 3, 5, 7)

    def game(step: int, moves: list[str], start: str = "." * 9) -> dict:  # type: ignore[type-arg]
        return {"step": step, "info": {"start": start, "result": {"moves": moves}}}

    rollouts = [game(1, ["O2", "X4", "O6", "X1"]), game(3, ["O2", "X4", "O6", "X0", "O8"]),
                game(12, ["X7"], start=trap), game(12, ["O0", "X4", "O8", "X2"])]  # a mirror image, a corner again
    table = mod.decisions(rollouts, {P.canonical(trap)}, 10)
    assert table == {(1, P.canonical(trap)): [2, 1, 1], (11, P.canonical(trap)): [2, 1, 0]}  # X0: the first free
    assert mod.decisions(rollouts, {P.canonical("....X....")}, 10) == {}
    every = mod.decisions(rollouts, None, 10)  # None: every class X moved from (here also the corner openings)
    assert every[(1, P.canonical(trap))] == [2, 1, 1]
    assert {c for _, c in every} == {P.canonical(trap), P.canonical("O........")}

    def said(text: str) -> list[dict]:  # type: ignore[type-arg]
        return [{"role": "user", "content": "board"}, {"role": "assistant", "reasoning_content": text}]

    texts = ["I'll play somewhere free: 0 1 3. I play 0.", "I'll play somewhere free: 5 0 3. I play 5.",
             "I'll play somewhere free: 5 0 3. I play 3.", "I win at 4. I play 4."]
    assert mod.first_listed(said(t) for t in texts) == (3, 2, 1)


def test_recipe_decisions_greedy_against_sampled_moves_per_board() -> None:
    """`decisions.py --greedy`: one-move tasks' first X moves per board (no valid move is -1), then each board's greedy
    move against its samples -- a wrong greedy move with mostly right samples is the greedy/sampled gap, a wrong one
    with mostly wrong samples is not; exactly half right does not count as mostly right."""
    mod = _recipe_script("decisions")
    trap, other = "..O.X.O..", "....XO.O."  # optimal (1, 3, 5, 7) and (2, 6, 8)

    def task(board: str, moves: list[str]) -> dict:  # type: ignore[type-arg]
        return {"task": {"board": board}, "info": {"result": {"moves": moves}}}

    assert P.analyze(trap).optimal == (1, 3, 5, 7) and P.analyze(other).optimal == (2, 6, 8)
    greedy = mod.first_moves([task(trap, ["X0", "O8"]), task(other, ["X8"])])
    assert greedy == {trap: [0], other: [8]}
    sampled = mod.first_moves([task(trap, ["X1"]), task(trap, ["X3", "O0"]), task(trap, ["X0"]), task(trap, []),
                               task(other, ["X0"]), task(other, ["X8"])])
    assert sampled[trap] == [1, 3, 0, -1]
    got = mod.greedy_vs_sampled(greedy, sampled)  # trap: greedy wrong, samples 2 of 4 right -> not mostly right
    assert got == {"boards": 2, "greedy_wrong": 1, "greedy_wrong_samples_right": 0, "greedy_right": 1,
                   "greedy_right_samples_wrong": 1}
    sampled[trap].append(5)  # 3 of 5 right
    assert mod.greedy_vs_sampled(greedy, sampled)["greedy_wrong_samples_right"] == 1
    assert mod.greedy_vs_sampled(greedy, {})["boards"] == 0


def test_recipe_decisions_reach_counts_whole_games_per_class_once() -> None:
    """`decisions.py --reach`: only games from the empty board count; a game reaching a class (any orientation, X to
    move) counts once however often; a class met only with O to move, or only in a restart, is not reached."""
    mod = _recipe_script("decisions")
    o_first = {"task": {"x_starts": False}, "info": {"start": "." * 9, "result": {"moves": ["O3", "X4", "O7", "X0"]}}}
    mirrored = {"task": {}, "info": {"result": {"moves": ["O5", "X4", "O7", "X8"]}}}  # `....XO.O.` as played
    restart = {"task": {"board": "...OX..O."}, "info": {"start": "...OX..O.", "result": {"moves": ["X0"]}}}
    x_first = {"task": {}, "info": {"result": {"moves": ["X4", "O3", "X0", "O7"]}}}  # that class only with O to move
    games, got = mod.reach([o_first, mirrored, restart, x_first], ["...OX..O.", "..O.X.O.."])
    assert games == 3
    assert got == {"....XO.O.": 2, "..O.X.O..": 0}


def test_positions_shown_by_a_real_game_and_the_quiet_teacher() -> None:
    """A scripted game through the server: `positions_shown` lists the positions X had to move in, in order, once
    each; the `mistakes="quiet"` teacher takes every win and block and plays at random only where nothing is
    forced."""
    from toolgym_tictactoe import forced_move, imperfect_player, positions_shown

    env = TicTacToeEnv(transport="inprocess", min_random_move_prob=0.5, max_random_move_prob=0.5)
    pol = imperfect_player(env, mistake_prob=1.0, mistakes="quiet", seed=3, think="track")
    async def play():  # type: ignore[no-untyped-def]
        try:
            return await evaluate(env, pol, env.build_dataset(12, seed=5), concurrency=4)
        finally:
            await env.aclose()

    trajs, _ = asyncio.run(play())
    forced_turns = 0
    for t in trajs:
        shown = positions_shown(t.messages)
        assert shown and len(shown) == len(set(shown)) and all(P.analyze(b) for b in shown)
        assert len(shown) == sum(1 for c in t.calls if c.exec_ok)  # one position per move the player made
        for board, call in zip(shown, t.calls, strict=True):
            cell = json.loads(call.arguments) if isinstance(call.arguments, str) else call.arguments
            if forced_move(board) is not None:
                forced_turns += 1
                assert cell["position"] == forced_move(board)
    assert forced_turns > 0
    with pytest.raises(ValueError, match="mistakes"):
        imperfect_player(env, mistakes="sometimes")
