"""What the local backends share: sampling params, the async batching queue, and the token-exact policy session.

A backend implements one blocking method, `generate_batch(requests) -> outputs` (token ids in, sampled token ids
and logprobs out). `BatchQueue` gathers concurrent `act` calls of many rollouts into one such call: the first
request waits `max_wait_s` for company, everything queued by then (up to `max_batch`) runs together in a worker
thread, and requests arriving meanwhile form the next batch. Batch sizes are recorded (`stats()`). A backend that
can also add rows to a running decode (`continuous_stepper()`, the transformers engine) gets `ContinuousQueue`
instead: requests join the running batch at the next token and each returns as soon as its row ends.

`ModelPolicy` (base of `HFPolicy` and `VLLMPolicy`) renders prompts with the tokenizer's chat template, tracks the
exact tokens of each rollout (`toolgym.models.chat.TokenTracker`), parses tool calls with the chosen
`ToolFormat`, and returns `AssistantTurn`s with `token_ids`, `logprobs`, `finish_reason`.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from dataclasses import dataclass, field, replace
from typing import Any

from toolgym.models.chat import ChatRenderer, TokenTracker, check_prefix_preservation
from toolgym.models.formats import ToolFormat, detect_format, get_format
from toolgym.policies.base import Policy, PolicySession
from toolgym.types import AssistantTurn, TokenTrace


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
    the model still chooses among them, and logprobs stay those of the unconstrained model."""

    prompt_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    allowed: list[list[int]] | None = None


@dataclass
class GenOutput:
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (end-of-turn token) or "length"


class BatchQueue:
    """Gathers concurrent requests into batches for a blocking `run_batch(list[GenRequest]) -> list[GenOutput]`.

    After the first request it waits `max_wait_s`; then, if `live()` says how many sessions (rollouts) are alive and
    fewer requests than that are queued, it keeps gathering until each live session has asked or `gather_s` has
    passed since the first request. Multi-turn rollouts come back from their tool calls a few milliseconds apart;
    without the wait each batch would hold whoever happened to be back (measured on tic-tac-toe games: 3.3 rows per
    batch instead of 6.8), and the others would wait for that whole batch before the next one starts."""

    def __init__(self, run_batch: Any, max_batch: int = 64, max_wait_s: float = 0.005,
                 live: Any = None, gather_s: float = 0.0):
        self.run_batch = run_batch
        self.max_batch = max(1, int(max_batch))
        self.max_wait_s = max_wait_s
        self.live = live
        self.gather_s = max(0.0, float(gather_s))
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
            self._worker = loop.create_task(self._work(self._queue))
        assert self._queue is not None
        return self._queue

    async def submit(self, req: GenRequest) -> GenOutput:
        fut = asyncio.get_running_loop().create_future()
        self._ensure().put_nowait((req, fut))
        return await fut

    async def _gather(self, q: asyncio.Queue) -> list[tuple[GenRequest, asyncio.Future]]:
        """Wait for a first request, then for company (see the class docstring); the batch, cancelled ones dropped."""
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
    on a few long rows. When nothing is running the first batch is gathered as `BatchQueue` does. A backend that
    raises `ContinuousUnsupported` (before touching its state) falls back to static batches for good."""

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
            return q.qsize() > 0 and self.stepper.running() < cap

        while True:
            if not self.continuous:
                batch = await self._gather(q)
                if batch:
                    await self._run_static(batch)
                continue
            if running:
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
        return st

    def reset_stats(self) -> None:
        super().reset_stats()
        self.decode_steps = self.decode_rows = 0
        self.prefill_s = 0.0
        self.prefill_tokens = self.reused_tokens = 0


class ModelPolicy(Policy):
    """Base of the local token-level backends (subclasses set `self.renderer` and implement `generate_batch`)."""

    name = "model"

    def __init__(
        self,
        renderer: ChatRenderer,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        max_tokens: int = 256,
        seed: int | None = None,
        tool_format: str | ToolFormat = "auto",
        check_template: str | bool = "strict",
        max_batch: int = 64,
        batch_wait_s: float = 0.005,
        batch_gather_s: float = 0.05,
        allowed_outputs: Any = None,
        batching: str = "static",
    ) -> None:
        self.renderer = renderer
        self.sampling = SamplingParams(temperature=temperature, top_p=top_p, top_k=top_k, max_tokens=max_tokens)
        self.seed = seed
        self.allowed_outputs = allowed_outputs
        if tool_format in (None, "auto"):
            self.tool_format = detect_format(renderer.chat_template)
        else:
            self.tool_format = get_format(tool_format)
        check_prefix_preservation(renderer, check_template)
        self.live_sessions = 0  # sessions opened and not yet closed (rollouts in flight)
        if batching not in ("static", "continuous"):
            raise ValueError(f"batching must be 'static' or 'continuous', not {batching!r}")
        stepper = self.continuous_stepper() if batching == "continuous" else None
        qargs = {"max_batch": max_batch, "max_wait_s": batch_wait_s, "live": lambda: self.live_sessions,
                 "gather_s": batch_gather_s}
        self.queue: BatchQueue = (ContinuousQueue(stepper, self.generate_batch, **qargs) if stepper is not None
                                  else BatchQueue(self.generate_batch, **qargs))
        self._sessions = itertools.count()

    # -- backend hook --------------------------------------------------------------------------------------------
    def generate_batch(self, requests: list[GenRequest]) -> list[GenOutput]:  # pragma: no cover - abstract
        raise NotImplementedError

    def continuous_stepper(self) -> Any:
        """The backend's `run_until` stepper for `ContinuousQueue`, or None (static batches only)."""
        return None

    def weights_changed(self) -> None:
        """The model's weights were modified (a trainer's optimizer step). A minimal no-op stand-in, kept only so
        GRPOTrainer's explicit sync runs on this branch: the hf engine already notices in-place changes itself
        (`_weights_version`); the model-policy branch gives this its real body (dropping the parked KV)."""

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams | None = None, allowed: list[list[int]] | None = None
    ) -> GenOutput:
        """Queue one generation (batched with concurrent ones)."""
        return await self.queue.submit(GenRequest(list(prompt_ids), params or self.sampling, allowed))

    def encode_choices(self, texts: list[str]) -> list[list[int]]:
        """Token sequences for constrained outputs: each text canonically tokenized + the end-of-turn token."""
        stop = self.renderer.stop_ids[:1]
        return [self.renderer.encode(t) + stop for t in texts]

    # -- Policy ----------------------------------------------------------------------------------------------------
    def open(self, tools: list[dict[str, Any]], task: dict[str, Any]) -> PolicySession:
        self.live_sessions += 1
        return ModelSession(self, tools, next(self._sessions))

    @property
    def stats(self) -> dict[str, float]:
        """Batching statistics (a dict, like the HTTP policy's `stats`)."""
        return self.queue.stats()

    async def aclose(self) -> None:
        await self.queue.aclose()


class ModelSession(PolicySession):
    def __init__(self, policy: ModelPolicy, tools: list[dict[str, Any]], index: int):
        self.policy = policy
        self.tracker = TokenTracker(policy.renderer, tools)
        self.index = index
        self.turns = 0
        self.generate_s = 0.0
        self.closed = False

    async def aclose(self) -> None:
        if not self.closed:  # the policy's batch gathering stops waiting for this session
            self.closed = True
            self.policy.live_sessions -= 1

    def _params(self) -> SamplingParams:
        p = self.policy.sampling
        if self.policy.seed is None:
            return p
        seed = random.Random(f"{self.policy.seed}:{self.index}:{self.turns}").getrandbits(62)
        return replace(p, seed=seed)

    async def act(self, messages: list[dict[str, Any]]) -> AssistantTurn:
        prompt = self.tracker.prompt_ids(messages)
        allowed = None
        if self.policy.allowed_outputs is not None:
            texts = self.policy.allowed_outputs(messages)
            allowed = self.policy.encode_choices(texts) if texts else None
        t0 = time.perf_counter()
        out = await self.policy.generate(prompt, self._params(), allowed)
        self.generate_s += time.perf_counter() - t0
        self.turns += 1
        ids = list(out.token_ids)
        body = ids[:-1] if ids and ids[-1] in self.policy.renderer.stop_ids else ids
        text = self.policy.renderer.decode(body)
        turn = self.policy.tool_format.parse(text)
        turn.token_ids = ids
        turn.logprobs = list(out.logprobs)
        turn.finish_reason = out.finish_reason
        turn.usage = {"prompt_tokens": len(prompt), "completion_tokens": len(ids)}
        self.tracker.add_sample(messages, ids, out.logprobs, turn.to_message())
        return turn

    def token_trace(self) -> TokenTrace | None:
        return self.tracker.finish()
