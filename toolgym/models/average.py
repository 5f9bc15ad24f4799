"""A uniform average of model checkpoints (`toolgym model average`): the element-wise mean of their weights, as in
"model soups" (Wortsman et al. 2022) or stochastic weight averaging over a run's last steps, so a run whose periodic
evals swing late can be read at one model that no single step's luck chose.

Every `*.safetensors` file of the first checkpoint (one `model.safetensors`, shards, or a LoRA
`adapter_model.safetensors`) is averaged with the same file of the others: floating tensors in float32, then cast
back to their dtype; other tensors must agree and are kept. The other files (config, tokenizer, chat template) come
from the last checkpoint, so the output loads wherever the checkpoints did.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

STEP_DIR = re.compile(r"step_(\d+)$")


def run_checkpoints(run_dir: Path, steps: list[int] | None = None, last: int = 3) -> list[Path]:
    """A training run's checkpoint models (`RUN/checkpoints/step_NNNNNN/model`): those of `steps`, or else the last
    `last` ones saved. A step without a checkpoint is an error naming it."""
    root = Path(run_dir) / "checkpoints"
    found = {int(m.group(1)): d / "model" for d in sorted(root.glob("step_*"))
             if (m := STEP_DIR.search(d.name)) and (d / "model").is_dir()}
    if steps:
        missing = [str(root / f"step_{s:06d}" / "model") for s in steps if s not in found]
        if missing:
            raise FileNotFoundError(f"missing checkpoints: {', '.join(missing)}")
        return [found[s] for s in steps]
    if not found:
        raise FileNotFoundError(f"no checkpoints under {root}")
    return [found[s] for s in sorted(found)[-last:]]


def average_models(models: list[Path], out: Path) -> Path:
    """Write to `out` the uniform average of `models` (model folders; see the module docstring); returns `out`."""
    import torch
    from safetensors.torch import load_file, save_file

    models = [Path(m) for m in models]
    if len(models) < 2:
        raise ValueError(f"averaging needs two checkpoints or more, got {len(models)}")
    files = sorted(p.name for p in models[0].glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no .safetensors file in {models[0]}")
    for m in models[1:]:
        if sorted(p.name for p in m.glob("*.safetensors")) != files:
            raise ValueError(f"{m} does not hold the same weight files as {models[0]} ({', '.join(files)})")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for name in files:
        states = [load_file(str(m / name)) for m in models]
        keys = set(states[0])
        if any(set(s) != keys for s in states[1:]):
            raise ValueError(f"the checkpoints' {name} do not hold the same tensors")
        mean = {}
        for k, t0 in states[0].items():
            if any(s[k].shape != t0.shape or s[k].dtype != t0.dtype for s in states[1:]):
                raise ValueError(f"tensor {k} of {name} differs in shape or dtype between checkpoints")
            if t0.is_floating_point():
                mean[k] = (sum(s[k].float() for s in states) / len(states)).to(t0.dtype)
            elif any(not torch.equal(s[k], t0) for s in states[1:]):
                raise ValueError(f"non-float tensor {k} of {name} differs between checkpoints")
            else:
                mean[k] = t0
        save_file(mean, str(out / name), metadata={"format": "pt"})
    for f in models[-1].iterdir():
        if f.is_file() and f.suffix != ".safetensors":
            shutil.copy2(f, out / f.name)
    return out
