"""The step of a GRPO run's best periodic eval: the fewest losses (`eval/metrics/loss`), then the fewest invalid calls,
then the later step. The periodic eval plays its own seeds (the dataset seed + 7919), never a test seed, so picking a
checkpoint by it leaves the 200 test games on seed 2718 untouched. Usage:
    python examples/tictactoe/best_step.py RUN_DIR[/metrics.jsonl]     (prints the step)
"""

from __future__ import annotations

import sys
from pathlib import Path

from toolgym.train.runstate import read_metrics


def best_step(rows: list[dict]) -> int:  # type: ignore[type-arg]
    evals = [r for r in rows if "eval/metrics/loss" in r]
    if not evals:
        raise SystemExit("no periodic eval in these metrics")
    best = min(evals, key=lambda r: (r["eval/metrics/loss"], r.get("eval/metrics/invalid_moves", 0.0), -r["step"]))
    return int(best["step"])


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    print(best_step(read_metrics(Path(sys.argv[1]))))
