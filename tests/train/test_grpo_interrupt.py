"""A real `toolgym train` (GRPO) process stopped by SIGTERM (a batch scheduler, `kill`) or Ctrl-C mid-run: it stops
cleanly -- the event loop takes the signal (`run_interruptible`), the stdio MCP server it started is gone, the
metrics log holds only whole lines, the CLI names the last checkpoint -- and `--resume` finishes the run. Real parts:
the tic-tac-toe server over stdio, the tiny random model, the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

TOOLGYM = [sys.executable, "-m", "toolgym.cli"]


def _config(path: Path, model: Path, out: Path) -> Path:
    path.write_text(json.dumps({
        "model": str(model), "output_dir": str(out), "env": "tictactoe",
        "env_args": {"transport": "stdio", "starts": "positions", "kinds": "quiet"}, "num_examples": 8,
        "batch_size": 2, "rollouts_per_example": 2, "max_steps": 40, "max_tokens": 12, "save_every": 1,
        "keep_checkpoints": 2, "num_threads": 1}))
    return path


@pytest.mark.slow  # two real training processes each: CI runs it (-m slow)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_grpo_run_stops_cleanly_and_resumes(tiny_model: Path, tmp_path: Path, sig: int) -> None:
    out = tmp_path / "run"
    cfg = _config(tmp_path / "grpo.json", tiny_model, out)
    err = (tmp_path / "stderr.txt").open("w")
    proc = subprocess.Popen([*TOOLGYM, "train", str(cfg)], stdout=err, stderr=err, start_new_session=True,
                            env={**os.environ, "COLUMNS": "200"})
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):
        assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()[-2000:]
        assert time.monotonic() < deadline, "no two GRPO steps in 120 s"
        time.sleep(0.1)
    servers = psutil.Process(proc.pid).children(recursive=True)
    assert servers, "the stdio server should be a child process"
    os.kill(proc.pid, sig)
    rc = proc.wait(60)
    err.close()
    text = (tmp_path / "stderr.txt").read_text()
    assert rc == 2, text[-2000:]
    assert f"{signal.Signals(sig).name}: stopping the GRPO run" in text  # the event loop took it
    assert "interrupted; the last checkpoint is" in text and "--resume" in text
    _, alive = psutil.wait_procs(servers, timeout=10)
    assert not alive, "the MCP server outlived the GRPO run"
    done = [json.loads(line) for line in metrics.read_text().splitlines()]  # whole lines only
    assert 2 <= len(done) < 40
    res = subprocess.run([*TOOLGYM, "train", str(cfg), "--resume", "-s", "max_steps=" + str(len(done) + 2)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert steps[-1] == len(done) + 2 and (out / "final" / "config.json").is_file()
