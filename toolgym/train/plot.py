"""`toolgym plot RUN...`: training curves from metrics.jsonl to PNG (several runs are drawn one after another on a
shared step axis, e.g. SFT-initialised GRPO phase 1 then phase 2)."""

from __future__ import annotations

from pathlib import Path

from toolgym.train.runstate import read_metrics

DEFAULT_KEYS = ("reward", "metrics/win", "metrics/loss", "tool_call_valid", "completion_tokens", "clip_frac",
                "drift_abs", "loss", "step_s")


def plot_runs(runs: list[Path], out: Path, keys: list[str] | None = None, smooth: int = 1) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = []
    offset = 0
    for r in runs:
        recs = [m for m in read_metrics(Path(r)) if "step" in m]
        series.append((Path(r).name, offset, recs))
        offset += max((m["step"] for m in recs), default=0)
    present = {k for _, _, recs in series for m in recs for k in m}
    keys = [k for k in (keys or DEFAULT_KEYS) if k in present] or sorted(present - {"step"})[:9]
    cols = 3
    rows = (len(keys) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys, strict=False):
        for name, off, recs in series:
            pts = [(m["step"] + off, m[key]) for m in recs if isinstance(m.get(key), int | float)]
            if not pts:
                continue
            xs, ys = zip(*pts, strict=True)
            if smooth > 1:
                ys = [sum(ys[max(0, i - smooth + 1) : i + 1]) / len(ys[max(0, i - smooth + 1) : i + 1]) for i in range(len(ys))]
            ax.plot(xs, ys, label=name)
        ax.set_title(key)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    if len(series) > 1:
        axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
