"""GRPO's weight EMA (`ema_decay`, toolgym/train/ema.py) on the real tiny transformers model: the average's arithmetic,
the swap in and out, what a run writes (checkpoint `ema/`, `final/` = the average, `final_live/`), the periodic eval
seeing the average, and resume keeping (or refusing) the shadow."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from toolgym.train.config import GRPOConfig
from toolgym.train.ema import EMA_FILE, WeightEMA
from toolgym.train.runstate import checkpoints, read_metrics


def _model(path: Path):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path)


def _cfg(model: Path, out: Path, **kw: object) -> GRPOConfig:
    """test_grpo_run's toy-task config: three short steps, a checkpoint at each, the average at decay 0.5."""
    from test_grpo_run import _cfg as toy_cfg

    return toy_cfg(model, out, **{**dict(rollouts_per_example=4, max_steps=3, ema_decay=0.5, save_every=1,
                                          keep_checkpoints=3), **kw})


def test_ema_moves_toward_the_weights_swaps_them_in_and_out_and_round_trips(tiny_model: Path, tmp_path: Path) -> None:
    model = _model(tiny_model)
    orig = {n: p.detach().clone() for n, p in model.named_parameters()}
    ema = WeightEMA(model, 0.75)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    assert ema.gap(model) > 0
    ema.update(model)  # 0.75 * w + 0.25 * (w + 1)
    for n, t in ema.shadow.items():
        assert torch.allclose(t, orig[n] + 0.25, atol=1e-6), n
    with ema.swapped(model):
        for n, p in model.named_parameters():
            assert torch.allclose(p, orig[n] + 0.25, atol=1e-6), n
    for n, p in model.named_parameters():  # the live weights are back
        assert torch.allclose(p, orig[n] + 1.0, atol=1e-6), n
    with pytest.raises(RuntimeError), ema.swapped(model):
        raise RuntimeError("an eval that fails")
    assert all(torch.allclose(p, orig[n] + 1.0, atol=1e-6) for n, p in model.named_parameters())
    ema.save(tmp_path)
    other = WeightEMA(_model(tiny_model), 0.75)
    other.load(tmp_path)
    assert all(torch.equal(other.shadow[n], ema.shadow[n]) for n in ema.shadow)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="has no ema.safetensors"):
        other.load(tmp_path / "empty")
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="ema_decay"):
            WeightEMA(model, bad)


def test_grpo_run_with_ema_delivers_the_average_and_resumes_it(tiny_model: Path, tmp_path: Path) -> None:
    """Three steps with ema_decay 0.5: each checkpoint's average is half the previous average and half that step's
    weights, `final/` is the last average, `final_live/` the last weights. The periodic eval is replaced by a probe
    (a fake: the toy env has no registered name to load an eval env from) that records the weights it was given."""
    from toy_env import DigitsEnv

    from toolgym.train.grpo import GRPOTrainer

    seen: list[torch.Tensor] = []

    class Probe(GRPOTrainer):
        async def _greedy_eval(self) -> dict[str, float]:
            seen.append(next(self.model.parameters()).detach().clone())
            return {"eval/probe": 1.0}

    out = tmp_path / "run"
    Probe(_cfg(tiny_model, out, eval_every=3), env=DigitsEnv()).run()
    m = read_metrics(out)
    assert [r["step"] for r in m] == [1, 2, 3] and all(r["ema_gap"] > 0 for r in m) and m[-1]["eval/probe"] == 1.0
    cks = checkpoints(out)
    assert [c.name for c in cks] == ["step_000001", "step_000002", "step_000003"]
    shadow = [load_file(str(c / EMA_FILE)) for c in cks]
    live = [load_file(str(c / "model" / "model.safetensors")) for c in cks]
    ema_hf = [load_file(str(c / "ema" / "model.safetensors")) for c in cks]
    name = next(n for n in live[0] if n in shadow[0] and live[0][n].is_floating_point())
    assert torch.allclose(shadow[2][name], 0.5 * shadow[1][name] + 0.5 * live[2][name], atol=1e-6)
    assert torch.allclose(ema_hf[2][name], shadow[2][name], atol=1e-6)
    assert not torch.allclose(shadow[2][name], live[2][name])  # the average trails the weights
    final = load_file(str(out / "final" / "model.safetensors"))
    final_live = load_file(str(out / "final_live" / "model.safetensors"))
    assert torch.equal(final[name], ema_hf[2][name]) and torch.equal(final_live[name], live[2][name])
    first = next(n for n, _ in _model(tiny_model).named_parameters())  # the probe's tensor, by name
    assert torch.allclose(seen[0], shadow[2][first], atol=1e-6)  # the eval saw the average, not the weights
    # a resume loads the stored shadow; a resume that drops the EMA, or adds one to a run without it, is refused
    tr = GRPOTrainer(_cfg(tiny_model, out, max_steps=4), resume=True, env=DigitsEnv())
    assert tr.step == 3 and all(torch.equal(tr.ema.shadow[n], shadow[2][n]) for n in shadow[2])  # type: ignore[union-attr]
    assert torch.equal(next(tr.model.parameters()).detach(), live[2][first])  # training goes on from the live weights
    asyncio.run(tr.policy.aclose())
    with pytest.raises(ValueError, match="holds an EMA"):
        GRPOTrainer(_cfg(tiny_model, out, max_steps=4, ema_decay=0.0), resume=True, env=DigitsEnv())
    plain = tmp_path / "plain"
    GRPOTrainer(_cfg(tiny_model, plain, max_steps=1, ema_decay=0.0), env=DigitsEnv()).run()
    assert not (plain / "final_live").exists() and not (checkpoints(plain)[0] / EMA_FILE).exists()
    with pytest.raises(ValueError, match="started without an EMA"):
        GRPOTrainer(_cfg(tiny_model, plain, max_steps=2), resume=True, env=DigitsEnv())


@pytest.mark.slow
def test_lora_run_with_ema_averages_the_adapter_only(tiny_model: Path, tmp_path: Path) -> None:
    """With LoRA the average covers the trainable adapter weights alone; `final/` (merged) and `final_live/` are
    both written and differ."""
    from toy_env import DigitsEnv

    from toolgym.train.grpo import run_grpo

    out = tmp_path / "lora"
    run_grpo(_cfg(tiny_model, out, max_steps=2, lora={"r": 4}, learning_rate=5e-2), env=DigitsEnv())
    shadow = load_file(str(checkpoints(out)[-1] / EMA_FILE))
    assert shadow and all("lora_" in n for n in shadow)
    assert (out / "final" / "adapter" / "adapter_config.json").is_file()
    final = load_file(str(out / "final" / "model.safetensors"))
    live = load_file(str(out / "final_live" / "model.safetensors"))
    assert any(not torch.equal(final[n], live[n]) for n in final if final[n].is_floating_point())
