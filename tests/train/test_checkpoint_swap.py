"""`save_checkpoint` writes a step to `step_N.tmp/` (DONE last) and swaps it in through `step_N.old/`, so a step saved
again (a resume that repeats it) is never missing: a kill at any instant of the swap leaves a folder that `--resume`
(`prepare_run` -> `recover_checkpoints`) puts back whole before it looks for the last checkpoint. Real files; the
tiny real model and a real AdamW for the save itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolgym.train.runstate import CKPT_DIR, checkpoints, latest_checkpoint, prepare_run, save_checkpoint


def _ckpt(folder: Path, tag: str, done: bool = True) -> None:
    (folder / "model").mkdir(parents=True)
    (folder / "model" / "model.safetensors").write_text(f"weights {tag}")
    if done:
        (folder / "DONE").write_text(tag)


@pytest.mark.parametrize("left", ["tmp-partial", "old-only", "tmp-and-old", "done-but-old", "tmp-whole-first"])
def test_resume_recovers_a_checkpoint_swap_cut_anywhere(tmp_path: Path, left: str) -> None:
    d = tmp_path / CKPT_DIR
    _ckpt(d / "step_000002", "2")
    step3, tmp, old = d / "step_000003", d / "step_000003.tmp", d / "step_000003.old"
    want = {"tmp-partial": "old 3", "old-only": "old 3", "tmp-and-old": "new 3", "done-but-old": "new 3",
            "tmp-whole-first": "new 3"}[left]
    if left == "tmp-partial":  # killed while writing the re-saved step: the old one stays
        _ckpt(step3, "old 3")
        _ckpt(tmp, "new 3", done=False)
    elif left == "old-only":  # the old moved aside, its new copy lost
        _ckpt(old, "old 3")
    elif left == "tmp-and-old":  # killed between the two renames
        _ckpt(old, "old 3")
        _ckpt(tmp, "new 3")
    elif left == "done-but-old":  # killed before the moved-aside old one was removed
        _ckpt(step3, "new 3")
        _ckpt(old, "old 3")
    else:  # a first save of the step killed between DONE and its rename
        _ckpt(tmp, "new 3")
    assert all(c.name in ("step_000002", "step_000003") for c in checkpoints(tmp_path))  # never a .tmp / .old
    assert prepare_run(tmp_path, {"seed": 0}, resume=True, match_keys=("seed",)) == step3
    assert sorted(p.name for p in d.iterdir()) == ["step_000002", "step_000003"]
    assert (step3 / "model" / "model.safetensors").read_text() == f"weights {want}"


def test_a_step_saved_twice_is_replaced_whole(tiny_model: Path, tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    tok = AutoTokenizer.from_pretrained(tiny_model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    first = save_checkpoint(tmp_path, 4, model, tok, opt, sched, {"tag": 1}, keep=3)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    again = save_checkpoint(tmp_path, 4, model, tok, opt, sched, {"tag": 2}, keep=3)
    assert again == first == latest_checkpoint(tmp_path)
    assert sorted(p.name for p in (tmp_path / CKPT_DIR).iterdir()) == ["step_000004"]
    state = torch.load(again / "trainer_state.pt", weights_only=False)
    assert state["extra"] == {"tag": 2}
