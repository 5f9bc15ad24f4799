"""GRPO's `eval_exact`: the periodic eval calls the env's `exact_eval` on the trainer's own weights (greedy) and logs
its keys as eval/exact/...; refused without `eval_every`, for an env without an exact evaluation, and for an opponent
that is neither optimal nor random. The tiny model is real (transformers, built offline) and untrained: it writes no
move, so its exact walk is known by hand -- X first, one line stuck at the empty board; O first, one line per opening
(all nine are equally good for O), every one a turn-cap loss."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from toolgym_tictactoe import TicTacToeEnv

from toolgym import load_policy
from toolgym.train.config import GRPOConfig


def _cfg(model: Path, out: Path, **kw: object) -> GRPOConfig:
    base = dict(model=str(model), output_dir=str(out), env="tictactoe",
                env_args={"transport": "inprocess", "max_turns": 2}, num_examples=4, batch_size=2,
                rollouts_per_example=2, max_steps=2, max_tokens=8, eval_every=2, eval_exact=True, save_every=10)
    return GRPOConfig(**{**base, **kw})


def test_periodic_eval_is_the_exact_walk(tiny_model: Path, tmp_path: Path) -> None:
    from toolgym.train.grpo import run_grpo
    from toolgym.train.runstate import read_metrics

    run_grpo(_cfg(tiny_model, tmp_path / "run"))
    evals = [m for m in read_metrics(tmp_path / "run") if "eval/exact/loss" in m]
    assert [m["step"] for m in evals] == [2]
    ev = evals[0]
    assert ev["eval/exact/lines"] == 10.0 and ev["eval/exact/diverged"] == 0.0
    assert ev["eval/exact/loss"] == pytest.approx(1.0) and ev["eval/exact/capped"] == pytest.approx(1.0)
    assert ev["eval/exact/win"] == ev["eval/exact/draw"] == 0.0
    assert not any(k.startswith("eval/") and not k.startswith("eval/exact/") for k in ev)  # no sampled eval beside it


def test_eval_sets_walk_against_another_opponent(tiny_model: Path, tmp_path: Path) -> None:
    """`eval_sets`: a second exact walk at every eval, against the random opponent, logged as eval/random/exact/...
    (the untrained model: X first, one line stuck at the empty board; O first, one line per random opening);
    a misspelt env argument in a set is refused before the run starts."""
    from toolgym.train.grpo import GRPOTrainer, run_grpo
    from toolgym.train.runstate import read_metrics

    rnd = {"min_random_move_prob": 1.0, "max_random_move_prob": 1.0}
    run_grpo(_cfg(tiny_model, tmp_path / "run", eval_sets={"random": rnd},
                  best_metric={"eval/exact/loss": 1.0, "eval/random/exact/win": -1.0}))
    (ev,) = [m for m in read_metrics(tmp_path / "run") if "eval/exact/loss" in m]
    assert ev["eval/random/exact/lines"] == 10.0 and ev["eval/random/exact/capped"] == pytest.approx(1.0)
    assert ev["best/value"] == pytest.approx(ev["eval/exact/loss"] - ev["eval/random/exact/win"])
    with pytest.raises(ValueError, match="config eval_sets.random: .*no_such"):
        GRPOTrainer(_cfg(tiny_model, tmp_path / "b", eval_sets={"random": {**rnd, "no_such": 1}}))
    # an opponent the walk cannot enumerate (a mix) is refused before the run starts, not at its first eval
    mix = {"min_random_move_prob": 0.3, "max_random_move_prob": 0.3}
    with pytest.raises(ValueError, match=r"config eval_sets.mix \(eval_exact\): exact_eval needs the optimal"):
        GRPOTrainer(_cfg(tiny_model, tmp_path / "c", eval_sets={"random": rnd, "mix": mix}))
    with pytest.raises(ValueError, match=r"config eval_env_args \(eval_exact\): exact_eval plays whole games"):
        GRPOTrainer(_cfg(tiny_model, tmp_path / "d", eval_env_args={"task": "move"}))
    assert not (tmp_path / "c").exists() and not (tmp_path / "d").exists()  # no run folder made


def test_eval_exact_is_refused_where_it_cannot_run(tiny_model: Path, tmp_path: Path) -> None:
    from toolgym.train.grpo import GRPOTrainer

    with pytest.raises(ValueError, match="set eval_every"):
        _cfg(tiny_model, tmp_path / "a", eval_every=0)
    from toy_env import DigitsEnv

    with pytest.raises(ValueError, match="no exact evaluation"):
        GRPOTrainer(_cfg(tiny_model, tmp_path / "b", env_args={}), env=DigitsEnv())
    env = TicTacToeEnv(transport="inprocess", min_random_move_prob=0.0, max_random_move_prob=0.5)
    policy = load_policy(f"hf:{tiny_model}", env, temperature=0.0, max_tokens=8)
    with pytest.raises(ValueError, match="optimal .* or the random"):
        asyncio.run(env.exact_eval(policy))
    with pytest.raises(ValueError, match="from the empty board"):
        asyncio.run(TicTacToeEnv(transport="inprocess", task="move").exact_eval(policy))
