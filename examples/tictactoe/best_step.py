"""Pick a GRPO run's checkpoint without touching the test seeds. Two ways:

- the best periodic eval: the fewest losses (`eval/metrics/loss`), then the fewest invalid calls, then the later step.
  The periodic eval plays its own seeds (the dataset seed + 7919), but only 100 games, so the pick is noisy;
- `--validation`: the fewest lost games over larger evals of each candidate checkpoint (e.g. 400 games on two
  validation seeds that are neither the periodic eval's nor a test seed), then the later step. Each TEMPLATE is an
  eval folder with `{step}` in its name; an errored rollout counts as a lost game (`toolgym eval`'s outcomes).

Usage:
    python examples/tictactoe/best_step.py RUN_DIR[/metrics.jsonl]                                  (prints the step)
    python examples/tictactoe/best_step.py --validation TEMPLATE [TEMPLATE ...] --steps 30 40 50 60  (prints the step)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from toolgym.train.runstate import read_metrics


def best_step(rows: list[dict]) -> int:  # type: ignore[type-arg]
    evals = [r for r in rows if "eval/metrics/loss" in r]
    if not evals:
        raise SystemExit("no periodic eval in these metrics")
    best = min(evals, key=lambda r: (r["eval/metrics/loss"], r.get("eval/metrics/invalid_moves", 0.0), -r["step"]))
    return int(best["step"])


def lost_games(eval_dir: Path) -> tuple[int, int]:
    """(lost games, games) of a `toolgym eval` folder of whole games; refused when it is missing or unfinished."""
    path = eval_dir / "summary.json"
    if not path.is_file():
        raise SystemExit(f"{eval_dir}: no summary.json (run the eval first)")
    s = json.loads(path.read_text())
    return round(s["outcomes"]["loss"] * s["rollouts"]), int(s["rollouts"])


def best_validated(templates: list[str], steps: list[int]) -> tuple[int, dict[int, tuple[int, int]]]:
    """(the step with the fewest lost games summed over the templates' folders, then the later step; per step
    (lost, games))."""
    if not steps or not templates or any("{step}" not in t for t in templates):
        raise SystemExit("--validation needs folder templates with {step} in them and --steps")
    table: dict[int, tuple[int, int]] = {}
    for step in steps:
        counts = [lost_games(Path(t.format(step=step))) for t in templates]
        table[step] = (sum(c[0] for c in counts), sum(c[1] for c in counts))
    best = min(steps, key=lambda s: (table[s][0], -s))
    return best, table


if __name__ == "__main__":
    if len(sys.argv) == 2 and not sys.argv[1].startswith("-"):
        print(best_step(read_metrics(Path(sys.argv[1]))))
        raise SystemExit(0)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--validation", nargs="+", required=True, metavar="TEMPLATE")
    ap.add_argument("--steps", nargs="+", type=int, required=True)
    a = ap.parse_args()
    step, table = best_validated(a.validation, a.steps)
    print(" ".join(f"{s}: {lost}/{n}" for s, (lost, n) in table.items()), file=sys.stderr)
    print(step)
