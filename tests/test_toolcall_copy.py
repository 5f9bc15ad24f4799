"""The tool-calling base learns to copy unseen strings: on a small synthetic server (`tests/servers/notes_server.py`,
three tools whose string arguments are free), tasks come from `toolgym tasks generate` only, the base shipped with
toolgym is fine-tuned for a few minutes on the answer key's rollouts and 8 fresh-value copies of each
(`--augment 8`, fresh words drawn as the generator draws them: the recipe's generate, synth and sft phases), and on held-out tasks -- every one with a string
argument value that no training task has -- its greedy calls must be exact (name and every argument) in at least
COPY_RATE of them, with a 95 % interval clear of the base's own (which copies nothing before fine-tuning). Slow
(about 6-10 minutes on 2 cores): `pytest -m slow`. Measured (docs/models.md): the first base (pre-trained in steps
of 32) 0 % -> 67.6 % (58.3-75.7) after SFT with the copies (51.9 % when their words were invented only), 15.7 %
(10.1-23.8) without them; the base shipped since 2026-11-28 (steps of 16) 95.8 % (93.2-97.5) on 400 held-out tasks
(n = 360), so the 90 % the recipe aims at is reached on this server; this test's own 120-task split 93.5 %
(87.2-96.8, n = 108, 8.3 min on 2 cores)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from toolgym.train.recipe import RecipeOptions, default_base, run_recipe

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800),
              pytest.mark.skipif(not (default_base() / "config.json").exists(), reason="the base is not built")]
pytest.importorskip("transformers")

SERVER = Path(__file__).resolve().parent / "servers" / "notes_server.py"
# this test's own split with the shipped base (2026-11-28): 93.5 % (87.2-96.8, n = 108; the base alone 0 %); the
# first base reached 67.6 % (58.3-75.7), so a base that copies like the first one fails here
COPY_RATE = 0.80


def test_the_base_fine_tuned_for_minutes_copies_unseen_strings(tmp_path: Path) -> None:
    cfg = tmp_path / "env.toml"
    cfg.write_text(f'name = "notes"\n[server]\ncommand = ["{sys.executable}", "{SERVER}"]\n'
                   '[env]\nsystem_prompt = "Use the tools. Give the final answer inside <answer></answer>."\n'
                   'max_turns = 4\n[tasks]\npath = "tasks.jsonl"\n[[rewards]]\ntype = "call_match"\n')
    opts = RecipeOptions(env=cfg, out=tmp_path / "run", n_train=400, n_heldout=120, seed=0,
                         gen={"chain_share": 0.0, "no_tool_share": 0.1},
                         sft={"epochs": 4.0, "batch_size": 16, "save_every": 1000}, augment=8,
                         phases=("generate", "env", "synth", "sft", "eval"), eval_models=("base", "sft"))
    report = run_recipe(opts, log=lambda m: None)
    train = [json.loads(x) for x in (tmp_path / "run" / "tasks.jsonl").read_text().splitlines()]
    held = [json.loads(x) for x in (tmp_path / "run" / "tasks.heldout.jsonl").read_text().splitlines()]
    seen = {v[0] for t in train for c in t["expected_calls"] for v in c["arguments"].values() if isinstance(v[0], str)}
    unseen = [t for t in held if any(isinstance(v[0], str) and v[0] not in seen
                                     for c in t["expected_calls"] for v in c["arguments"].values())]
    assert len(unseen) >= 80  # the held-out tool tasks carry strings no training task has
    r = report["heldout"]["sft"]["unseen_string_call_match"]
    before = report["heldout"]["base"]["unseen_string_call_match"]
    assert r["n"] >= 80 and r["rate"] >= COPY_RATE, r
    assert r["lo"] > before["hi"], (before, r)
