"""Lock-step batching (`lockstep=True`): which requests compute together is a function of the requests alone, not of
when they arrive -- a batch starts only once every live session has asked, in `request_key` order -- so a seeded
run repeats to the last bit. The queue tests use a stand-in model function that records its batches; the engine
test runs the real transformers engine (a tiny model built offline) with continuous batching, and the run-level
test counts what `iter_rollouts` announces through `expect_rollouts` on real tic-tac-toe games over MCP."""

from __future__ import annotations

import asyncio
import random

import pytest

from tg_testutil import ROOT, batch_recorder
from toolgym.policies.batching import BatchQueue, GenRequest, SamplingParams, request_key


LATE_START = ROOT / "examples" / "tictactoe" / "late_start"


_recorder = batch_recorder


async def _sessions(q: BatchQueue, ids: list[int], turns: int, rng: random.Random, live: list[int]) -> list[list[int]]:
    """Each id a session asking `turns` times, a random pause (its 'tool call') before each ask; `live[0]` counts
    the sessions not yet ended, as `ModelPolicy.expect_rollouts` does."""

    async def one(i: int) -> list[int]:
        got = []
        for t in range(turns):
            await asyncio.sleep(rng.random() * 0.02)
            out = await q.submit(GenRequest([i * 100 + t], SamplingParams()))
            got.append(out.token_ids[0])
        live[0] -= 1
        return got

    return await asyncio.wait_for(asyncio.gather(*(one(i) for i in ids)), timeout=30)


def test_lockstep_batches_do_not_depend_on_arrival_times() -> None:
    """Four sessions, three turns each, arriving in two different random orders and spacings: the same batches, each
    every live session's request in key order; each session gets its own answers back."""
    seen = []
    for seed in (1, 2):
        batches, run = _recorder()
        live = [4]
        q = BatchQueue(run, max_wait_s=0.0, live=lambda live=live: live[0], gather_s=0.0, lockstep=True)
        outs = asyncio.run(_sessions(q, [3, 1, 2, 0], 3, random.Random(seed), live))
        assert outs == [[300, 301, 302], [100, 101, 102], [200, 201, 202], [0, 1, 2]]
        seen.append(batches)
    assert seen[0] == seen[1] == [[0, 100, 200, 300], [1, 101, 201, 301], [2, 102, 202, 302]]


def test_without_lockstep_arrival_times_decide_the_batches() -> None:
    """The contrast (the reason for lock-step): the same sessions without it batch whoever is back."""
    batches, run = _recorder()
    live = [4]
    q = BatchQueue(run, max_wait_s=0.0, live=lambda: live[0], gather_s=0.0)
    asyncio.run(_sessions(q, [3, 1, 2, 0], 3, random.Random(1), live))
    assert len(batches) > 3 and sorted(sum(batches, [])) == sorted(i * 100 + t for i in range(4) for t in range(3))


def test_lockstep_splits_a_round_larger_than_max_batch_in_key_order() -> None:
    batches, run = _recorder()
    live = [5]
    q = BatchQueue(run, max_batch=2, max_wait_s=0.0, live=lambda: live[0], lockstep=True)
    asyncio.run(_sessions(q, [4, 2, 0, 3, 1], 1, random.Random(3), live))
    assert batches == [[0, 100], [200, 300], [400]]


def test_request_key_orders_by_seed_then_prompt() -> None:
    a = GenRequest([5, 1], SamplingParams(seed=7))
    b = GenRequest([1, 9], SamplingParams(seed=9))
    c = GenRequest([2], SamplingParams(seed=None))
    d = GenRequest([1], SamplingParams(seed=None))
    assert sorted([a, b, c, d], key=request_key) == [d, c, a, b]


def test_lockstep_gather_sleeps_until_notified() -> None:
    """A lock-step gather waiting for a session that has not asked sleeps until a request or `notify` (the policy
    calls it when a rollout is announced or a session closes) instead of polling: over 0.3 s it reads `live()` a
    handful of times (a re-check every LOCKSTEP_RECHECK_S; a 0.5 ms poll read it hundreds of times). A `live()` that
    drops without a notify is still seen at the next re-check, never a hang."""
    batches, run = _recorder()
    live, reads = [2], [0]

    def count() -> int:
        reads[0] += 1
        return live[0]

    q = BatchQueue(run, max_wait_s=0.0, live=count, lockstep=True)

    async def main() -> None:
        first = asyncio.ensure_future(q.submit(GenRequest([7], SamplingParams())))
        await asyncio.sleep(0.3)
        assert not first.done() and reads[0] < 30
        live[0] = 1
        q.notify()
        assert (await asyncio.wait_for(first, 5)).token_ids == [7]
        second = asyncio.ensure_future(q.submit(GenRequest([8], SamplingParams())))
        live[0] = 2  # another session announced ...
        await asyncio.sleep(0.1)
        assert not second.done()
        live[0] = 1  # ... and ended without a notify: the re-check sees it
        assert (await asyncio.wait_for(second, 5)).token_ids == [8]
        await q.aclose()

    asyncio.run(main())
    assert batches == [[7], [8]]


def test_lockstep_needs_a_live_count() -> None:
    with pytest.raises(ValueError, match="live"):
        BatchQueue(lambda r: r, lockstep=True)


def test_engine_logprobs_repeat_bit_for_bit_under_lockstep() -> None:
    """The real engine with continuous batching (and its drafter) on the committed 0.9M tic-tac-toe start (the tiny
    test model's rows compute the same in any company; this one's do not: without lock-step the same run differed
    by up to 1.2e-5 in a log-probability, measured), twelve seeded conversations of four turns with random pauses
    between turns: two runs with different pauses give the same tokens, the same log-probabilities to the last bit,
    and the same batches."""
    from toolgym.policies.hf import HFPolicy

    def play(pause_seed: int) -> tuple[list[list[float]], list[int]]:
        policy = HFPolicy(str(LATE_START), max_tokens=12, temperature=1.0, lockstep=True)
        rng = random.Random(pause_seed)

        async def one(i: int) -> list[float]:
            prompt = [10 + i, 20, 30 + i] * 5
            got: list[float] = []
            for t in range(4):
                await asyncio.sleep(rng.random() * 0.01)
                out = await policy.generate(prompt, SamplingParams(temperature=1.0, max_tokens=12, seed=10 * i + t))
                got += out.logprobs
                prompt = prompt + out.token_ids + [40, 50]
            policy.expect_rollouts(-1)
            return got

        async def main() -> list[list[float]]:
            policy.expect_rollouts(12)
            try:
                return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(12))), timeout=120)
            finally:
                await policy.aclose()

        lps = asyncio.run(main())
        return lps, list(policy.queue.batch_sizes)

    (a, sizes_a), (b, sizes_b) = play(1), play(2)
    assert a == b  # exact float equality, every token
    assert sizes_a == sizes_b == [12, 12, 12, 12]
    assert all(len(x) > 0 for x in a)


def test_iter_rollouts_announces_its_rollouts(tiny_dir) -> None:  # type: ignore[no-untyped-def]
    """Five tic-tac-toe games at concurrency 2 through the in-process MCP server: the policy is told of 2 rollouts
    at the start, an ending rollout hands its count on while jobs remain, and the count is back at 0 when the run
    ends; at no point does it fall below the games still in flight."""
    from toolgym_tictactoe import TicTacToeEnv

    from toolgym.policies.hf import HFPolicy
    from toolgym.rollout import run_rollouts

    env = TicTacToeEnv(transport="inprocess", max_turns=2)
    policy = HFPolicy(str(tiny_dir), max_tokens=4, temperature=0.0, lockstep=True)
    deltas: list[int] = []
    inner = policy.expect_rollouts

    def spy(n: int) -> None:
        deltas.append(n)
        inner(n)
        assert policy.expected >= policy.live_sessions

    policy.expect_rollouts = spy  # type: ignore[method-assign]
    tasks = env.build_dataset(5, seed=0)

    async def main() -> int:
        async with env:
            trajs = await run_rollouts(env, policy, [(i, 0, t) for i, t in enumerate(tasks)], concurrency=2, seed=3)
        await policy.aclose()
        return len(trajs)

    assert asyncio.run(main()) == 5
    assert deltas[0] == 2 and sum(deltas) == 0 and policy.expected == 0
    assert deltas[1:] == [0, 0, 0, -1, -1]
