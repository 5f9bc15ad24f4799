"""The committed tiny tic-tac-toe checkpoint is `toolgym eval tictactoe`'s default: it loads through the `hf:` path
with no network, and plays real games through MCP tool calls (well-formed, legal calls; mostly wins
against the random opponent). Real model, real in-process MCP server; numbers from the recipe's greedy eval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from toolgym_tictactoe import CHECKPOINT, TicTacToeEnv, embedded_default_policy
from typer.testing import CliRunner

from toolgym.cli import app

pytest.importorskip("transformers")


def test_checkpoint_is_committed_and_is_the_default() -> None:
    assert (CHECKPOINT / "model.safetensors").is_file() and (CHECKPOINT / "tokenizer.json").is_file()
    assert embedded_default_policy() == f"hf:{CHECKPOINT}" == TicTacToeEnv.default_policy
    assert TicTacToeEnv.default_policy_options == {"temperature": 0.0, "max_tokens": 200}


def test_eval_with_no_model_flag_plays_the_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "ev"
    res = CliRunner().invoke(app, ["eval", "tictactoe", "-n", "24", "-c", "24", "-a", "transport=inprocess",
                                   "-a", "min_random_move_prob=1.0", "-a", "max_random_move_prob=1.0", "-o", str(out)],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    run = json.loads((out / "run.json").read_text())
    assert run["model"] == f"hf:{CHECKPOINT}" and run["sampling"]["temperature"] == 0.0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors"] == 0
    acc = summary["tool_accuracy"]["make_move"]
    # recipe eval (200 games vs random): every call well-formed and legal, wins 85.5 %; a random-init model makes no call
    assert acc["parse_ok"] > 0.97 and acc["exec_ok"] > 0.97, acc
    assert summary["metrics"]["win"]["mean"] >= 0.6, summary["metrics"]["win"]


def test_checkpoint_holds_the_optimal_opponent_to_draws(tmp_path: Path) -> None:
    """The committed model (recipe SFT on line-scan teacher games) draws against the optimal opponent: 199 of 200 in
    the recipe's eval, all 24 here; its predecessor without the line scan drew about half."""
    out = tmp_path / "ev"
    res = CliRunner().invoke(app, ["eval", "tictactoe", "-n", "24", "-c", "24", "-a", "transport=inprocess",
                                   "--seed", "12345", "-o", str(out)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    m = json.loads((out / "summary.json").read_text())["metrics"]
    assert m["win"]["mean"] == 0.0  # nobody beats the optimal opponent
    assert m["loss"]["mean"] <= 0.1, m["loss"]


def test_flags_override_the_default_options() -> None:
    from toolgym.cli import policy_choice

    env = TicTacToeEnv(transport="inprocess")
    assert policy_choice(env, None, {"temperature": 0.8, "top_p": None}) == (
        f"hf:{CHECKPOINT}", {"temperature": 0.8, "max_tokens": 200})
    # -m keeps the env's sampling defaults (a scripted player ignores those it does not declare)
    assert policy_choice(env, "scripted:random", {"temperature": None, "seed": 3}) == (
        "scripted:random", {"temperature": 0.0, "max_tokens": 200, "seed": 3})
