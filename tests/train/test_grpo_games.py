"""GRPO on full tic-tac-toe games against the minimax opponent raises the sampled reward within a few steps, on a tiny
start: the committed 0.9M model (envs/tictactoe checkpoint), from a quiet position where it often plays a move that
loses the game.

Everything is real: games through the tic-tac-toe MCP server (in-process), the optimal opponent, the env's rubric
(outcome + format - invalid), the colocated hf engine with continuous batching, CISPO with credit on the decisions
(`pg_tokens = "answer"`) and `save_rollouts`. The start position is chosen in the test, not hard-coded: among the
quiet positions of the held-out split (which the committed model never trained on), the one where the model's
sampled moves keep the game value least often while still sometimes doing so (GRPO needs a right sample to learn
from), measured by 8 sampled one-move tasks per position. Then 12 GRPO steps of 2 seeds x 8 games from that
position: the mean sampled reward of the last three steps must clear the first three by a margin well above the
noise of a constant policy (0.1 on a 0-0.7 scale).
"""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from toolgym_tictactoe import CHECKPOINT, TicTacToeEnv, positions_shown
from toolgym_tictactoe import positions as P

from toolgym.train.config import GRPOConfig
from toolgym.train.runstate import read_metrics


class FromPosition(TicTacToeEnv):
    """Whole games from one position (X to move) against the optimal opponent, one seed per example."""

    def __init__(self, board: str, **kw: object) -> None:
        super().__init__(transport="inprocess", **kw)  # type: ignore[arg-type]
        self.board = board

    def build_dataset(self, n: int | None = None, seed: int = 0) -> list[dict[str, object]]:
        pos = P.analyze(self.board)
        return [{"seed": seed * 1_000_003 + i, "x_starts": self.board.count("X") == self.board.count("O"),
                 "random_move_prob": 0.0, "group": 0, "board": self.board, "kind": pos.kind, "pieces": pos.pieces,
                 "split": pos.split} for i in range(n or 2)]


def weak_quiet_position(n_positions: int = 48, samples: int = 8, target: float = 0.35) -> tuple[str, float]:
    """(board, sampled optimal rate) of the held-out quiet position, among the first `n_positions` of a seeded
    sample, where the committed model's sampled moves keep the value at the rate closest to `target` (sometimes
    right, so GRPO has right samples to learn from; mostly wrong, so there is room)."""
    from toolgym.eval import evaluate
    from toolgym.policies.hf import HFPolicy

    env = TicTacToeEnv(transport="inprocess", task="move", split="heldout", kinds="quiet")
    tasks = env.build_dataset(n_positions, seed=3)
    pol = HFPolicy(str(CHECKPOINT), temperature=1.0, max_tokens=200, seed=0, max_batch=64, num_threads=1)

    async def run():  # type: ignore[no-untyped-def]
        try:
            return await evaluate(env, pol, tasks, rollouts_per_example=samples, concurrency=64)
        finally:
            await pol.aclose()
            await env.aclose()

    trajs, _ = asyncio.run(run())
    rate: dict[str, list[float]] = {}
    for t in trajs:
        rate.setdefault(t.task["board"], []).append(t.rewards.get("optimal", 0.0))
    scored = sorted((abs(sum(v) / len(v) - target), sum(v) / len(v), b) for b, v in rate.items() if 0 < sum(v) < len(v))
    assert scored, "the committed model plays every sampled held-out quiet position always or never right"
    return scored[0][2], scored[0][1]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_grpo_on_full_games_raises_the_sampled_reward(tmp_path: Path) -> None:
    from toolgym.train.grpo import run_grpo

    board, start_rate = weak_quiet_position()
    assert start_rate <= 0.5
    cfg = GRPOConfig(model=str(CHECKPOINT), output_dir=str(tmp_path / "run"), env="tictactoe", num_examples=64,
                     batch_size=2, rollouts_per_example=8, max_steps=12, loss_type="cispo", pg_tokens="answer",
                     reasoning_end=" I play", learning_rate=3e-4, warmup_steps=2, kl_coef=0.1, temperature=1.0, max_tokens=200,
                     micro_batch_size=16, concurrency=16, num_threads=1, save_every=100, seed=0, save_rollouts=True)
    run_grpo(cfg, env=FromPosition(board))
    m = read_metrics(tmp_path / "run")
    rewards = [round(r["reward"], 3) for r in m]
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last >= first + 0.1, (board, start_rate, rewards)
    assert all(r["metrics/win"] + r["metrics/draw"] + r["metrics/loss"] == pytest.approx(1.0) for r in m)
    # the saved rollouts are whole games from that position: every game shows it first, then later positions
    with gzip.open(tmp_path / "run" / "rollouts.jsonl.gz", "rt") as f:
        games = [json.loads(line) for line in f]
    assert len(games) == 12 * 2 * 8 and {g["step"] for g in games} == set(range(1, 13))
    assert all(positions_shown(g["messages"])[0] == board for g in games)
    assert sum(len(positions_shown(g["messages"])) > 1 for g in games) > len(games) // 4
    # what was learnt is the decision at that position: the share of games whose first move keeps the value
    right = P.analyze(board).optimal

    def first_move_ok(g: dict) -> float:  # type: ignore[type-arg]
        calls = [c for c in g["calls"] if c["name"] == "make_move" and c["exec_ok"]]
        if not calls:
            return 0.0
        args = calls[0]["arguments"]
        return float(int((json.loads(args) if isinstance(args, str) else args)["position"]) in right)

    by_step = [sum(first_move_ok(g) for g in games if g["step"] == k) / 16 for k in range(1, 13)]
    print(f"\nfrom {board} (sampled optimal {start_rate:.2f} before): reward per step {rewards}, first move "
          f"keeps the value {[round(x, 2) for x in by_step]}")
    assert sum(by_step[-3:]) > sum(by_step[:3])
