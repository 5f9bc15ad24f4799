"""Per-step training metrics: a metric that does not apply to a rollout (None from its function, absent from
`Trajectory.metrics`) is averaged over the rollouts it applies to, not counted as 0."""

from __future__ import annotations

from toolgym.train.grpo import rollout_metrics
from toolgym.types import Trajectory


def test_metrics_average_over_rollouts_they_apply_to() -> None:
    ts = []
    for i in range(4):
        t = Trajectory(example_id=i, rollout_index=0, task={})
        t.reward = 1.0
        t.metrics = {"legal": 1.0, **({"win_taken": 1.0} if i < 2 else {})}  # win_taken applies to 2 of 4
        ts.append(t)
    m = rollout_metrics(ts)
    assert m["metrics/win_taken"] == 1.0 and m["metrics/legal"] == 1.0
