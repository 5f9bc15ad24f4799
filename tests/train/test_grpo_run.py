"""End-to-end GRPO on the tiny model: the reward rises on a learnable toy task; kill -9 mid-run and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toolgym.train.config import GRPOConfig
from toolgym.train.runstate import checkpoints, read_metrics

HERE = Path(__file__).parent


def _cfg(model: Path, out: Path, **kw: object) -> GRPOConfig:
    base = dict(model=str(model), output_dir=str(out), env="digits", num_examples=16, batch_size=4,
                rollouts_per_example=8, learning_rate=1e-2, max_tokens=8, micro_batch_size=16, max_steps=12, seed=0)
    return GRPOConfig(**{**base, **kw})


def test_reward_rises_on_toy_task(tiny_model: Path, tmp_path: Path) -> None:
    from toy_env import DigitsEnv

    from toolgym.train.grpo import run_grpo

    run_grpo(_cfg(tiny_model, tmp_path / "run"), env=DigitsEnv())
    m = read_metrics(tmp_path / "run")
    assert [r["step"] for r in m] == list(range(1, 13))
    first = sum(r["reward"] for r in m[:3]) / 3
    last = sum(r["reward"] for r in m[-3:]) / 3
    assert last > 2 * first and last > first + 0.03, [round(r["reward"], 3) for r in m]
    assert all(r["drift_abs"] < 1e-3 for r in m)  # colocated engine: sampler == trainer weights
    assert (tmp_path / "run" / "final" / "model.safetensors").is_file()


def test_max_minutes_stops_after_the_step_that_spends_it(tiny_model: Path, tmp_path: Path) -> None:
    """A wall-clock budget smaller than one step: the run stops after its first step, with that step's checkpoint
    and `final` written, the stop recorded in its metrics; a resume with a budget goes on from there."""
    from toy_env import DigitsEnv

    from toolgym.train.grpo import run_grpo

    out = tmp_path / "run"
    run_grpo(_cfg(tiny_model, out, max_steps=4, save_every=10, max_minutes=1e-6), env=DigitsEnv())
    m = read_metrics(out)
    assert [r["step"] for r in m] == [1] and m[0]["stopped"] == "max_minutes"
    assert [c.name for c in checkpoints(out)] == ["step_000001"]
    assert (out / "final" / "model.safetensors").is_file()
    run_grpo(_cfg(tiny_model, out, max_steps=4, save_every=10, max_minutes=1e-6), env=DigitsEnv(), resume=True)
    assert [r["step"] for r in read_metrics(out)] == [1, 2]
    run_grpo(_cfg(tiny_model, out, max_steps=4, save_every=10), env=DigitsEnv(), resume=True)  # no budget: to the end
    m = read_metrics(out)
    assert [r["step"] for r in m] == [1, 2, 3, 4] and "stopped" not in m[-1]


@pytest.mark.slow  # a benchmark, docs build or resume run: CI runs it (-m slow), the default suite not
def test_resume_after_sigkill(tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    cfg = _cfg(tiny_model, out, max_steps=6, learning_rate=1e-3, keep_checkpoints=3)
    (tmp_path / "cfg.json").write_text(cfg.model_dump_json())
    script = (f"import sys; sys.path.insert(0, {str(HERE)!r})\n"
              "from toy_env import DigitsEnv\n"
              "from toolgym.train.config import GRPOConfig\n"
              "from toolgym.train.grpo import run_grpo\n"
              f"cfg = GRPOConfig.model_validate_json(open({str(tmp_path / 'cfg.json')!r}).read())\n"
              "run_grpo(cfg, resume=len(sys.argv) > 1, env=DigitsEnv())\n")
    (tmp_path / "run.py").write_text(script)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "run.py")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(checkpoints(out)) < 2 and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(checkpoints(out)) >= 2, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
    killed_at = int(checkpoints(out)[-1].name.split("_")[1])
    with (out / "metrics.jsonl").open("a") as f:
        f.write('{"step": 99, "torn')  # simulate a line torn by the kill
    res = subprocess.run([sys.executable, str(tmp_path / "run.py"), "resume"], capture_output=True, timeout=300)
    assert res.returncode == 0, res.stderr.decode()[-3000:]
    lines = (out / "metrics.jsonl").read_text().splitlines()
    recs = [json.loads(x) for x in lines]  # every line parses: file not corrupted
    assert [r["step"] for r in recs] == list(range(1, 7))  # no step lost or repeated
    assert killed_at < 6
    cks = checkpoints(out)
    assert int(cks[-1].name.split("_")[1]) == 6 and len(cks) == 3
    assert (out / "final" / "model.safetensors").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("loss_type", ["dr_grpo", "dapo", "cispo", "gspo"])
def test_every_loss_variant_runs(tiny_model: Path, tmp_path: Path, loss_type: str) -> None:
    from toy_env import DigitsEnv

    from toolgym.train.grpo import run_grpo

    last = run_grpo(_cfg(tiny_model, tmp_path / loss_type, loss_type=loss_type, max_steps=2, kl_coef=0.1,
                         old_logprobs="trainer", updates_per_batch=2), env=DigitsEnv())
    assert last["step"] == 2 and "clip_frac" in last and last["kl_ref"] >= 0


@pytest.mark.slow
def test_lora_run(tiny_model: Path, tmp_path: Path) -> None:
    from toy_env import DigitsEnv

    from toolgym.train.grpo import run_grpo

    last = run_grpo(_cfg(tiny_model, tmp_path / "lora", max_steps=2, lora={"r": 4}, kl_coef=0.05), env=DigitsEnv())
    assert last["step"] == 2
    assert (tmp_path / "lora" / "final" / "adapter" / "adapter_config.json").is_file()
    assert (tmp_path / "lora" / "final" / "model.safetensors").is_file()
