"""Typed env options (`toolgym.options`): every entry point checks `-a key=value` / `env_args` against the options
the env declares, types command-line values by the declaration, and names the closest valid option for a typo.
Real envs (the bundled entry points and a config env), the real CLI through typer's runner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import Field
from typer.testing import CliRunner

from toolgym import StatefulToolEnv
from toolgym.cli import app
from toolgym.options import EnvOptionError, check_options, declared_options
from toolgym.registry import check_env_args, env_options, load_env, parse_env_args

ROOT = Path(__file__).resolve().parents[1]
TIME_ENV = ROOT / "examples" / "third_party_time" / "env.toml"
runner = CliRunner()


def _run(*argv: str) -> Any:
    return runner.invoke(app, list(argv), env={"COLUMNS": "200", "NO_COLOR": "1"})


def test_command_line_values_are_typed_by_the_declaration() -> None:
    args = parse_env_args("tictactoe", ["require_think=false", "max_random_move_prob=0.25", "num_groups=4",
                                        "kinds=win,block", "task=move", "starts=null", "max_turns=3"])
    assert args == {"require_think": False, "max_random_move_prob": 0.25, "num_groups": 4,
                    "kinds": ["win", "block"], "task": "move", "starts": None, "max_turns": 3}
    assert type(args["max_random_move_prob"]) is float and args["require_think"] is False
    assert parse_env_args("tictactoe", ['kinds=["quiet"]'])["kinds"] == ["quiet"]
    assert parse_env_args("tictactoe", ["kinds=all"])["kinds"] == "all"
    # a str option keeps text that would parse as a number
    assert parse_env_args("wiki", ["corpus=123"])["corpus"] == "123"
    env = load_env("tictactoe", **parse_env_args("tictactoe", ["require_think=False", "max_turns=3"]))
    assert env.require_think is False and env.max_turns == 3


@pytest.mark.parametrize("pair, needle", [
    ("max_random_move_prob=2", "0.0 <= x <= 1.0"),
    ("num_groups=0", ">= 1"),
    ("num_groups=1.5", "integer"),
    ("task=moves", "'game' or 'move'"),
    ("require_think=perhaps", "bool"),
    ("opening_moves=9", "<= 8"),
    ("kinds=win,draw", "kinds"),
])
def test_bad_values_name_the_rule(pair: str, needle: str) -> None:
    with pytest.raises(EnvOptionError) as exc:
        parse_env_args("tictactoe", [pair])
    assert needle in str(exc.value) and pair.split("=")[0] in str(exc.value)


def test_load_env_names_the_closest_option() -> None:
    with pytest.raises(EnvOptionError, match="did you mean 'max_random_move_prob'"):
        load_env("tictactoe", max_random_move_prb=0)
    with pytest.raises(ValueError, match="unknown option 'bogus'. Valid options: db, "):
        load_env("sql", bogus=1)
    with pytest.raises(EnvOptionError, match="did you mean 'max_turns'"):
        load_env(str(TIME_ENV), max_turn=3)
    with pytest.raises(EnvOptionError, match=r"timeout_s=-1: .*greater than 0"):
        load_env("sql", timeout_s=-1)


def test_eval_rejects_a_misspelled_option_before_running(tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = _run("eval", "tictactoe", "-m", "scripted:minimax", "-n", "1", "-o", str(out),
               "-a", "max_random_move_prb=0")
    assert res.exit_code == 2, res.output
    assert "did you mean 'max_random_move_prob'" in res.output
    assert not out.exists()  # nothing was run or written
    ok = _run("eval", "tictactoe", "-m", "scripted:minimax", "-n", "2", "-o", str(out),
              "-a", "max_random_move_prob=0.5", "-a", "require_think=false")
    assert ok.exit_code == 0, ok.output
    info = json.loads((out / "run.json").read_text())
    assert info["env_args"] == {"max_random_move_prob": 0.5, "require_think": False}


def test_serve_tools_synth_and_export_reject_it(tmp_path: Path) -> None:
    for argv in (["serve", "tictactoe", "-m", "scripted:minimax", "-a", "max_random_move_prb=0"],
                 ["tools", "tictactoe", "-a", "max_random_move_prb=0"],
                 ["synth", "tictactoe", "-m", "scripted:minimax", "-o", str(tmp_path / "d.jsonl"),
                  "-a", "max_random_move_prb=0"]):
        res = _run(*argv)
        assert res.exit_code == 2, (argv, res.output)
        assert "did you mean 'max_random_move_prob'" in res.output, argv
    assert not (tmp_path / "d.jsonl").exists()
    res = _run("export", "verifiers", "tictactoe", str(tmp_path / "vf"), "-a", "max_random_move_prb=0")
    assert res.exit_code == 2 and not (tmp_path / "vf").exists()


@pytest.mark.parametrize("field", ["env_args", "eval_env_args"])
def test_train_config_rejects_it_before_loading_a_model(tmp_path: Path, field: str) -> None:
    cfg = tmp_path / "grpo.toml"
    cfg.write_text(f'model = "{tmp_path / "no-model-here"}"\nenv = "tictactoe"\noutput_dir = "{tmp_path / "out"}"\n'
                   f"[{field}]\nmax_random_move_prb = 0.25\n")
    pytest.importorskip("torch")
    res = _run("train", str(cfg))
    assert res.exit_code == 2, res.output
    assert f"config {field}: tictactoe: unknown option 'max_random_move_prb'; did you mean" in " ".join(res.output.split())
    assert not (tmp_path / "out").exists()


def test_trl_env_checks_it_too() -> None:
    trl_mod = pytest.importorskip("toolgym.integrations.trl")
    with pytest.raises(EnvOptionError, match="did you mean 'require_think'"):
        trl_mod.TRLEnv("tictactoe", require_thinking=False)


def test_envs_lists_the_declared_options() -> None:
    res = _run("envs", "tictactoe")
    assert res.exit_code == 0, res.output
    for text in ("max_random_move_prob", "float", "0.0 <= x <= 1.0", "Highest such probability",
                 '"game" | "move"', "max_turns", "tool_timeout"):
        assert text in res.output, text
    opts = env_options("tictactoe")
    assert opts is not None and opts["max_turns"].default == 8  # the class's own value, not the base None
    every = _run("envs")
    assert every.exit_code == 0 and all(f"{n} options" in every.output for n in ("sql", "tictactoe", "wiki"))
    # every bundled option has a description
    for name in ("sql", "tictactoe", "wiki"):
        assert all(o.description for o in (env_options(name) or {}).values()), name


class _Maze(StatefulToolEnv):
    """A third-party env declaring its options the documented way."""

    def __init__(self, size: Annotated[int, Field(ge=3, le=50)] = 8, layout: Literal["open", "rooms"] = "open",
                 **options: Any) -> None:
        """
        Args:
            size: Side of the square maze, in cells.
            layout: How walls are drawn.
        """
        self.size, self.layout = size, layout
        super().__init__(**options)


def load_maze(**kwargs: Any) -> _Maze:
    return _Maze(**kwargs)


def load_undeclared(**kwargs: Any):  # type: ignore[no-untyped-def]
    return _Maze(**kwargs)


def test_third_party_envs_get_it_by_declaring_the_same_way() -> None:
    opts = declared_options(load_maze)
    assert opts is not None and list(opts)[:2] == ["size", "layout"] and "max_turns" in opts
    assert opts["size"].description == "Side of the square maze, in cells." and opts["size"].range == "3 <= x <= 50"
    assert check_options(load_maze, {"size": "12", "layout": "rooms"}, "maze", from_text=True) == \
        {"size": 12, "layout": "rooms"}
    with pytest.raises(EnvOptionError, match="did you mean 'size'"):
        check_options(load_maze, {"sise": 8}, "maze")
    with pytest.raises(EnvOptionError, match="less than or equal to 50"):
        check_options(load_maze, {"size": 80}, "maze")
    # undeclared: passed through unchecked (text values JSON-parsed), as before
    assert declared_options(load_undeclared) is None
    assert check_options(load_undeclared, {"anything": "1"}, "x", from_text=True) == {"anything": 1}
    assert check_env_args("tictactoe", {}) == {}
