"""`toolgym tasks train` end to end in miniature, through the command line, on the two third-party servers of
`examples/multi_server` (skips without them): every phase writes its output -- tasks, the derived env, teacher
rows the answer key scored full marks on, an SFT and a GRPO model, held-out evaluations of each and the report --
and a second run skips what exists. Slow (about a minute). The model is a random tiny one (the point is the plumbing; what the shipped base
learns is in test_toolcall_copy.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tg_testutil import MULTI_SERVER_ENV as ENV
from tg_testutil import need_multi_servers

pytestmark = [need_multi_servers, pytest.mark.slow, pytest.mark.timeout(900)]
pytest.importorskip("transformers")

TG = [sys.executable, "-m", "toolgym.cli"]


def test_recipe_runs_every_phase_and_resumes(tmp_path: Path) -> None:
    base = tmp_path / "tiny"
    subprocess.run([*TG, "model", "init-tiny", "--out", str(base)], check=True, capture_output=True)
    run = tmp_path / "run"
    cmd = [*TG, "tasks", "train", str(ENV), "-o", "run", "-n", "24", "--heldout", "12", "--base", str(base),
           "--sft", "epochs=0.5", "--grpo", "max_steps=2", "--grpo", "batch_size=2", "--grpo", "rollouts_per_example=2",
           "--grpo", "eval_every=0", "-c", "4", "--num-threads", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=800, cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    for name in ("tasks.jsonl", "tasks.heldout.jsonl", "env.json", "teacher.jsonl", "sft/final/config.json",
                 "grpo/final/config.json", "eval/base/summary.json", "eval/sft/summary.json", "eval/grpo/summary.json",
                 "report.md", "report.json", "heldout.png", "grpo_curves.png"):
        assert (run / name).exists(), name
    assert json.loads((run / "env.json").read_text())["env"]["sampling"] == {"temperature": 0.0, "max_tokens": 160}
    teacher = [json.loads(x) for x in (run / "teacher.jsonl").read_text().splitlines()]
    assert len(teacher) == 24 and all(r["reward"] == 1.5 for r in teacher)  # the answer key: correct + call_match
    report = json.loads((run / "report.json").read_text())
    assert set(report["heldout"]) == {"base", "sft", "grpo"}
    assert report["heldout"]["sft"]["call_match"]["n"] + report["heldout"]["sft"]["abstain_ok"]["n"] == 12
    assert {"abstain", "majority call", "copy", "answer key"} <= set(report["trivial"])
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)  # every output exists: nothing re-runs
    assert again.returncode == 0 and "synth:" not in again.stdout and "sft:" not in again.stdout
    strict = subprocess.run([*cmd, "--phase", "eval", "--strict-calls"], capture_output=True, text=True, timeout=300,
                            cwd=tmp_path)  # the plain evals resume (exist), the strict ones run beside them
    assert strict.returncode == 0, (strict.stdout + strict.stderr)[-3000:]
    report = json.loads((run / "report.json").read_text())
    assert set(report["heldout"]) == {"base", "sft", "grpo", "base-strict", "sft-strict", "grpo-strict"}
    assert (run / "eval" / "sft-strict" / "summary.json").exists()
    for line in (run / "eval" / "sft-strict" / "results.jsonl").read_text().splitlines():
        assert not any("could not parse" in (c.get("error") or "") for c in json.loads(line)["calls"])
