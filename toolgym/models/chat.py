"""Chat-template rendering for token-exact multi-turn trajectories, and the template prefix-preservation check.

How a rollout's tokens are built (`TokenTracker`):

1. the first prompt is the chat template rendered with `tools` and `add_generation_prompt=True`, tokenized;
2. each assistant turn's **sampled tokens are appended verbatim** (mask 1, with their logprobs);
3. the template's end-of-turn text the model did not sample (e.g. the `\\n` after `<|im_end|>`, or the whole
   `<|im_end|>\\n` when generation stopped at `max_tokens`) is appended with mask 0;
4. each batch of new tool/user messages is appended as the template-rendered **delta**: render the conversation
   with and without the new messages (the longer one with `add_generation_prompt=True`), tokenize the difference.

Step 4 only works when the template is prefix-preserving: rendering a conversation and then rendering it with more
messages must extend the first text. Some templates are not (Qwen3's drops the `<think>` of assistant turns before
the last user message). `check_prefix_preservation` probes the template at start-up and raises
`TemplateNotPrefixPreservingError` naming the fix; the tracker re-checks on every turn and raises the same error.

`load_chat_template` reads the `chat_template` option of the model policies (inline text or a .jinja path).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from toolgym.types import TokenTrace


def load_chat_template(value: str | None) -> str | None:
    """A template given inline or as a path to a .jinja file."""
    if value and "{" not in value and Path(value).is_file():
        return Path(value).read_text(encoding="utf-8")
    return value


class TemplateNotPrefixPreservingError(RuntimeError):
    """The chat template re-renders earlier turns differently once later turns are added."""


FIX_HINT = (
    "Token-exact multi-turn trajectories need a prefix-preserving chat template. Fixes: pass a template that "
    "renders every earlier turn unchanged (option chat_template=PATH_OR_TEXT; for Qwen3 remove the "
    "`loop.index0 > ns.last_query_index` condition so `<think>` is kept in all assistant turns, or use "
    "toolgym.models.tiny.CHAT_TEMPLATE as a model), keep one user message per rollout (check_template='tools'), "
    "or switch the check off (check_template=False) and accept re-tokenised, not sampled, tokens for earlier turns."
)

END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "<end_of_turn>", "<|end|>", "</s>")


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copy OpenAI-format messages into what HF templates expect (tool-call arguments as dicts, content not None)."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("content") is None:
            m["content"] = ""
        if m.get("tool_calls"):
            calls = []
            for tc in m["tool_calls"]:
                tc = copy.deepcopy(tc)
                fn = tc.get("function", tc)
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        parsed = json.loads(args) if args.strip() else {}
                        fn["arguments"] = parsed if isinstance(parsed, dict) else args
                    except json.JSONDecodeError:
                        pass  # keep the raw string (the template prints it as written)
                calls.append(tc)
            m["tool_calls"] = calls
        out.append(m)
    return out


class ChatRenderer:
    """A tokenizer + chat template: render conversations to text/ids; knows the stop tokens and end-of-turn text."""

    def __init__(self, tokenizer: Any, chat_template: str | None = None, template_kwargs: dict[str, Any] | None = None):
        self.tok = tokenizer
        if chat_template:
            self.tok.chat_template = chat_template
        if not getattr(self.tok, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; pass chat_template=PATH_OR_TEXT")
        self.template_kwargs = dict(template_kwargs or {})
        self.stop_ids = self._stop_ids()
        self.turn_suffix = self._turn_suffix()

    @property
    def chat_template(self) -> str:
        t = self.tok.chat_template
        return t if isinstance(t, str) else json.dumps(t)

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, add_generation_prompt: bool) -> str:
        return self.tok.apply_chat_template(
            normalize_messages(messages),
            tools=tools or None,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **self.template_kwargs,
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"]) if text else []

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _stop_ids(self) -> list[int]:
        ids: set[int] = set()
        eos = self.tok.eos_token_id
        if eos is not None:
            ids.update(eos if isinstance(eos, list) else [eos])
        vocab = self.tok.get_vocab()
        tmpl = self.chat_template
        for t in END_OF_TURN_TOKENS:
            if t in vocab and t in tmpl:
                ids.add(vocab[t])
        return sorted(ids)

    def _turn_suffix(self) -> str:
        """The text the template puts after an assistant message's content (e.g. `<|im_end|>\\n`)."""
        marker = "XYZZY-END-MARKER"
        base = [{"role": "user", "content": "hi"}]
        head = self.render(base, None, True)
        full = self.render(base + [{"role": "assistant", "content": marker}], None, False)
        i = full.rfind(marker)
        if not full.startswith(head) or i < 0:
            return self.tok.eos_token or ""
        return full[i + len(marker) :]

    def tail_after_sample(self, sampled_ids: list[int]) -> str:
        """Template text still owed after a sample: the suffix minus the stop token the model emitted, if any."""
        if sampled_ids and sampled_ids[-1] in self.stop_ids:
            stop_text = self.decode(sampled_ids[-1:])
            if self.turn_suffix.startswith(stop_text):
                return self.turn_suffix[len(stop_text) :]
            return self.turn_suffix.split(stop_text, 1)[1] if stop_text in self.turn_suffix else ""
        return self.turn_suffix


def _probe_conversation(with_second_user: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "probe_tool",
                "description": "A probe.",
                "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
            },
        }
    ]

    def call(i: int) -> dict[str, Any]:
        return {"id": f"call_{i}", "type": "function", "function": {"name": "probe_tool", "arguments": json.dumps({"x": i})}}

    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a probe."},
        {"role": "user", "content": "Start."},
        {"role": "assistant", "content": "", "reasoning_content": "First thought.", "tool_calls": [call(1)]},
        {"role": "tool", "tool_call_id": "call_1", "name": "probe_tool", "content": "one"},
        {"role": "assistant", "content": "Two calls.", "reasoning_content": "Second thought.", "tool_calls": [call(2), call(3)]},
        {"role": "tool", "tool_call_id": "call_2", "name": "probe_tool", "content": "two"},
        {"role": "tool", "tool_call_id": "call_3", "name": "probe_tool", "content": "three"},
        {"role": "assistant", "content": "Done.", "reasoning_content": "Third thought."},
    ]
    if with_second_user:
        msgs += [
            {"role": "user", "content": "Again."},
            {"role": "assistant", "content": "", "reasoning_content": "Fourth thought.", "tool_calls": [call(4)]},
        ]
    return msgs, tools


def check_prefix_preservation(renderer: ChatRenderer, mode: str | bool = "strict") -> None:
    """Probe the template: at every assistant boundary the shorter render must be a prefix of the longer one.

    `mode`: "strict" (also a second user message after assistant turns), "tools" (one user message, tool turns
    only), False/"off" (skip). Raises `TemplateNotPrefixPreservingError`.
    """
    if mode in (False, None, "off", "false"):
        return
    msgs, tools = _probe_conversation(with_second_user=(mode != "tools"))
    for k, m in enumerate(msgs):
        if m["role"] != "assistant":
            continue
        before = renderer.render(msgs[:k], tools, True)
        upto = renderer.render(msgs[: k + 1], tools, False)
        if not upto.startswith(before):
            raise TemplateNotPrefixPreservingError(
                f"the chat template's generation prompt is not a prefix of the rendered assistant turn {k}: "
                f"{before[-80:]!r} vs {upto[len(before) - 80 : len(before) + 20]!r}. {FIX_HINT}"
            )
        for j in range(k + 2, len(msgs) + 1):
            if msgs[j - 1]["role"] == "assistant":
                longer = renderer.render(msgs[:j], tools, False)
                if not longer.startswith(upto):
                    at = next((i for i, (a, b) in enumerate(zip(upto, longer)) if a != b), min(len(upto), len(longer)))
                    raise TemplateNotPrefixPreservingError(
                        f"the chat template is not prefix-preserving: adding messages {k + 1}..{j - 1} changes how "
                        f"turn <= {k} renders (at char {at}: {upto[max(0, at - 40) : at + 40]!r} became "
                        f"{longer[max(0, at - 40) : at + 40]!r}). {FIX_HINT}"
                    )


class TokenTracker:
    """The exact token ids / mask / logprobs of one rollout (see module docstring)."""

    def __init__(self, renderer: ChatRenderer, tools: list[dict[str, Any]] | None):
        self.r = renderer
        self.tools = tools
        self.trace = TokenTrace()
        self.n_msgs = 0  # messages represented in the trace
        self.pending_tail = ""  # template text owed after the last sample (joined to the next delta)
        self.mismatches = 0  # assistant turns whose re-render differs from the sampled text

    def prompt_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """Extend the trace with the new (non-assistant) messages and return the full prompt ids."""
        if self.n_msgs == 0:
            text = self.r.render(messages, self.tools, True)
            self.trace.extend(self.r.encode(text), 0)
        else:
            if len(messages) < self.n_msgs:
                raise ValueError("the conversation got shorter between turns")
            prev = self.r.render(messages[: self.n_msgs], self.tools, False)
            new = self.r.render(messages, self.tools, True)
            if not new.startswith(prev):
                at = next((i for i, (a, b) in enumerate(zip(prev, new)) if a != b), len(prev))
                raise TemplateNotPrefixPreservingError(
                    f"re-rendering the conversation changed earlier turns (at char {at}: "
                    f"{prev[max(0, at - 40) : at + 40]!r} -> {new[max(0, at - 40) : at + 40]!r}). {FIX_HINT}"
                )
            delta = new[len(prev) :]
            self.trace.extend(self.r.encode(self.pending_tail + delta), 0)
            self.pending_tail = ""
        self.n_msgs = len(messages)
        return list(self.trace.ids)

    def add_sample(self, messages: list[dict[str, Any]], ids: list[int], logprobs: list[float], assistant_msg: dict[str, Any]) -> None:
        """Append sampled tokens verbatim; `assistant_msg` is what the conversation will carry for this turn."""
        self.trace.extend(list(ids), 1, [float(x) for x in logprobs])
        self.pending_tail = self.r.tail_after_sample(list(ids))
        conv = list(messages) + [assistant_msg]
        before = self.r.render(list(messages), self.tools, True)
        after = self.r.render(conv, self.tools, False)
        sampled = self.r.decode(list(ids))
        if not after.startswith(before) or after[len(before) :] != sampled + self.pending_tail:
            self.mismatches += 1
        self.n_msgs = len(conv)

    def finish(self) -> TokenTrace:
        """The trace so far plus the owed end-of-turn text (a copy; the tracker can go on)."""
        t = TokenTrace(list(self.trace.ids), list(self.trace.mask), list(self.trace.logprobs))
        if self.pending_tail:
            t.extend(self.r.encode(self.pending_tail), 0)
        return t


def tokenize_conversation(renderer: ChatRenderer, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> TokenTrace:
    """Token ids + assistant mask of a finished conversation, the way a policy session would have produced it
    had the model sampled the canonical (template-rendered) text of each assistant turn. For SFT data.

    Assistant spans are the text between the generation prompt and the end-of-turn token (inclusive); everything
    else (prompts, tool results, the template's text after the end-of-turn token) has mask 0, and so has an
    assistant message marked `"weight": 0` (OpenAI's fine-tuning convention: context, not a target).
    """
    trace = TokenTrace()
    done = ""  # text already in the trace
    suffix = renderer.turn_suffix
    for k, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        before = renderer.render(messages[:k], tools, True)
        after = renderer.render(messages[: k + 1], tools, False)
        if not before.startswith(done) or not after.startswith(before):
            raise TemplateNotPrefixPreservingError(f"conversation does not render prefix-preservingly at message {k}. {FIX_HINT}")
        trace.extend(renderer.encode(before[len(done) :]), 0)
        body = after[len(before) :]
        stop_text = renderer.decode(renderer.stop_ids[:1]) if renderer.stop_ids else ""
        tail = suffix[len(stop_text) :] if suffix.startswith(stop_text) else ""
        gen = body[: len(body) - len(tail)] if tail and body.endswith(tail) else body
        trace.extend(renderer.encode(gen), 0 if m.get("weight", 1) == 0 else 1)
        done = before + gen
    if messages and messages[-1].get("role") == "assistant":
        full = renderer.render(messages, tools, False)
    else:
        full = renderer.render(messages, tools, True)
    if full.startswith(done):
        trace.extend(renderer.encode(full[len(done) :]), 0)
    return trace
