"""Bad config values fail with a clear message before any work starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolgym.train.cli import app
from toolgym.train.config import ConfigError, GRPOConfig, SFTConfig, describe, load_config

BASE = {"model": "m", "output_dir": "o", "env": "tictactoe"}


def test_valid_defaults_and_dapo_clip_higher() -> None:
    cfg = load_config(GRPOConfig, None, {**BASE, "loss_type": "dapo"})
    assert cfg.epsilon_high == 0.28 and cfg.epsilon == 0.2
    assert load_config(GRPOConfig, None, BASE).epsilon_high == 0.2


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("loss_type", "ppo", "loss_type"),
    ("rollouts_per_example", 1, "rollouts_per_example"),
    ("learning_rate", -1, "learning_rate"),
    ("epsilon", 1.5, "epsilon"),
    ("batch_sz", 4, "batch_sz"),  # typo: unknown fields are rejected, not ignored
    ("lora", {"r": 0}, "lora.r"),
])
def test_bad_values_name_the_field(field: str, value: object, needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(GRPOConfig, None, {**BASE, field: value})
    assert needle in str(exc.value)


@pytest.mark.parametrize(("engine", "args", "needle"), [
    ("vllm", {"gpu_mem_utilization": 0.3}, "did you mean 'gpu_memory_utilization'?"),
    ("vllm-server", {"base_url": "http://h/v1", "sync_dir": "/s", "served_name": "m"}, "did you mean 'served_model_name'?"),
    ("hf", {"max_model_len": 512}, "engine_args apply to engine"),
])
def test_engine_args_are_checked_by_name(engine: str, args: dict, needle: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError, match=needle):
        load_config(GRPOConfig, None, {**BASE, "engine": engine, "engine_args": args})
    ok = {"vllm": {"max_model_len": 512}, "vllm-server": {"base_url": "http://h/v1", "sync_dir": "/s"}, "hf": {}}
    assert load_config(GRPOConfig, None, {**BASE, "engine": engine, "engine_args": ok[engine]}).engine == engine


def test_missing_required_and_warmup() -> None:
    with pytest.raises(ConfigError, match="env"):
        load_config(GRPOConfig, None, {"model": "m", "output_dir": "o"})
    with pytest.raises(ConfigError, match="warmup_steps"):
        load_config(GRPOConfig, None, {**BASE, "max_steps": 2, "warmup_steps": 5})


def test_file_overrides_and_base(tmp_path: Path) -> None:
    (tmp_path / "base.toml").write_text('model = "m"\noutput_dir = "o"\nenv = "tictactoe"\nbatch_size = 4\n'
                                        '[env_args]\nmin_random_move_prob = 0.2\n')
    (tmp_path / "p2.toml").write_text('base = "base.toml"\ntemperature = 1.25\n')
    cfg = load_config(GRPOConfig, tmp_path / "p2.toml", ["env_args.max_random_move_prob=0.7", "batch_size=2"])
    assert cfg.temperature == 1.25 and cfg.batch_size == 2
    assert cfg.env_args == {"min_random_move_prob": 0.2, "max_random_move_prob": 0.7}
    with pytest.raises(ConfigError, match="not found"):
        load_config(GRPOConfig, tmp_path / "nope.toml")


def test_every_field_documented() -> None:
    for cls in (GRPOConfig, SFTConfig):
        for name, f in cls.model_fields.items():
            assert f.description, f"{cls.__name__}.{name} has no description"
    assert "rollouts_per_example" in describe(GRPOConfig)


def test_cli_bad_config_fails_before_work(tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({**BASE, "output_dir": str(tmp_path / "run"), "loss_type": "nope"}))
    res = CliRunner().invoke(app, ["train", str(cfg)])
    assert res.exit_code == 2
    assert "loss_type" in res.output
    assert not (tmp_path / "run").exists()  # nothing started
    res = CliRunner().invoke(app, ["train", str(cfg), "--set", "loss_type=gspo", "--set", "max_steps=0"])
    assert res.exit_code == 2 and "max_steps" in res.output
    res = CliRunner().invoke(app, ["sft", "--set", "epochs=0", "--model", "m", "--out", "o", "--data", "x.jsonl"])
    assert res.exit_code == 2 and "epochs" in res.output


def test_recipe_configs_validate() -> None:
    """The tic-tac-toe recipe's files load and chain: budget SFT inherits the main SFT, each GRPO run starts from the
    SFT that precedes it, and no RL run trains on held-out positions (its periodic evals may look at them)."""
    from pathlib import Path

    from toolgym.train.config import GRPOConfig, SFTConfig, load_config

    root = Path(__file__).resolve().parents[2] / "examples" / "tictactoe"
    sft = load_config(SFTConfig, root / "sft.toml")
    budget = load_config(SFTConfig, root / "budget.toml")
    focus = load_config(SFTConfig, root / "focus.toml")
    main = load_config(GRPOConfig, root / "grpo.toml")
    rl = load_config(GRPOConfig, root / "grpo_budget.toml")
    assert budget.learning_rate == sft.learning_rate and budget.data != sft.data
    assert str(focus.model) == f"{sft.output_dir}/final" and focus.learning_rate < sft.learning_rate
    assert str(main.model) == f"{sft.output_dir}/final"
    assert str(rl.model) == f"{budget.output_dir}/final"
    for cfg in (main, rl):
        assert cfg.env_args["task"] == "move" and cfg.env_args["split"] == "train", cfg.env_args
    assert rl.eval_env_args == {"split": "heldout"}
    pairs = [("weak_sft.toml", "weak_grpo.toml"), ("noisy_sft.toml", "noisy_grpo.toml"),
             ("reader_sft.toml", "reader_grpo.toml")]
    for s_file, g_file in pairs:  # the other RL lines: each GRPO starts from its own SFT, trains on train positions
        s_cfg, g_cfg = load_config(SFTConfig, root / s_file), load_config(GRPOConfig, root / g_file)
        assert str(g_cfg.model) == f"{s_cfg.output_dir}/final", g_file
        assert g_cfg.env_args["split"] == "train" and g_cfg.eval_env_args == {"split": "heldout"}, g_file
    assert load_config(GRPOConfig, root / "noisy_grpo.toml").kl_coef > 0  # the anchor that kept the scan intact
    reader = load_config(GRPOConfig, root / "reader_grpo.toml")  # credit on the cell the reader's verdict names
    assert reader.pg_tokens == "answer" and reader.kl_coef > 0
    from toolgym_tictactoe import imperfect_player  # the reader's teacher: scripted:imperfect at mistake_prob 1.0

    turn = imperfect_player(None, mistake_prob=1.0, seed=0, think="track").fn([{"role": "user", "content": " X | 1 | 2\n 3 | O | 5\n 6 | 7 | 8"}], {})
    assert reader.reasoning_end in turn.reasoning and turn.reasoning.endswith(f"I play {turn.tool_calls[0].arguments['position']}.")


def test_deterministic_needs_the_hf_engine() -> None:
    assert load_config(GRPOConfig, None, {**BASE, "deterministic": True}).deterministic
    with pytest.raises(ConfigError, match="deterministic needs engine"):
        load_config(GRPOConfig, None, {**BASE, "deterministic": True, "engine": "vllm"})


def test_late_patch_config_trains_late_training_boards_in_both_contexts() -> None:
    """late_patch.toml (run.sh forced-late-patch) starts from a whole-game arm's kept weights; its pool is half whole
    games from the empty board and half games from late training boards (5-8 marks, never a held-out one), all against
    the optimal opponent with an invalid move forfeiting; the PATCH=move overrides give one-move tasks on the same
    boards (position_share must be 0 there: the env refuses to mix with move tasks)."""
    from toolgym_tictactoe import TicTacToeEnv
    from toolgym_tictactoe import positions as P

    root = Path(__file__).resolve().parents[2] / "examples" / "tictactoe"
    cfg = load_config(GRPOConfig, root / "late_patch.toml")
    assert str(cfg.model).endswith("/best") and cfg.kl_coef > 0 and cfg.pg_tokens == "all"
    pool = TicTacToeEnv(**{**cfg.env_args, "transport": "inprocess"}).build_dataset(cfg.num_examples, seed=0)
    late = [r for r in pool if "board" in r]
    assert 0.4 < len(late) / len(pool) < 0.6
    assert {9 - r["board"].count(".") for r in late} == {5, 6, 7, 8}
    assert not any(P.is_heldout(r["board"]) for r in late)
    assert {r["invalid_move"] for r in pool} == {"forfeit"} and {r["random_move_prob"] for r in pool} == {0.0}
    move = load_config(GRPOConfig, root / "late_patch.toml", ["env_args.task=move", "env_args.position_share=0",
                                                              "num_examples=2705", "env_args.invalid_move=retry"])
    tasks = TicTacToeEnv(**{**move.env_args, "transport": "inprocess"}).build_dataset(move.num_examples, seed=0)
    assert len({r["board"] for r in tasks}) == 2705 and all(5 <= 9 - r["board"].count(".") <= 8 for r in tasks)
    assert not any(P.is_heldout(r["board"]) for r in tasks)
