"""Teacher data: play any policy (scripted expert, OpenAI-compatible model, local model) through an env, keep the
rollouts that pass the filters, export chat-with-tools rows (JSONL, optionally an HF `datasets` folder).

Filters: `min_reward` (total reward), `drop_if` (names of reward functions / metrics whose value > 0 drops the
rollout, e.g. `loss`), `require_valid` (every turn parsed, every call executed without error). Errored rollouts
are always dropped. `failed_turns="context"` keeps rollouts with failed turns but marks each assistant turn that
failed (unparsable, or a call that did not execute) `"weight": 0`: SFT keeps it as context and trains only the turns
after it -- a teacher's recovery from an error (the error message, then a good call) without its error. The
returned summary (the CLI writes it next to the output: `data.summary.json`) carries the policy's `stats` as
`policy_stats` when it has them, as eval's summary.json does (an OpenAI-compatible policy: requests, retries,
failovers, endpoint_errors), and counts the failed turns kept (`failed_turns`).

Every finished game is appended to a journal next to the output (`data.games.jsonl` for `data.jsonl`: its first
line says what was run, then one trajectory per line, flushed as each game ends). A crashed, killed or interrupted
run keeps its games there, and `resume=True` (`toolgym synth --resume`) plays only the rest (errored games again);
the filters apply to all games at the end, so they may change between the runs. The data file is written
atomically once every game is played, and the journal is then removed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolgym.journal import drop_torn_lines, first_finished, read_results, record_line, run_differences
from toolgym.train.data import trajectory_row, write_rows
from toolgym.types import Trajectory


FAILED_TURNS = ("train", "context")
"""What `synth` does with a kept rollout's failed turns: train on them as played, or keep them as context only."""


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
    if require_valid and failed_turn_indices(traj):
        return False
    return True


def failed_turn_indices(traj: Trajectory) -> set[int]:
    """Indices (among the assistant turns) of the turns that did not parse or held a call that failed."""
    bad = {i for i, t in enumerate(traj.turns) if not t.get("parse_ok", True)}
    return bad | {c.turn for c in traj.calls if not c.exec_ok}


def context_failed_turns(row: dict[str, Any], traj: Trajectory) -> dict[str, Any]:
    """`row` with each failed assistant turn marked `"weight": 0` (kept as context, out of the SFT loss)."""
    bad = failed_turn_indices(traj)
    if not bad:
        return row
    messages, k = [], 0
    for m in row["messages"]:
        if m.get("role") == "assistant":
            m = {**m, "weight": 0} if k in bad else m
            k += 1
        messages.append(m)
    return {**row, "messages": messages}


def journal_path(out: Path) -> Path:
    """Where a synth run writing `out` keeps its games until the data file is written."""
    return out.with_name(out.stem + ".games.jsonl")


def _open_journal(journal: Path, info: dict[str, Any], resume: bool) -> dict[tuple[int, int], Trajectory]:
    """The finished games of an earlier run (resume), after checking it played the same tasks; a fresh journal
    otherwise."""
    if not journal.exists():
        journal.parent.mkdir(parents=True, exist_ok=True)
        journal.write_text(json.dumps({"synth_run": info}, default=str) + "\n")
        return {}
    if not resume:
        raise FileExistsError(f"{journal} holds the games of an unfinished synth run: pass --resume to continue it, "
                              "or delete it to start again")
    try:
        old = json.loads(journal.open().readline()).get("synth_run", {})
    except (json.JSONDecodeError, AttributeError):
        old = {}
    diff = run_differences(old, info)
    if diff:
        raise ValueError(f"--resume: {journal} is of a different run; differences (old, new): {diff}")
    finished = first_finished()
    drop_torn_lines(journal, lambda rec: "synth_run" in rec or finished(rec))
    return read_results(journal)


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
    resume: bool = False,
    run_info: dict[str, Any] | None = None,
    failed_turns: str = "train",
) -> dict[str, Any]:
    """Play `tasks`, filter, write `out`. `run_info` (env, teacher, seed, env args) is recorded in the journal and
    must match on `resume`. `failed_turns`: "train" (rows as played) or "context" (failed turns weight 0)."""
    if failed_turns not in FAILED_TURNS:
        raise ValueError(f"failed_turns must be one of {FAILED_TURNS}, not {failed_turns!r}")
    from toolgym.rollout import iter_rollouts

    journal = journal_path(out)
    info = {**(run_info or {}), "n": len(tasks)}
    results = _open_journal(journal, info, resume)
    resumed = len(results)
    for t in results.values():
        if on_done:
            on_done(t)
    jobs = [(i, 0, t) for i, t in enumerate(tasks) if (i, 0) not in results]
    await env.start()
    with journal.open("a") as f:
        async for _, traj in iter_rollouts(env, policy, jobs, concurrency):
            line, traj = record_line(traj)  # a record that cannot be written is an error of its rollout
            results[(traj.example_id, traj.rollout_index)] = traj
            f.write(line)
            f.flush()
            if on_done:
                on_done(traj)
    trajs = [results[k] for k in sorted(results)]
    tools = env.model_tools()
    kept = [t for t in trajs if keep(t, min_reward, list(drop_if or []), require_valid)]
    rows = [trajectory_row(t, tools) for t in kept]
    if failed_turns == "context":
        rows = [context_failed_turns(r, t) for r, t in zip(rows, kept, strict=True)]
    write_rows(rows, out, hf_out)
    journal.unlink()  # the data file holds what the games were for
    errors = sum(1 for t in trajs if t.error)
    res = {"played": len(trajs), "kept": len(kept), "errors": errors, "resumed": resumed,
           # every game counts, an errored one at reward 0 (as in eval's statistics)
           "mean_reward_all": sum(t.reward for t in trajs if not t.error) / max(1, len(trajs)),
           "mean_reward_kept": sum(t.reward for t in kept) / max(1, len(kept)), "out": str(out),
           "failed_turns": sum(len(failed_turn_indices(t)) for t in kept)}
    if hasattr(policy, "stats"):  # as in eval's summary.json: requests, retries, failovers, endpoint_errors
        res["policy_stats"] = dict(policy.stats)
    return res
