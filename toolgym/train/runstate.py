"""The run folder: model loading (full or LoRA), checkpoints with optimizer + RNG state, resume, metrics.

Layout of `output_dir`:

| path | what |
|---|---|
| `config.json` | the resolved config (a resumed run must match it on the fields that matter) |
| `metrics.jsonl` | one JSON object per optimizer step (`{"step": n, ...}`), appended + flushed + fsynced |
| `checkpoints/step_000012/` | `model/` (HF `save_pretrained`: full weights or the LoRA adapter), `trainer_state.pt` (optimizer, scheduler, torch/python RNG, step; GRPO with `restart_share`: the last step's rollouts and the env's `restart_state`), `DONE` (written last) |
| `checkpoints/step_N/ema.safetensors`, `ema/` | GRPO with `ema_decay`: the weights' moving average (float32 shadow for resume; HF folder for evals) |
| `final/` | plain HF weights (LoRA merged when `save_merged`), loadable as `hf:output_dir/final`, and `adapter/` for LoRA runs; with `ema_decay` the average, and `final_live/` the trained weights |

Crash safety: a checkpoint is written into `step_N.tmp/` and renamed after DONE is in it, so a SIGKILL leaves
either the previous complete checkpoint or the new one. On resume the metrics file is cut back to the steps the
checkpoint covers (torn last lines dropped) and rewritten atomically.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CKPT_DIR = "checkpoints"


# ----------------------------------------------------------------------------------------------- model loading
def load_model(cfg: Any, path: str | None = None) -> tuple[Any, Any, bool]:
    """(model, tokenizer, is_lora) from `path` (default cfg.model); LoRA wraps it when cfg.lora is set.
    `path` may be a checkpoint's model/ folder holding an adapter."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolgym.policies.hf import resolve_device_dtype

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    dev, dt = resolve_device_dtype(cfg.device, cfg.dtype)
    src = path or cfg.model
    from toolgym.models import check_model_source

    check_model_source(str(src))
    adapter = Path(src) / "adapter_config.json"
    if adapter.is_file():
        from peft import PeftModel

        base_name = json.loads(adapter.read_text())["base_model_name_or_path"]
        tok = AutoTokenizer.from_pretrained(src)
        base = AutoModelForCausalLM.from_pretrained(base_name, dtype=dt)
        model = PeftModel.from_pretrained(base, src, is_trainable=True)
        set_threads(cfg, model)
        return model.to(dev), tok, True
    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=dt).to(dev)
    set_threads(cfg, model)
    if cfg.lora is not None:
        from peft import LoraConfig, get_peft_model

        lc = cfg.lora
        model = get_peft_model(model, LoraConfig(r=lc.r, lora_alpha=lc.alpha, lora_dropout=lc.dropout,
                                                 target_modules=lc.target_modules, task_type="CAUSAL_LM"))
        return model, tok, True
    return model, tok, False


def set_threads(cfg: Any, model: Any) -> None:
    """torch CPU threads: cfg.num_threads, or 1 for models under 20M parameters on CPU (their matmuls are too small
    to split; on this shared 2-core machine a 0.2M-model train step took 10 s with 2 threads vs 1.4 s with 1)."""
    import torch

    if getattr(cfg, "engine", "hf") == "vllm":  # vLLM's CPU kernels check torch's thread count against their own
        return
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    elif next(model.parameters()).device.type == "cpu" and sum(p.numel() for p in model.parameters()) < 20_000_000:
        torch.set_num_threads(1)


def make_optimizer(cfg: Any, model: Any, total_steps: int) -> tuple[Any, Any]:
    import math

    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.learning_rate, betas=tuple(cfg.adam_betas), weight_decay=cfg.weight_decay)

    def factor(step: int) -> float:
        if cfg.warmup_steps and step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        if cfg.lr_schedule == "constant":
            return 1.0
        frac = min(1.0, (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps))
        return 1.0 - frac if cfg.lr_schedule == "linear" else 0.5 * (1 + math.cos(math.pi * frac))

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


def save_hf(model: Any, tok: Any, out: Path, merged: bool) -> None:
    """Plain HF format: full weights, or (LoRA) the adapter, plus merged full weights when `merged`."""
    out.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "peft_config"):
        if merged:
            import copy

            copy.deepcopy(model).merge_and_unload().save_pretrained(out, safe_serialization=True)
            tok.save_pretrained(out)
            model.save_pretrained(out / "adapter")
            tok.save_pretrained(out / "adapter")
            return
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)


# ----------------------------------------------------------------------------------------------- checkpoints
def checkpoints(out: Path) -> list[Path]:
    d = out / CKPT_DIR
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.name.startswith("step_") and not p.name.endswith((".tmp", ".old"))
                  and (p / "DONE").is_file())


def latest_checkpoint(out: Path) -> Path | None:
    cks = checkpoints(out)
    return cks[-1] if cks else None


def save_checkpoint(out: Path, step: int, model: Any, tok: Any, opt: Any, sched: Any, extra: dict[str, Any], keep: int,
                    write_more: Callable[[Path], None] | None = None) -> Path:
    """Write `checkpoints/step_N/` atomically; `write_more(folder)` adds files (GRPO's EMA) before DONE."""
    import torch

    final = out / CKPT_DIR / f"step_{step:06d}"
    tmp = final.with_name(final.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp / "model", safe_serialization=True)
    tok.save_pretrained(tmp / "model")
    state = {
        "step": step,
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(),
        "extra": extra,
        "time": time.time(),
    }
    if torch.cuda.is_available():
        state["cuda_rng"] = torch.cuda.get_rng_state_all()
    torch.save(state, tmp / "trainer_state.pt")
    if write_more is not None:
        write_more(tmp)
    (tmp / "DONE").write_text(str(step))
    _fsync_dir(tmp)
    swap_in(tmp, final)  # a step saved again (a resume that repeats it) replaces its folder without a gap
    for old in checkpoints(out)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def swap_in(tmp: Path, final: Path) -> None:
    """Put the whole folder `tmp` at `final`, replacing any folder there through `final`.old/ (moved aside, then
    removed), so that a kill at any instant leaves either `final` whole or what `recover_swap` puts back."""
    old = final.with_name(final.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    _fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)


def recover_swap(final: Path, marker: str) -> None:
    """Finish a `swap_in` a kill interrupted: with `final` missing, its new version (whole in `final`.tmp/ when it
    holds `marker`, the file written last) or else its old one (`final`.old/) is put in place; leftovers are
    removed."""
    tmp, old = final.with_name(final.name + ".tmp"), final.with_name(final.name + ".old")
    if not final.exists():
        for cand in (tmp, old):
            if (cand / marker).is_file():
                cand.rename(final)
                break
    for left in (tmp, old):
        if left.exists():
            shutil.rmtree(left, ignore_errors=True)


def recover_checkpoints(out: Path) -> None:
    """Finish the checkpoint swaps (`save_checkpoint`) a kill interrupted in `out`, before a resume looks for the
    last checkpoint."""
    d = out / CKPT_DIR
    if d.is_dir():
        for name in sorted({p.name.rsplit(".", 1)[0] for p in d.iterdir() if p.name.endswith((".tmp", ".old"))}):
            recover_swap(d / name, "DONE")


def load_trainer_state(ckpt: Path, opt: Any, sched: Any) -> dict[str, Any]:
    import torch

    state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    opt.load_state_dict(state["optimizer"])
    sched.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    random.setstate(state["python_rng"])
    if "cuda_rng" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return state


def _fsync_dir(p: Path) -> None:
    try:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


# ----------------------------------------------------------------------------------------------- run folder
def prepare_run(out: Path, config: dict[str, Any], resume: bool, match_keys: tuple[str, ...]) -> Path | None:
    """Create/check the run folder. Returns the checkpoint to resume from (None = fresh start)."""
    out.mkdir(parents=True, exist_ok=True)
    cfg_file = out / "config.json"
    if resume:
        recover_checkpoints(out)
    ckpt = latest_checkpoint(out)
    if not resume:
        if (out / "metrics.jsonl").exists() or ckpt is not None:
            raise FileExistsError(f"{out} already holds a run: pass --resume to continue it, or choose another output_dir")
    elif cfg_file.exists():
        old = json.loads(cfg_file.read_text())
        diff = {k: (old.get(k), config.get(k)) for k in match_keys if old.get(k) != config.get(k)}
        if diff:
            raise ValueError(f"--resume: {out} was started with a different config (old, new): {diff}")
    cfg_file.write_text(json.dumps(config, indent=2, default=str))
    return ckpt if resume else None


class MetricsLog:
    """metrics.jsonl + optional TensorBoard / W&B / trackio sinks."""

    def __init__(self, out: Path, resume_step: int, report_to: list[str], config: dict[str, Any]):
        self.path = out / "metrics.jsonl"
        kept: list[str] = []
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # torn line from a kill
                if isinstance(rec, dict) and rec.get("step", 1 << 60) <= resume_step:
                    kept.append(json.dumps(rec))
            tmp = self.path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(k + "\n" for k in kept))
            tmp.replace(self.path)
        self.f = self.path.open("a")
        self.sinks: list[Any] = []
        for name in report_to:
            try:
                if name == "tensorboard":
                    from torch.utils.tensorboard import SummaryWriter

                    self.sinks.append(("tb", SummaryWriter(str(out / "tb"))))
                elif name == "wandb":
                    import wandb

                    self.sinks.append(("wandb", wandb.init(project="toolgym", dir=str(out), config=config, resume="allow")))
                elif name == "trackio":
                    import trackio

                    self.sinks.append(("trackio", trackio.init(project="toolgym", config=config)))
            except ImportError as exc:
                raise ImportError(f"report_to={name!r} needs its package installed: {exc}") from exc

    def log(self, rec: dict[str, Any]) -> None:
        self.f.write(json.dumps(rec, default=float) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())
        step = int(rec["step"])
        nums = {k: v for k, v in rec.items() if isinstance(v, int | float) and k != "step"}
        for kind, s in self.sinks:
            if kind == "tb":
                for k, v in nums.items():
                    s.add_scalar(k, v, step)
            else:
                s.log(nums, step=step)

    def close(self) -> None:
        self.f.close()
        for kind, s in self.sinks:
            if kind == "tb":
                s.close()
            else:
                try:
                    s.finish()
                except Exception:  # noqa: BLE001
                    pass


def read_rollouts(path: Path) -> list[dict[str, Any]]:
    """The rollouts a GRPO run saved (`save_rollouts`: RUN_DIR/rollouts.jsonl.gz, or that file), one per (step,
    example, rollout): a step replayed after a resume counts once (its last copy), and a line torn by a kill is
    skipped."""
    import gzip

    if path.is_dir():
        path = path / "rollouts.jsonl.gz"
    seen: dict[tuple[int, int, int], dict[str, Any]] = {}
    with gzip.open(path, "rt") as f:
        for line in f:
            try:
                d = json.loads(line)
            except json.JSONDecodeError:
                continue
            seen[(d["step"], d["example_id"], d["rollout_index"])] = d
    return list(seen.values())


def read_metrics(path: Path) -> list[dict[str, Any]]:
    out = []
    if path.is_dir():
        path = path / "metrics.jsonl"
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out
