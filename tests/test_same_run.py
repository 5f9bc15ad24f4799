"""`examples/tictactoe/same_run.py`: two GRPO run folders are the same run when every logged metric but the clock's,
every saved game (random game and tool-call ids masked) and the final weights are equal to the last bit. The run
folders are constructed here (the script reads files; a real pair of runs is in the recipe's docs)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tg_testutil import example_module

same_run = example_module("examples/tictactoe/same_run.py")


def _run(d: Path, loss: float = 0.5, rollout_s: float = 1.0, move: int = 4, game_id: str = "a1b2c3d4e5f6a7b8",
         call_id: str = "call_0123456789ab", weights: bytes = b"w") -> Path:
    d.mkdir(parents=True)
    rows = [{"step": 1, "loss": 0.25, "rollout_s": rollout_s, "gen_mean_batch": 3.0 + rollout_s},
            {"step": 2, "loss": loss, "rollout_s": 2 * rollout_s, "gen_mean_batch": 7.0}]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    game = {"step": 1, "example_id": 0, "rollout_index": 0, "timings": {"total_s": rollout_s},
            "messages": [{"role": "assistant",
                          "tool_calls": [{"id": call_id, "function": {"arguments": f'{{"position": {move}}}'}}]},
                         {"role": "tool", "content": f"game {game_id}: you played {move}"}],
            "calls": [{"latency_s": rollout_s, "arguments": {"position": move}}], "info": {"game_id": game_id}}
    with gzip.open(d / "rollouts.jsonl.gz", "wt") as f:
        f.write(json.dumps(game) + "\n")
    (d / "final").mkdir()
    (d / "final" / "model.safetensors").write_bytes(weights)
    return d


def test_runs_differing_only_in_clock_and_random_ids_are_the_same(tmp_path: Path) -> None:
    a = _run(tmp_path / "a")
    b = _run(tmp_path / "b", rollout_s=9.0, game_id="ffffeeeeddddcccc", call_id="call_ba9876543210")
    assert same_run.compare(a, b) == []


def test_a_logged_metric_a_move_or_the_weights_tell_runs_apart(tmp_path: Path) -> None:
    a = _run(tmp_path / "a")
    diffs = same_run.compare(a, _run(tmp_path / "b", loss=0.5000000001))
    assert len(diffs) == 1 and diffs[0].startswith("metrics: step 2: 1 keys differ, first loss")
    assert same_run.compare(a, _run(tmp_path / "c", move=5)) == ["rollouts: game 0 (step 1) differs"]
    assert same_run.compare(a, _run(tmp_path / "d", weights=b"v")) == ["final/: the weights differ"]
