"""Teacher data: play any policy (scripted expert, OpenAI-compatible model, local model) through an env, keep the
rollouts that pass the filters, export chat-with-tools rows (JSONL, optionally an HF `datasets` folder).

Filters: `min_reward` (total reward), `drop_if` (names of reward functions / metrics whose value > 0 drops the
rollout, e.g. `loss`), `require_valid` (every turn parsed, every call executed without error). Errored rollouts
are always dropped. The returned summary (the CLI writes it next to the output: `data.summary.json`) carries the
policy's `stats` as `policy_stats` when it has them, as eval's summary.json does (an OpenAI-compatible policy:
requests, retries, failovers, endpoint_errors).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolgym.train.data import trajectory_row, write_rows
from toolgym.types import Trajectory


def keep(traj: Trajectory, min_reward: float | None, drop_if: list[str], require_valid: bool) -> bool:
    if traj.error is not None:
        return False
    if min_reward is not None and traj.reward < min_reward:
        return False
    vals = {**traj.metrics, **traj.rewards}
    for name in drop_if:
        if name not in vals:
            raise KeyError(f"drop_if: {name!r} is not a reward or metric of this env (have: {sorted(vals)})")
        if vals[name] > 0:
            return False
    if require_valid:
        if any(not t.get("parse_ok", True) for t in traj.turns) or any(not c.exec_ok for c in traj.calls):
            return False
    return True


async def synth(
    env: Any,
    policy: Any,
    tasks: list[dict[str, Any]],
    out: Path,
    hf_out: Path | None = None,
    min_reward: float | None = None,
    drop_if: list[str] | None = None,
    require_valid: bool = False,
    concurrency: int = 8,
    on_done: Any = None,
) -> dict[str, Any]:
    from toolgym.rollout import run_rollouts

    await env.start()
    trajs = await run_rollouts(env, policy, [(i, 0, t) for i, t in enumerate(tasks)], concurrency, on_done)
    tools = env.model_tools()
    kept = [t for t in trajs if keep(t, min_reward, list(drop_if or []), require_valid)]
    write_rows([trajectory_row(t, tools) for t in kept], out, hf_out)
    errors = sum(1 for t in trajs if t.error)
    res = {"played": len(trajs), "kept": len(kept), "errors": errors,
           "mean_reward_all": sum(t.reward for t in trajs if not t.error) / max(1, len(trajs) - errors),
           "mean_reward_kept": sum(t.reward for t in kept) / max(1, len(kept)), "out": str(out)}
    if hasattr(policy, "stats"):  # as in eval's summary.json: requests, retries, failovers, endpoint_errors
        res["policy_stats"] = dict(policy.stats)
    return res
