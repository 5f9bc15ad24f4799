"""Continuous batching in the transformers engine (`HFPolicy(batching="continuous")`, the default): rows that join a
running decode batch, leave it when done, and continue a conversation from its parked KV give the same tokens and
log-probs as generating each request alone. Real tiny model (built offline), real tic-tac-toe MCP server."""

from __future__ import annotations

import asyncio
import random

import pytest
import torch

from toolgym.policies.batching import (
    ContinuousQueue,
    ContinuousUnsupported,
    GenOutput,
    GenRequest,
    SamplingParams,
)
from toolgym.policies.hf import HFPolicy
from tg_testutil import legal_moves, run_env


@pytest.fixture()
def policy(tiny_dir):  # type: ignore[no-untyped-def]
    return HFPolicy(str(tiny_dir), temperature=1.0, max_tokens=40, seed=0)


def _prompts(policy: HFPolicy, n: int, seed: int = 0) -> list[list[int]]:
    """Chat prompts of very different lengths (a long one joins a batch of short rows: the batch has to move)."""
    r = policy.renderer
    rng = random.Random(seed)
    return [r.encode(r.render([{"role": "user", "content": "x " * rng.choice([1, 5, 40, 160])}], None, True))
            for _ in range(n)]


async def _staggered(policy: HFPolicy, reqs: list[GenRequest], gaps_s: list[float]) -> list[GenOutput]:
    async def one(req: GenRequest, delay: float) -> GenOutput:
        await asyncio.sleep(delay)
        return await policy.queue.submit(req)

    try:
        return await asyncio.gather(*[one(r, d) for r, d in zip(reqs, gaps_s)])
    finally:
        await policy.aclose()


def _same(a: GenOutput, b: GenOutput) -> None:
    assert a.token_ids == b.token_ids
    assert a.finish_reason == b.finish_reason
    assert max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs)), default=0.0) < 1e-4


def test_rows_joining_a_running_batch_match_solo_generation(policy):  # type: ignore[no-untyped-def]
    rng = random.Random(1)
    prompts = _prompts(policy, 10)
    reqs = [GenRequest(p, SamplingParams(temperature=0.0 if i % 3 == 0 else 1.0, max_tokens=rng.randrange(1, 40),
                                         seed=100 + i)) for i, p in enumerate(prompts)]
    solo = [policy.engine.generate_batch([r])[0] for r in reqs]
    outs = asyncio.run(_staggered(policy, reqs, [0.0, 0.0, 0.0, 0.01, 0.02, 0.02, 0.03, 0.05, 0.06, 0.08]))
    for a, b in zip(solo, outs):
        _same(a, b)
    st = policy.stats
    assert st["requests"] == 10 and st["generated_tokens"] == sum(len(o.token_ids) for o in outs)
    assert st["batches"] >= 2, st  # later requests joined while earlier rows were decoding
    assert st["mean_decode_rows"] > 1.0 and st["decode_steps"] < sum(len(o.token_ids) for o in outs), st
    assert policy.engine.running() == 0


def test_a_continued_conversation_reuses_its_kv_and_matches(policy):  # type: ignore[no-untyped-def]
    p0 = _prompts(policy, 1, seed=3)[0]
    params = SamplingParams(temperature=1.0, max_tokens=30, seed=5)
    tool_result = policy.renderer.encode("\n<tool>ok</tool>\n")

    async def two_turns() -> tuple[GenOutput, GenOutput]:  # one event loop: the policy stays open between turns
        a = await policy.queue.submit(GenRequest(p0, params))
        b = await policy.queue.submit(GenRequest(p0 + a.token_ids + tool_result, params))
        return a, b

    first, second = asyncio.run(two_turns())
    follow = p0 + first.token_ids + tool_result
    st = policy.stats
    assert st["reused_tokens"] == len(p0) + len(first.token_ids) - 1  # the last sampled token was never fed
    assert st["prefill_tokens"] == len(p0) + len(follow) - st["reused_tokens"]
    _same(second, policy.engine.generate_batch([GenRequest(follow, params)])[0])
    # new weights: the parked KV is stale and must not be reused
    third_prompt = follow + second.token_ids + policy.renderer.encode("\n<tool>again</tool>\n")
    with torch.no_grad():
        next(policy.model.parameters()).add_(0.01)
    policy.weights_changed()  # what a trainer calls after changing the weights in place
    policy.queue.reset_stats()
    third = asyncio.run(_staggered(policy, [GenRequest(third_prompt, params)], [0.0]))[0]
    assert policy.stats["reused_tokens"] == 0 and policy.stats["prefill_tokens"] == len(third_prompt)
    assert len(policy.engine.parked) == 0  # closing the policy frees the parked KV
    _same(third, policy.engine.generate_batch([GenRequest(third_prompt, params)])[0])


def test_conversations_continued_together_extend_their_kv_in_one_forward(policy):  # type: ignore[no-untyped-def]
    """Two parked conversations of different lengths continue in the same admission (one batched forward over
    their new tokens, which differ in length too): each matches generating it alone."""
    eng = policy.engine
    p_short, p_long = _prompts(policy, 2, seed=7)[0], _prompts(policy, 1, seed=0)[0] + [9] * 120
    params = [SamplingParams(temperature=1.0, max_tokens=12, seed=s) for s in (1, 2)]

    def run(items: list[tuple[int, GenRequest]]) -> dict[int, GenOutput]:
        done: dict[int, GenOutput] = {}
        out, _ = eng.run_until(items, [], lambda: False)
        done.update(out)
        while eng.running():
            out, _ = eng.run_until([], [], lambda: False)
            done.update(out)
        return done

    first = run([(0, GenRequest(p_short, params[0])), (1, GenRequest(p_long, params[1]))])
    follow = [p_short + first[0].token_ids + [5, 6, 7], p_long + first[1].token_ids + list(range(20, 60))]
    calls = []
    real = eng._extend
    eng._extend = lambda items: calls.append(len(items)) or real(items)  # type: ignore[method-assign]
    second = run([(k, GenRequest(follow[k], params[k])) for k in (0, 1)])
    assert calls == [2]
    for k in (0, 1):
        _same(second[k], eng.generate_batch([GenRequest(follow[k], params[k])])[0])


def test_a_new_conversation_reuses_the_prefix_it_shares_with_a_finished_one(policy):  # type: ignore[no-untyped-def]
    """Two conversations that share a long system prompt but differ after it: the second prefills only from where they
    differ (the finished first one stays parked for others), and matches generating it alone; below `prefix_kv_min`
    shared tokens nothing is reused."""
    r = policy.renderer
    system = {"role": "system", "content": "You answer about tools. " * 12}
    p1, p2 = (r.encode(r.render([system, {"role": "user", "content": q}], None, True)) for q in ("one", "two two"))
    shared = next(i for i, (a, b) in enumerate(zip(p1, p2, strict=False)) if a != b)
    assert shared > policy.engine.parked.prefix_min  # the case under test
    params = SamplingParams(temperature=1.0, max_tokens=20, seed=9)

    async def both() -> tuple[GenOutput, GenOutput]:
        a = await policy.queue.submit(GenRequest(p1, params))
        policy.queue.reset_stats()
        b = await policy.queue.submit(GenRequest(p2, params))
        return a, b

    _, second = asyncio.run(both())
    st = policy.stats
    assert st["reused_tokens"] == shared and st["prefill_tokens"] == len(p2) - shared
    assert len(policy.engine.parked) == 2  # the first row was copied from, not taken
    _same(second, policy.engine.generate_batch([GenRequest(p2, params)])[0])
    short = policy.engine.parked.shared_prefix(p2[: policy.engine.parked.prefix_min])
    assert short is None  # too short a prompt to reuse a prefix of


def test_parked_kv_budget_zero_prefills_every_turn_and_negative_is_refused(tiny_dir):  # type: ignore[no-untyped-def]
    pol = HFPolicy(str(tiny_dir), temperature=1.0, max_tokens=20, seed=0, parked_kv_mb=0)
    p0 = _prompts(pol, 1, seed=4)[0]
    params = SamplingParams(temperature=1.0, max_tokens=20, seed=1)

    async def two_turns() -> None:
        a = await pol.queue.submit(GenRequest(p0, params))
        await pol.queue.submit(GenRequest(p0 + a.token_ids + [5, 6, 7], params))
        await pol.aclose()

    asyncio.run(two_turns())
    assert pol.stats["reused_tokens"] == 0 and pol.stats["requests"] == 2
    with pytest.raises(ValueError, match="parked_kv_mb"):
        HFPolicy(str(tiny_dir), parked_kv_mb=-1)
    with pytest.raises(ValueError, match="prefix_kv_min"):
        HFPolicy(str(tiny_dir), prefix_kv_min=-1)


def test_tictactoe_games_are_identical_under_static_and_continuous_batching(tiny_dir):  # type: ignore[no-untyped-def]
    traces = {}
    for mode in ("static", "continuous"):
        pol = HFPolicy(str(tiny_dir), temperature=1.0, max_tokens=64, seed=2, allowed_outputs=legal_moves,
                       batching=mode)
        _, trajs = run_env(pol, n=6, concurrency=6)
        assert all(t.error is None for t in trajs)
        traces[mode] = trajs
        if mode == "continuous":
            assert pol.stats["reused_tokens"] > pol.stats["prefill_tokens"] / 2, pol.stats  # turns 2+ reuse KV
    for a, b in zip(traces["static"], traces["continuous"]):
        assert a.tokens.ids == b.tokens.ids and a.reward == b.reward
        assert max(abs(x - y) for x, y in zip(a.tokens.logprobs, b.tokens.logprobs)) < 1e-4


def test_a_cancelled_rollout_leaves_the_batch(policy):  # type: ignore[no-untyped-def]
    long_req = GenRequest(_prompts(policy, 1)[0], SamplingParams(temperature=1.0, max_tokens=10_000, seed=1))
    policy.engine.stop_ids = set()  # the long row can only end by its budget
    short = [GenRequest(p, SamplingParams(temperature=1.0, max_tokens=20, seed=2)) for p in _prompts(policy, 3, 9)]

    async def go() -> list[GenOutput]:
        task = asyncio.create_task(policy.queue.submit(long_req))
        await asyncio.sleep(0.05)
        task.cancel()
        try:
            outs = await asyncio.gather(*[policy.queue.submit(r) for r in short])
            left.append(policy.engine.running())  # before closing the policy (which clears the engine)
            return outs
        finally:
            await policy.aclose()

    left: list[int] = []
    outs = asyncio.run(go())
    assert all(len(o.token_ids) == 20 for o in outs)
    assert left == [0]  # the cancelled row was dropped, not decoded to its budget


def test_an_engine_error_fails_the_running_rows_and_the_next_batch_works(policy, monkeypatch):  # type: ignore[no-untyped-def]
    reqs = [GenRequest(p, SamplingParams(temperature=1.0, max_tokens=8, seed=i)) for i, p in
            enumerate(_prompts(policy, 3))]
    real = policy.engine._step
    calls = {"n": 0}

    def flaky() -> list:  # type: ignore[type-arg]
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("out of memory (simulated)")
        return real()

    monkeypatch.setattr(policy.engine, "_step", flaky)

    async def go() -> list:  # type: ignore[type-arg]
        res = await asyncio.gather(*[policy.queue.submit(r) for r in reqs], return_exceptions=True)
        again = await policy.queue.submit(reqs[0])
        await policy.aclose()
        return [*res, again]

    *first, again = asyncio.run(go())
    assert all(isinstance(x, RuntimeError) and "simulated" in str(x) for x in first)
    _same(again, policy.engine.generate_batch([reqs[0]])[0])


def test_unsupported_cache_falls_back_to_static_batches():  # type: ignore[no-untyped-def]
    """A stepper that refuses (as the engine does for sliding-window or convolution caches) is a fake here: the
    real models that refuse are not tiny; the queue's fallback is what is tested."""

    class Refuses:
        def running(self) -> int:
            return 0

        def reset(self) -> None:
            pass

        def run_until(self, admit, drop, should_yield):  # type: ignore[no-untyped-def]
            raise ContinuousUnsupported("sliding-window cache")

    seen: list[int] = []

    def run_batch(reqs: list[GenRequest]) -> list[GenOutput]:
        seen.append(len(reqs))
        return [GenOutput([len(r.prompt_ids)], [0.0], "stop") for r in reqs]

    q = ContinuousQueue(Refuses(), run_batch, max_wait_s=0.001)

    async def go() -> list[GenOutput]:
        try:
            first = await asyncio.gather(*[q.submit(GenRequest([1] * n)) for n in (1, 2, 3)])
            return [*first, await q.submit(GenRequest([1] * 4))]
        finally:
            await q.aclose()

    outs = asyncio.run(go())
    assert [o.token_ids for o in outs] == [[1], [2], [3], [4]]
    assert not q.continuous and sum(seen) == 4


def test_batching_option_is_checked(tiny_dir):  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="batching must be"):
        HFPolicy(str(tiny_dir), batching="dynamic")
    assert type(HFPolicy(str(tiny_dir)).queue) is ContinuousQueue
    assert type(HFPolicy(str(tiny_dir), batching="static").queue).__name__ == "BatchQueue"


def test_load_state_dict_drops_the_parked_kv_and_reset_sessions_renumbers(policy):  # type: ignore[no-untyped-def]
    """The trainer hooks: `load_state_dict` (like any in-place weight change followed by `weights_changed()`) drops
    the parked KV; `reset_sessions()` numbers the next rollouts from 0 again (their seeds derive from it)."""
    p0 = _prompts(policy, 1, seed=3)[0]

    async def one_turn() -> None:
        await policy.queue.submit(GenRequest(p0, SamplingParams(temperature=1.0, max_tokens=10, seed=5)))

    asyncio.run(one_turn())
    assert len(policy.engine.parked) == 1
    policy.load_state_dict(policy.model.state_dict())
    assert len(policy.engine.parked) == 0
    assert [policy.open([], {}).index for _ in range(3)] == [0, 1, 2]
    policy.reset_sessions()
    assert policy.open([], {}).index == 0
