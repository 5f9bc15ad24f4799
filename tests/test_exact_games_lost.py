"""`examples/tictactoe/exact_games.py`'s `lost_by_class`: where a walk's lost probability went, on hand-written lines
(the `Line` / `ExactResult` the walk returns): a played-out loss by the board of X's first value-losing move, a game
left at the turn cap by the board it stopped on (two symmetric images of one board pooled), an errored game apart."""

from __future__ import annotations

import pytest
from tg_testutil import example_module
from toolgym_tictactoe import positions as P
from toolgym_tictactoe.exact import ExactResult, Line

exact_games = example_module("examples/tictactoe/exact_games.py")


def _result(lines: list[Line]) -> ExactResult:
    lost = sum(line.weight for line in lines if line.status not in ("win", "draw"))
    return ExactResult(win=1 - lost, draw=0.0, loss=lost, capped=0.0, errored=0.0, invalid_per_game=0.0, lines=lines)


def test_lost_by_class_names_the_board_a_capped_line_stopped_on() -> None:
    lines = [
        Line(True, [], 0.4, "win", ["X4", "O0", "X8", "O2", "X1", "O6", "X7"]),
        # O takes the centre, X answers on an edge: the value is lost on the board before X1
        Line(False, [], 0.1, "loss", ["O4", "X1", "O0", "X8", "O2", "X6", "O5", "X3", "O7"]),
        # stuck with X to move on O...XXO.. and on its mirror image ..OXX...O
        Line(True, [0], 0.25, "in_progress", ["X4", "O0", "X5", "O6"]),
        Line(True, [1], 0.2, "in_progress", ["X4", "O2", "X3", "O8"]),
        Line(False, [], 0.05, "error", []),
    ]
    out = exact_games.lost_by_class(_result(lines))
    stuck = P.canonical("O...XXO..")
    assert P.canonical("..OXX...O") == stuck
    assert list(out) == [f"(turn cap) {stuck}", P.canonical("....O...."), "(errored) ........."]
    assert out[f"(turn cap) {stuck}"] == pytest.approx(0.45)
    assert out[P.canonical("....O....")] == pytest.approx(0.1)
    assert out["(errored) ........."] == pytest.approx(0.05)
    assert sum(out.values()) == pytest.approx(0.6)
