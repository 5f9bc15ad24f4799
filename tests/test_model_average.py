"""`toolgym model average`: the uniform average of a run's checkpoints, or of model folders, on a real tiny model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from toolgym.cli import app
from toolgym.models.average import run_checkpoints
from toolgym.models.tiny import init_tiny


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder with checkpoints at steps 10..40, each the tiny model's weights shifted by 0, 1, 2, 3."""
    root = tmp_path_factory.mktemp("avg")
    base = init_tiny(root / "tiny", size="tiny", seed=0)
    run = root / "run"
    for step, shift in ((10, 0.0), (20, 1.0), (30, 2.0), (40, 3.0)):
        ck = run / "checkpoints" / f"step_{step:06d}" / "model"
        shutil.copytree(base, ck)
        state = load_file(str(ck / "model.safetensors"))
        save_file({k: v + shift if v.is_floating_point() else v for k, v in state.items()},
                  str(ck / "model.safetensors"), metadata={"format": "pt"})
    return run


def _shift_of(out: Path, run: Path) -> set[float]:
    """The shifts of `out`'s float tensors from step 10's (one value when every tensor moved alike)."""
    first = load_file(str(run / "checkpoints" / "step_000010" / "model" / "model.safetensors"))
    got = load_file(str(out / "model.safetensors"))
    assert got.keys() == first.keys()
    shifts = set()
    for k, v in first.items():
        if v.is_floating_point():
            shifts.add(round(float((got[k] - v).mean()), 3))
            assert torch.allclose(got[k] - v, (got[k] - v).flatten()[0].expand_as(v), atol=1e-5), k
        else:
            assert torch.equal(got[k], v), k
    return shifts


def test_chosen_steps_average_to_their_mean_and_the_result_loads(run: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    res = CliRunner().invoke(app, ["model", "average", str(run), "--steps", "10,20,30", "-o", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert _shift_of(tmp_path / "a", run) == {1.0}
    assert (tmp_path / "a" / "tokenizer.json").is_file()
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "a").num_parameters() > 0


def test_without_steps_the_last_checkpoints_and_model_folders_work_too(run: Path, tmp_path: Path) -> None:
    assert [p.parent.name for p in run_checkpoints(run)] == ["step_000020", "step_000030", "step_000040"]
    res = CliRunner().invoke(app, ["model", "average", str(run), "--last", "2", "-o", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    assert _shift_of(tmp_path / "b", run) == {2.5}
    ck = run / "checkpoints"
    res = CliRunner().invoke(app, ["model", "average", str(ck / "step_000010" / "model"),
                                   str(ck / "step_000040" / "model"), "-o", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    assert _shift_of(tmp_path / "c", run) == {1.5}


def test_a_missing_step_or_a_lone_model_is_a_clear_error(run: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["model", "average", str(run), "--steps", "10,50", "-o", str(tmp_path / "d")])
    assert res.exit_code == 2 and "step_000050" in res.output
    assert not (tmp_path / "d").exists()
    lone = run / "checkpoints" / "step_000010" / "model"
    res = CliRunner().invoke(app, ["model", "average", str(lone), "-o", str(tmp_path / "e")])
    assert res.exit_code == 2 and "two checkpoints" in res.output
    res = CliRunner().invoke(app, ["model", "average", str(run), "--steps", "ten", "-o", str(tmp_path / "f")])
    assert res.exit_code != 0 and "--steps" in res.output


def test_every_weight_file_is_averaged_and_the_other_files_come_from_the_last(tmp_path: Path) -> None:
    """Sharded weights (two files and their index) and a differing integer tensor."""
    from toolgym.models.average import average_models

    dirs = []
    for i in range(3):
        d = tmp_path / f"m{i}"
        d.mkdir()
        save_file({"a": torch.full((2, 2), float(i))}, str(d / "model-00001-of-00002.safetensors"))
        save_file({"b": torch.full((3,), 2.0 * i, dtype=torch.bfloat16), "n": torch.arange(3)},
                  str(d / "model-00002-of-00002.safetensors"))
        (d / "model.safetensors.index.json").write_text("{}")
        (d / "config.json").write_text(f'{{"i": {i}}}')
        dirs.append(d)
    out = average_models(dirs, tmp_path / "out")
    assert torch.equal(load_file(str(out / "model-00001-of-00002.safetensors"))["a"], torch.full((2, 2), 1.0))
    second = load_file(str(out / "model-00002-of-00002.safetensors"))
    assert second["b"].dtype == torch.bfloat16 and torch.equal(second["b"], torch.full((3,), 2.0, dtype=torch.bfloat16))
    assert (out / "config.json").read_text() == '{"i": 2}' and (out / "model.safetensors.index.json").is_file()
    save_file({"b": torch.zeros(3, dtype=torch.bfloat16), "n": torch.arange(1, 4)},
              str(dirs[2] / "model-00002-of-00002.safetensors"))
    with pytest.raises(ValueError, match="non-float tensor n"):
        average_models(dirs, tmp_path / "out2")
    save_file({"a": torch.zeros(3, 2)}, str(dirs[1] / "model-00001-of-00002.safetensors"))
    with pytest.raises(ValueError, match="tensor a of model-00001-of-00002.safetensors differs in shape"):
        average_models(dirs, tmp_path / "out3")
