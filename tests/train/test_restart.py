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
