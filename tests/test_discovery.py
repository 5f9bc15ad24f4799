"""`examples/tictactoe/discovery.py`, the position-level evidence of discovery: its split of the quiet positions by
how often the RL games visited them, and `--pool` over several runs, on counts and model answers built by hand (no
model, no run folder), so every expected number is known without the code under test."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
from tg_testutil import example_module
from toolgym_tictactoe import positions as P
from toolgym_tictactoe.shortcuts import position_scores

CENTRE = "....O...."  # O took the centre, X to move: a quiet position (the corners keep the draw)
CORNER = "O........"  # O took corner 0, X to move: quiet (only the centre keeps the draw)


def _module():  # type: ignore[no-untyped-def]
    return example_module("examples/tictactoe/discovery.py")


def _rows(rows: list[dict[str, object]]) -> dict[str, dict[str, object]]:
    return {str(r["positions"]): r for r in rows}


def test_table_splits_quiet_positions_by_visits() -> None:
    mod = _module()
    quiet = [b for b in P.positions("all") if P.analyze(b).kind == "quiet"]
    assert CENTRE in quiet and CORNER in quiet
    other = next(b for b in quiet if b not in (CENTRE, CORNER))
    assert P.analyze("XX.OO....").kind == "win"
    counts = Counter({CENTRE: 70, CORNER: 1, "XX.OO....": 500})  # a win to take, not quiet: never counted
    # the model keeps the value on CENTRE, loses it on CORNER; of the unvisited ones only `other` was evaluated
    _, rows = mod.table(counts, {"rl": {CENTRE: 1.0, CORNER: 0.0, other: 1.0}})
    by = _rows(rows)
    assert by["all quiet"]["n"] == len(quiet)
    assert by["all quiet"]["rl"] == {"optimal": 2.0, "n": 3, "boards": {CENTRE: 1.0, CORNER: 0.0, other: 1.0}}
    assert by["visited by RL games"]["n"] == 2
    assert by["visited by RL games"]["rl"] == {"optimal": 1.0, "n": 2, "boards": {CENTRE: 1.0, CORNER: 0.0}}
    often = by[f"visited in >= {mod.OFTEN} games"]
    assert often["n"] == 1 and often["rl"] == {"optimal": 1.0, "n": 1, "boards": {CENTRE: 1.0}}
    assert by["not visited"]["n"] == len(quiet) - 2
    assert by["not visited"]["rl"] == {"optimal": 1.0, "n": 1, "boards": {other: 1.0}}
    # the ceilings are the shortcut's exact scores on the same positions
    assert often["copy-centre"] == pytest.approx(100 * position_scores("copy-centre", [CENTRE])["optimal"])
    assert by["visited by RL games"]["copy"] == pytest.approx(
        100 * position_scores("copy", [CENTRE, CORNER])["optimal"])


def test_pool_adds_runs_row_by_row(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    mod = _module()
    _, a = mod.table(Counter({CENTRE: 70}), {"start": {CENTRE: 0.0}, "rl": {CENTRE: 1.0}})
    _, b = mod.table(Counter({CORNER: 3}), {"start": {CORNER: 1.0}, "rl": {CORNER: 0.0}})
    table = mod.pool([{"rows": a}, {"rows": b}])
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
             for line in table.splitlines() if line.startswith("| ")}
    visited = cells["visited by RL games"]
    assert visited[0] == "2" and visited[1].startswith("50.0 (") and visited[2].startswith("50.0 (")
    often = cells[f"visited in >= {mod.OFTEN} games"]
    assert often[0] == "1" and often[1].startswith("0.0 (") and often[2].startswith("100.0 (")
    # a ceiling pooled over (run, position) pairs: the mean of the two positions' exact scores
    both = 100 * position_scores("copy-centre", [CENTRE, CORNER])["optimal"]
    assert float(visited[3 + 1]) == pytest.approx(both, abs=0.05)  # columns: n, start, rl, copy, copy-centre
    # the command line: --pool over --json files; outputs naming other models are refused
    files = []
    for i, rows in enumerate((a, b)):
        files.append(tmp_path / f"{i}.json")
        files[-1].write_text(json.dumps({"visited_positions": 1, "rows": rows}))
    sys.argv = ["discovery.py", "--pool", *map(str, files)]
    mod.main()
    assert capsys.readouterr().out.strip() == table
    _, c = mod.table(Counter({CORNER: 3}), {"other": {CORNER: 1.0}, "rl": {CORNER: 0.0}})
    with pytest.raises(SystemExit, match="different models"):
        mod.pool([{"rows": a}, {"rows": c}])


def _width(cell: str) -> float:
    lo, hi = cell.split("(")[1].rstrip(")").split("-")
    return float(hi) - float(lo)


def test_pool_clusters_pairs_by_position() -> None:
    """Two runs that visit the same ten positions, scored by one shared start: the twenty (run, position) pairs
    are ten answers given twice, so the pooled interval is as wide as one run's, not Wilson's over twenty pairs;
    outputs without each position's answer (written before) fall back to Wilson's, and say so."""
    mod = _module()
    quiet = [b for b in P.positions("all") if P.analyze(b).kind == "quiet"][:10]
    start = {b: float(i % 2) for i, b in enumerate(quiet)}  # half kept
    _, a = mod.table(Counter({b: 1 for b in quiet}), {"start": start})
    _, b = mod.table(Counter({b: 1 for b in quiet}), {"start": start})
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
             for line in mod.pool([{"rows": a}, {"rows": b}]).splitlines() if line.startswith("| ")}
    one = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
           for line in mod.pool([{"rows": a}]).splitlines() if line.startswith("| ")}
    assert "clustered by position" in mod.pool([{"rows": a}, {"rows": b}])
    both, single = cells["visited by RL games"], one["visited by RL games"]
    assert both[0] == "20" and both[1].startswith("50.0 (") and single[1].startswith("50.0 (")
    assert _width(both[1]) == pytest.approx(_width(single[1]), abs=0.11)
    assert _width(mod.rate(10, 20)) < 0.8 * _width(both[1])
    # outputs from before the answers were stored: Wilson over the pairs, with the note
    old = [{k: ({"optimal": v["optimal"], "n": v["n"]} if isinstance(v, dict) else v) for k, v in r.items()}
           for r in a]
    legacy = mod.pool([{"rows": old}, {"rows": old}])
    assert "Wilson" in legacy and "too narrow" in legacy
    row = next(line for line in legacy.splitlines() if line.startswith("| visited by RL games"))
    assert row.split("|")[3].strip() == mod.rate(10, 20)
