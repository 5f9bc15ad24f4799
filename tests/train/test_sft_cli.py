"""synth -> sft -> plot through the typer sub-app, on a handful of games."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from toolgym.train.cli import app


def test_synth_sft_plot(tiny_model: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    data = tmp_path / "teacher.jsonl"
    res = runner.invoke(app, ["synth", "tictactoe", "--teacher", "scripted:imperfect", "--teacher-arg", "mistake_prob=0.5",
                              "-n", "12", "--drop-if", "loss", "--require-valid", "-a", "transport=inprocess",
                              "-a", "max_random_move_prob=1.0", "-o", str(data), "--hf-out", str(tmp_path / "hf")])
    assert res.exit_code == 0, res.output
    rows = [json.loads(x) for x in data.read_text().splitlines()]
    assert 0 < len(rows) <= 12
    assert all(r["metrics"]["loss"] == 0 for r in rows)
    assert rows[0]["tools"] and rows[0]["messages"][0]["role"] == "system"
    from datasets import load_from_disk

    assert len(load_from_disk(str(tmp_path / "hf"))) == len(rows)

    out = tmp_path / "sft"
    res = runner.invoke(app, ["sft", "--data", str(tmp_path / "hf"), "--model", str(tiny_model), "--out", str(out),
                              "-s", "epochs=4", "-s", "batch_size=4", "-s", "micro_batch_size=2", "-s", "learning_rate=5e-3"])
    assert res.exit_code == 0, res.output
    m = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    per_epoch = len(m) // 4  # every epoch sees the same rows: compare the first epoch's mean loss with the last's
    first, last = (sum(r["loss"] for r in part) / per_epoch for part in (m[:per_epoch], m[-per_epoch:]))
    assert per_epoch >= 1 and last < 0.8 * first, (first, last)
    assert (out / "final" / "model.safetensors").is_file() and (out / "final" / "tokenizer.json").is_file()
    res = runner.invoke(app, ["sft", "--data", str(data), "--model", str(tiny_model), "--out", str(out)])
    assert res.exit_code == 2 and "--resume" in res.output  # never silently overwrites a run

    res = runner.invoke(app, ["plot", str(out), "-o", str(tmp_path / "c.png"), "-k", "loss", "-k", "lr"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_plot_runs_in_sequence_or_overlaid(tmp_path) -> None:
    """`toolgym plot A B` continues B's steps after A's (phases); `--overlay` starts both at 0 (an ablation)."""
    from toolgym.train.plot import run_series

    for name, n in (("cispo", 5), ("grpo", 3)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text(
            "".join(json.dumps({"step": s, "reward": s / n}) + "\n" for s in range(1, n + 1)))
    runs = [tmp_path / "cispo", tmp_path / "grpo"]
    assert [(name, off) for name, off, _ in run_series(runs)] == [("cispo", 0), ("grpo", 5)]
    assert [(name, off) for name, off, _ in run_series(runs, overlay=True)] == [("cispo", 0), ("grpo", 0)]
    res = CliRunner().invoke(app, ["plot", *map(str, runs), "--overlay", "-k", "reward", "-o", str(tmp_path / "o.png")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "o.png").stat().st_size > 1000


def test_sft_names_a_missing_model_folder(tmp_path) -> None:
    """`toolgym sft --model PATH` with a folder that does not exist fails with 'no such model folder', not a hub
    error, and starts no run; the error is the last thing printed (no progress bar drawn after it)."""
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": "hello"}]}) + "\n")
    res = CliRunner().invoke(app, ["sft", "--model", str(tmp_path / "no-such-model"), "--data", str(data),
                                   "--out", str(tmp_path / "run")])
    assert res.exit_code == 2 and "no such model folder" in res.output.replace("\n", " "), res.output
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
    assert "sft steps" not in res.output and res.output.strip().startswith("error:"), res.output
    res = CliRunner().invoke(app, ["sft", "--model", str(tmp_path / "no-such-model"), "--data", str(tmp_path / "no.jsonl"),
                                   "--out", str(tmp_path / "run")])
    assert res.exit_code == 2 and "not found" in res.output and "sft steps" not in res.output, res.output


def test_train_names_a_missing_model_folder(tmp_path, monkeypatch) -> None:
    """`toolgym train` with a `model` folder that does not exist fails with 'no such model folder' before any weights
    or tokenizer are loaded (`from_pretrained` is never reached) and starts no run (no metrics, no checkpoint)."""
    import transformers

    loaded: list[object] = []

    def spy(*args: object, **kwargs: object) -> None:
        loaded.append(args)
        raise AssertionError("from_pretrained reached")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", spy)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", spy)
    cfg = tmp_path / "grpo.json"
    cfg.write_text(json.dumps({"model": str(tmp_path / "no-such-model"), "output_dir": str(tmp_path / "run"),
                               "env": "tictactoe", "env_args": {"transport": "inprocess"}}))
    res = CliRunner().invoke(app, ["train", str(cfg)])
    assert res.exit_code == 2 and "no such model folder" in res.output.replace("\n", " "), res.output
    assert loaded == []
    assert not (tmp_path / "run").exists()  # nothing written: no config.json, metrics or checkpoint


def test_pretrain_names_a_tokenizer_folder_without_a_tokenizer(tmp_path: Path) -> None:
    """`toolgym pretrain --tokenizer DIR` where DIR holds no tokenizer.json: exit 2 naming it, nothing written."""
    out = tmp_path / "base"
    res = CliRunner().invoke(app, ["pretrain", "--out", str(out), "--steps", "1", "--tokenizer", str(tmp_path)])
    assert res.exit_code == 2, res.output
    assert "no tokenizer.json" in res.output.replace("\n", " ")
    assert not out.exists()
