"""`examples/tictactoe/restarts.py` on a hand-written run folder (rollouts.jsonl.gz as GRPO's `save_rollouts` writes
it): restarted groups by window and class, the new / replayed split, and the trap groups (`restart_trap_share`) as
their own kind with their wins -- never counted as groups from lost games."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from tg_testutil import ROOT

TRAP = "....O...."  # O took the centre: four value-keeping corners
LOST = "O...X...."


def _row(step: int, example: int, rollout: int, task: dict, **metrics: float) -> dict:  # type: ignore[type-arg]
    return {"step": step, "example_id": example, "rollout_index": rollout, "task": task, "metrics": metrics}


def test_trap_groups_are_their_own_kind(tmp_path: Path) -> None:
    rows = [
        _row(1, 0, 0, {"board": "........."}, loss=1.0),  # a new game: not a restart, not counted
        _row(1, 1, 0, {"board": LOST, "start": "restart"}, loss=1.0),
        _row(1, 1, 1, {"board": LOST, "start": "restart"}, loss=0.0),
        _row(1, 2, 0, {"board": TRAP, "start": "restart", "trap": True}, win=1.0),
        _row(1, 2, 1, {"board": TRAP, "start": "restart", "trap": True}, win=0.0, loss=1.0),
        _row(2, 0, 0, {"board": LOST, "start": "restart", "replay": True}, loss=1.0),
        _row(2, 0, 1, {"board": LOST, "start": "restart", "replay": True}, loss=1.0),
        _row(2, 1, 0, {"board": TRAP, "start": "restart", "trap": True}, win=1.0),
        _row(2, 1, 1, {"board": TRAP, "start": "restart", "trap": True}, win=1.0),
    ]
    with gzip.open(tmp_path / "rollouts.jsonl.gz", "wt") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    res = subprocess.run([sys.executable, "examples/tictactoe/restarts.py", str(tmp_path), "--window", "1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    # all restarted groups but the traps: step 1 one group (1 of 2 samples lost), step 2 one replayed (2 of 2)
    assert "| all | 1 (0), 50 % | 1 (1), 100 % | 2 (1), 75 % |" in out
    assert "| new (from lost games) | 1: 100 % contested, 1 classes | 0 | 1: 100 % contested, 1 classes |" in out
    assert "| replayed | 0 | 1: 0 % contested, 1 classes | 1: 0 % contested, 1 classes |" in out
    # trap groups: step 1 half won (contested), step 2 all won (not contested); 3 of 4 samples won in all
    assert "| trap (won, contested on the win) | 1: 50 % won, 100 % contested | 1: 100 % won, 0 % contested | " \
        "2: 75 % won, 50 % contested |" in out
