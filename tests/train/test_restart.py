"""GRPO's `restart_share`: groups that restart from a state the previous step's rollouts reached (the env's
`restart_tasks` hook), so that a group's samples differ only from that decision on. Real parts: the tic-tac-toe
server in-process, its optimal opponent, the scripted random player and the tiny random model."""

from __future__ import annotations

import asyncio
import gzip
import json
import random
from pathlib import Path

import pytest
from toolgym_tictactoe import positions_shown
from toolgym_tictactoe import positions as P

from toolgym.policies import load_policy
from toolgym.registry import load_env
from toolgym.rollout import run_rollouts
from toolgym.train.config import GRPOConfig


def _restartable(games: list) -> set[str]:
    return {b for g in games for b in positions_shown(g.messages) if b.count(".") >= 2 and b != "." * 9}


def test_restarts_come_from_boards_lost_games_showed_and_start_there() -> None:
    async def go() -> tuple[list, list, list, list]:
        env = load_env("tictactoe", transport="inprocess", invalid_move="forfeit", opponent_style="trappy")
        player = load_policy("scripted:random", env)
        rows = env.build_dataset(24)
        async with env:
            games = await run_rollouts(env, player, [(i, 0, r) for i, r in enumerate(rows)], 24)
            restarts = env.restart_tasks(games, 6, random.Random(0))
            again = await run_rollouts(env, player, [(100 + i, 0, r) for i, r in enumerate(restarts)], 6)
            opening = load_env("tictactoe", transport="inprocess", restart_max_pieces=3)
            early = opening.restart_tasks(games, 24, random.Random(0))
        return games, restarts, again, early

    games, restarts, again, early = asyncio.run(go())
    assert early and all(9 - r["board"].count(".") <= 3 for r in early)  # restart_max_pieces: the opening only
    assert any(9 - b.count(".") > 3 for b in _restartable(games))  # the filter had boards to leave out
    lost = [g for g in games if g.metrics["loss"] == 1.0]
    assert len(lost) >= 6  # a random player against the optimal opponent loses most games
    lost_boards = {b for g in lost for b in positions_shown(g.messages)}
    assert len(restarts) == 6 and len({r["board"] for r in restarts}) == 6  # each board once
    for r in restarts:
        assert r["board"] in lost_boards  # enough lost games: every restart comes from one
        assert r["board"].count(".") >= 2 and r["board"] != "." * 9
        assert r["start"] == "restart" and r["opponent_style"] == "trappy" and r["invalid_move"] == "forfeit"
        assert r["random_move_prob"] == 0.0 and r["kind"] == P.analyze(r["board"]).kind
    for r, t in zip(restarts, again, strict=True):
        assert t.error is None
        assert positions_shown(t.messages)[0] == r["board"]  # the game went on from that board
        assert t.messages[1]["content"].startswith("A game in progress.")


def _restart_two_ways(kw: dict, variant: dict, games: int, n: int, seed: int) -> tuple[list, list, list, list]:
    """The random player's `games` games in an env of options `kw`; `n` restarts drawn from them by that env and by
    one with `variant` added (the same rng seed); the variant's restarts played on."""
    async def go() -> tuple[list, list, list, list]:
        env, other = load_env("tictactoe", **kw), load_env("tictactoe", **kw, **variant)
        player = load_policy("scripted:random", env)
        rows = env.build_dataset(games)
        async with env, other:
            played = await run_rollouts(env, player, [(i, 0, r) for i, r in enumerate(rows)], games)
            plain = env.restart_tasks(played, n, random.Random(seed))
            changed = other.restart_tasks(played, n, random.Random(seed))
            again = await run_rollouts(other, player, [(100 + i, 0, r) for i, r in enumerate(changed)], n)
        return played, plain, changed, again

    return asyncio.run(go())


def test_restart_opponent_optimal_plays_a_lost_games_board_against_the_optimal_opponent() -> None:
    """`restart_opponent = "optimal"`: the boards still come from lost games (here against an opponent that always
    plays at random), but the restarted games are played at random-move probability 0, the rest of the opponent
    (seed, style, invalid-move rule) the game's; the default keeps the game's probability."""
    kw = {"transport": "inprocess", "min_random_move_prob": 1.0, "max_random_move_prob": 1.0,
          "opponent_style": "trappy"}
    games, same, hard, again = _restart_two_ways(kw, {"restart_opponent": "optimal"}, 32, 4, 0)
    assert any(g.metrics["loss"] == 1.0 for g in games)
    assert same and all(r["random_move_prob"] == 1.0 for r in same)
    assert [r["board"] for r in hard] == [r["board"] for r in same]  # the same boards, drawn the same way
    for r, s in zip(hard, same, strict=True):
        assert r["random_move_prob"] == 0.0
        assert r["opponent_style"] == "trappy"
        assert {k: r.get(k) for k in ("seed", "group", "invalid_move")} == \
            {k: s.get(k) for k in ("seed", "group", "invalid_move")}
    assert all(t.error is None for t in again)
    assert load_env("tictactoe", transport="inprocess", restart_opponent="optimal").restart_options() == \
        ["restart_opponent"]


def test_restart_board_last_unforced_and_restart_invalid_move_forfeit() -> None:
    """`restart_board = "last_unforced"`: a lost game restarts from the last board it showed with no win to take
    and no threat to block (the decisive board of a game lost to a fork), where `uniform` also draws forced ones;
    `restart_invalid_move = "forfeit"`: the restarted rows forfeit on an invalid move while the game's rows retried."""
    from toolgym_tictactoe import forced_move

    kw = {"transport": "inprocess", "min_random_move_prob": 0.0, "max_random_move_prob": 0.0}
    games, uniform, picked, again = _restart_two_ways(
        kw, {"restart_board": "last_unforced", "restart_invalid_move": "forfeit", "restart_opponent": "optimal"},
        48, 12, 1)
    lost = [g for g in games if g.metrics["loss"] == 1.0]
    assert len(lost) >= 12  # the random player loses most games to the optimal opponent: every restart is a lost one's
    last_unforced = {[b for b in positions_shown(g.messages) if b.count(".") >= 2 and b != "." * 9
                      and forced_move(b) is None][-1] for g in lost}
    assert any(forced_move(r["board"]) is not None for r in uniform)  # uniform draws had forced boards to leave out
    assert len(picked) == 12 and len({r["board"] for r in picked}) == 12
    assert all(forced_move(r["board"]) is None for r in picked)  # every lost game here showed an unforced board
    assert sum(r["board"] in last_unforced for r in picked) >= 9  # the last one, unless another game took it first
    assert all(r["invalid_move"] == "forfeit" and r["random_move_prob"] == 0.0 for r in picked)
    assert all("invalid_move" not in r for r in uniform)  # the games' own rule: retry (the default, not written)
    assert all(t.error is None and positions_shown(t.messages)[0] == r["board"] for r, t in zip(picked, again))
    assert load_env("tictactoe", transport="inprocess", restart_board="last_unforced",
                    restart_invalid_move="forfeit").restart_options() == ["restart_invalid_move", "restart_board"]


def test_restart_symmetry_restarts_a_rotation_or_reflection_of_the_lost_games_board() -> None:
    """`restart_symmetry`: each restart board is one of the 8 images of a board the lost games restart from without
    it -- the same symmetry classes, so the held-out split is kept -- in orientations the games never showed (over
    40 draws: several images per class), each board once per call; the restarted games are played from that image."""
    from toolgym_tictactoe.positions import canonical

    kw = {"transport": "inprocess", "min_random_move_prob": 0.0, "max_random_move_prob": 0.0,
          "restart_board": "last_unforced"}
    games, _, turned, again = _restart_two_ways(kw, {"restart_symmetry": True}, 48, 12, 2)
    assert len(turned) == 12 and len({r["board"] for r in turned}) == 12
    assert all(t.error is None and positions_shown(t.messages)[0] == r["board"] for r, t in zip(turned, again))
    shown = {b for g in games for b in positions_shown(g.messages)}
    plain_env, turned_env = load_env("tictactoe", **kw), load_env("tictactoe", **kw, restart_symmetry=True)
    plain_all: set[str] = set()
    turned_all: set[str] = set()
    for seed in range(40):
        plain_all |= {r["board"] for r in plain_env.restart_tasks(games, 12, random.Random(seed))}
        turned_all |= {r["board"] for r in turned_env.restart_tasks(games, 12, random.Random(seed))}
    assert plain_all <= shown  # without it: boards as the games showed them
    assert {canonical(b) for b in turned_all} == {canonical(b) for b in plain_all}
    assert len(turned_all) >= 2 * len(plain_all) and len(turned_all - shown) >= 20  # measured: 96 vs 27, 56 new
    assert load_env("tictactoe", transport="inprocess", restart_symmetry=True).restart_options() == \
        ["restart_symmetry"]


def _cfg(model: Path, out: Path, **kw: object) -> GRPOConfig:
    base = dict(model=str(model), output_dir=str(out), env="tictactoe",
                env_args={"transport": "inprocess", "starts": "positions", "kinds": "quiet"}, num_examples=8,
                batch_size=2, rollouts_per_example=2, max_steps=3, max_tokens=12, restart_share=0.5,
                save_rollouts=True, save_every=10)
    return GRPOConfig(**{**base, **kw})


def test_grpo_restart_share_replaces_the_last_groups_from_the_second_step(tiny_model: Path, tmp_path: Path) -> None:
    from toolgym.train.grpo import run_grpo
    from toolgym.train.runstate import read_metrics

    run_grpo(_cfg(tiny_model, tmp_path / "run"))
    metrics = read_metrics(tmp_path / "run")
    assert [m["restart_groups"] for m in metrics] == [0, 1, 1]
    with gzip.open(tmp_path / "run" / "rollouts.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    by_step: dict[int, list[dict]] = {}
    for r in rows:
        by_step.setdefault(r["step"], []).append(r)
    assert not any(r["task"].get("start") == "restart" for r in by_step[1])
    for step in (2, 3):
        restarted = [r for r in by_step[step] if r["task"].get("start") == "restart"]
        assert len(restarted) == 2 and len({r["example_id"] for r in restarted}) == 1  # one group of 2 samples
        shown = {b for r in by_step[step - 1] for b in positions_shown(r["messages"])}
        assert restarted[0]["task"]["board"] in shown  # a board the previous step's games showed


def test_restart_share_needs_an_env_that_can_restart(tiny_model: Path, tmp_path: Path) -> None:
    from toy_env import DigitsEnv

    from toolgym.train.grpo import GRPOTrainer

    with pytest.raises(ValueError, match="cannot restart episodes.*restart_tasks"):
        GRPOTrainer(_cfg(tiny_model, tmp_path / "run", env="digits", env_args={}), env=DigitsEnv())


def test_restart_options_without_restart_share_are_refused(tiny_model: Path, tmp_path: Path) -> None:
    """`restart_replay` / `restart_max_pieces` act only on restarted groups: without `restart_share` GRPO names them
    before anything runs; with it, or left out, the trainer starts."""
    from toolgym.train.grpo import GRPOTrainer

    game = {"transport": "inprocess"}
    for bad in ({"restart_replay": 0.5}, {"restart_max_pieces": 3}, {"restart_replay": 0.5, "restart_max_pieces": 3}):
        with pytest.raises(ValueError, match=f"env_args {', '.join(bad)}: acts only on restarted groups"):
            GRPOTrainer(_cfg(tiny_model, tmp_path / "bad", env_args={**game, **bad}, restart_share=0.0))
    assert not (tmp_path / "bad").exists()
    assert GRPOTrainer(_cfg(tiny_model, tmp_path / "ok", env_args={**game, "restart_replay": 0.5})).env.restart_replay
    assert GRPOTrainer(_cfg(tiny_model, tmp_path / "off", env_args=game, restart_share=0.0)).env.restart_options() == []


def test_a_resumed_run_restarts_from_what_the_unbroken_run_would(tiny_model: Path, tmp_path: Path) -> None:
    """GRPO's checkpoints keep what the next step's restarts are drawn from (the last step's rollouts and the env's
    `restart_state`): a deterministic run stopped after each of its first three steps (`max_minutes`) and resumed
    plays the same restarts, games and rewards as the same run unbroken. Before, the first step after a resume had
    no restarts at all and the replay buffer started empty."""
    import torch

    from toolgym.train.grpo import run_grpo
    from toolgym.train.runstate import checkpoints, read_metrics, read_rollouts

    kw = dict(deterministic=True, max_steps=5, rollouts_per_example=4,
              env_args={"transport": "inprocess", "starts": "positions", "kinds": "quiet", "restart_replay": 0.5})
    run_grpo(_cfg(tiny_model, tmp_path / "a", **kw))
    b = tmp_path / "b"
    for i in range(3):
        run_grpo(_cfg(tiny_model, b, max_minutes=1e-6, **kw), resume=i > 0)
    assert [m["step"] for m in read_metrics(b)] == [1, 2, 3]
    extra = torch.load(checkpoints(b)[-1] / "trainer_state.pt", weights_only=False)["extra"]
    assert len(extra["restart_from"]) == 8 and all(t.tokens is None for t in extra["restart_from"])
    assert set(extra["env_restart_state"]) == {"replay", "replay_clock"}
    assert extra["env_restart_state"]["replay_clock"] == 2  # restarts drawn at steps 2 and 3
    run_grpo(_cfg(tiny_model, b, **kw), resume=True)
    keys = ("step", "reward", "restart_groups")
    ma, mb = read_metrics(tmp_path / "a"), read_metrics(b)
    assert [m["restart_groups"] for m in ma] == [0, 1, 1, 1, 1]
    assert [[m[k] for k in keys] for m in mb] == [[m[k] for k in keys] for m in ma]

    def games(run: Path) -> list[tuple]:  # type: ignore[type-arg]
        return sorted((r["step"], r["example_id"], r["rollout_index"], json.dumps(r["task"], sort_keys=True),
                       r["reward"]) for r in read_rollouts(run))

    assert games(b) == games(tmp_path / "a")


def test_read_rollouts_counts_a_replayed_step_once_and_skips_a_torn_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`read_rollouts`: the saved rollouts of a run, one per (step, example, rollout) -- the last copy of a step that
    a resume replayed -- and a line torn by a kill skipped, from the run folder or the file."""
    import gzip
    import json

    from toolgym.train.runstate import read_rollouts

    def row(step: int, ex: int, i: int, reward: float) -> str:
        return json.dumps({"step": step, "example_id": ex, "rollout_index": i, "reward": reward}) + "\n"

    path = tmp_path / "rollouts.jsonl.gz"
    with gzip.open(path, "at") as f:  # one gzip member per step, as GRPO writes them
        f.write(row(1, 0, 0, 0.1) + row(1, 0, 1, 0.2) + '{"step": 2, "exam')
    with gzip.open(path, "at") as f:  # the resume replays step 1
        f.write("\n" + row(1, 0, 0, 0.3) + row(1, 0, 1, 0.4) + row(2, 5, 0, 1.0))
    rows = read_rollouts(tmp_path)
    assert sorted((r["step"], r["example_id"], r["rollout_index"], r["reward"]) for r in rows) == \
        [(1, 0, 0, 0.3), (1, 0, 1, 0.4), (2, 5, 0, 1.0)]
    assert read_rollouts(path) == rows


# ------------------------------------------------------------------ restart_replay (PLR for boards)
def _old_restart_tasks(trajectories: list, n: int, rng: random.Random, max_pieces: int = 7) -> list[dict]:
    """The restarts as they were before `restart_replay` (the seventh round's rule), kept here as the reference."""
    lost, other = [], []
    for t in trajectories:
        if t.error is not None:
            continue
        boards = [b for b in positions_shown(t.messages) if 1 <= 9 - b.count(".") <= max_pieces]
        if boards:
            (lost if t.metrics.get("loss", 0.0) > 0 else other).append((t.task, boards))
    rows: list[dict] = []
    seen: set[str] = set()
    for pool in (lost, other):
        rng.shuffle(pool)
        for task, boards in pool:
            if len(rows) >= n:
                return rows
            fresh = [b for b in boards if b not in seen]
            if not fresh:
                continue
            board = rng.choice(fresh)
            seen.add(board)
            row = {k: task[k] for k in ("seed", "random_move_prob", "group", "opponent_style", "invalid_move")
                   if k in task}
            pos = P.analyze(board)
            rows.append({**row, "board": board, "start": "restart", "x_starts": board.count("X") == board.count("O"),
                         "kind": pos.kind, "pieces": pos.pieces, "split": pos.split})
    return rows


def test_restart_replay_off_restarts_exactly_as_before() -> None:
    """restart_replay = 0 (the default): the same rows as the old rule for the same rng, no extra random draw, and
    no buffer -- also on a second call whose trajectories include restarted groups."""
    async def go() -> tuple[list, list]:
        env = load_env("tictactoe", transport="inprocess")
        player = load_policy("scripted:random", env)
        rows = env.build_dataset(24)
        async with env:
            games = await run_rollouts(env, player, [(i, 0, r) for i, r in enumerate(rows)], 24)
            restarts = env.restart_tasks(games, 6, random.Random(0))
            again = await run_rollouts(env, player, [(100 + i, r, t) for i, t in enumerate(restarts)
                                                     for r in range(2)], 12)
        return games, again

    games, again = asyncio.run(go())
    for trajs, n, seed in ((games, 6, 0), (games + again, 10, 3), (again, 4, 7)):
        for env in (load_env("tictactoe", transport="inprocess"),
                    load_env("tictactoe", transport="inprocess", restart_replay=0.0, restart_buffer=2)):
            mine, ref = random.Random(seed), random.Random(seed)
            assert env.restart_tasks(trajs, n, mine) == _old_restart_tasks(trajs, n, ref)
            assert mine.getstate() == ref.getstate()  # no extra draws
            assert env.replay == {} and env.replay_clock == 0


def _restarted(board: str, seed: int, outcomes: str) -> list:
    """A restarted group's trajectories from `board` (opponent seed `seed`): one per character of `outcomes`
    (w / d / l), each showing only its start board."""
    from toolgym.types import Trajectory

    task = {"seed": seed, "random_move_prob": 0.0, "group": 0, "board": board, "start": "restart"}
    text = "A game in progress.\n" + "\n---------\n".join(
        " | ".join(c if c != "." else str(3 * r + i) for i, c in enumerate(board[3 * r:3 * r + 3])) for r in range(3))
    return [Trajectory(example_id=seed, rollout_index=i, task=task, messages=[{"role": "user", "content": text}],
                       metrics={"win": float(o == "w"), "draw": float(o == "d"), "loss": float(o == "l")})
            for i, o in enumerate(outcomes)]


TRAP = "....XO.O."      # X in the centre, O on 5 and 7: some samples draw, some lose (contested)
LOST = "O...X.O.."      # a board whose group all lost
NEW = "..O.X.O.."       # a board of a lost game, not restarted yet


def test_restart_replay_prefers_a_contested_board_to_one_whose_group_all_lost() -> None:
    """Boards enter the buffer when their restarted group comes back, scored by the spread of its losses; the
    contested board is replayed far more often than the all-lost one, and the rest still come from lost games."""
    from toolgym.types import Trajectory

    def lost_game() -> Trajectory:
        t = _restarted(NEW, 9, "l")[0]
        return Trajectory(example_id=50, task={"seed": 9, "random_move_prob": 0.0, "group": 0}, messages=t.messages,
                          metrics={"loss": 1.0})

    picks = {TRAP: 0, LOST: 0}
    for seed in range(100):
        env = load_env("tictactoe", transport="inprocess", restart_replay=0.5)
        trajs = _restarted(LOST, 1, "llllllll") + _restarted(TRAP, 2, "ddddllll") + [lost_game()]
        rows = env.restart_tasks(trajs, 2, random.Random(seed))
        assert env.replay[(TRAP, 2, 0.0, 0, None, None)]["score"] == pytest.approx(0.5)
        assert env.replay[(LOST, 1, 0.0, 0, None, None)]["score"] == 0.0
        replayed = [r for r in rows if r.get("replay")]
        assert len(rows) == 2 and len(replayed) == 1  # round(0.5 * 2) replayed, one new
        assert replayed[0]["seed"] == {TRAP: 2, LOST: 1}[replayed[0]["board"]]  # with its own opponent
        picks[replayed[0]["board"]] += 1
        new = [r for r in rows if not r.get("replay")]
        assert new[0]["board"] != replayed[0]["board"] and new[0]["start"] == "restart"
    assert picks[TRAP] >= 80 and picks[TRAP] + picks[LOST] == 100


def test_restart_replay_buffer_keeps_the_most_contested_boards_and_refreshes_scores() -> None:
    env = load_env("tictactoe", transport="inprocess", restart_replay=1.0, restart_buffer=1, restart_staleness=0.0)
    env.restart_tasks(_restarted(LOST, 1, "llllllll"), 1, random.Random(0))
    assert [k[0] for k in env.replay] == [LOST]
    rows = env.restart_tasks(_restarted(TRAP, 2, "ddddllll"), 1, random.Random(0))  # a full buffer: it replaces
    assert [k[0] for k in env.replay] == [TRAP] and rows[0]["board"] == TRAP and rows[0]["replay"] is True
    env.restart_tasks(_restarted(LOST, 1, "llllllll"), 1, random.Random(0))  # not better: stays out
    assert [k[0] for k in env.replay] == [TRAP]
    env.restart_tasks(_restarted(TRAP, 2, "dddddddd"), 1, random.Random(0))  # the last group's spread counts
    assert env.replay[(TRAP, 2, 0.0, 0, None, None)]["score"] == 0.0
    outcome = load_env("tictactoe", transport="inprocess", restart_replay=1.0, restart_score="outcome")
    outcome.restart_tasks(_restarted(TRAP, 2, "wwwwdddd"), 1, random.Random(0))  # win / draw spreads outcomes only
    assert outcome.replay[(TRAP, 2, 0.0, 0, None, None)]["score"] == pytest.approx(0.25)


def test_restart_state_round_trip_replays_the_same_boards() -> None:
    """`restart_state` / `load_restart_state` (what GRPO's checkpoints keep): a fresh env given a filled buffer's
    state draws the same rows as the env it came from, with the same rng; the state is a copy, not a view."""
    trajs = _restarted(LOST, 1, "llllllll") + _restarted(TRAP, 2, "ddddllll")
    env = load_env("tictactoe", transport="inprocess", restart_replay=0.5)
    env.restart_tasks(trajs, 2, random.Random(0))
    state = env.restart_state()
    assert len(state["replay"]) == 2 and state["replay_clock"] == 1
    other = load_env("tictactoe", transport="inprocess", restart_replay=0.5)
    assert other.restart_state() == {"replay": {}, "replay_clock": 0}
    other.load_restart_state(state)
    assert other.restart_tasks(trajs, 2, random.Random(7)) == env.restart_tasks(trajs, 2, random.Random(7))
    assert other.restart_state() == env.restart_state() and state["replay_clock"] == 1  # the saved copy unchanged
    other.load_restart_state(None)  # a checkpoint with nothing saved leaves the env as it is
    assert other.restart_state()["replay_clock"] == 2


@pytest.mark.parametrize("bad", [{"restart_replay": 1.5}, {"restart_replay": -0.1}, {"restart_staleness": 1.0},
                                 {"restart_temperature": 0}, {"restart_buffer": 0}, {"restart_score": "value"},
                                 {"restart_opponent": "strong"}, {"restart_invalid_move": "retry"},
                                 {"restart_board": "first"}, {"restart_symmetry": "sometimes"}])
def test_restart_replay_bad_option_is_a_clear_error(bad: dict) -> None:
    from toolgym.options import EnvOptionError

    with pytest.raises(EnvOptionError, match=f"option {next(iter(bad))}="):
        load_env("tictactoe", transport="inprocess", **bad)
    with pytest.raises(ValueError, match="restart_replay replays restarted games"):
        load_env("tictactoe", transport="inprocess", task="move", restart_replay=0.5)


def test_lost_probe_games_are_restarted_before_other_lost_games() -> None:
    """GRPO's `probe_games` mark greedy games `probe`: among the lost games, `restart_tasks` takes theirs first, on
    every rng seed; the restart rows carry no `probe` mark (they are trained on)."""
    import dataclasses

    async def go() -> list:
        env = load_env("tictactoe", transport="inprocess")
        player = load_policy("scripted:random", env)
        rows = env.build_dataset(24)
        async with env:
            return await run_rollouts(env, player, [(i, 0, r) for i, r in enumerate(rows)], 24)

    games = asyncio.run(go())
    env = load_env("tictactoe", transport="inprocess", restart_board="last_unforced")
    lost = [g for g in games if g.metrics["loss"] == 1.0 and _restartable([g])]
    assert len(lost) >= 6
    probes = [dataclasses.replace(g, task={**g.task, "probe": True}) for g in lost[:2]]
    probe_boards = {b for g in probes for b in _restartable([g])}
    others = {b for g in lost[2:] for b in _restartable([g])} - probe_boards
    offered = [g for g in games if g not in lost[:2]] + probes  # the probes last in the list: order does not decide
    taken_first = [env.restart_tasks(offered, 2, random.Random(seed)) for seed in range(12)]
    assert all({r["board"] for r in rows} <= probe_boards for rows in taken_first)
    plain = [env.restart_tasks(games, 2, random.Random(seed)) for seed in range(12)]  # unmarked: any lost game
    assert any({r["board"] for r in rows} & others for rows in plain)
    assert not any("probe" in r for rows in taken_first for r in rows)


def test_grpo_probe_games_offer_greedy_games_for_restarts_from_the_first_step(tiny_model: Path, tmp_path: Path) -> None:
    """`probe_games`: each step plays greedy games that are offered to `restart_tasks` (so even the first step, with
    no previous rollouts, restarts a group), logged as probe/..., never saved or trained on; without restart_share
    the option is refused."""
    from toolgym.train.grpo import GRPOTrainer, run_grpo
    from toolgym.train.runstate import read_metrics

    run_grpo(_cfg(tiny_model, tmp_path / "run", probe_games=3))
    metrics = read_metrics(tmp_path / "run")
    assert [m["restart_groups"] for m in metrics] == [1, 1, 1]  # without probes: [0, 1, 1]
    assert all(m["probe/rollouts"] == 3 for m in metrics)
    with gzip.open(tmp_path / "run" / "rollouts.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    assert len(rows) == 3 * 2 * 2 and not any(r["task"].get("probe") for r in rows)
    first = [r for r in rows if r["step"] == 1 and r["task"].get("start") == "restart"]
    pool = {t["board"] for t in load_env("tictactoe", **_cfg(tiny_model, tmp_path / "x").env_args).build_dataset(8)}
    assert len(first) == 2 and first[0]["task"]["board"] in pool  # a probe game's start board
    with pytest.raises(ValueError, match="probe_games: probes only choose restarts"):
        GRPOTrainer(_cfg(tiny_model, tmp_path / "bad", probe_games=2, restart_share=0.0))


def test_restart_trap_share_restarts_choices_among_value_keeping_moves_against_the_random_opponent() -> None:
    """`restart_trap_share`: that share of the restarted groups restarts from a board where X chooses among two or
    more value-keeping moves (no win to take, no threat to block), from any game, against the random opponent
    (random-move probability 1), marked `trap`; the rest are drawn as before (lost games' boards, against the optimal
    opponent here); trap groups are never scored into the replay buffer."""
    from toolgym_tictactoe import forced_move

    kw = {"transport": "inprocess", "min_random_move_prob": 0.0, "max_random_move_prob": 0.0,
          "restart_board": "last_unforced", "restart_opponent": "optimal"}
    games, plain, mixed, again = _restart_two_ways(kw, {"restart_trap_share": 0.5, "restart_replay": 0.25}, 48, 12, 3)
    shown = {b for g in games for b in positions_shown(g.messages)}
    traps = [r for r in mixed if r.get("trap")]
    assert len(mixed) == 12 and len({r["board"] for r in mixed}) == 12
    assert len(traps) == 6  # half of 12 (the replay buffer is empty at the first call)
    for r in traps:
        assert r["board"] in shown and r["start"] == "restart" and r["random_move_prob"] == 1.0
        assert forced_move(r["board"]) is None and len(P.analyze(r["board"]).optimal) >= 2
    assert all(r["random_move_prob"] == 0.0 and not r.get("trap") for r in mixed if r not in traps)
    assert not any(r.get("trap") for r in plain)  # off by default
    assert all(t.error is None and positions_shown(t.messages)[0] == r["board"] for r, t in zip(mixed, again))
    # the trap groups' outcomes do not enter the replay buffer; the others' do
    env = load_env("tictactoe", **kw, restart_trap_share=0.5, restart_replay=0.25)
    env.restart_tasks(again + again, 12, random.Random(4))  # each restarted board seen twice: a spread to score
    assert len(env.replay) == 6 and all(key[2] == 0.0 for key in env.replay)  # key: (board, seed, random_move_prob,..)
    # with half replayed and half trap groups, no lost game's board is left: a warning, once
    env = load_env("tictactoe", **kw, restart_trap_share=0.5, restart_replay=0.5)
    with pytest.warns(UserWarning, match="none restart from lost games' boards"):
        rows = env.restart_tasks(again + again, 12, random.Random(4))
    assert len(rows) == 12 and all(r.get("trap") or r.get("replay") for r in rows)
    assert load_env("tictactoe", transport="inprocess", restart_trap_share=0.5).restart_options() == \
        ["restart_trap_share"]
    with pytest.raises(ValueError, match="restart_trap_share"):
        load_env("tictactoe", transport="inprocess", task="move", restart_trap_share=0.5)


def test_restart_trap_random_sets_the_trap_groups_opponent_only() -> None:
    """`restart_trap_random`: the trap groups play that opponent (here 0.5); the same boards are drawn as
    with the default (the same rng seed), and the other restarted groups keep the optimal opponent; without
    `restart_trap_share` the option is refused (it would change nothing)."""
    kw = {"transport": "inprocess", "min_random_move_prob": 0.0, "max_random_move_prob": 0.0,
          "restart_board": "last_unforced", "restart_opponent": "optimal", "restart_trap_share": 0.5}
    _, plain, half, again = _restart_two_ways(kw, {"restart_trap_random": 0.5}, 48, 12, 3)
    assert [r["board"] for r in half] == [r["board"] for r in plain]
    traps = [r for r in half if r.get("trap")]
    assert len(traps) == 6 and all(r["random_move_prob"] == 0.5 for r in traps)
    assert all(r["random_move_prob"] == 1.0 for r in plain if r.get("trap"))
    assert all(r["random_move_prob"] == 0.0 for r in half if not r.get("trap"))
    assert all(t.error is None for t in again)
    with pytest.raises(ValueError, match="set restart_trap_share"):
        load_env("tictactoe", transport="inprocess", restart_trap_random=0.5)
    with pytest.raises(ValueError, match="restart_trap_random"):
        load_env("tictactoe", transport="inprocess", restart_trap_share=0.5, restart_trap_random=1.5)


def test_a_restart_state_that_cannot_be_pickled_leaves_the_checkpoint_without_it(tiny_model: Path, tmp_path: Path,
                                                                                   caplog: pytest.LogCaptureFixture
                                                                                   ) -> None:
    """An env whose `restart_state` cannot be saved (here a lock) does not break the checkpoint: it is written
    without the restart state, with a warning, and the run ends normally."""
    import threading

    import torch
    from toolgym_tictactoe import TicTacToeEnv

    from toolgym.train.grpo import run_grpo
    from toolgym.train.runstate import checkpoints

    class Unsaveable(TicTacToeEnv):
        def restart_state(self):  # type: ignore[no-untyped-def]
            return {"lock": threading.Lock()}

    env = Unsaveable(transport="inprocess", starts="positions", kinds="quiet")
    with caplog.at_level("WARNING", logger="toolgym.train"):
        run_grpo(_cfg(tiny_model, tmp_path / "run", max_steps=2, save_every=1), env=env)
    assert "the restart state cannot be saved" in caplog.text
    assert torch.load(checkpoints(tmp_path / "run")[-1] / "trainer_state.pt", weights_only=False)["extra"] == {}
