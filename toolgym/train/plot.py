"""`toolgym plot RUN...`: training curves from metrics.jsonl to PNG. Several runs are drawn one after another on a
shared step axis (a run resumed as a second phase), or with `overlay` from step 0 each (a loss or lr ablation)."""

from __future__ import annotations

from pathlib import Path

from toolgym.train.runstate import read_metrics

# drawn when present: rewards, game results, the tool-call accuracy flags of the step's rollouts (and of the periodic
# held-out eval), then the optimisation's own signals
DEFAULT_KEYS = ("reward", "metrics/win", "metrics/loss", "tool_call_valid", "metrics/call_match", "metrics/abstain_ok",
                "metrics/tool_parse_ok", "metrics/tool_name_ok", "metrics/tool_args_ok", "metrics/tool_exec_ok",
                "eval/reward", "eval/metrics/call_match", "eval/metrics/abstain_ok", "completion_tokens", "clip_frac",
                "drift_abs", "loss", "step_s")


def run_series(runs: list[Path], overlay: bool = False) -> list[tuple[str, int, list[dict]]]:  # type: ignore[type-arg]
    """(name, step offset, records) per run: in sequence each run starts where the previous one ended; overlaid
    every run starts at 0."""
    series = []
    offset = 0
    for r in runs:
        recs = [m for m in read_metrics(Path(r)) if "step" in m]
        series.append((Path(r).name, offset, recs))
        if not overlay:
            offset += max((m["step"] for m in recs), default=0)
    return series


def plot_runs(runs: list[Path], out: Path, keys: list[str] | None = None, smooth: int = 1,
              overlay: bool = False) -> Path:
    """Draw `keys` (default: a standard set) of each run's metrics.jsonl into one PNG; `smooth` is a moving-average
    window (series with fewer than 3 windows of points, such as periodic evals, are drawn raw); `overlay` starts
    every run at step 0 instead of after the previous one."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = run_series(runs, overlay)
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
            if smooth > 1 and len(ys) >= 3 * smooth:  # sparse series (periodic evals) are drawn raw
                ys = [sum(ys[max(0, i - smooth + 1) : i + 1]) / len(ys[max(0, i - smooth + 1) : i + 1]) for i in range(len(ys))]
            ax.plot(xs, ys, label=name, marker="o" if len(xs) <= 12 else None, markersize=3)
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
