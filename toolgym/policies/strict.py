"""Strict tool calls: a tool call's body is decoded under its tool's JSON schema (`strict_calls=True`, `hf:` only).

What OpenAI's `strict` function calling and vLLM's structured outputs give a hosted model, for the in-process
engine: the model writes its turn freely until it opens a tool call (`<tool_call>`, the `hermes` format); from
there the newline the format puts after the tag is forced (a call opened `<tool_call> ` with a space would
otherwise escape the constraint), and until the call's close tag, each sampled token is one that keeps the text a prefix of
`{"name": TOOL, "arguments": ARGS}` with TOOL one of the session's tools and ARGS valid for that tool's parameter
schema (required properties present, no unknown ones, types, enums). After the close tag the turn is free again
(another call, or the end of the turn). So a call can no longer fail to parse or miss a required argument; its
values are still the model's choice, and the logprobs returned are the unconstrained model's (as for
`allowed_outputs`), so a trainer's ratios are not those of the masked sampler: strict decoding is for evaluation
and serving.

The schema becomes a regular expression (`outlines_core.json_schema.build_regex_from_schema`, with the model's
own separators: `", "` and `": "`) and an index over the tokenizer's vocabulary (`outlines_core.Index`), built once
per tool list and shared by every session with those tools. A schema the converter cannot express (recursive
`$ref`s, for instance) constrains that tool's arguments to any JSON object, and `StrictCalls.loose` names it.
Properties are written in the schema's order (the order `toolgym tasks generate` and the teacher write them).
"""

from __future__ import annotations

import json
import re
import threading
from typing import Any

#: the JSON separators between values: tojson / json.dumps write ", " and ": "
WHITESPACE = r"[ ]?"
ANY_OBJECT = '{"type": "object"}'


def token_bytes(tokenizer: Any) -> dict[int, bytes]:
    """Each token id's bytes in decoded text: byte-level BPE tokens through their byte alphabet, SentencePiece
    tokens with `▁` as a space and `<0xNN>` byte tokens, added (special) tokens as their text."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode  # GPT-2's byte -> printable stand-in (`Ġ`)

    vocab: dict[str, int] = tokenizer.get_vocab()
    added = {t.content for t in getattr(tokenizer, "added_tokens_decoder", {}).values()}
    byte_level = "ByteLevel" in repr(getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None))
    table = {c: b for b, c in bytes_to_unicode().items()}
    out: dict[int, bytes] = {}
    for tok, i in vocab.items():
        if tok in added:
            out[i] = tok.encode()
        elif byte_level and all(c in table for c in tok):
            out[i] = bytes(table[c] for c in tok)
        elif re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", tok):
            out[i] = bytes([int(tok[3:5], 16)])
        else:
            out[i] = tok.replace("▁", " ").encode()
    return out


class CallGrammar:
    """The compiled constraint for one tool list: `constraint()` gives a fresh per-turn state."""

    def __init__(self, index: Any, open_bytes: bytes, loose: list[str]):
        self.index = index
        self.open_bytes = open_bytes
        self.loose = loose

    def constraint(self, token_bytes_of: dict[int, bytes]) -> CallConstraint:
        return CallConstraint(self, token_bytes_of)


class CallConstraint:
    """One turn's state. `allowed(so_far)` -> the token ids allowed next given the turn's tokens so far, or None
    where the turn is free (outside a tool call). Called with a growing `so_far` (the engine's per-row output)."""

    def __init__(self, grammar: CallGrammar, token_bytes_of: dict[int, bytes]):
        from outlines_core import Guide

        self._guide_cls = Guide
        self.grammar = grammar
        self.bytes_of = token_bytes_of
        self.seen = 0  # tokens of so_far consumed
        self.tail = b""  # the free text's last bytes (to spot the open tag)
        self.guide: Any = None

    def allowed(self, so_far: list[int]) -> list[int] | None:
        tag = self.grammar.open_bytes
        for tok in so_far[self.seen :]:
            self.seen += 1
            if self.guide is not None:
                self.guide.advance(tok)
                if self.guide.is_finished():
                    self.guide = None
                    self.tail = b""
                continue
            self.tail = (self.tail + self.bytes_of.get(tok, b""))[-4 * len(tag) :]
            if self.tail.endswith(tag):
                self.guide = self._guide_cls(self.grammar.index)
                self.tail = b""
            elif tag in self.tail:  # the tag ended inside a token: that call is left unconstrained
                self.tail = b""
        if self.guide is None:
            return None
        return list(self.guide.get_tokens())


class StrictCalls:
    """Builds and caches `CallGrammar`s for a tokenizer and tool format (only `hermes` is supported)."""

    def __init__(self, tokenizer: Any, tool_format: Any, end_of_turn_id: int):
        name = getattr(tool_format, "name", str(tool_format))
        if name != "hermes":
            raise ValueError(f"strict_calls supports the hermes tool format (<tool_call> JSON), not {name!r}")
        try:
            from outlines_core import Vocabulary  # noqa: F401
        except ImportError as e:  # pragma: no cover - the strict extra is installed by setup.sh and CI
            raise ImportError("strict_calls needs outlines_core: pip install 'toolgym[strict]'") from e
        # the guide starts right after the open tag, so the newline after it is part of what is constrained
        self.open_text, self.body_start, self.close_text = tool_format.OPEN, "\n", "\n" + tool_format.CLOSE
        self.bytes_of = token_bytes(tokenizer)
        self.eot = end_of_turn_id
        self._vocab: Any = None
        self._cache: dict[str, CallGrammar] = {}
        self._lock = threading.Lock()

    def _vocabulary(self) -> Any:
        from outlines_core import Vocabulary

        if self._vocab is None:
            by_bytes: dict[bytes, list[int]] = {}
            for i, b in self.bytes_of.items():
                if i != self.eot and b:
                    by_bytes.setdefault(b, []).append(i)
            self._vocab = Vocabulary(self.eot, by_bytes)
        return self._vocab

    def regex(self, tools: list[dict[str, Any]]) -> tuple[str, list[str]]:
        """The call body's regular expression for `tools` (OpenAI-style specs) and the tools left loose."""
        from outlines_core.json_schema import build_regex_from_schema

        parts, loose = [], []
        for t in tools:
            fn = t.get("function", t)
            schema = fn.get("parameters") or {"type": "object", "properties": {}}
            try:
                args = build_regex_from_schema(json.dumps(schema), whitespace_pattern=WHITESPACE)
            except (ValueError, TypeError, RuntimeError):  # a schema the converter cannot express
                args = build_regex_from_schema(ANY_OBJECT, whitespace_pattern=WHITESPACE)
                loose.append(fn["name"])
            name = json.dumps(fn["name"], ensure_ascii=False)
            parts.append(r"\{" + re.escape(f'"name": {name}, "arguments": ') + args + r"\}")
        return re.escape(self.body_start) + "(" + "|".join(parts) + ")" + re.escape(self.close_text), loose

    def grammar(self, tools: list[dict[str, Any]]) -> CallGrammar:
        key = json.dumps(tools, sort_keys=True)
        with self._lock:
            g = self._cache.get(key)
            if g is None:
                from outlines_core import Index

                regex, loose = self.regex(tools)
                g = CallGrammar(Index(regex, self._vocabulary()), self.open_text.encode(), loose)
                self._cache[key] = g
            return g

    def constraint(self, tools: list[dict[str, Any]]) -> CallConstraint | None:
        """A fresh per-turn constraint for a session with `tools` (None without tools: nothing to call)."""
        if not tools:
            return None
        return self.grammar(tools).constraint(self.bytes_of)

    @property
    def loose(self) -> list[str]:
        """Tools whose schema could not be compiled (their arguments are only held to a JSON object)."""
        return sorted({n for g in self._cache.values() for n in g.loose})
