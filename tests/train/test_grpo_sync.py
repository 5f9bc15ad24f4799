"""GRPOTrainer.update ends with an explicit sampler sync for every engine: once per update, after its optimizer
step(s). hf: `policy.weights_changed()` (the engine drops KV parked under the old weights; `sync_weights` cannot
turn it off); vllm: `update_weights` in place; vllm-server: a safetensors folder the server reloads from."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_loss_reference import REWARDS, _trainer, _trajectories

SYNC = {"hf": "weights_changed", "vllm": ("update_weights", ["table"]),
        "vllm-server": ("reload_weights", ["model.safetensors"])}


@pytest.mark.parametrize("sync_weights", [True, False])
@pytest.mark.parametrize("engine", list(SYNC))
def test_update_syncs_the_sampler_once_after_the_optimizer_steps(engine: str, sync_weights: bool,
                                                                 tmp_path: Path) -> None:
    tr = _trainer("grpo", 0.0, False, 2, tmp_path)
    tr.cfg = tr.cfg.model_copy(update={"engine": engine, "updates_per_batch": 2, "sync_weights": sync_weights})
    events: list[Any] = []
    step = tr.opt.step
    tr.opt.step = lambda: (events.append("optimizer step"), step())
    tr.policy = SimpleNamespace(weights_changed=lambda: events.append("weights_changed"),
                                update_weights=lambda sd: events.append(("update_weights", sorted(sd))),
                                reload_weights=lambda path: events.append(("reload_weights", sorted(os.listdir(path)))))
    tr.sync_dir = tmp_path / "weights_sync"
    stats = tr.update(_trajectories(REWARDS))
    synced = sync_weights or engine == "hf"
    assert events == ["optimizer step", "optimizer step"] + ([SYNC[engine]] if synced else [])
    assert stats["sync_s"] >= 0.0 and (synced or stats["sync_s"] == 0.0)
