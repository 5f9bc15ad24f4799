"""GRPO's `best_metric` / `revert_to_best` (toolgym/train/grpo.py `keep_best`) on the real tiny transformers model and
the toy digits env over a real in-process MCP server: which eval becomes the best (ties to the later step, nothing
before `best_from_step`), what OUTPUT/best/ holds, the weights and optimizer state put back bit for bit, a whole run's
logged best against the running best of its own logged evals, a resume that keeps the best, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_grpo_run import _cfg as toy_cfg
from toy_env import DigitsEnv

from toolgym.train.config import GRPOConfig
from toolgym.train.runstate import read_metrics


def _cfg(model: Path, out: Path, **kw: object) -> GRPOConfig:
    return toy_cfg(model, out, **{**dict(eval_every=1, eval_examples=4, best_metric="eval/reward",
                                          env="toy_env:DigitsEnv"), **kw})


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _opt_step(trainer) -> None:  # type: ignore[no-untyped-def]
    """One real AdamW step on a made-up loss: moves the weights and the optimizer's moments."""
    trainer.opt.zero_grad()
    sum((p.float() ** 2).sum() for p in trainer.model.parameters() if p.requires_grad).backward()
    trainer.opt.step()


def test_best_is_kept_and_a_worse_eval_puts_it_back(tiny_model: Path, tmp_path: Path) -> None:
    from toolgym.train.grpo import GRPOTrainer

    out = tmp_path / "run"
    tr = GRPOTrainer(_cfg(tiny_model, out, revert_to_best=True, best_from_step=2), env=DigitsEnv())
    _opt_step(tr)
    tr.step = 1
    assert tr.keep_best({"eval/reward": 0.1}) == {}  # before best_from_step: not a candidate
    assert not (out / "best").exists()
    tr.step = 2
    assert tr.keep_best({"eval/reward": 0.5}) == {"best/step": 2.0, "best/value": 0.5}
    kept, kept_opt = _weights(tr.model), json.dumps(
        {k: [t.tolist() for t in v.values() if torch.is_tensor(t)] for k, v in tr.opt.state_dict()["state"].items()})
    assert json.loads((out / "best" / "best.json").read_text()) == {"step": 2, "metric": "eval/reward", "value": 0.5}
    on_disk = load_file(str(out / "best" / "model.safetensors"))
    assert all(torch.equal(on_disk[k], kept[k]) for k in on_disk)
    _opt_step(tr)
    assert not all(torch.equal(v, kept[k]) for k, v in tr.model.state_dict().items())
    tr.step = 3
    assert tr.keep_best({"eval/reward": 0.6}) == {"best/reverted": 1.0, "best/step": 2.0, "best/value": 0.5}
    assert all(torch.equal(v, kept[k]) for k, v in tr.model.state_dict().items())  # bit for bit
    assert json.dumps({k: [t.tolist() for t in v.values() if torch.is_tensor(t)]
                       for k, v in tr.opt.state_dict()["state"].items()}) == kept_opt
    _opt_step(tr)  # training on from the put-back state leaves the kept copy as it was
    tr.step = 4
    tr.keep_best({"eval/reward": 0.7})
    assert all(torch.equal(v, kept[k]) for k, v in tr.model.state_dict().items())
    tr.step = 5
    assert tr.keep_best({"eval/reward": 0.5}) == {"best/step": 5.0, "best/value": 0.5}  # a tie: the later step
    with pytest.raises(ValueError, match=r"no such metric \(it logged: eval/loss, eval/rollouts\)"):
        tr.keep_best({"eval/loss": 1.0, "eval/rollouts": 4})


def test_without_revert_and_higher_is_better(tiny_model: Path, tmp_path: Path) -> None:
    from toolgym.train.grpo import GRPOTrainer

    tr = GRPOTrainer(_cfg(tiny_model, tmp_path / "run", greater_is_better=True), env=DigitsEnv())
    tr.step = 1
    assert tr.keep_best({"eval/reward": 0.5}) == {"best/step": 1.0, "best/value": 0.5}
    _opt_step(tr)
    moved = _weights(tr.model)
    tr.step = 2
    assert tr.keep_best({"eval/reward": 0.4}) == {"best/step": 1.0, "best/value": 0.5}  # worse: kept, not put back
    assert all(torch.equal(v, moved[k]) for k, v in tr.model.state_dict().items())
    tr.step = 3
    assert tr.keep_best({"eval/reward": 0.8}) == {"best/step": 3.0, "best/value": 0.8}
    assert not (tmp_path / "run" / "best" / "revert.pt").exists()  # only revert_to_best needs the optimizer state


def _running_best(rows: list[dict], start: int = 0) -> list[tuple[int, float, bool]]:  # type: ignore[type-arg]
    """(best step, best value, reverted) after each eval row: the higher reward wins, a tie goes to the later step."""
    best: tuple[int, float] | None = None
    seen = []
    for r in rows:
        if r["step"] < start:
            continue
        v = r["eval/reward"]
        worse = best is not None and v < best[1]
        if not worse:
            best = (r["step"], v)
        assert best is not None
        seen.append((best[0], best[1], worse))
    return seen


def test_a_run_ends_on_its_best_and_a_resume_keeps_it(tiny_model: Path, tmp_path: Path) -> None:
    from toolgym.train.grpo import run_grpo

    out = tmp_path / "run"
    kw = dict(greater_is_better=True, revert_to_best=True, max_steps=4, save_every=1, learning_rate=5e-2)
    run_grpo(_cfg(tiny_model, out, **kw), env=DigitsEnv())
    run_grpo(_cfg(tiny_model, out, **{**kw, "max_steps": 6}), resume=True, env=DigitsEnv())
    rows = read_metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    got = [(int(r["best/step"]), r["best/value"], r.get("best/reverted") == 1.0) for r in rows]
    assert got == _running_best(rows)  # across the resume too
    best = json.loads((out / "best" / "best.json").read_text())
    assert (best["step"], best["value"]) == got[-1][:2]
    final = load_file(str(out / "final" / "model.safetensors"))
    kept = load_file(str(out / "best" / "model.safetensors"))
    assert final.keys() == kept.keys() and all(torch.equal(final[k], kept[k]) for k in final)  # ends on its best


def test_refused_configs(tiny_model: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="set eval_every too"):
        _cfg(tiny_model, tmp_path, eval_every=0)
    with pytest.raises(ValueError, match=r"logs eval/\[SET/\]exact/\.\.\."):
        _cfg(tiny_model, tmp_path, eval_exact=True)
    with pytest.raises(ValueError, match="eval_exact is off"):
        _cfg(tiny_model, tmp_path, best_metric="eval/exact/loss")
    with pytest.raises(ValueError, match="with ema_decay"):
        _cfg(tiny_model, tmp_path, ema_decay=0.5)
    with pytest.raises(ValueError, match="eval_exact is off"):
        _cfg(tiny_model, tmp_path, best_metric={"eval/reward": 1.0, "eval/r/exact/win": -1.0}, eval_sets={"r": {}})
    with pytest.raises(ValueError, match="an empty weighted sum"):
        _cfg(tiny_model, tmp_path, best_metric={})
    for name in ("exact", "a/b", ""):
        with pytest.raises(ValueError, match="not a name for an eval"):
            _cfg(tiny_model, tmp_path, eval_sets={name: {}})
    with pytest.raises(ValueError, match="eval_sets run with the periodic eval"):
        _cfg(tiny_model, tmp_path, eval_every=0, best_metric=None, eval_sets={"r": {}})
    assert _cfg(tiny_model, tmp_path, eval_exact=True, best_metric={"eval/exact/loss": 1.0, "eval/r/exact/win": -1.0},
                eval_sets={"r": {}}).eval_sets == {"r": {}}
    for kw in (dict(revert_to_best=True), dict(best_from_step=3), dict(greater_is_better=True),
               dict(best_constraints={"eval/loss": {"max": 0.05}})):
        with pytest.raises(ValueError, match="act on best_metric"):
            _cfg(tiny_model, tmp_path, best_metric=None, **kw)


def test_best_constraints_keep_the_best_among_the_evals_that_meet_them(tiny_model: Path, tmp_path: Path) -> None:
    """`best_constraints`: the most reward among the evals with eval/loss <= 0.05 (the bound itself meets it); an
    eval outside them is no candidate however good its metric, is logged best/infeasible and, with revert_to_best,
    puts the kept weights back; best.json records the kept eval's constrained values; a NaN never meets a bound."""
    from toolgym.train.grpo import GRPOTrainer

    out = tmp_path / "run"
    tr = GRPOTrainer(_cfg(tiny_model, out, greater_is_better=True, revert_to_best=True,
                          best_constraints={"eval/loss": {"max": 0.05}}), env=DigitsEnv())
    tr.step = 1
    assert tr.keep_best({"eval/reward": 0.9, "eval/loss": 0.2}) == {"best/infeasible": 1.0}  # nothing kept yet
    assert not (out / "best").exists()
    tr.step = 2
    assert tr.keep_best({"eval/reward": 0.5, "eval/loss": 0.05}) == {"best/step": 2.0, "best/value": 0.5}
    assert json.loads((out / "best" / "best.json").read_text()) == {
        "step": 2, "metric": "eval/reward", "value": 0.5, "constraints": {"eval/loss": 0.05}}
    kept = _weights(tr.model)
    _opt_step(tr)
    tr.step = 3
    assert tr.keep_best({"eval/reward": 0.99, "eval/loss": 0.1}) == {"best/infeasible": 1.0, "best/reverted": 1.0,
                                                                     "best/step": 2.0, "best/value": 0.5}
    assert all(torch.equal(v, kept[k]) for k, v in tr.model.state_dict().items())
    tr.step = 4
    assert tr.keep_best({"eval/reward": 0.4, "eval/loss": 0.0})["best/reverted"] == 1.0  # feasible but worse
    tr.step = 5
    assert tr.keep_best({"eval/reward": 0.9, "eval/loss": float("nan")})["best/infeasible"] == 1.0
    tr.step = 6
    assert tr.keep_best({"eval/reward": 0.6, "eval/loss": 0.01}) == {"best/step": 6.0, "best/value": 0.6}
    with pytest.raises(ValueError, match=r"best_constraints 'eval/loss': the periodic eval logged no such metric"):
        tr.keep_best({"eval/reward": 0.6})
    with pytest.raises(ValueError, match="best_constraints 'exact/loss': the periodic eval logs"):
        _cfg(tiny_model, tmp_path, best_constraints={"exact/loss": {"max": 0.05}})
    with pytest.raises(ValueError, match="needs min, max or both"):
        _cfg(tiny_model, tmp_path, best_constraints={"eval/loss": {}})
    with pytest.raises(ValueError, match="is above its max"):
        _cfg(tiny_model, tmp_path, best_constraints={"eval/loss": {"min": 0.5, "max": 0.1}})
    with pytest.raises(ValueError, match="extra"):
        _cfg(tiny_model, tmp_path, best_constraints={"eval/loss": {"below": 0.1}})


def test_eval_sets_and_a_weighted_best(tiny_model: Path, tmp_path: Path) -> None:
    """`eval_sets` run beside the periodic eval and log eval/NAME/...: a set with no overrides is the same greedy
    eval of the same tasks, so it logs the same numbers; `best_metric` as {metric: weight} keeps the best of the
    weighted sum, and every metric it names must be logged."""
    from toolgym.train.grpo import GRPOTrainer, run_grpo

    out = tmp_path / "run"
    weights = {"eval/reward": 1.0, "eval/same/reward": -3.0}
    run_grpo(_cfg(tiny_model, out, max_steps=3, eval_sets={"same": {}}, best_metric=weights), env=DigitsEnv())
    rows = read_metrics(out)
    assert all(r["eval/same/reward"] == r["eval/reward"] and r["eval/same/rollouts"] == r["eval/rollouts"]
               for r in rows)
    best = min(rows, key=lambda r: (-2 * r["eval/reward"], -r["step"]))  # lower is better; a tie: the later step
    assert json.loads((out / "best" / "best.json").read_text()) == {
        "step": best["step"], "metric": weights, "value": pytest.approx(-2 * best["eval/reward"])}
    tr = GRPOTrainer(_cfg(tiny_model, tmp_path / "b", best_metric={"eval/reward": 1.0, "eval/b/reward": -2.0},
                          eval_sets={"b": {}}), env=DigitsEnv())
    tr.step = 1
    assert tr.keep_best({"eval/reward": 0.5, "eval/b/reward": 0.2}) == {"best/step": 1.0,
                                                                        "best/value": pytest.approx(0.1)}
    with pytest.raises(ValueError, match=r"'eval/b/reward': the periodic eval logged no such metric"):
        tr.keep_best({"eval/reward": 0.5})


def test_a_resume_cannot_go_back_to_a_best_kept_without_its_state(tiny_model: Path, tmp_path: Path) -> None:
    """A run that kept its best without revert_to_best has no optimizer state in best/: resuming it with
    revert_to_best is refused with the reason, before any step (the run folder is left as it was)."""
    from toolgym.train.grpo import GRPOTrainer, run_grpo

    out = tmp_path / "run"
    run_grpo(_cfg(tiny_model, out, greater_is_better=True, max_steps=2, save_every=1))
    assert (out / "best" / "best.json").is_file() and not (out / "best" / "revert.pt").exists()
    before = (out / "metrics.jsonl").read_text()
    with pytest.raises(ValueError, match="holds no revert.pt"):
        GRPOTrainer(_cfg(tiny_model, out, greater_is_better=True, max_steps=4, revert_to_best=True), resume=True)
    assert (out / "metrics.jsonl").read_text() == before


def test_a_value_that_is_not_a_number_changes_nothing(tiny_model: Path, tmp_path: Path) -> None:
    """An eval that measured nothing (0 / 0 gives NaN) is neither a best nor worse than one: no best/ before a real
    value, no going back after one (NaN compares false both ways, so without the guard it would put the best back at
    every such eval); it is logged as best/nonfinite."""
    from toolgym.train.grpo import GRPOTrainer

    out = tmp_path / "run"
    tr = GRPOTrainer(_cfg(tiny_model, out, revert_to_best=True), env=DigitsEnv())
    tr.step = 1
    assert tr.keep_best({"eval/reward": float("nan")}) == {"best/nonfinite": 1.0}
    assert not (out / "best").exists() and tr.best is None
    tr.step = 2
    assert tr.keep_best({"eval/reward": 0.5}) == {"best/step": 2.0, "best/value": 0.5}
    _opt_step(tr)
    moved = _weights(tr.model)
    for step, bad in ((3, float("nan")), (4, float("inf"))):
        tr.step = step
        assert tr.keep_best({"eval/reward": bad}) == {"best/nonfinite": 1.0, "best/step": 2.0, "best/value": 0.5}
    assert all(torch.equal(v, moved[k]) for k, v in tr.model.state_dict().items())  # not put back
    assert json.loads((out / "best" / "best.json").read_text())["step"] == 2


def _best(folder: Path, step: int) -> Path:
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_text(f"weights of step {step}")
    (folder / "best.json").write_text(json.dumps({"step": step}))
    return folder


@pytest.mark.parametrize("left", ["none", "tmp-whole", "tmp-partial", "old", "tmp-and-old", "done-but-old"])
def test_recover_best_after_a_kill_in_the_swap(tmp_path: Path, left: str) -> None:
    """Every instant a kill can hit write_best's swap (best.tmp/ written best.json last, best/ renamed to best.old/,
    best.tmp/ renamed to best/, best.old/ removed) leaves a whole best that recover_best puts in place: the new one
    where it was written whole, else the old one; nothing else is left."""
    from toolgym.train.grpo import recover_best

    best, tmp, old = tmp_path / "best", tmp_path / "best.tmp", tmp_path / "best.old"
    want: int | None = None
    if left == "tmp-whole":  # killed between the first best's write and its rename (no best/ yet)
        _best(tmp, 7)
        want = 7
    elif left == "tmp-partial":  # killed while writing the new best, the old one in place
        _best(best, 5)
        tmp.mkdir()
        (tmp / "model.safetensors").write_text("half")
        want = 5
    elif left == "old":  # only the moved-aside old best (its new copy lost): the old one is whole
        _best(old, 5)
        want = 5
    elif left == "tmp-and-old":  # killed between the two renames
        _best(old, 5)
        _best(tmp, 7)
        want = 7
    elif left == "done-but-old":  # killed after the swap, before best.old/ was removed
        _best(best, 7)
        _best(old, 5)
        want = 7
    recover_best(best)
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if want is None else ["best"])
    if want is not None:
        assert json.loads((best / "best.json").read_text()) == {"step": want}
        assert (best / "model.safetensors").read_text() == f"weights of step {want}"


def test_write_best_swaps_in_the_new_best_and_leaves_nothing_beside_it(tiny_model: Path, tmp_path: Path) -> None:
    from toolgym.train.grpo import GRPOTrainer

    out = tmp_path / "run"
    tr = GRPOTrainer(_cfg(tiny_model, out, greater_is_better=True), env=DigitsEnv())
    for step, value in ((1, 0.2), (2, 0.4)):
        tr.step = step
        tr.keep_best({"eval/reward": value})
        assert sorted(p.name for p in out.iterdir() if p.name.startswith("best")) == ["best"]
        assert json.loads((out / "best" / "best.json").read_text())["step"] == step
