"""`ModelPolicy`: the base of the token-level backends (`hf:`, `vllm:`, `vllm-server:`), and its `ModelSession`.

A `ModelPolicy` renders prompts with the tokenizer's chat template, tracks the exact tokens of each rollout
(`toolgym.models.chat.TokenTracker`), queues one generation per turn (`toolgym.policies.batching`), parses tool calls
with the chosen `ToolFormat` (`toolgym.models.formats`), and returns `AssistantTurn`s with `token_ids`, `logprobs`,
`finish_reason`. A backend subclass sets the renderer and implements `generate_batch` (and, for continuous
batching, `continuous_stepper`).

Two hooks for a trainer: `weights_changed()` (the model's weights were modified in place: drop whatever was
computed with the old ones; the transformers engine's parked KV) and `reset_sessions()` (number the next sessions
from 0 again, so seeded sampling is a function of `(seed, session, turn)` and a resumed run samples the same).
"""

from __future__ import annotations

import itertools
import random
import time
from dataclasses import replace
from typing import Any

from toolgym.models.chat import ChatRenderer, TokenTracker, check_prefix_preservation
from toolgym.models.formats import ToolFormat, detect_format, get_format
from toolgym.policies.base import Policy, PolicySession
from toolgym.policies.batching import BatchQueue, ContinuousQueue, GenOutput, GenRequest, SamplingParams
from toolgym.types import AssistantTurn, TokenTrace


class ModelPolicy(Policy):
    """Base of the local token-level backends (subclasses pass the renderer and implement `generate_batch`).

    Args:
        temperature: Sampling temperature; <= 0 is greedy.
        top_p: Nucleus sampling mass (1: off).
        top_k: Sample among the k most likely tokens (0: off).
        max_tokens: Most tokens sampled per turn.
        seed: Seeds each turn's sampling from (seed, session, turn); None: unseeded.
        tool_format: How the model writes tool calls: "auto" (from the chat template), "hermes", "pythonic", "llama3".
        check_template: Check that the chat template is prefix-preserving: "strict", "tools" or False.
        max_batch: Most requests in one batch.
        batch_wait_s: How long a first request waits for company.
        batch_gather_s: With several rollouts in flight, how long to wait for all of them to ask before a batch.
        allowed_outputs: `fn(messages) -> texts` the turn must be one of (constrained decoding; `hf:` only).
        strict_calls: Decode each tool call under its tool's JSON schema (`toolgym.policies.strict`; `hf:` only,
            `hermes` format): calls always parse, name a tool of the session and hold its required arguments.
        batching: "static" (one batch at a time) or "continuous" (rows join and leave a running batch).
        lockstep: Batch in lock-step (`toolgym.policies.batching.BatchQueue`): a batch starts once every rollout in
            flight has asked, and rows join none already running, so which rows compute together -- and so every
            logit to the last bit -- depends on the rollouts alone, not on timing. Seeded runs then repeat exactly
            on the same machine and thread count; a turn waits for the slowest rollout's tool call.
    """

    name = "model"

    def __init__(
        self,
        renderer: ChatRenderer,
        /,
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
        strict_calls: bool = False,
        batching: str = "static",
        lockstep: bool = False,
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
        self.strict = None
        if strict_calls:
            from toolgym.policies.strict import StrictCalls

            self.strict = StrictCalls(renderer.tok, self.tool_format, renderer.stop_ids[0])
        self.live_sessions = 0  # sessions opened and not yet closed (rollouts in flight)
        self.expected = 0  # rollouts announced (`expect_rollouts`) and not yet ended
        if batching not in ("static", "continuous"):
            raise ValueError(f"batching must be 'static' or 'continuous', not {batching!r}")
        stepper = self.continuous_stepper() if batching == "continuous" else None
        qargs = {"max_batch": max_batch, "max_wait_s": batch_wait_s, "live": self._live, "gather_s": batch_gather_s,
                 "lockstep": lockstep}
        self.queue: BatchQueue = (ContinuousQueue(stepper, self.generate_batch, **qargs) if stepper is not None
                                  else BatchQueue(self.generate_batch, **qargs))
        self._sessions = itertools.count()

    def _live(self) -> int:
        """Rollouts that will still ask or end: those announced, or (more) sessions opened without announcing."""
        return max(self.expected, self.live_sessions)

    def expect_rollouts(self, n: int) -> None:
        self.expected = max(0, self.expected + int(n))
        self.queue.notify()

    # -- trainer hooks -------------------------------------------------------------------------------------------
    def weights_changed(self) -> None:
        """The model's weights were modified in place (an optimizer step, `load_state_dict`): drop whatever was
        computed with the old ones. Nothing to drop here; the transformers engine drops its parked KV. Policies
        holding their own copy of the weights (vLLM) refresh their caches when they load new ones."""

    def reset_sessions(self) -> None:
        """Number the next sessions from 0 again. With `seed` set, a session's sampling is a function of
        (seed, session number, turn): a trainer that sets `seed` for a step and calls this samples the same
        rollouts when the step is run again (a resumed run)."""
        self._sessions = itertools.count()

    # -- backend hook --------------------------------------------------------------------------------------------
    def generate_batch(self, requests: list[GenRequest]) -> list[GenOutput]:  # pragma: no cover - abstract
        raise NotImplementedError

    def continuous_stepper(self) -> Any:
        """The backend's `run_until` stepper for `ContinuousQueue`, or None (static batches only)."""
        return None

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams | None = None, allowed: list[list[int]] | None = None,
        constraint: Any = None,
    ) -> GenOutput:
        """Queue one generation (batched with concurrent ones)."""
        return await self.queue.submit(GenRequest(list(prompt_ids), params or self.sampling, allowed, constraint))

    def encode_choices(self, texts: list[str]) -> list[list[int]]:
        """Token sequences for constrained outputs: each text canonically tokenized + the end-of-turn token."""
        stop = self.renderer.stop_ids[:1]
        return [self.renderer.encode(t) + stop for t in texts]

    # -- Policy ----------------------------------------------------------------------------------------------------
    def open(self, tools: list[dict[str, Any]], task: dict[str, Any]) -> PolicySession:
        self.live_sessions += 1
        self.queue.notify()
        return ModelSession(self, tools, next(self._sessions))

    def open_seeded(self, tools: list[dict[str, Any]], task: dict[str, Any], seed: int) -> PolicySession:
        """A session whose turns are sampled with seeds drawn from `(seed, turn)` (not from the session's number)."""
        self.live_sessions += 1
        self.queue.notify()
        return ModelSession(self, tools, next(self._sessions), seed=seed)

    @property
    def stats(self) -> dict[str, float]:
        """Batching statistics (a dict, like the HTTP policy's `stats`)."""
        return self.queue.stats()

    async def aclose(self) -> None:
        await self.queue.aclose()


class ModelSession(PolicySession):
    def __init__(self, policy: ModelPolicy, tools: list[dict[str, Any]], index: int, seed: int | None = None):
        self.policy = policy
        self.tools = tools
        self.tracker = TokenTracker(policy.renderer, tools)
        self.index = index
        self.seed = seed  # a rollout seed (`open_seeded`): turn seeds come from (seed, turn) instead
        self.turns = 0
        self.generate_s = 0.0
        self.closed = False

    async def aclose(self) -> None:
        if not self.closed:  # the policy's batch gathering stops waiting for this session
            self.closed = True
            self.policy.live_sessions -= 1
            self.policy.queue.notify()

    def _params(self) -> SamplingParams:
        p = self.policy.sampling
        if self.seed is not None:
            return replace(p, seed=random.Random(f"rollout:{self.seed}:{self.turns}").getrandbits(62))
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
        constraint = self.policy.strict.constraint(self.tools) if self.policy.strict is not None else None
        t0 = time.perf_counter()
        out = await self.policy.generate(prompt, self._params(), allowed, constraint)
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
