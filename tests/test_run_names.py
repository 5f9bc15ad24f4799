"""`toolgym eval`'s default results folder: `runs/eval/<env>-<model short name>-<time>/`, named for people."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from toolgym.cli import app, default_out, model_short_name


@pytest.mark.parametrize(("uri", "name"), [
    ("scripted:minimax", "minimax"),
    ("hf:Qwen/Qwen3-0.6B", "Qwen3-0.6B"),
    ("hf:LiquidAI/LFM2-1.2B", "LFM2-1.2B"),
    ("vllm-server:Qwen/Qwen3-0.6B", "Qwen3-0.6B"),
    ("openai:gpt-4o-mini", "gpt-4o-mini"),
    ("hf:runs/tiny", "tiny"),
    ("hf:runs/tictactoe/sft/final", "sft-final"),
    ("hf:runs/tictactoe/grpo1/checkpoints/step_25/model", "grpo1-step_25-model"),
    ("hf:./ckpt/", "ckpt"),
    ("hf:/abs/path/model", "path-model"),
    ("minimax", "minimax"),
    ("openai:a b?c", "a_b_c"),
])
def test_model_short_name(uri: str, name: str) -> None:
    assert model_short_name(uri) == name


def test_default_out_names_the_env_and_the_embedded_default(tmp_path: Path) -> None:
    ckpt = tmp_path / "toolgym_tictactoe" / "checkpoint"
    ckpt.mkdir(parents=True)
    env = SimpleNamespace(name="tictactoe", default_policy=f"hf:{ckpt}")
    stamp = r"\d{8}-\d{6}"
    assert re.fullmatch(rf"runs/eval/tictactoe-default-{stamp}", default_out(env, "tictactoe", f"hf:{ckpt}").as_posix())
    assert re.fullmatch(rf"runs/eval/tictactoe-minimax-{stamp}",
                        default_out(env, "tictactoe", "scripted:minimax").as_posix())
    # a config env is named by its `name`, not by its file
    cfg = SimpleNamespace(name="time-conversion", default_policy="scripted:reference")
    assert re.fullmatch(rf"runs/eval/time-conversion-reference-{stamp}",
                        default_out(cfg, "examples/third_party_time/env.toml", "scripted:reference").as_posix())


def test_eval_writes_the_named_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, ["eval", "tictactoe", "-m", "scripted:minimax", "-n", "2",
                                   "-a", "transport=inprocess"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    (run,) = (tmp_path / "runs" / "eval").iterdir()
    assert re.fullmatch(r"tictactoe-minimax-\d{8}-\d{6}", run.name)
    assert (run / "results.jsonl").is_file() and (run / "summary.json").is_file()
