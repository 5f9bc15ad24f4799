"""Plot held-out results of the multi-server walkthrough: per task kind, the share of correct answers and of exact
tool calls (call_match; for `none` tasks: no call) with 95 % Wilson intervals, one bar per evaluated model.

    R=runs/multi_server
    python examples/multi_server/plot_results.py $R/eval-tiny $R/eval-sft $R/eval-grpo \
        --labels untrained SFT GRPO -o examples/multi_server/heldout.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from toolgym.eval import read_results  # noqa: E402
from toolgym.stats import wilson  # noqa: E402

KINDS = ("time", "sum", "both", "none")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--labels", nargs="*")
    ap.add_argument("-o", "--out", type=Path, default=Path("heldout.png"))
    a = ap.parse_args()
    labels = a.labels or [r.name for r in a.runs]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    width = 0.8 / len(a.runs)
    for j, (metric, ax) in enumerate(zip(("correct", "call_match"), axes, strict=True)):
        for i, (run, label) in enumerate(zip(a.runs, labels, strict=True)):
            trajs = list(read_results(run / "results.jsonl").values())
            rates, errs = [], [[], []]
            for kind in KINDS:
                xs = [t.rewards.get(metric, 0.0) == 1.0 for t in trajs if t.task.get("kind") == kind and not t.error]
                lo, hi = wilson(sum(xs), len(xs))
                rate = sum(xs) / len(xs) if xs else 0.0
                rates.append(100 * rate)
                errs[0].append(max(0.0, 100 * (rate - lo)))
                errs[1].append(max(0.0, 100 * (hi - rate)))
            ax.bar([k + i * width for k in range(len(KINDS))], rates, width, yerr=errs, capsize=3, label=label)
        ax.set_xticks([k + width * (len(a.runs) - 1) / 2 for k in range(len(KINDS))], KINDS)
        ax.set_title(f"held-out {metric} (%)")
        ax.axhline(95, color="grey", linestyle=":", linewidth=1)
        if j == 0:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(json.dumps({"wrote": str(a.out)}))


if __name__ == "__main__":
    main()
