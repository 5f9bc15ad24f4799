"""GRPO's `deterministic = true` repeats a run to the last bit: the same config run twice (one after the other, so
the two runs see different timings) logs the same metrics (every key but the clock's), saves the same games and
ends with the same weights (`examples/tictactoe/same_run.py`). Real parts: the committed 0.9M late start
(examples/tictactoe/late_start), whole games against the optimal opponent through the in-process tic-tac-toe MCP
server, the hf engine with continuous batching in lock-step, restarts from the previous step's lost games. The
recipe-scale pair (60 steps, two fresh clones) is in the recipe's docs."""

from __future__ import annotations

from pathlib import Path

import pytest
from tg_testutil import ROOT, example_module

from toolgym.train.config import GRPOConfig

same_run = example_module("examples/tictactoe/same_run.py")


def _cfg(out: Path) -> GRPOConfig:
    return GRPOConfig(
        model=str(ROOT / "examples" / "tictactoe" / "late_start"), output_dir=str(out), env="tictactoe",
        env_args={"transport": "inprocess", "task": "game", "min_random_move_prob": 0.0,
                  "max_random_move_prob": 0.0, "restart_board": "last_unforced", "restart_opponent": "optimal"},
        num_examples=50, batch_size=2, rollouts_per_example=4, max_steps=3, warmup_steps=0, temperature=1.0,
        max_tokens=200, pg_tokens="answer", reasoning_end=" I play", restart_share=0.5, kl_coef=0.01,
        save_rollouts=True, save_every=100, num_threads=1, seed=1, deterministic=True)


@pytest.mark.slow
def test_a_deterministic_run_repeats_bit_for_bit(tmp_path: Path) -> None:
    from toolgym.train.grpo import run_grpo
    from toolgym.train.runstate import read_metrics

    run_grpo(_cfg(tmp_path / "a"))
    run_grpo(_cfg(tmp_path / "b"))
    assert [m["step"] for m in read_metrics(tmp_path / "a")] == [1, 2, 3]
    assert same_run.compare(tmp_path / "a", tmp_path / "b") == []
    assert (tmp_path / "a" / "final" / "model.safetensors").is_file()
