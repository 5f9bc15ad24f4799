"""Plain records shared by every layer: tool calls, assistant turns, token traces, trajectories.

Everything downstream (eval statistics, SFT data, GRPO batches, serving) reads the same `Trajectory`.
Records are dataclasses that round-trip through JSON (`to_dict` / `from_dict`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

MAX_ARG_DEPTH = 32
"""Tool-call arguments nested deeper than this (objects and arrays) are a parse error: no tool schema needs it, and
records of any depth must still be written (600 levels used to crash `dataclasses.asdict` and with it the run)."""
MAX_PARSED_ARG_CHARS = 1_000_000
"""Argument text longer than this is not parsed at all (a parse error), and a record keeps only this much of it."""
KEPT_ARG_CHARS = MAX_PARSED_ARG_CHARS


def nesting_depth(value: Any, stop: int = MAX_ARG_DEPTH) -> int:
    """How deeply objects and arrays nest in a JSON-like value (a scalar: 0, `{}`: 1), counted without recursion;
    counting stops once past `stop` (returns `stop + 1`)."""
    depth, level = 0, [(value, 1)]
    while level:
        v, d = level.pop()
        if isinstance(v, dict):
            children = v.values()
        elif isinstance(v, (list, tuple)):
            children = v
        else:
            continue
        depth = max(depth, d)
        if depth > stop:
            return stop + 1
        level.extend((c, d + 1) for c in children if isinstance(c, (dict, list, tuple)))
    return depth


def argument_error(arguments: Any, raw: str | None = None) -> str | None:
    """Why parsed arguments cannot be kept (too deep, or their text too long), or None."""
    if raw is not None and len(raw) > MAX_PARSED_ARG_CHARS:
        return f"arguments too large to parse ({len(raw):,} characters, limit {MAX_PARSED_ARG_CHARS:,})"
    if isinstance(arguments, (dict, list)) and nesting_depth(arguments) > MAX_ARG_DEPTH:
        return f"arguments nested deeper than {MAX_ARG_DEPTH} levels"
    return None


def kept_text(raw: str | None) -> str | None:
    """Raw argument text as a record keeps it: at most `KEPT_ARG_CHARS` characters."""
    if raw is None or len(raw) <= KEPT_ARG_CHARS:
        return raw
    return raw[:KEPT_ARG_CHARS] + f"... [{len(raw) - KEPT_ARG_CHARS:,} more characters not kept]"


@dataclass
class ToolCall:
    """One tool call as the model wrote it (after parsing its output).

    `arguments` is None when the argument text could not be parsed as a JSON object (or nests deeper than
    `MAX_ARG_DEPTH`); the raw text is kept in `raw_arguments` and the reason in `parse_error`.
    """

    name: str
    arguments: dict[str, Any] | None
    id: str = ""
    raw_arguments: str | None = None
    parse_error: str | None = None

    @property
    def parse_ok(self) -> bool:
        return self.parse_error is None and self.arguments is not None

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI chat `tool_calls` entry for this call (arguments as a JSON string)."""
        if self.arguments is not None:
            args = json.dumps(self.arguments, ensure_ascii=False)
        else:
            args = self.raw_arguments or ""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": args}}


@dataclass
class TokenTrace:
    """Exact tokens of one rollout, for training.

    `ids` is the whole conversation as token ids; `mask[i]` is 1 where token i was sampled by the policy
    (assistant-generated), 0 for prompt/tool/user tokens; `logprobs[i]` is the sampler's log-probability of
    token i (0.0 where mask is 0).
    """

    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    def extend(self, ids: list[int], mask_value: int, logprobs: list[float] | None = None) -> None:
        self.ids.extend(ids)
        self.mask.extend([mask_value] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class AssistantTurn:
    """What a policy returns for one assistant turn.

    `content` is the visible text (without tool-call markup), `reasoning` any `<think>` text, `tool_calls` the
    parsed calls. `parse_ok` is False when the raw output contained tool-call markup that could not be parsed;
    `raw_text` keeps the model's exact output. Token ids and logprobs are filled by local backends.
    """

    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str | None = None
    parse_ok: bool = True
    parse_error: str | None = None
    raw_text: str | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    finish_reason: str | None = None
    usage: dict[str, int] | None = None

    def to_message(self) -> dict[str, Any]:
        """The OpenAI chat message for this turn (what the next policy call sees)."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content or ""}
        if self.reasoning:
            msg["reasoning_content"] = self.reasoning
        if self.tool_calls:
            msg["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        return msg


@dataclass
class CallRecord:
    """One tool call the model made, with its outcome (BFCL-aligned accuracy flags).

    `parse_ok`: arguments parsed; `name_ok`: the tool exists (and is visible to the model); `args_ok`: arguments
    valid against the tool's `inputSchema`; `exec_ok`: the server ran it without error; `call_match`: equal to the
    expected call at this position (None when the task carries no expected calls). `server`: the server the call
    went to, in a multi-server env (None with one server).
    """

    turn: int
    name: str
    arguments: dict[str, Any] | None
    parse_ok: bool
    name_ok: bool
    args_ok: bool
    exec_ok: bool
    call_match: bool | None = None
    error: str | None = None
    result: str = ""
    latency_s: float = 0.0
    server: str | None = None


@dataclass
class Trajectory:
    """The full record of one rollout."""

    example_id: int
    rollout_index: int = 0
    task: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    rewards: dict[str, float] = field(default_factory=dict)
    reward: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    stop_reason: str | None = None
    tokens: TokenTrace | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict. Shallow: the values (messages, arguments, task) are the trajectory's own objects, not
        copies -- `dataclasses.asdict` copied them recursively and raised RecursionError on arguments nested ~600
        deep, which ended the whole run. Serialize it; do not mutate it."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["calls"] = [{f.name: getattr(c, f.name) for f in dataclasses.fields(c)} for c in self.calls]
        if self.tokens is not None:
            out["tokens"] = {f.name: getattr(self.tokens, f.name) for f in dataclasses.fields(self.tokens)}
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        d = dict(d)
        d["calls"] = [CallRecord(**c) for c in d.get("calls", [])]
        tok = d.get("tokens")
        d["tokens"] = TokenTrace(**tok) if tok else None
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})
