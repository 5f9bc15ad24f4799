"""`benchmarks/bench_batching.py` end to end on a few games: the five batching modes play the same seeded games
through the real tic-tac-toe MCP server (the bench refuses to print timings otherwise) and the JSON records each
mode's engine counters. It times nothing itself (timings belong to the benchmark)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # a benchmark, docs build or resume run: CI runs it (-m slow), the default suite not
def test_bench_batching_runs_and_checks_the_traces(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_batching.py"), "--games", "4",
                           "--concurrency", "4", "--max-tokens", "200", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "same traces in every mode" in proc.stdout
    rows = {r["mode"]: r for r in json.loads(out.read_text())}
    assert set(rows) == {"static", "continuous, no parked KV", "continuous, no drafts", "continuous",
                         "continuous, lock-step"}
    assert all(r["errors"] == 0 and r["generated_tokens"] > 0 for r in rows.values())
    assert len({r["generated_tokens"] for r in rows.values()}) == 1  # the same games, token for token
    assert rows["continuous, no parked KV"]["reused_tokens"] == 0 < rows["continuous"]["reused_tokens"]
    # sampled rows draft too, and a kept draft token is a decode step saved
    assert rows["continuous, no drafts"]["drafted_tokens"] == 0 < rows["continuous"]["accepted_tokens"]
    assert rows["continuous"]["decode_steps"] < rows["continuous, no drafts"]["decode_steps"]
    # lock-step: every batch holds every game still in flight, so no more admissions than the games' turns
    lock = rows["continuous, lock-step"]
    assert lock["max_batch_size"] == 4 and lock["batches"] <= rows["continuous"]["batches"]


@pytest.mark.slow
def test_bench_batching_greedy_games_have_the_same_traces_in_every_mode(tmp_path: Path) -> None:
    """Greedy games (as eval and serve play them): speculative steps keep drafted tokens and change no token."""
    out = tmp_path / "g.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_batching.py"), "--games", "4",
                           "--concurrency", "4", "--max-tokens", "200", "--temperature", "0", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "same traces in every mode" in proc.stdout
    rows = {r["mode"]: r for r in json.loads(out.read_text())}
    assert set(rows) == {"static", "continuous, no parked KV", "continuous, no drafts", "continuous",
                         "continuous, lock-step"}
    assert len({r["generated_tokens"] for r in rows.values()}) == 1
    assert rows["continuous, no drafts"]["drafted_tokens"] == 0
    assert 0 < rows["continuous"]["accepted_tokens"] <= rows["continuous"]["drafted_tokens"]
    # each kept draft token is a decode step saved
    assert rows["continuous"]["decode_steps"] < rows["continuous, no drafts"]["decode_steps"]
