"""`benchmarks/bench_grpo.py --env tictactoe`: a ratio is printed only after the work check passes (both sides
sampled the same tokens and made the same MCP tool calls per step, within the tolerance). The slow test runs the
real benchmark (toolgym's GRPO step and TRL's `GRPOTrainer` + `TRLEnv`, the real tic-tac-toe MCP server) for two
steps of its default size, 2 prompts x 4 games (one step alone put the MCP calls exactly at the 25 % tolerance:
game lengths vary; with 2 games the sampled tokens were 28 % apart); it times nothing (timings belong to the
benchmark), it checks the two sides' work and the report."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "bench_grpo.py"


def _bench():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_grpo", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _summary(tok: tuple[float, float], calls: tuple[float, float]) -> dict:
    return {side: {"sampled_tokens_per_step": tok[i], "mcp_calls_per_step": calls[i]}
            for i, side in enumerate(("toolgym", "trl"))}


def test_work_check_passes_only_for_the_same_work() -> None:
    check = _bench().work_check
    ok = check(_summary((1000, 1100), (20, 21)), 0.25)
    assert ok["same_work"] is True
    assert ok["sampled_tokens_per_step"]["rel_diff"] == pytest.approx(100 / 1100)
    assert check(_summary((1000, 1400), (20, 20)), 0.25)["same_work"] is False  # tokens 29 % apart
    assert check(_summary((1000, 1000), (10, 20)), 0.25)["same_work"] is False  # half the tool calls
    assert check(_summary((1000, 1000), (0, 0)), 0.25)["same_work"] is False    # no tool calls at all: not the workload
    assert check(_summary((1000, 1400), (20, 20)), 0.5)["same_work"] is True


def test_paired_ratio_interval_covers_the_ratio_and_narrows_with_steps() -> None:
    ci = _bench().paired_ratio_ci
    a, b = [5.0, 9.0, 6.0, 8.0], [10.0, 15.0, 9.0, 14.0]  # step times vary a lot; the paired ratio much less
    lo, hi = ci(a, b)
    assert lo <= sum(a) / sum(b) <= hi and 0.5 < lo < hi < 0.7
    lo2, hi2 = ci(a * 4, b * 4)
    assert hi2 - lo2 < hi - lo
    assert ci([1.0, 1.0], [2.0, 2.0]) == (0.5, 0.5)


@pytest.mark.slow
def test_tictactoe_benchmark_sides_do_the_same_work(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--env", "tictactoe", "--steps", "2", "--warmup", "0",
                           "--out", str(out)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    wc = res["work_check"]
    assert wc["mcp_calls_per_step"]["toolgym"] > 0 and wc["sampled_tokens_per_step"]["trl"] > 0
    assert wc["same_work"] is True, wc
    assert res["ratio_toolgym_over_trl"] > 0 and "ratio toolgym / TRL step time" in proc.stdout
    lo, hi = res["ratio_ci95"]
    assert lo <= res["ratio_toolgym_over_trl"] <= hi
    tok = res["summary"]["toolgym"]["sampled_tokens_per_step"] / res["summary"]["trl"]["sampled_tokens_per_step"]
    assert res["ratio_per_sampled_token"] == pytest.approx(res["ratio_toolgym_over_trl"] / tok)
    assert res["summary"]["toolgym"]["decode_steps_per_step"] > 0  # continuous batching's decode steps recorded
    assert len(res["toolgym"]["steps"]) == len(res["trl"]["steps"]) == 2
