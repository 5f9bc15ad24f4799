"""`BatchQueue` gathering: with the number of live sessions known, requests that arrive a few milliseconds apart
(rollouts coming back from their tool calls) run as one batch; a session that never asks holds a batch back at most
`gather_s`; without a live count the queue batches whoever is there after `max_wait_s`. The model is a stand-in
function that records the batches (the queue is what is tested, not a model)."""

from __future__ import annotations

import asyncio

from tg_testutil import batch_recorder

from toolgym.policies.batching import BatchQueue, GenOutput, GenRequest, SamplingParams


_recorder = batch_recorder


async def _staggered(q: BatchQueue, ids: list[int], gap_s: float) -> list[GenOutput]:
    async def one(i: int, k: int) -> GenOutput:
        await asyncio.sleep(k * gap_s)
        return await q.submit(GenRequest([i], SamplingParams()))

    return await asyncio.wait_for(asyncio.gather(*(one(i, k) for k, i in enumerate(ids))), timeout=20)


def test_requests_of_all_live_sessions_are_gathered_into_one_batch() -> None:
    batches, run = _recorder()
    q = BatchQueue(run, max_wait_s=0.001, live=lambda: 4, gather_s=5.0)
    outs = asyncio.run(_staggered(q, [10, 11, 12, 13], gap_s=0.03))
    assert batches == [[10, 11, 12, 13]]
    assert [o.token_ids for o in outs] == [[10], [11], [12], [13]]  # each request gets its own answer back


def test_without_a_live_count_staggered_requests_run_apart() -> None:
    batches, run = _recorder()
    q = BatchQueue(run, max_wait_s=0.001)
    asyncio.run(_staggered(q, [10, 11, 12, 13], gap_s=0.03))
    assert len(batches) == 4 and sorted(sum(batches, [])) == [10, 11, 12, 13]


def test_a_session_that_never_asks_holds_the_batch_at_most_gather_s() -> None:
    """Five sessions alive, three ask: the batch of three still runs (after the bounded wait) and answers all."""
    batches, run = _recorder()
    q = BatchQueue(run, max_wait_s=0.001, live=lambda: 5, gather_s=0.05)
    outs = asyncio.run(_staggered(q, [1, 2, 3], gap_s=0.0))
    assert batches == [[1, 2, 3]] and len(outs) == 3


def test_live_sessions_count_opened_and_closed_rollouts(tiny_dir) -> None:  # type: ignore[no-untyped-def]
    from toolgym.policies.hf import HFPolicy

    policy = HFPolicy(str(tiny_dir), max_tokens=4, seed=0)
    a, b = policy.open([], {}), policy.open([], {})
    assert policy.live_sessions == 2

    async def close() -> None:
        await a.aclose()
        await a.aclose()  # closing twice counts once
        await b.aclose()

    asyncio.run(close())
    assert policy.live_sessions == 0
