"""GRPO's `symmetry_images`: each trained episode also trained in its images under the env's symmetries, with the
episode's advantage. Real parts: the committed late start of the RL rounds (0.9M, examples/tictactoe/late_start)
playing whole games through the tic-tac-toe MCP server (in-process) against the optimal opponent, the colocated hf
engine, the chat template, GRPO's micro-batches and loss."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from toolgym_tictactoe import positions as P
from toolgym_tictactoe.symmetry import game_image

from toolgym.train.config import GRPOConfig

LATE = Path(__file__).resolve().parents[2] / "examples" / "tictactoe" / "late_start"


def _cfg(out: Path, **kw: object) -> GRPOConfig:
    base = dict(model=str(LATE), output_dir=str(out), env="tictactoe",
                env_args={"transport": "inprocess", "task": "game", "num_groups": 1, "min_random_move_prob": 0.0,
                          "max_random_move_prob": 0.0},
                num_examples=16, batch_size=3, rollouts_per_example=6, max_steps=1, max_tokens=200, temperature=0.7,
                pg_tokens="answer", reasoning_end=" I play", kl_coef=0.01, loss_type="grpo", micro_batch_size=8,
                concurrency=18, skip_constant_groups=False, symmetry_images=2, num_threads=1, save_every=10)
    return GRPOConfig(**{**base, **kw})


def test_symmetry_images_needs_an_env_with_symmetries(tmp_path: Path) -> None:
    from toy_env import DigitsEnv

    from toolgym.train.grpo import GRPOTrainer

    with pytest.raises(ValueError, match="symmetry_images: the env 'digits' declares no symmetries"):
        GRPOTrainer(_cfg(tmp_path / "run", env="digits", env_args={}), env=DigitsEnv())
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(not (LATE / "model.safetensors").is_file(), reason="the committed late start is absent")
def test_images_are_trained_with_their_episodes_advantage(tmp_path: Path) -> None:
    """The model's own sampled games: where a game's text is recognised, the chat template renders it back to exactly
    the tokens the model sampled (so an image is the sequence the model would have sampled in that orientation);
    every image gets its episode's advantage and micro-batches of its own; the update trains on both, the images'
    ratio starting at 1 (their behaviour log-probs are the trainer's own) and the drift measured on sampled
    sequences only."""
    import torch

    from toolgym.models.chat import ChatRenderer, tokenize_conversation
    from toolgym.train.grpo import GRPOTrainer

    trainer = GRPOTrainer(_cfg(tmp_path / "run"))

    async def go() -> None:
        async with trainer.env:  # as in the run: rollouts and the update while the env is up
            check(await trainer.rollouts(0))

    def check(trajs: list) -> None:
        seqs, adv, stats, used = trainer.select_groups(trajs)
        assert len(seqs) == len(used) == len(trajs) == 18
        assert all(u.tokens is s for u, s in zip(used, seqs, strict=True))
        renderer = ChatRenderer(trainer.tok)
        recognised = [t for t in used if game_image(t.messages, P.SYMMETRIES[0]) == t.messages]
        assert len(recognised) >= 6  # measured: most games at T 0.7 are written in the start's own format
        for t in recognised:
            last = max(k for k, m in enumerate(t.messages) if m["role"] == "assistant")
            canon = tokenize_conversation(renderer, t.messages[: last + 1], trainer.env.model_tools())
            assert canon.ids == t.tokens.ids and canon.mask == t.tokens.mask

        images, image_adv = trainer.images(used, adv)
        assert len(images) >= 2 * len(recognised) - 2  # two each, a symmetric game fewer
        assert set(image_adv.tolist()) <= set(adv.tolist())
        assert all(sum(i.mask) > 0 and len(i.ids) == len(i.mask) for i in images)
        again, again_adv = trainer.images(used, adv)  # the images of a step are drawn by a per-step seed
        assert [i.ids for i in again] == [i.ids for i in images] and torch.equal(again_adv, image_adv)

        batches, _ = trainer.micro_batches(seqs, adv, images, image_adv)
        assert sum(b.image for b in batches) == -(-len(images) // 8)
        assert sum(int(b.ids.shape[0]) for b in batches if b.image) == len(images)
        total = sum(float(b.pg_weights.sum()) for b in batches)  # grpo: 1/len per sequence, / n over all sequences
        assert total == pytest.approx(1.0, rel=1e-4)
        before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        st = trainer.update(trajs)
        assert st["image_seqs"] == len(images) and st["groups_used"] == 3
        assert st["drift_abs"] < 0.05  # the sampler's own weights: only float noise, measured on sampled sequences
        assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())

    asyncio.run(go())

def test_images_drawn_per_step_differ_between_steps() -> None:
    """`images` seeds its choice of symmetries by (seed, step): another step draws other symmetries for the same
    game (so over steps a decision meets every orientation)."""
    from toolgym_tictactoe.symmetry import game_images

    from toolgym.policies import load_policy
    from toolgym.registry import load_env
    from toolgym.rollout import run_rollouts

    async def go() -> list:
        env = load_env("tictactoe", transport="inprocess")
        player = load_policy("scripted:imperfect", env, mistake_prob=1.0, mistakes="quiet", think="track",
                         free_list=True)
        async with env:
            return await run_rollouts(env, player, [(0, 0, env.build_dataset(1)[0])], 1)

    msgs = asyncio.run(go())[0].messages
    draws = {tuple(str(game_images(msgs, 1, random.Random(f"images:0:{step}"))[0]) for _ in [0])
             for step in range(12)}
    assert len(draws) >= 3
