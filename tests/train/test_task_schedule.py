"""GRPO's task_schedule (a curriculum: the pool rebuilt per phase, e.g. an opponent annealed from random to optimal)
and save_rollouts: the phases' pools on the real tic-tac-toe env, bad schedules refused at load time."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolgym.train.config import ConfigError, GRPOConfig, load_config

SCHEDULE = [
    {"from_step": 0, "env_args": {"min_random_move_prob": 0.5, "max_random_move_prob": 1.0}},
    {"from_step": 3, "env_args": {"min_random_move_prob": 0.0, "max_random_move_prob": 0.0, "num_groups": 1}},
]


def _cfg(model: Path, out: Path, **kw: object) -> GRPOConfig:
    base = dict(model=str(model), output_dir=str(out), env="tictactoe",
                env_args={"transport": "inprocess", "num_groups": 2}, num_examples=12, batch_size=2,
                rollouts_per_example=2, max_steps=6, task_schedule=SCHEDULE)
    return GRPOConfig(**{**base, **kw})


def test_phases_rebuild_the_pool(tiny_model: Path, tmp_path: Path) -> None:
    from toolgym.train.grpo import GRPOTrainer

    tr = GRPOTrainer(_cfg(tiny_model, tmp_path / "run"))
    try:
        tr.schedule_tasks(0)
        first = [t["random_move_prob"] for t in tr.tasks]
        assert tr.phase == 0 and tr.num_groups == 2 and len(first) == 12
        assert all(0.5 <= p <= 1.0 for p in first) and min(first) < 0.75 < max(first)  # both buckets present
        tr.schedule_tasks(2)
        assert [t["random_move_prob"] for t in tr.tasks] == first  # same phase: the pool is kept
        tr.schedule_tasks(3)
        assert tr.phase == 1 and tr.num_groups == 1
        assert [t["random_move_prob"] for t in tr.tasks] == [0.0] * 12
        assert [t["seed"] for t in tr.tasks] != [t["seed"] for t in tr.env.build_dataset(12, seed=0)]  # new seeds
    finally:
        tr.log.close()


def test_bad_schedules_are_refused(tiny_model: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="from_step must start at 0"):
        _cfg(tiny_model, tmp_path, task_schedule=[{"from_step": 2, "env_args": {}}])
    with pytest.raises(ValueError, match="increase"):
        _cfg(tiny_model, tmp_path, task_schedule=[{"from_step": 0}, {"from_step": 0}])
    toml = tmp_path / "c.toml"
    toml.write_text(f'model = "{tiny_model}"\noutput_dir = "{tmp_path / "o"}"\nenv = "tictactoe"\n'
                    'task_schedule = [{ from_step = 0, env_args = {}, steps = 3 }]\n')
    with pytest.raises(ConfigError, match="task_schedule"):
        load_config(GRPOConfig, toml)


def test_a_bad_phase_argument_fails_before_the_model_loads(tmp_path: Path) -> None:
    from toolgym.train.grpo import GRPOTrainer

    cfg = GRPOConfig(model=str(tmp_path / "missing"), output_dir=str(tmp_path / "run"), env="tictactoe",
                     task_schedule=[{"from_step": 0, "env_args": {"max_random_move_prob": 2.0}}])
    with pytest.raises(ValueError, match=r"task_schedule\[0\]\.env_args"):
        GRPOTrainer(cfg)


def test_a_phase_argument_that_changes_no_task_row_is_refused(tmp_path: Path) -> None:
    """A phase rebuilds only the task pool (the rollouts keep the run's env): an option that acts in the env's hooks
    would silently do nothing there, so it is refused before the model loads. Options the rows carry pass: the
    opponent's random-move range, `opponent_style` and `invalid_move` (tic-tac-toe puts them in every row)."""
    from toolgym.train.grpo import GRPOTrainer, inert_phase_args

    def cfg(phase_args: dict) -> GRPOConfig:
        return GRPOConfig(model=str(tmp_path / "missing"), output_dir=str(tmp_path / "run"), env="tictactoe",
                          env_args={"transport": "inprocess"}, num_examples=20,
                          task_schedule=[{"from_step": 0, "env_args": {}},
                                         {"from_step": 5, "env_args": phase_args}])

    carried = {"max_random_move_prob": 0.5, "opponent_style": "trappy", "invalid_move": "forfeit",
               "format_weight": 0.2}  # the last: the default said again, not a change
    assert inert_phase_args(cfg(carried)) == []
    assert inert_phase_args(cfg({"format_weight": 0.5, "transport": "stdio", "opponent_style": "trappy"})) == [
        "task_schedule[1].env_args.format_weight", "task_schedule[1].env_args.transport"]
    with pytest.raises(ValueError, match=r"task_schedule\[1\]\.env_args\.win_reward: changes no task row"):
        GRPOTrainer(cfg({"win_reward": 2.0}))
