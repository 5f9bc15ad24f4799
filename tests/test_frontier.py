"""`examples/tictactoe/frontier.py`: each checkpoint of a GRPO run placed on both game targets. The run folders here
are written by hand in the formats the trainer and `exact_games.py --json` write (metrics.jsonl rows, best/best.json,
checkpoints/step_N/model, one-model walks); the reference players' numbers come from `toolgym_tictactoe.shortcuts`
and the recipe's exact-bounds table, not from the code under test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tg_testutil import ROOT, example_module
from toolgym_tictactoe.shortcuts import game_outcome


def _module():  # type: ignore[no-untyped-def]
    return example_module("examples/tictactoe/frontier.py")


def _run(root: Path, name: str, losses: dict[int, float], *, best: int | None = None,
         logged_wins: dict[int, float] | None = None, saved: tuple[int, ...] = ()) -> Path:
    run = root / name
    (run / "final").mkdir(parents=True)
    rows = []
    for step, lo in losses.items():
        row = {"step": step, "eval/exact/loss": lo, "loss": 0.1}
        if logged_wins and step in logged_wins:
            row["eval/random/exact/win"] = logged_wins[step]
        rows.append(row)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if best is not None:
        (run / "best").mkdir()
        (run / "best" / "best.json").write_text(json.dumps({"step": best, "metric": "eval/exact/loss",
                                                            "value": losses[best]}))
    for s in saved:
        (run / "checkpoints" / f"step_{s:06d}" / "model").mkdir(parents=True)
    return run


def _walk(path: Path, win: float, opponent: str = "random") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"hf:some/model": {"opponent": opponent, "win": win, "draw": 1 - win, "loss": 0.0,
                                                   "lines": []}}))


def test_points_come_from_each_kind_of_walk(tmp_path: Path) -> None:
    mod = _module()
    ex = tmp_path / "exact"
    run = _run(tmp_path, "arm-seed1", {5: 0.30, 10: 0.04, 15: 0.03, 20: 0.08}, best=15, saved=(10, 15, 20))
    _walk(ex / "forced-arm-seed1-step10-random.json", 0.91)
    _walk(ex / "forced-arm-seed1-best-random.json", 0.88)  # best.json names step 15
    _walk(ex / "forced-arm-seed1-random.json", 0.92)  # final/ is the last step, 20
    losses, wins = mod.run_points(ex, run)
    assert losses == {5: 0.30, 10: 0.04, 15: 0.03, 20: 0.08}
    assert wins == {10: 0.91, 15: 0.88, 20: 0.92}
    # a run that walked against random play itself needs no files; its own numbers win over a file's
    logged = _run(tmp_path, "arm-seed2", {5: 0.02, 10: 0.06}, logged_wins={5: 0.93, 10: 0.90})
    _walk(ex / "forced-arm-seed2-step5-random.json", 0.10)
    assert mod.run_points(ex, logged)[1] == {5: 0.93, 10: 0.90}
    # the final weights count only where the last step had an eval (here the run went on to step 12)
    late = _run(tmp_path, "arm-seed5", {5: 0.04, 10: 0.03})
    with (late / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 12, "loss": 0.1}) + "\n")
    _walk(ex / "forced-arm-seed5-random.json", 0.95)
    assert mod.run_points(ex, late)[1] == {}


def test_missing_lists_only_unwalked_checkpoints_under_the_loss_target(tmp_path: Path) -> None:
    mod = _module()
    ex = tmp_path / "exact"
    run = _run(tmp_path, "arm-seed3", {5: 0.04, 10: 0.05, 15: 0.02, 20: 0.09, 25: 0.01}, saved=(5, 10, 15, 20))
    _walk(ex / "forced-arm-seed3-step15-random.json", 0.9)
    got = mod.missing(ex, run)
    # 15 is walked, 20 is above the target, 25 has no checkpoint (the last step's walk is RUN-random.json)
    assert [name for name, _ in got] == ["forced-arm-seed3-step5", "forced-arm-seed3-step10"]
    assert got[0][1] == run / "checkpoints" / "step_000005" / "model"


def test_pareto_front() -> None:
    mod = _module()
    pts = {10: (0.04, 0.88), 20: (0.03, 0.88), 30: (0.06, 0.91), 40: (0.06, 0.89), 50: (0.02, 0.86),
           60: (0.03, 0.88)}
    # 10 is beaten by 20 (fewer losses, as many wins), 40 by 30; 20 and 60 tie, so neither beats the other
    assert mod.pareto(pts) == [20, 30, 50, 60]


def test_references_are_the_exact_players() -> None:
    mod = _module()
    ref = mod.references()
    cc = game_outcome("copy-centre", 0.0)[2], game_outcome("copy-centre", 1.0)[0]
    assert ref["copy-centre"] == pytest.approx(cc)
    # the recipe's exact-bounds table: minimax with uniform ties 87.3 % wins, the never-losing bound 95.6 %
    assert ref["minimax, uniform ties"] == pytest.approx((0.0, 0.8726), abs=5e-5)
    assert ref["never-losing bound"] == pytest.approx((0.0, 0.9556), abs=5e-5)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "examples/tictactoe/frontier.py", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_cli_counts_the_points_that_meet_both_and_draws(tmp_path: Path) -> None:
    ex = tmp_path / "exact"
    a = _run(tmp_path, "arm-seed1", {10: 0.04, 15: 0.03, 20: 0.08}, best=15, saved=(10, 15))
    b = _run(tmp_path, "arm-seed2", {10: 0.02, 20: 0.01}, logged_wins={10: 0.95, 20: 0.85})
    _walk(ex / "forced-arm-seed1-step10-random.json", 0.91)
    _walk(ex / "forced-arm-seed1-best-random.json", 0.88)
    png = tmp_path / "f.png"
    res = _cli(str(ex), str(a), str(b), "-o", str(png))
    assert res.returncode == 0, res.stderr
    # under the 5 % target: seed1 steps 10 (91 % wins) and 15 (88 %); seed2 steps 10 (95 %) and 20 (85 %)
    assert "2 of 4 points under the loss target meet the wins target too" in res.stdout
    assert "| arm-seed1 | 2 | 2 | 1 | 91.00 (step 10, 4.00 % losses) |" in res.stdout
    assert png.stat().st_size > 10_000
    assert _cli(str(ex), str(a), "--missing").stdout == ""  # both checkpoints under the target are walked


def test_bad_input_exits_with_one_line(tmp_path: Path) -> None:
    ex = tmp_path / "exact"
    res = _cli(str(ex), str(tmp_path / "nowhere"))
    assert res.returncode != 0 and "not a run folder" in res.stderr
    run = _run(tmp_path, "arm-seed1", {10: 0.04})
    _walk(ex / "forced-arm-seed1-random.json", 0.9, opponent="optimal")
    res = _cli(str(ex), str(run))
    assert res.returncode != 0 and "not the random opponent" in res.stderr
    quiet = _run(tmp_path, "arm-seed4", {})
    res = _cli(str(ex), str(quiet))
    assert res.returncode != 0 and "no exact periodic eval" in res.stderr
