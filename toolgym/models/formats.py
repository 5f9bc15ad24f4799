"""Tool-call formats: parse a model's raw output into an `AssistantTurn`, and render calls back to text.

Families (small open models emit tool calls in one of these):

- `hermes` (Hermes / Qwen2.5 / Qwen3): `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`, possibly
  several per turn, with prose around them.
- `pythonic` (LFM2): `<|tool_call_start|>[fn(a=1, b="x"), g()]<|tool_call_end|>`. Parsed with `ast` and
  `ast.literal_eval` on each argument node -- never `eval`.
- `llama3` (Llama-3.x JSON tool calling): the turn is a JSON object `{"name": ..., "parameters": {...}}`
  (optionally after `<|python_tag|>`; several objects separated by `;` or newlines).

All formats strip a leading `<think>...</think>` block into `reasoning` (also a bare `...</think>` when the
generation prompt already opened the block, as Qwen3's does). Parsing never raises: malformed markup gives a turn
with `parse_ok=False`, a `parse_error`, and the raw text kept in `raw_text`. Arguments nested deeper than
`MAX_ARG_DEPTH` (32) or whose text is longer than `MAX_PARSED_ARG_CHARS` are a parse error of their call too (a call
record keeps at most that much of its raw argument text). Parsers do not know the tool list: a call
to an unknown tool parses fine (the environment reports `name_ok=False`).

`detect_format(chat_template)` picks the family from a tokenizer's chat template; `get_format(name)` overrides.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toolgym.types import (
    MAX_ARG_DEPTH,
    MAX_PARSED_ARG_CHARS,
    AssistantTurn,
    ToolCall,
    argument_error,
    kept_text,
    nesting_depth,
)

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def _call_id() -> str:
    return "call_" + uuid.uuid4().hex[:12]


def split_think(text: str, in_call: Callable[[str], bool] | None = None) -> tuple[str | None, str, str | None]:
    """Split `<think>...</think>` off the start of `text`: (reasoning, rest, error). A bare `</think>` (the
    generation prompt opened the block) ends reasoning only where `in_call(text_before_it)` is false, so a call
    whose argument holds the text `</think>` stays a call."""
    stripped = text.lstrip()
    if stripped.startswith(THINK_OPEN):
        body = stripped[len(THINK_OPEN) :]
        end = body.find(THINK_CLOSE)
        if end < 0:
            return body.strip(), "", f"unterminated {THINK_OPEN} block"
        return body[:end].strip(), body[end + len(THINK_CLOSE) :], None
    # generation prompt opened the block already (e.g. Qwen3): text is "reasoning</think>rest"
    end = text.find(THINK_CLOSE)
    if end >= 0 and THINK_OPEN not in text[:end] and not (in_call and in_call(text[:end])):
        return text[:end].strip(), text[end + len(THINK_CLOSE) :], None
    return None, text, None


def _coerce_arguments(args: Any) -> tuple[dict[str, Any] | None, str | None]:
    """Arguments as written (a dict, or a JSON string of one) -> (dict, error)."""
    if args is None:
        return {}, None
    if isinstance(args, str):
        if len(args) > MAX_PARSED_ARG_CHARS:
            return None, argument_error(None, args)
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError) as e:  # JSONDecodeError; also a >4300-digit int, deep nesting
            return None, f"arguments string is not JSON: {e}"
    if not isinstance(args, dict):
        return None, f"arguments must be an object, got {type(args).__name__}"
    err = argument_error(args)
    return (None, err) if err else (args, None)


def _call_from_obj(obj: Any, raw: str, args_keys: tuple[str, ...]) -> ToolCall:
    if not isinstance(obj, dict):
        return ToolCall(name="", arguments=None, id=_call_id(), raw_arguments=raw, parse_error="call is not a JSON object")
    if "function" in obj and isinstance(obj["function"], dict):  # OpenAI-shaped call
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return ToolCall(name="", arguments=None, id=_call_id(), raw_arguments=raw, parse_error="call has no name")
    raw_args = next((obj[k] for k in args_keys if k in obj), None)
    if isinstance(raw_args, (dict, list)) and nesting_depth(raw_args) > MAX_ARG_DEPTH:  # before json.dumps recurses
        return ToolCall(name=name.strip(), arguments=None, id=_call_id(), raw_arguments=kept_text(raw),
                        parse_error=argument_error(raw_args))
    args, err = _coerce_arguments(raw_args)
    raw_args_text = raw_args if isinstance(raw_args, str) else json.dumps(raw_args, ensure_ascii=False)
    return ToolCall(name=name.strip(), arguments=args, id=_call_id(), raw_arguments=kept_text(raw_args_text),
                    parse_error=err)


def _bad_call(raw: str, error: str) -> ToolCall:
    m = re.search(r"""["']name["']\s*:\s*["']([^"']+)["']""", raw) or re.match(r"\s*\[?\s*([A-Za-z_][\w.]*)\s*\(", raw)
    return ToolCall(name=m.group(1) if m else "", arguments=None, id=_call_id(), raw_arguments=kept_text(raw),
                    parse_error=error)


def _finish(raw: str, reasoning: str | None, prose: list[str], calls: list[ToolCall], errors: list[str]) -> AssistantTurn:
    for c in calls:  # every format: arguments too deep (e.g. pythonic literals) are a parse error of their call
        if c.arguments is not None and (err := argument_error(c.arguments)):
            c.arguments, c.parse_error = None, err
        c.raw_arguments = kept_text(c.raw_arguments)
    errors = errors + [f"{c.name or '?'}: {c.parse_error}" for c in calls if c.parse_error]
    content = "\n".join(p.strip() for p in prose if p.strip()) or None
    return AssistantTurn(
        content=content,
        tool_calls=calls,
        reasoning=reasoning or None,
        parse_ok=not errors,
        parse_error="; ".join(errors) or None,
        raw_text=raw,
    )


@dataclass
class ToolFormat:
    """Base class: `parse(text) -> AssistantTurn` and `render_turn(...) -> str` (the canonical assistant text)."""

    name: str = "base"

    def parse(self, text: str) -> AssistantTurn:
        try:
            reasoning, rest, err = split_think(text, self._in_call)
            turn = self._parse_body(text, reasoning, rest)
            if err:
                turn.parse_ok = False
                turn.parse_error = "; ".join(e for e in (err, turn.parse_error) if e)
            return turn
        except Exception as e:  # a parser bug must not kill a rollout
            return AssistantTurn(content=text, parse_ok=False, parse_error=f"parser error: {e!r}", raw_text=text)

    def _parse_body(self, raw: str, reasoning: str | None, body: str) -> AssistantTurn:
        return _finish(raw, reasoning, [body], [], [])

    def _in_call(self, before: str) -> bool:
        """Whether `before` (the text up to a bare `</think>`) has opened a tool call already."""
        return False

    def render_calls(self, calls: list[ToolCall] | list[dict[str, Any]]) -> str:
        raise NotImplementedError

    def render_turn(self, content: str | None = None, calls: list | None = None, reasoning: str | None = None) -> str:
        """Canonical text of an assistant turn (what the tiny template renders; SFT targets use it)."""
        parts = []
        if reasoning is not None:
            parts.append(f"{THINK_OPEN}\n{reasoning.strip()}\n{THINK_CLOSE}\n\n")
        body = [content.strip()] if content and content.strip() else []
        if calls:
            body.append(self.render_calls(calls))
        return "".join(parts) + "\n".join(body)


def _name_args(call: ToolCall | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if isinstance(call, ToolCall):
        return call.name, call.arguments or {}
    fn = call.get("function", call)
    args = fn.get("arguments", fn.get("parameters", {}))
    if isinstance(args, str):
        args = json.loads(args) if args.strip() else {}
    return fn["name"], args


def _close_outside_quotes(body: str, start: int, close_tag: str, quotes: str) -> int:
    """Index of the first `close_tag` at or after `start` that is not inside a quoted string (`quotes`: the quote
    characters of the call syntax; a backslash escapes the next character inside a string), so an argument holding
    the close tag (`{"a": "</tool_call>"}`) does not end the call early. Falls back to the first close tag at all when
    the quotes never balance (a malformed call, which its parser then reports). Linear in the text scanned."""
    token = _QUOTE_TOKENS.get((close_tag, quotes))
    if token is None:
        token = re.compile(r"\\.|[" + re.escape(quotes) + "]|" + re.escape(close_tag), re.S)
        _QUOTE_TOKENS[(close_tag, quotes)] = token
    quote, pos = None, start
    while (m := token.search(body, pos)) is not None:
        t = m.group()
        if quote is not None:  # inside a string: only its own closing quote matters
            if t == quote:
                quote = None
            pos = m.end()
        elif t == close_tag:
            return m.start()
        elif t in quotes:
            quote, pos = t, m.end()
        else:  # a backslash outside a string escapes nothing: look again from the next character
            pos = m.start() + 1
    return body.find(close_tag, start)


_QUOTE_TOKENS: dict[tuple[str, str], re.Pattern[str]] = {}


def split_blocks(body: str, open_tag: str, close_tag: str,
                 quotes: str = "") -> tuple[list[str], list[str], str | None]:
    """Split `body` into prose pieces and the texts between `open_tag`/`close_tag` pairs, in order; the text after
    an open tag that is never closed (a truncated sample) comes back as the third item. With `quotes`, a close tag
    inside a quoted string of the call does not end it (see `_close_outside_quotes`)."""
    prose: list[str] = []
    blocks: list[str] = []
    pos = 0
    while True:
        start = body.find(open_tag, pos)
        if start < 0:
            prose.append(body[pos:])
            return prose, blocks, None
        prose.append(body[pos:start])
        inner = start + len(open_tag)
        end = _close_outside_quotes(body, inner, close_tag, quotes) if quotes else body.find(close_tag, inner)
        if end < 0:
            return prose, blocks, body[inner:]
        blocks.append(body[inner:end])
        pos = end + len(close_tag)


class HermesFormat(ToolFormat):
    OPEN, CLOSE = "<tool_call>", "</tool_call>"

    def __init__(self) -> None:
        super().__init__(name="hermes")

    def _in_call(self, before: str) -> bool:
        return self.OPEN in before

    def _parse_body(self, raw: str, reasoning: str | None, body: str) -> AssistantTurn:
        calls: list[ToolCall] = []
        prose, blocks, unterminated = split_blocks(body, self.OPEN, self.CLOSE, quotes='"')
        for inner in blocks:
            inner = inner.strip()
            if not inner:
                calls.append(_bad_call(inner, "empty tool call"))
                continue
            if len(inner) > MAX_PARSED_ARG_CHARS:
                calls.append(_bad_call(inner, argument_error(None, inner) or "tool call too large"))
                continue
            try:
                obj = json.loads(inner)
            except (ValueError, RecursionError) as e:  # JSONDecodeError; also a >4300-digit int, deep nesting
                calls.append(_bad_call(inner, f"invalid JSON in tool call: {e}"))
                continue
            calls.append(_call_from_obj(obj, inner, ("arguments", "parameters")))
        if unterminated is not None:
            calls.append(_bad_call(unterminated, "unterminated <tool_call> (truncated output?)"))
        errors = ["stray </tool_call>"] if self.CLOSE in "".join(prose) else []
        return _finish(raw, reasoning, prose, calls, errors)

    def render_calls(self, calls: list) -> str:
        out = []
        for c in calls:
            name, args = _name_args(c)
            out.append(f"{self.OPEN}\n{json.dumps({'name': name, 'arguments': args}, ensure_ascii=False)}\n{self.CLOSE}")
        return "\n".join(out)


def py_literal(value: Any) -> str:
    """Python-literal text of a JSON value (for pythonic calls): strings double-quoted, True/False/None."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(py_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k), ensure_ascii=False)}: {py_literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot render {type(value).__name__} as a Python literal")


def source_segmenter(source: str) -> Callable[[ast.AST], str | None]:
    """`ast.get_source_segment(source, node)` for many nodes of one source in linear time (the stdlib function
    splits the whole source again on every call: quadratic for a turn with thousands of calls)."""
    lines = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", source)  # the tokenizer's line ends, kept
    encoded: dict[int, bytes] = {}

    def line(i: int) -> bytes:  # column offsets are UTF-8 byte offsets
        if i not in encoded:
            encoded[i] = lines[i].encode()
        return encoded[i]

    def segment(node: ast.AST) -> str | None:
        try:
            l0, l1 = node.lineno - 1, node.end_lineno - 1  # type: ignore[attr-defined]
            c0, c1 = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
            if l1 is None or c1 is None:
                return None
            if l0 == l1:
                return line(l0)[c0:c1].decode()
            return line(l0)[c0:].decode() + "".join(lines[l0 + 1 : l1]) + line(l1)[:c1].decode()
        except (AttributeError, IndexError, TypeError, UnicodeDecodeError):
            return None

    return segment


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


class PythonicFormat(ToolFormat):
    """LFM2: `<|tool_call_start|>[fn(a=1, b="x")]<|tool_call_end|>`. Keyword arguments only; literal values only."""

    OPEN, CLOSE = "<|tool_call_start|>", "<|tool_call_end|>"

    def __init__(self) -> None:
        super().__init__(name="pythonic")

    def _in_call(self, before: str) -> bool:
        return self.OPEN in before or before.lstrip().startswith("[")

    def _parse_calls(self, inner: str) -> list[ToolCall]:
        if not inner.strip():
            return [_bad_call(inner, "empty tool call")]
        source = inner.strip()
        try:
            tree = ast.parse(source, mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as e:  # deep nesting: RecursionError
            return [_bad_call(inner, f"invalid pythonic call: {getattr(e, 'msg', None) or str(e) or type(e).__name__}")]
        nodes = tree.body.elts if isinstance(tree.body, (ast.List, ast.Tuple)) else [tree.body]
        if not nodes:
            return [_bad_call(inner, "empty tool call list")]
        calls = []
        segment = source_segmenter(source)
        for node in nodes:
            seg = segment(node) or inner
            if not isinstance(node, ast.Call) or _dotted(node.func) is None:
                calls.append(_bad_call(seg, "expected a function call like fn(a=1)"))
                continue
            name = _dotted(node.func)
            if node.args:
                calls.append(ToolCall(name, None, _call_id(), seg, "positional arguments are not allowed"))
                continue
            args: dict[str, Any] = {}
            err = None
            for kw in node.keywords:
                if kw.arg is None:
                    err = "**kwargs are not allowed"
                    break
                try:
                    args[kw.arg] = ast.literal_eval(kw.value)
                except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                    err = f"argument {kw.arg!r} is not a literal"
                    break
            calls.append(ToolCall(name, None if err else args, _call_id(), seg, err))
        return calls

    def _parse_body(self, raw: str, reasoning: str | None, body: str) -> AssistantTurn:
        calls: list[ToolCall] = []
        prose, blocks, unterminated = split_blocks(body, self.OPEN, self.CLOSE, quotes="\"'")
        for inner in blocks:
            calls.extend(self._parse_calls(inner))
        if unterminated is not None:
            calls.append(_bad_call(unterminated, "unterminated <|tool_call_start|> (truncated?)"))
        return _finish(raw, reasoning, prose, calls, [])

    def render_calls(self, calls: list) -> str:
        items = []
        for c in calls:
            name, args = _name_args(c)
            items.append(f"{name}(" + ", ".join(f"{k}={py_literal(v)}" for k, v in args.items()) + ")")
        return f"{self.OPEN}[{', '.join(items)}]{self.CLOSE}"


class Llama3Format(ToolFormat):
    """Llama-3.x JSON: the turn is `{"name": ..., "parameters": {...}}` (maybe after `<|python_tag|>`)."""

    TAG = "<|python_tag|>"

    def __init__(self) -> None:
        super().__init__(name="llama3")

    def _in_call(self, before: str) -> bool:
        return self.TAG in before or before.lstrip().startswith("{") or bool(re.search(r'\{\s*"name"\s*:', before))

    def _parse_body(self, raw: str, reasoning: str | None, body: str) -> AssistantTurn:
        text = body.strip()
        tagged = text.startswith(self.TAG)
        if tagged:
            text = text[len(self.TAG) :].strip()
        prose: list[str] = []
        if not text.startswith("{"):
            if tagged:
                return _finish(raw, reasoning, [], [_bad_call(text, "<|python_tag|> not followed by a JSON call")], [])
            m = re.search(r'(<\|python_tag\|>\s*)?\{\s*"name"\s*:', text)  # prose, then a call
            if m is None:
                return _finish(raw, reasoning, [body], [], [])
            prose.append(text[: m.start()])
            text = text[m.end(1) if m.group(1) else m.start() :]
        calls: list[ToolCall] = []
        dec = json.JSONDecoder()
        pos = 0
        while pos < len(text):
            while pos < len(text) and text[pos] in " \t\r\n;":
                pos += 1
            if pos >= len(text):
                break
            if text[pos] != "{":
                prose.append(text[pos:])
                break
            try:
                obj, end = dec.raw_decode(text, pos)
            except (ValueError, RecursionError) as e:  # JSONDecodeError; also a >4300-digit int, deep nesting
                calls.append(_bad_call(text[pos:], f"invalid JSON in tool call: {e}"))
                break
            seg = text[pos:end]
            pos = end
            if isinstance(obj, dict) and not obj:
                calls.append(_bad_call(seg, "empty tool call"))
                continue
            calls.append(_call_from_obj(obj, seg, ("parameters", "arguments")))
        return _finish(raw, reasoning, prose, calls, [])

    def render_calls(self, calls: list) -> str:
        return "; ".join(
            json.dumps({"name": n, "parameters": a}, ensure_ascii=False) for n, a in (_name_args(c) for c in calls)
        )


FORMATS: dict[str, type[ToolFormat]] = {"hermes": HermesFormat, "pythonic": PythonicFormat, "llama3": Llama3Format}
ALIASES = {"qwen": "hermes", "qwen2.5": "hermes", "qwen3": "hermes", "lfm2": "pythonic", "llama": "llama3", "json": "llama3"}


def get_format(name: str | ToolFormat) -> ToolFormat:
    """A format by name (`hermes`/`qwen`, `pythonic`/`lfm2`, `llama3`/`json`) or pass a `ToolFormat` through."""
    if isinstance(name, ToolFormat):
        return name
    key = ALIASES.get(name.lower(), name.lower())
    if key not in FORMATS:
        raise ValueError(f"unknown tool format {name!r}; known: {sorted(FORMATS)} (aliases {sorted(ALIASES)})")
    return FORMATS[key]()


def detect_format(chat_template: str | None, default: str = "hermes") -> ToolFormat:
    """Guess the tool-call family from a chat template's text."""
    t = chat_template or ""
    if "<tool_call>" in t:
        return HermesFormat()
    if "tool_call_start" in t:
        return PythonicFormat()
    if "<|python_tag|>" in t or ("<|start_header_id|>" in t and "ipython" in t):
        return Llama3Format()
    return get_format(default)
