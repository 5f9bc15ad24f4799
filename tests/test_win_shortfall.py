"""`examples/tictactoe/win_shortfall.py`: where a greedy player leaves wins against the random opponent. The walks
here are built by hand from deterministic shortcut players (every line of play against the random opponent, with
its chance), so the expected totals come from `toolgym_tictactoe.shortcuts`, not from the code under test; the
walk format is the one `exact_games.py --json` writes (real walks of trained models are read the same way)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from mcp_server_tictactoe import game as g
from tg_testutil import example_module
from toolgym_tictactoe import positions as P
from toolgym_tictactoe.shortcuts import game_outcome, move_distribution


def _module():  # type: ignore[no-untyped-def]
    return example_module("examples/tictactoe/win_shortfall.py")


def _walk(player: Callable[[str], int]) -> dict[str, object]:
    """Every line of play of the deterministic X `player` against a uniformly random O, both starts (a coin flip)."""
    lines: list[dict[str, object]] = []

    def go(board: str, x_to_move: bool, moves: list[str], weight: float, x_starts: bool) -> None:
        if g.winner(board) or not g.free_cells(board):
            status = {"X": "win", "O": "loss"}.get(g.winner(board) or "", "draw")
            lines.append({"x_starts": x_starts, "weight": weight, "status": status, "moves": moves})
        elif x_to_move:
            c = player(board)
            go(g.play(board, c, "X"), False, [*moves, f"X{c}"], weight, x_starts)
        else:
            free = g.free_cells(board)
            for c in free:
                go(g.play(board, c, "O"), True, [*moves, f"O{c}"], weight / len(free), x_starts)

    go(g.EMPTY * 9, True, [], 0.5, True)
    go(g.EMPTY * 9, False, [], 0.5, False)
    win = sum(float(x["weight"]) for x in lines if x["status"] == "win")  # type: ignore[arg-type]
    return {"opponent": "random", "win": win, "lines": lines}


def _shortcut(name: str) -> Callable[[str], int]:
    return lambda board: next(iter(move_distribution(name, board)))


def test_gap_is_the_sum_of_the_decisions() -> None:
    mod = _module()
    assert mod.bound() == pytest.approx(0.9556, abs=5e-5)  # the recipe's exact bound, 95.6 %
    for name in ("copy-centre", "first-free", "copy-first"):
        walk = _walk(_shortcut(name))
        assert walk["win"] == pytest.approx(game_outcome(name, 1.0)[0])  # the hand-built walk is the exact one
        parts = mod.shortfall(walk)
        assert parts["gap"] == pytest.approx(mod.bound() - walk["win"])
        # the performance difference lemma: a walk with no errors leaves nothing to `other`
        assert parts["other"] == pytest.approx(0.0, abs=1e-12)
        assert parts["X first"] + parts["O first"] == pytest.approx(parts["tie"] + parts["value lost"])
        assert sum(parts.get(f"move {k}", 0.0) for k in range(1, 6)) == pytest.approx(parts["gap"])
    # first-free gives the value away (and loses games); copy-centre keeps it more often
    ff, cc = mod.shortfall(_walk(_shortcut("first-free"))), mod.shortfall(_walk(_shortcut("copy-centre")))
    assert ff["value lost"] > 0.2 and cc["value lost"] < ff["value lost"]


def test_the_bounds_player_has_no_gap_and_a_tie_costs_wins() -> None:
    mod = _module()

    def best(board: str) -> int:
        return max(P.analyze(board).optimal, key=lambda c: mod.never_lose_wins(g.play(board, c, "X"), False))

    perfect = mod.shortfall(_walk(best))
    assert perfect["gap"] == pytest.approx(0.0, abs=1e-12) and perfect["tie"] == pytest.approx(0.0, abs=1e-12)

    def worst_tie(board: str) -> int:  # never gives the value away, sets the fewest traps
        return min(P.analyze(board).optimal, key=lambda c: mod.never_lose_wins(g.play(board, c, "X"), False))

    timid = mod.shortfall(_walk(worst_tie))
    assert timid["value lost"] == 0.0 and timid["tie"] == pytest.approx(timid["gap"]) and timid["gap"] > 0.05


def test_visited_split_and_the_command_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    mod = _module()
    walk = _walk(_shortcut("copy-centre"))
    parts = mod.shortfall(walk, visited={g.EMPTY * 9})
    assert parts["visited"] + parts["not visited"] == pytest.approx(parts["tie"] + parts["value lost"])
    assert parts["visited"] == pytest.approx(0.5 * (mod.never_lose_wins(g.EMPTY * 9, True)
                                                    - mod.never_lose_wins(g.play(g.EMPTY * 9, 4, "X"), False)))
    f = tmp_path / "cc-random.json"
    f.write_text(json.dumps({"hf:cc": walk}))
    start = tmp_path / "ff-random.json"
    start.write_text(json.dumps({"hf:ff": _walk(_shortcut("first-free"))}))
    sys.argv = ["win_shortfall.py", str(f), "--start", str(start)]
    mod.main()
    out = capsys.readouterr().out
    assert "95.56 %" in out and f"| cc-random | {100 * walk['win']:.2f} |" in out and "| start: ff-random |" in out
    f.write_text(json.dumps({"hf:cc": {**walk, "opponent": "optimal"}}))
    with pytest.raises(SystemExit, match="random opponent"):
        mod.main()
    # a missing walk or a run folder without saved games: one line, not a traceback
    for args, message in (([str(tmp_path / "none.json")], "no such walk"),
                          ([f"{start}={tmp_path}"], "no rollouts.jsonl.gz")):
        sys.argv = ["win_shortfall.py", *args]
        with pytest.raises(SystemExit, match=message):
            mod.main()
