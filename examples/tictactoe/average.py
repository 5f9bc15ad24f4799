"""Average the weights of a run's checkpoints into one model (a uniform checkpoint average, as in "model soups" or
stochastic weight averaging over the last steps), so a run whose periodic evals swing late can be read at one model
that no single step's luck chose.

    python examples/tictactoe/average.py RUN_DIR OUT_DIR [--steps 40 50 60]

RUN_DIR: a GRPO run (`checkpoints/step_NNNNNN/model`); the other files of the model (config, tokenizer, chat
template) are copied from the last step given.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def average(models: list[Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the models' `model.safetensors` tensors (floating tensors in float32, then cast back;
    others must agree and are kept)."""
    if not models:
        raise ValueError("no checkpoint to average")
    states = [load_file(str(m / "model.safetensors")) for m in models]
    keys = set(states[0])
    if any(set(s) != keys for s in states[1:]):
        raise ValueError("the checkpoints do not hold the same tensors")
    out = {}
    for k in states[0]:
        t0 = states[0][k]
        if t0.is_floating_point():
            out[k] = (sum(s[k].float() for s in states) / len(states)).to(t0.dtype)
        else:
            if any(not torch.equal(s[k], t0) for s in states[1:]):
                raise ValueError(f"non-float tensor {k} differs between checkpoints")
            out[k] = t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--steps", type=int, nargs="+", default=[40, 50, 60])
    args = ap.parse_args()
    models = [args.run_dir / "checkpoints" / f"step_{s:06d}" / "model" for s in args.steps]
    missing = [str(m) for m in models if not (m / "model.safetensors").is_file()]
    if missing:
        raise SystemExit(f"missing checkpoints: {', '.join(missing)}")
    state = average(models)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for f in models[-1].iterdir():
        if f.name != "model.safetensors" and f.is_file():
            shutil.copy2(f, args.out_dir / f.name)
    save_file(state, str(args.out_dir / "model.safetensors"), metadata={"format": "pt"})
    print(f"{args.out_dir}: the mean of {len(models)} checkpoints (steps {', '.join(map(str, args.steps))})")


if __name__ == "__main__":
    main()
