"""Batching for the local backends: sampling params, generation requests/outputs, and the async queues that gather
the `act` calls of many concurrent rollouts into batches.

A backend implements one blocking method, `generate_batch(requests) -> outputs` (token ids in, sampled token ids
and logprobs out). `BatchQueue` gathers concurrent `act` calls of many rollouts into one such call: the first
request waits `max_wait_s` for company, everything queued by then (up to `max_batch`) runs together in a worker
thread, and requests arriving meanwhile form the next batch. Batch sizes are recorded (`stats()`). A backend that
can also add rows to a running decode (`continuous_stepper()`, the transformers engine's
`toolgym.policies.continuous.ContinuousBatcher`) gets `ContinuousQueue` instead: requests join the running batch
at the next token and each returns as soon as its row ends.

The policy on top (`toolgym.policies.model.ModelPolicy`) owns a queue and submits one `GenRequest` per turn.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SamplingParams:
    """Per-request sampling. `temperature <= 0` is greedy. `seed` makes one request reproducible.

    Logprobs are of the sampled token under softmax(logits / temperature) before top-p/top-k truncation (raw
    logits when greedy) -- what a trainer recomputes with the same temperature.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 256
    seed: int | None = None


@dataclass
class GenRequest:
    """`allowed`: optional complete outputs (token-id sequences) the sample must be one of -- constrained decoding;
    the model still chooses among them, and logprobs stay those of the unconstrained model. `constraint`: an object
    whose `allowed(tokens_so_far)` gives the token ids allowed next, or None where the output is free (strict tool
    calls, `toolgym.policies.strict`); logprobs likewise unconstrained."""

    prompt_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    allowed: list[list[int]] | None = None
    constraint: Any = None

    @property
    def constrained(self) -> bool:
        """Whether some tokens may be masked (greedy fast paths skip rows that are)."""
        return bool(self.allowed) or self.constraint is not None


@dataclass
class GenOutput:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (end-of-turn token) or "length"


LOCKSTEP_RECHECK_S = 0.05
"""A lock-step gather waits for `notify` / a request, and looks again after this long in any case (a `live()` that
changed without a `notify` costs at most this, never a hang)."""


class BatchQueue:
    """Gathers concurrent requests into batches for a blocking `run_batch(list[GenRequest]) -> list[GenOutput]`.

    After the first request it waits `max_wait_s`; then, if `live()` says how many sessions (rollouts) are alive and
    fewer requests than that are queued, it keeps gathering until each live session has asked or `gather_s` has
    passed since the first request. Multi-turn rollouts come back from their tool calls a few milliseconds apart;
    without the wait each batch would hold whoever happened to be back (measured on tic-tac-toe games: 3.3 rows per
    batch instead of 6.8), and the others would wait for that whole batch before the next one starts.

    `lockstep=True` makes what runs together a function of the requests alone, not of when they arrive: a batch
    starts only once every live session has asked (no time bound), and it holds the first `max_batch` of them in
    `request_key` order (the rest wait, in order, for the next). The backend then computes each row in the same
    company, so the same requests give the same numbers to the last bit -- what a seeded, bit-reproducible run
    needs. `live()` must then count every session that will still ask or end (`ModelPolicy.expect_rollouts`)."""

    def __init__(self, run_batch: Any, max_batch: int = 64, max_wait_s: float = 0.005,
                 live: Any = None, gather_s: float = 0.0, lockstep: bool = False):
        self.run_batch = run_batch
        self.max_batch = max(1, int(max_batch))
        self.max_wait_s = max_wait_s
        self.live = live
        self.gather_s = max(0.0, float(gather_s))
        self.lockstep = bool(lockstep)
        if self.lockstep and live is None:
            raise ValueError("lockstep batching needs live(): the number of sessions that will still ask or end")
        self._held: list[tuple[GenRequest, asyncio.Future]] = []  # lock-step: gathered, sorted, not yet run
        self._wake = asyncio.Event()  # lock-step: set by a request or a change of live() (`notify`)
        self.batch_sizes: list[int] = []
        self.batch_times: list[float] = []
        self.generated_tokens = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue | None = None
        self._worker: asyncio.Task | None = None

    def _ensure(self) -> asyncio.Queue:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._worker is None or self._worker.done():
            self._loop = loop
            self._queue = asyncio.Queue()
            self._held = []
            self._wake = asyncio.Event()  # (an Event binds to the loop it first waits in)
            self._worker = loop.create_task(self._work(self._queue))
        assert self._queue is not None
        return self._queue

    async def submit(self, req: GenRequest) -> GenOutput:
        fut = asyncio.get_running_loop().create_future()
        self._ensure().put_nowait((req, fut))
        self._wake.set()
        return await fut

    def notify(self) -> None:
        """`live()` changed (a rollout announced, a session opened or closed): a lock-step gather waiting for every
        live session looks again. Without it the gather still looks every `LOCKSTEP_RECHECK_S`."""
        self._wake.set()

    async def _gather(self, q: asyncio.Queue) -> list[tuple[GenRequest, asyncio.Future]]:
        """Wait for a first request, then for company (see the class docstring); the batch, cancelled ones dropped."""
        if self.lockstep:
            return await self._gather_lockstep(q)
        batch = [await q.get()]
        t_first = time.perf_counter()
        if self.max_wait_s > 0:
            await asyncio.sleep(self.max_wait_s)
        else:
            await asyncio.sleep(0)
        if self.live is not None and self.gather_s > 0:  # lock-step turns: wait (bounded) for every live session
            want = min(self.max_batch, int(self.live()))
            while len(batch) + q.qsize() < want and time.perf_counter() - t_first < self.gather_s:
                await asyncio.sleep(0.001)
                want = min(self.max_batch, int(self.live()))
        while not q.empty() and len(batch) < self.max_batch:
            batch.append(q.get_nowait())
        return [(r, f) for r, f in batch if not f.cancelled()]

    async def _gather_lockstep(self, q: asyncio.Queue) -> list[tuple[GenRequest, asyncio.Future]]:
        """Lock-step: once every live session has asked (those held from the last round included), the first
        `max_batch` requests in `request_key` order."""
        while True:
            if not self._held:
                self._held.append(await q.get())
            while len(self._held) + q.qsize() < int(self.live()):
                self._wake.clear()  # (no await between the count and the clear: nothing can be missed)
                try:
                    await asyncio.wait_for(self._wake.wait(), LOCKSTEP_RECHECK_S)
                except TimeoutError:
                    pass
            while not q.empty():
                self._held.append(q.get_nowait())
            self._held = sorted((x for x in self._held if not x[1].cancelled()), key=lambda x: request_key(x[0]))
            batch, self._held = self._held[:self.max_batch], self._held[self.max_batch:]
            if batch:
                return batch

    async def _work(self, q: asyncio.Queue) -> None:
        while True:
            batch = await self._gather(q)
            if not batch:
                continue
            await self._run_static(batch)

    async def _run_static(self, batch: list[tuple[GenRequest, asyncio.Future]]) -> None:
        t0 = time.perf_counter()
        try:
            outs = await asyncio.to_thread(self.run_batch, [r for r, _ in batch])
        except Exception as e:  # hand the error to every waiting rollout
            for _, f in batch:
                if not f.done():
                    f.set_exception(e)
            return
        self.batch_times.append(time.perf_counter() - t0)
        self.batch_sizes.append(len(batch))
        self.generated_tokens += sum(len(o.token_ids) for o in outs)
        for (_, f), o in zip(batch, outs):
            if not f.done():
                f.set_result(o)

    def stats(self) -> dict[str, float]:
        n = len(self.batch_sizes)
        return {
            "batches": n,
            "requests": sum(self.batch_sizes),
            "mean_batch_size": (sum(self.batch_sizes) / n) if n else 0.0,
            "max_batch_size": max(self.batch_sizes, default=0),
            "generated_tokens": self.generated_tokens,
            "generate_s": sum(self.batch_times),
        }

    def reset_stats(self) -> None:
        self.batch_sizes.clear()
        self.batch_times.clear()
        self.generated_tokens = 0

    async def aclose(self) -> None:
        if self._worker is not None and not self._worker.done():
            self._worker.cancel()
            try:
                await self._worker
            except (asyncio.CancelledError, RuntimeError):
                pass
        self._worker = None


def request_key(req: GenRequest) -> tuple[int, int, tuple[int, ...]]:
    """The order lock-step batching puts requests in: by sampling seed, then prompt (identical requests of
    unseeded greedy rollouts compute the same, so their order cannot change a result)."""
    seed = req.params.seed
    return (0 if seed is None else 1, seed or 0, tuple(req.prompt_ids))


class ContinuousUnsupported(RuntimeError):
    """The backend cannot add rows to a running batch (e.g. a sliding-window or convolution KV cache)."""


class ContinuousQueue(BatchQueue):
    """Continuous batching: rows join and leave a running decode batch at token boundaries.

    `stepper.run_until(admit, drop, should_yield)` (run in a worker thread) prefills the admitted `(tag, request)`
    rows into the running batch, forgets the dropped tags, and decodes one token per step for every row until a row
    finishes or `should_yield()` says requests are waiting; it returns the finished `(tag, GenOutput)` pairs and
    `{"steps": decode steps, "rows": rows summed over them}`. A finished row's rollout resumes at once (its tool
    call runs while the others decode) and its next turn joins the batch at the next token boundary, instead of
    waiting for the longest row of a static batch: on multi-turn games the static batch spends most decode steps
    on a few long rows. When nothing is running the first batch is gathered as `BatchQueue` does. With `lockstep`
    no row joins a running batch: the next is gathered (lock-step, see `BatchQueue`) once the last row has ended.
    A backend that raises `ContinuousUnsupported` (before touching its state) falls back to static batches for good."""

    def __init__(self, stepper: Any, run_batch: Any, **kwargs: Any):
        super().__init__(run_batch, **kwargs)
        self.stepper = stepper
        self.continuous = True
        self.reset_stats()  # the decode / prefill counters

    async def _work(self, q: asyncio.Queue) -> None:
        await asyncio.to_thread(self.stepper.reset)  # rows of a worker that was cancelled mid-batch
        running: dict[int, asyncio.Future] = {}
        tags = itertools.count()
        cap = self.max_batch

        def should_yield() -> bool:  # read from the worker thread: asyncio.Queue.qsize is a len()
            return not self.lockstep and q.qsize() > 0 and self.stepper.running() < cap

        while True:
            if not self.continuous:
                batch = await self._gather(q)
                if batch:
                    await self._run_static(batch)
                continue
            if running and self.lockstep:  # rows join only when the batch has run out (see `BatchQueue`)
                batch = []
            elif running:
                batch = []
                while not q.empty() and len(running) + len(batch) < cap:
                    batch.append(q.get_nowait())
                batch = [(r, f) for r, f in batch if not f.cancelled()]
            else:
                batch = await self._gather(q)
                if not batch:
                    continue
            admit = [(next(tags), r, f) for r, f in batch]
            drop = [t for t, f in running.items() if f.cancelled()]  # timed-out rollouts stop costing compute
            for t in drop:
                running.pop(t)
            for t, _, f in admit:
                running[t] = f
            t0 = time.perf_counter()
            try:
                done, st = await asyncio.to_thread(self.stepper.run_until, [(t, r) for t, r, _ in admit], drop,
                                                   should_yield)
            except ContinuousUnsupported:
                self.continuous = False
                for t, _, _ in admit:
                    running.pop(t)
                await self._run_static([(r, f) for _, r, f in admit])
                continue
            except Exception as e:  # hand the error to every rollout in the batch; the next batch starts afresh
                for f in running.values():
                    if not f.done():
                        f.set_exception(e)
                running.clear()
                await asyncio.to_thread(self.stepper.reset)
                continue
            self.batch_times.append(time.perf_counter() - t0)
            if admit:
                self.batch_sizes.append(len(admit))
            self.decode_steps += st["steps"]
            self.decode_rows += st["rows"]
            self.prefill_s += st.get("prefill_s", 0.0)
            self.prefill_tokens += st.get("prefill_tokens", 0)
            self.reused_tokens += st.get("reused_tokens", 0)
            self.drafted_tokens += st.get("drafted_tokens", 0)
            self.accepted_tokens += st.get("accepted_tokens", 0)
            for t, o in done:
                f = running.pop(t, None)
                self.generated_tokens += len(o.token_ids)
                if f is not None and not f.done():
                    f.set_result(o)

    def stats(self) -> dict[str, float]:
        """`BatchQueue.stats` (batches = admissions, each one prefill) plus decode steps and mean rows per step."""
        st = super().stats()
        st["decode_steps"] = self.decode_steps
        st["mean_decode_rows"] = self.decode_rows / self.decode_steps if self.decode_steps else 0.0
        st["prefill_s"] = self.prefill_s
        st["prefill_tokens"] = self.prefill_tokens
        st["reused_tokens"] = self.reused_tokens  # prompt tokens whose KV came from the conversation's last turn
        st["drafted_tokens"] = self.drafted_tokens  # speculative steps: tokens drafted, and those kept
        st["accepted_tokens"] = self.accepted_tokens
        return st

    def reset_stats(self) -> None:
        super().reset_stats()
        self.decode_steps = self.decode_rows = 0
        self.prefill_s = 0.0
        self.prefill_tokens = self.reused_tokens = 0
        self.drafted_tokens = self.accepted_tokens = 0
