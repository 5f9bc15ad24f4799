"""An exponential moving average (EMA) of the trained weights, kept beside the model during GRPO (`ema_decay`).

After every optimizer step `update` moves each float32 shadow tensor toward the live parameter:
`ema = decay * ema + (1 - decay) * live`, so the average spans about `1 / (1 - decay)` optimizer steps (0.9: ten).
The sampler keeps playing with the live weights (the policy gradient is on-policy for them); the EMA is what the run
delivers: periodic evals and `final/` use it (`swapped`), and each checkpoint stores it twice -- `ema.safetensors`
(the float32 shadow, keyed by parameter name, for an exact resume) and `ema/` (an HF folder like `model/`, for evals).

Only trainable parameters are averaged (with LoRA: the adapter); the shadow starts at the starting weights.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

EMA_FILE = "ema.safetensors"


class WeightEMA:
    """The shadow weights of `model`'s trainable parameters; `decay` in (0, 1)."""

    def __init__(self, model: Any, decay: float):
        if not 0.0 < decay < 1.0:
            raise ValueError(f"ema_decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.shadow = {n: p.detach().float().clone() for n, p in model.named_parameters() if p.requires_grad}
        if not self.shadow:
            raise ValueError("ema_decay: the model has no trainable parameters to average")

    def _params(self, model: Any) -> dict[str, Any]:
        params = {n: p for n, p in model.named_parameters() if n in self.shadow}
        missing = sorted(set(self.shadow) - set(params))
        if missing:
            raise ValueError(f"EMA: the model lacks {len(missing)} averaged parameter(s), first {missing[0]!r}")
        return params

    def update(self, model: Any) -> None:
        """One step of the average toward the model's current weights."""
        import torch

        with torch.no_grad():
            for n, p in self._params(model).items():
                self.shadow[n].lerp_(p.detach().float(), 1.0 - self.decay)

    def gap(self, model: Any) -> float:
        """||live - ema|| / ||live|| over the averaged parameters: how far the delivered weights trail the sampler's."""
        import torch

        num = den = 0.0
        with torch.no_grad():
            for n, p in self._params(model).items():
                live = p.detach().float()
                num += float(torch.sum((live - self.shadow[n]) ** 2))
                den += float(torch.sum(live ** 2))
        return (num / den) ** 0.5 if den > 0 else 0.0

    @contextmanager
    def swapped(self, model: Any) -> Iterator[None]:
        """Inside the block the model holds the EMA weights; the live ones come back after it (also on error)."""
        import torch

        params = self._params(model)
        live = {n: p.detach().clone() for n, p in params.items()}
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(self.shadow[n].to(p.dtype))
        try:
            yield
        finally:
            with torch.no_grad():
                for n, p in params.items():
                    p.copy_(live[n])

    def save(self, folder: Path) -> None:
        from safetensors.torch import save_file

        save_file({n: t.contiguous() for n, t in self.shadow.items()}, str(folder / EMA_FILE))

    def load(self, folder: Path) -> None:
        """The shadow a checkpoint stored; refused when its parameters are not the model's."""
        from safetensors.torch import load_file

        path = folder / EMA_FILE
        if not path.is_file():
            raise ValueError(f"ema_decay is set but the checkpoint {folder} has no {EMA_FILE}: the run was started "
                             "without an EMA (resume it without ema_decay, or start a new run)")
        state = load_file(str(path))
        if set(state) != set(self.shadow):
            raise ValueError(f"{path}: its parameters differ from the model's "
                             f"({len(set(state) ^ set(self.shadow))} names differ)")
        for n, t in state.items():
            if t.shape != self.shadow[n].shape:
                raise ValueError(f"{path}: {n} has shape {tuple(t.shape)}, the model's {tuple(self.shadow[n].shape)}")
            self.shadow[n] = t.float().clone()


__all__ = ["EMA_FILE", "WeightEMA"]
