"""Print the results table (win/draw/loss %, valid tool calls) from runs/tictactoe/eval/*/summary.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def row(summary: dict) -> tuple[float, float, float, float]:  # type: ignore[type-arg]
    m = summary.get("metrics", {})
    def g(k: str) -> float:
        v = m.get(k, {})
        return float(v.get("mean", v) if isinstance(v, dict) else v or 0.0)
    valid = summary.get("tool_accuracy", {}).get("*", {}).get("exec_ok", 0.0)  # share of all calls that made a move
    return g("win"), g("draw"), g("loss"), float(valid)


def main(root: Path) -> None:
    print("| model | vs random W/D/L % (seed 12345 · 777) | vs optimal W/D/L % (12345 · 777) | legal-move calls, random / optimal (12345) |")
    print("|---|---|---|---|")
    for name in ("base", "sft", "grpo1", "grpo2"):
        cells, valid = [], []
        for opp in ("random", "optimal"):
            per_seed = []
            for sfx in ("", "-777"):
                f = root / "eval" / f"{name}-vs-{opp}{sfx}" / "summary.json"
                if not f.exists():
                    per_seed.append("-")
                    continue
                w, d, l, v = row(json.loads(f.read_text()))
                per_seed.append(f"{100 * w:.0f}/{100 * d:.0f}/{100 * l:.0f}")
                if not sfx:
                    valid.append(f"{100 * v:.1f} %")
            cells.append(" · ".join(per_seed))
        print(f"| {name} | {cells[0]} | {cells[1]} | {' / '.join(valid) or '-'} |")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/tictactoe"))
