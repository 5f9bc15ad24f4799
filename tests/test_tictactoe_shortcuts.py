"""The shortcut ceilings (copy the named cell, random, first free cell...) on positions built by hand, where the right
answer is known without the code under test, and their exact game outcomes against known anchors."""

from __future__ import annotations

import pytest

from mcp_server_tictactoe import game as g
from toolgym_tictactoe import positions as P
from toolgym_tictactoe.shortcuts import (
    SHORTCUTS,
    ceilings,
    exact_outcome,
    format_table,
    game_outcome,
    move_distribution,
    never_losing_bound,
    never_losing_wins,
    position_scores,
    trap_boards,
    trap_gambles,
    trap_move_values,
)

# O took the centre (O moved first), X to move: the corners keep the draw, the edges lose (O forks) -- textbook
CENTRE = "....O...."
# O took corner 0, X to move: only the centre keeps the draw
CORNER = "O........"
# X holds 3 and 4 (wins at 5); O holds 0 and 1 (threatens 2): the scan's first `block` line (012) comes before its
# first `win` line (345), but the named cell is the first *win*: 5
WIN_AND_THREAT = "OO.XX...."


def test_hand_analysis_of_the_constructed_positions() -> None:
    assert P.analyze(CENTRE).optimal == (0, 2, 6, 8) and P.analyze(CENTRE).kind == "quiet"
    assert P.analyze(CORNER).optimal == (4,) and P.analyze(CORNER).kind == "quiet"
    assert P.analyze(WIN_AND_THREAT).kind == "win" and 5 in P.analyze(WIN_AND_THREAT).optimal


def test_move_distributions() -> None:
    assert move_distribution("copy", WIN_AND_THREAT) == {5: 1.0}  # the win, not the block the scan meets first
    assert move_distribution("copy-first", WIN_AND_THREAT) == {5: 1.0}
    assert move_distribution("first-free", WIN_AND_THREAT) == {2: 1.0}
    assert move_distribution("random", WIN_AND_THREAT) == {c: 0.2 for c in (2, 5, 6, 7, 8)}
    # no forced move: copy is random, copy-first the first free cell, copy-centre the centre or else a corner
    assert move_distribution("copy", CORNER) == {c: 1 / 8 for c in range(1, 9)}
    assert move_distribution("copy-first", CORNER) == {1: 1.0}
    assert move_distribution("copy-centre", CORNER) == {4: 1.0}
    assert move_distribution("copy-centre", CENTRE) == {0: 1.0}
    for name in SHORTCUTS:
        for b in (CENTRE, CORNER, WIN_AND_THREAT):
            d = move_distribution(name, b)
            assert abs(sum(d.values()) - 1) < 1e-12 and set(d) <= set(g.free_cells(b))


def test_position_scores_on_constructed_positions() -> None:
    assert position_scores("random", [CENTRE])["optimal"] == pytest.approx(4 / 8)
    assert position_scores("random", [CORNER])["optimal"] == pytest.approx(1 / 8)
    assert position_scores("copy", [CORNER, CENTRE])["optimal"] == pytest.approx((1 / 8 + 4 / 8) / 2)
    assert position_scores("first-free", [CORNER, CENTRE])["optimal"] == pytest.approx(0.5)  # 1 loses, 0 holds
    assert position_scores("copy-centre", [CORNER, CENTRE])["optimal"] == 1.0
    assert position_scores("copy", [WIN_AND_THREAT])["optimal"] == 1.0
    assert position_scores("first-free", [WIN_AND_THREAT])["optimal"] == float(2 in P.analyze(WIN_AND_THREAT).optimal)
    assert position_scores("copy", [])["n"] == 0.0
    with pytest.raises(ValueError, match="unknown shortcut"):
        move_distribution("oracle", CENTRE)


def test_exact_game_outcomes() -> None:
    def minimax(board: str) -> dict[int, float]:
        best = g.best_moves(board, "X")
        return {c: 1 / len(best) for c in best}

    w, d, lo = exact_outcome(minimax, 0.0)
    assert lo == pytest.approx(0.0) and d == pytest.approx(1.0)  # perfect play draws perfect play
    for name in SHORTCUTS:
        for p in (0.0, 0.5, 1.0):
            assert sum(game_outcome(name, p)) == pytest.approx(1.0)
    # the always-first-free-cell player never beats the optimal opponent and random play is symmetric vs random
    assert game_outcome("first-free", 0.0)[0] == 0.0
    w, d, lo = game_outcome("random", 1.0)
    assert w == pytest.approx(lo)
    # the anchor: copy-else-random loses 47 % of its games to the optimal opponent
    assert 100 * game_outcome("copy", 0.0)[2] == pytest.approx(47.0, abs=0.05)
    with pytest.raises(ValueError):
        exact_outcome(minimax, 1.5)


def test_ceiling_table() -> None:
    rows = ceilings({"quiet": [CORNER, CENTRE]}, random_move_probs=(0.0,), names=("copy", "copy-centre"))
    assert rows[0]["quiet optimal %"] == pytest.approx(100 * (1 / 8 + 4 / 8) / 2)
    assert rows[1]["quiet optimal %"] == 100.0
    assert rows[0]["P=0 W/D/L %"] == "0.0 / 53.0 / 47.0"
    table = format_table(rows)
    assert table.splitlines()[0] == "| player | quiet optimal % | P=0 W/D/L % |" and "| copy-centre | 100.0 |" in table


def test_trap_move_values_and_gambles() -> None:
    """The trap boards are the env's `restart_trap_share` boards; against the optimal opponent (0) every cell is
    worth its game value (the centre board's corners draw, its edges lose); against the random player some boards
    pay a value-losing move more than every value-keeping one, at 0.5 none do, and the keeping moves' spread shrinks
    as the opponent gets stronger."""
    boards = trap_boards()
    assert CENTRE in boards and CORNER not in boards and WIN_AND_THREAT not in boards  # one keeping move; forced
    assert all(P.analyze(b).kind in ("quiet", "free") and len(P.analyze(b).optimal) >= 2 for b in boards)
    optimal = trap_move_values(0.0)
    assert optimal[CENTRE] == pytest.approx({0: 0.5, 2: 0.5, 6: 0.5, 8: 0.5, 1: 0.0, 3: 0.0, 5: 0.0, 7: 0.0})
    for b, q in optimal.items():
        a = P.analyze(b)
        assert all(q[c] == pytest.approx((a.value + 1) / 2) for c in a.optimal)
        assert all(q[c] < (a.value + 1) / 2 - 1e-9 for c in q if c not in a.optimal)
    random_q = trap_move_values(1.0)[CENTRE]
    assert all(0.5 < random_q[c] <= 1.0 for c in random_q)  # against the random player every cell wins on average
    at = {p: trap_gambles(p) for p in (1.0, 0.5, 0.0)}
    assert at[1.0]["boards"] == len(boards)
    assert at[1.0]["gambles"] > 0 and at[0.5]["gambles"] == 0 == at[0.0]["gambles"]
    assert at[1.0]["spread"] > at[0.5]["spread"] > 1e-9 > at[0.0]["spread"]
    with pytest.raises(ValueError, match="random_move_prob"):
        trap_move_values(1.5)


def test_never_losing_bound_two_ways() -> None:
    """The never-losing bound (95.56 %, the recipe's exact bounds) by its own recursion and by `exact_outcome` with
    a lookahead player that takes, among the minimax-best moves, the one with the most wins; it never loses to the
    optimal opponent, and from the centre board X's edges (value-losing) are not among its choices."""
    def never_losing(board: str, after) -> dict[int, float]:  # type: ignore[no-untyped-def]
        return {max(g.best_moves(board, "X"), key=lambda c: after(c)[0]): 1.0}

    assert never_losing_bound() == pytest.approx(0.9556, abs=5e-5)
    assert exact_outcome(never_losing, 1.0, lookahead=True)[0] == pytest.approx(never_losing_bound())
    assert exact_outcome(never_losing, 0.0, lookahead=True)[2] == 0.0
    assert never_losing_wins(g.EMPTY * 9, True) > never_losing_wins(g.EMPTY * 9, False)  # X first wins more
