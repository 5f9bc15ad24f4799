"""`toolgym eval --exact`: the env's exact evaluation from the command line, through the real tic-tac-toe env
(in-process server) -- the shipped `scripted:minimax` and a `copy-centre` shortcut player checked against the
board-level tree walk (`shortcuts.exact_outcome` / `game_outcome`), as `tests/test_tictactoe_exact.py` checks
`exact_games` -- and its refusals: an env without the hook, a sampling temperature, the options of a sampled run, an
env config the walk cannot take, a walk that is not exact (exit 3)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from tg_testutil import board_player
from toolgym_tictactoe import TicTacToeEnv
from toolgym_tictactoe.shortcuts import exact_outcome, game_outcome, move_distribution
from toolgym_tictactoe.text import explain_best_move
from typer.testing import CliRunner

from toolgym.cli import app
from toolgym.eval import inexact_reason

runner = CliRunner()
RANDOM_OPPONENT = ("-a", "min_random_move_prob=1", "-a", "max_random_move_prob=1")


def _eval(env: str, *args: str) -> tuple[int, str]:
    res = runner.invoke(app, ["eval", env, *args], catch_exceptions=False)
    return res.exit_code, res.output


_player = board_player


@pytest.fixture
def extra_players(monkeypatch: pytest.MonkeyPatch) -> None:
    """`scripted:copy-centre` (the shortcut: one cell per board) and `scripted:no-centre-o` (copy-centre that fails
    -- raises -- on a board where O holds the centre), beside the players the env ships."""
    shipped = TicTacToeEnv.scripted_players

    def copy_centre(board: str) -> int:
        (cell,) = move_distribution("copy-centre", board)
        return cell

    def no_centre_o(board: str) -> int:
        if board[4] == "O":
            raise RuntimeError("this player cannot play against a centre O")
        return copy_centre(board)

    monkeypatch.setattr(TicTacToeEnv, "scripted_players", lambda self: {
        **shipped(self),
        "copy-centre": lambda env, **_: _player(copy_centre, "scripted:copy-centre"),
        "no-centre-o": lambda env, **_: _player(no_centre_o, "scripted:no-centre-o")})


def _minimax_cell(board: str) -> int:
    """`scripted:minimax`'s move (tie_break="preference"): the forced win or block, else the first minimax-best cell
    in centre, corners, edges order."""
    return explain_best_move(board, "preference")[0]


@pytest.mark.parametrize("opponent", ["optimal", "random"])
def test_exact_minimax_equals_the_board_level_tree_walk(opponent: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ("-m", "scripted:minimax", "--exact", "-a", "transport=inprocess", "-o", str(out),
            *(RANDOM_OPPONENT if opponent == "random" else ()))
    code, text = _eval("tictactoe", *args)
    assert code == 0, text
    exact = json.loads((out / "exact.json").read_text())
    m = exact["exact"]
    w, d, lost = exact_outcome(lambda b: {_minimax_cell(b): 1.0}, float(opponent == "random"))
    assert (m["win"], m["draw"], m["loss"]) == pytest.approx((w, d, lost), abs=1e-12)
    assert m["loss"] == 0  # a perfect player never loses
    if opponent == "optimal":
        assert m["draw"] == pytest.approx(1.0, abs=1e-12)  # perfect against perfect: every game a draw
    assert m["errored"] == m["diverged"] == m["capped"] == 0 and m["lines"] > 2
    assert exact["not_exact"] is None and exact["policy"] == "scripted:minimax"
    # what it printed: the table and the W/D/L line, from the same numbers
    assert "exact evaluation (tictactoe)" in text and re.search(rf"│ lines +│ +{int(m['lines'])} │", text), text
    assert f"win/draw/loss: {100 * m['win']:.2f} / {100 * m['draw']:.2f} / {100 * m['loss']:.2f} % (exact)" in text
    run = json.loads((out / "run.json").read_text())
    assert run["exact"] is True and run["model"] == "scripted:minimax" and run["sampling"]["temperature"] == 0.0
    assert run["env_args"]["transport"] == "inprocess"
    assert not (out / "results.jsonl").exists() and not (out / "summary.json").exists()
    # the folder holds a run now: a second one is refused, and leaves it as it was
    code, text = _eval("tictactoe", *args)
    assert code == 2 and "holds a run already" in text, text
    assert json.loads((out / "exact.json").read_text()) == exact


@pytest.mark.parametrize("opponent", ["optimal", "random"])
def test_exact_copy_centre_equals_game_outcome(opponent: str, tmp_path: Path, extra_players: None) -> None:
    out = tmp_path / "run"
    code, text = _eval("tictactoe", "-m", "scripted:copy-centre", "--exact", "-a", "transport=inprocess",
                       "-o", str(out), *(RANDOM_OPPONENT if opponent == "random" else ()))
    assert code == 0, text
    m = json.loads((out / "exact.json").read_text())["exact"]
    w, d, lost = game_outcome("copy-centre", float(opponent == "random"))
    assert (m["win"], m["draw"], m["loss"]) == pytest.approx((w, d, lost), abs=1e-12)
    assert lost > 0  # the shortcut loses some games: a loss rate of 0 would not test the weights
    assert m["errored"] == m["diverged"] == 0
    assert f"{100 * m['loss']:.2f} % (exact)" in text


def test_an_errored_walk_exits_3_after_printing(tmp_path: Path, extra_players: None) -> None:
    """Every game where O takes the centre errors: its probability is counted as lost, the walk is not exact."""
    out = tmp_path / "run"
    code, text = _eval("tictactoe", "-m", "scripted:no-centre-o", "--exact", "-a", "transport=inprocess",
                       "-o", str(out))
    assert code == 3, text
    exact = json.loads((out / "exact.json").read_text())
    m = exact["exact"]
    assert 0 < m["errored"] <= m["loss"]
    assert exact["not_exact"] == inexact_reason(m) and "errored games hold" in exact["not_exact"]
    last = text.strip().splitlines()[-1]
    assert last.startswith("error: not exact: errored games hold") and "(counted as lost)" in last
    assert "exact evaluation (tictactoe)" in text and f"results: {out}/exact.json" in text  # printed first


def test_a_diverged_walk_exits_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An env whose exact evaluation reports lines that did not replay their parent's moves (a policy that is not
    deterministic): the metrics are printed and written, and the exit code says they are not exact."""
    async def diverged(self: Any, policy: Any) -> dict[str, float]:
        return {"win": 0.25, "draw": 0.5, "loss": 0.25, "errored": 0.0, "diverged": 2.0}

    monkeypatch.setattr(TicTacToeEnv, "exact_eval", diverged)
    code, text = _eval("tictactoe", "-m", "scripted:minimax", "--exact", "-a", "transport=inprocess",
                       "-o", str(tmp_path / "d"))
    assert code == 3, text
    assert "2 line(s) did not replay their parent's moves" in text.strip().splitlines()[-1]
    assert "errored games" not in text  # errored is 0: not a reason
    assert json.loads((tmp_path / "d" / "exact.json").read_text())["exact"]["diverged"] == 2.0


def test_inexact_reason_reads_errored_and_diverged() -> None:
    assert inexact_reason({"win": 1.0, "errored": 0.0, "diverged": 0.0}) is None
    assert inexact_reason({"win": 1.0}) is None  # an env that reports neither
    both = inexact_reason({"errored": 0.125, "diverged": 3.0})
    assert both is not None and "12.50 %" in both and "3 line(s)" in both


def test_an_env_without_exact_evaluation_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "sql"
    code, text = _eval("sql", "--exact", "-o", str(out))
    assert code == 2
    assert text.strip() == "error: the env 'sql' has no exact evaluation (it does not implement exact_eval); " \
                           "evaluate it without --exact"
    assert not out.exists()


@pytest.mark.parametrize("how", [("-t", "0.7"), ("--temperature", "0.7"), ("--model-arg", "temperature=0.7")])
def test_a_sampling_temperature_is_refused(how: tuple[str, str], tmp_path: Path) -> None:
    code, text = _eval("tictactoe", "-m", "scripted:minimax", "--exact", *how, "-o", str(tmp_path / "t"))
    assert code == 2
    assert text.startswith("error: --exact runs the policy greedily (temperature 0)") and "0.7" in text, text
    assert not (tmp_path / "t").exists()


def test_temperature_zero_is_accepted_and_overrides_the_envs_default(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """`-t 0` is what --exact runs at anyway; an env whose default sampling is not greedy is run greedily (its other
    sampling options kept)."""
    monkeypatch.setattr(TicTacToeEnv, "default_policy_options", {"temperature": 1.0, "max_tokens": 50})
    for name, more in (("z", ("-t", "0")), ("d", ())):
        code, text = _eval("tictactoe", "-m", "scripted:minimax", "--exact", *more, "-a", "transport=inprocess",
                           "-o", str(tmp_path / name))
        assert code == 0, text
        sampling = json.loads((tmp_path / name / "run.json").read_text())["sampling"]
        assert sampling["temperature"] == 0.0 and sampling["max_tokens"] == 50, sampling
        assert (tmp_path / name / "exact.json").is_file()


def test_the_options_of_a_sampled_run_are_refused(tmp_path: Path) -> None:
    code, text = _eval("tictactoe", "-m", "scripted:minimax", "--exact", "-n", "5", "-r", "2", "--resume",
                       "-o", str(tmp_path / "o"))
    assert code == 2
    assert text.startswith("error: --exact plays every episode a greedy policy can meet, once each: "
                           "-n/--num-examples, -r/--rollouts, --resume do not apply to it"), text
    code, text = _eval("tictactoe", "-m", "scripted:minimax", "--exact", "--fail-on-error", "0.1")
    assert code == 2 and "--fail-on-error does not apply" in text, text
    assert not (tmp_path / "o").exists()


def test_an_env_config_the_walk_cannot_take_is_refused(tmp_path: Path) -> None:
    """One-move tasks have no games to walk: exit 2 with the env's reason, and no run recorded in the folder."""
    out = tmp_path / "m"
    code, text = _eval("tictactoe", "-m", "scripted:minimax", "--exact", "-a", "task=move", "-a", "transport=inprocess",
                       "-o", str(out))
    assert code == 2
    assert text.strip().splitlines()[-1] == ("error: tictactoe --exact: exact_eval plays whole games from the empty "
                                             "board (task=game, starts=empty, no position_share)")
    assert not (out / "run.json").exists() and not (out / "exact.json").exists()
    # refused before the model loads: a model folder that does not exist is never reached
    code, text = _eval("tictactoe", "-m", f"hf:{tmp_path / 'no-model'}", "--exact", "-a", "transport=inprocess",
                       "-a", "min_random_move_prob=0.3", "-a", "max_random_move_prob=0.3", "-o", str(tmp_path / "x"))
    assert code == 2
    assert text.strip().splitlines()[-1] == ("error: tictactoe --exact: exact_eval needs the optimal (random-move "
                                             "probability 0) or the random (1) opponent, not 0.3-0.3")
