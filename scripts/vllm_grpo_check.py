"""GRPO with the in-process vLLM sampler (`engine = "vllm"`) on the tiny model (run with the vLLM venv's python).

    .venv-vllm/bin/python scripts/vllm_grpo_check.py --mode sync  [--out result.json]
    .venv-vllm/bin/python scripts/vllm_grpo_check.py --mode stale [--out result.json]
    .venv-vllm/bin/python scripts/vllm_grpo_check.py --mode lora  [--out result.json]

Runs a few GRPO steps on the one-turn toy env of `tests/train/toy_env.py` with a large learning rate, so the
weights move a lot each step. The trainer logs `drift_abs`: the mean |trainer log-prob - sampler log-prob| over the
sampled tokens, computed before each update. With weights pushed into vLLM after every step (`sync`, `lora`) the
drift stays at numerical noise on every step; with the push switched off (`stale`, `sync_weights = false`) the
sampler keeps the starting weights and the drift grows after the first step -- the negative control that shows the
sync is what keeps the sampler on-policy. Prints a JSON summary; exit code 0 when the mode's check holds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from vllm_check import corpus_module  # scripts/ is on sys.path when this file runs as a script

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["sync", "stale", "lora"], default="sync")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", default=None, help="write the JSON summary here")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0-1" if (os.cpu_count() or 1) >= 2 else "0")
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "train")]

    import vllm
    from toy_env import DigitsEnv

    from toolgym.models.tiny import init_tiny
    from toolgym.train.config import GRPOConfig
    from toolgym.train.grpo import run_grpo
    from toolgym.train.runstate import read_metrics

    tmp = Path(tempfile.mkdtemp(prefix="toolgym-vllm-grpo-"))
    model_dir = init_tiny(tmp / "tiny", size="tiny", seed=0, corpus_sources=["chatml", corpus_module().tictactoe_corpus])  # type: ignore[attr-defined]
    cfg = GRPOConfig(
        model=str(model_dir), output_dir=str(tmp / "run"), env="digits", num_examples=16, batch_size=4,
        rollouts_per_example=8, learning_rate=3e-2 if args.mode != "lora" else 5e-2, max_tokens=8,
        micro_batch_size=16, max_steps=args.steps, seed=0, engine="vllm", sync_weights=args.mode != "stale",
        engine_args={"max_model_len": 512},
        lora={"r": 8, "alpha": 16} if args.mode == "lora" else None,
    )
    t0 = time.perf_counter()
    run_grpo(cfg, env=DigitsEnv())
    rows = read_metrics(cfg.output_dir)
    drift = [r["drift_abs"] for r in rows]
    summary = {
        "mode": args.mode, "vllm_version": vllm.__version__, "wall_s": round(time.perf_counter() - t0, 1),
        "steps": [r["step"] for r in rows], "drift_abs": drift, "drift_max": [r["drift_max"] for r in rows],
        "reward": [r["reward"] for r in rows], "sync_s": [r["sync_s"] for r in rows],
        "step_s": [r["step_s"] for r in rows],
    }
    ok = summary["steps"] == list(range(1, args.steps + 1))
    if args.mode == "stale":  # the sampler never sees the update: drift jumps after step 1
        ok = ok and drift[0] < 1e-3 and max(drift[1:]) > 1e-2
    else:  # in sync: every step's sampler equals the trainer up to numerics
        ok = ok and max(drift) < 1e-3
    summary["ok"] = bool(ok)
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
