"""`benchmarks/bench_serve.py --repeat N` summarises each row's ratio to the `before` measured in the same round (the
machine's speed drifts between rounds, so a ratio across rounds would mix two speeds): median and range."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_serve  # noqa: E402


def _round(before: float, default: float) -> list[dict]:  # type: ignore[type-arg]
    return [{"policy": "model", "config": "before", "runs": [{"clients": 10, "calls_per_s": before}]},
            {"policy": "model", "config": "default", "runs": [{"clients": 10, "calls_per_s": default}]}]


def test_each_round_is_divided_by_its_own_before() -> None:
    # a slow round (1.0 -> 9.0) and two fast ones: per-round ratios 9, 12, 10 -- not 27 / 4.5 of pooled means
    summary = bench_serve.summarise([_round(1.0, 9.0), _round(2.0, 24.0), _round(1.5, 15.0)])
    row = next(s for s in summary if s["config"] == "default")
    assert row["x_before"] == {"median": 10.0, "min": 9.0, "max": 12.0}
    assert row["calls_per_s"] == {"median": 15.0, "min": 9.0, "max": 24.0}
    assert next(s for s in summary if s["config"] == "before")["x_before"]["median"] == 1.0
    import io

    from rich.console import Console

    con = Console(width=200, record=True, file=io.StringIO())
    con.print(bench_serve.summary_table(summary, "t"))
    assert "10.0 (9.0-12.0)" in con.export_text()
