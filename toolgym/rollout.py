"""The rollout engine: play a `Policy` against a `StatefulToolEnv` and record a `Trajectory`.

`run_rollout` is the policy loop around an `Episode` (`toolgym.episode`), which owns the rest of the lifecycle:

    async with env.episode(task) as ep:          # acquire a session, setup_state, the first messages
        session = policy.open(env.model_tools(), task)
        while not ep.done:
            await ep.run_turn(await session.act(ep.messages))   # tool calls, env_response, stop checks
        traj = await ep.finish()                 # rubric + tool-call accuracy
    # cleanup and release, also after errors and cancellation

Failures of the model (bad JSON, unknown tool, bad arguments, server-side errors) are recorded on the call and shown
to the model as a tool error; failures of the infrastructure (dead or hung server, failing hidden call, raising
reward function, a bug in a hook or in the policy) end that rollout with `trajectory.error` set, and the engine goes
on with the next one. `PolicyUnavailable` (the policy cannot answer at all) stops the run instead.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from toolgym.env import HiddenCallError, StatefulToolEnv
from toolgym.mcp_bridge import ToolCallError
from toolgym.policies.base import PolicyUnavailable
from toolgym.policies import Policy
from toolgym.rubric import RewardError
from toolgym.types import Trajectory


async def run_rollout(
    env: StatefulToolEnv,
    policy: Policy,
    task: dict[str, Any],
    example_id: int = 0,
    rollout_index: int = 0,
    max_turns: int | None = None,
    sampling_seed: int | None = None,
    score: bool = True,
) -> Trajectory:
    """Play one rollout (`max_turns`: this rollout's turn cap instead of the env's; `sampling_seed`: the policy's
    sampling is a function of it (`Policy.open_seeded`); `score=False`: no rubric -- a served request has no reference
    to grade against -- so `rewards` stay empty). Never raises for model or server failures: they land in the
    trajectory -- except `PolicyUnavailable` (the policy cannot answer at all), which stops the run."""
    t_start = time.perf_counter()
    ep = env.episode(task, example_id, rollout_index, max_turns)
    traj: Trajectory | None = None
    error: str | None = None
    close_error: str | None = None
    tokens = None
    generation_s = 0.0
    try:
        async with ep:
            psession = policy.open(env.model_tools(), task) if sampling_seed is None else \
                policy.open_seeded(env.model_tools(), task, sampling_seed)
            try:
                while not ep.done:
                    t0 = time.perf_counter()
                    turn = await psession.act(ep.messages)
                    generation_s += time.perf_counter() - t0
                    await ep.run_turn(turn)
                traj = await ep.finish() if score else ep.trajectory()
            finally:  # the policy's session closes before the env's cleanup
                tokens = psession.token_trace()
                try:
                    await psession.aclose()
                except Exception as exc:  # noqa: BLE001
                    close_error = f"policy session close failed: {exc}"
    except PolicyUnavailable:
        raise  # the policy cannot answer at all: the run stops (iter_rollouts re-raises it) instead of failing all
    except (ToolCallError, HiddenCallError, RewardError) as exc:
        error = str(exc)
    except Exception as exc:  # noqa: BLE001 - a bug in a hook or policy fails this rollout, not the run
        error = f"{type(exc).__name__}: {exc}"
    finally:
        if traj is None:
            traj = ep.trajectory()
        traj.info = ep.info()  # after cleanup: what the hooks left in the state
        if tokens is not None:
            traj.tokens = tokens
        traj.error = error or close_error or ep.cleanup_error
        traj.timings = {"generation_s": generation_s, **ep.timings, "total_s": time.perf_counter() - t_start}
    return traj


def rollout_seed(seed: int, example_id: int, rollout_index: int) -> int:
    """The sampling seed of one rollout of a run seeded with `seed`: a function of the three alone, so a run samples
    the same whatever the concurrency, the order rollouts start in, or how often it was resumed."""
    return random.Random(f"toolgym-rollout:{seed}:{example_id}:{rollout_index}").getrandbits(62)


async def run_rollouts(
    env: StatefulToolEnv,
    policy: Policy,
    jobs: Iterable[tuple[int, int, dict[str, Any]]],
    concurrency: int = 8,
    on_done: Callable[[Trajectory], Any] | None = None,
    seed: int | None = None,
) -> list[Trajectory]:
    """Run (example_id, rollout_index, task) jobs with at most `concurrency` in flight; results in job order. With
    `seed`, each rollout's sampling is seeded by `rollout_seed(seed, example_id, rollout_index)`."""
    jobs = list(jobs)
    results: list[Trajectory | None] = [None] * len(jobs)
    async for i, traj in iter_rollouts(env, policy, jobs, concurrency, seed):
        results[i] = traj
        if on_done is not None:
            on_done(traj)
    return [r for r in results if r is not None]


async def iter_rollouts(
    env: StatefulToolEnv, policy: Policy, jobs: list[tuple[int, int, dict[str, Any]]], concurrency: int = 8,
    seed: int | None = None,
) -> AsyncIterator[tuple[int, Trajectory]]:
    """Yield (job index, trajectory) as rollouts finish, at most `concurrency` in flight (`seed`: see
    `run_rollouts`)."""
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    queue: asyncio.Queue[tuple[int, Trajectory | Exception]] = asyncio.Queue()
    sem = asyncio.Semaphore(concurrency)
    # The policy is told how many rollouts are in flight or about to be (a lock-step policy waits for each of them):
    # min(concurrency, jobs not yet ended). An ending rollout hands its count to the job that takes its place.
    announced = min(concurrency, len(jobs))
    ended = 0

    def end_one() -> None:
        nonlocal announced, ended
        ended += 1
        keep = min(concurrency, len(jobs) - ended)
        policy.expect_rollouts(keep - announced)
        announced = keep

    async def one(i: int, ex: int, r: int, task: dict[str, Any]) -> None:
        async with sem:
            try:
                sampling = None if seed is None else rollout_seed(seed, ex, r)
                item: Trajectory | Exception = await run_rollout(env, policy, task, ex, r, sampling_seed=sampling)
            except Exception as exc:  # noqa: BLE001 - PolicyUnavailable (or an engine bug): stop the run with it
                item = exc
            end_one()
            await queue.put((i, item))

    policy.expect_rollouts(announced)
    tasks = [asyncio.create_task(one(i, ex, r, t)) for i, (ex, r, t) in enumerate(jobs)]
    try:
        for _ in range(len(tasks)):
            i, item = await queue.get()
            if isinstance(item, Exception):
                raise item
            yield i, item
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if announced:  # rollouts cancelled before they ended
            policy.expect_rollouts(-announced)
            announced = 0
