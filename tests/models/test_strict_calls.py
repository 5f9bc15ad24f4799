"""Strict tool calls (`strict_calls=True`): a tool call's body is decoded under its tool's JSON schema. Real parts:
the shipped tool-calling base (toolgym/models/toolcall_base) and its byte-level tokenizer, outlines_core's index."""

from __future__ import annotations

import asyncio

import jsonschema
import pytest

from toolgym.policies.hf import HFPolicy
from toolgym.policies.strict import StrictCalls, token_bytes
from toolgym.train.recipe import default_base

BASE_DIR = str(default_base())

TOOL = {"type": "function", "function": {
    "name": "file_note", "description": "Write a note about a file.",
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string", "description": "The file."},
        "mode": {"type": "string", "enum": ["brief", "full"]},
        "lines": {"type": "integer", "description": "How many lines."}},
        "required": ["path", "mode"], "additionalProperties": False}}}
OTHER = {"type": "function", "function": {"name": "clock", "description": "The time now.",
                                          "parameters": {"type": "object", "properties": {}}}}


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(BASE_DIR)


def test_token_bytes_spell_the_decoded_text(tokenizer) -> None:  # type: ignore[no-untyped-def]
    by_id = token_bytes(tokenizer)
    for text in ['<tool_call>\n{"name": "a b", "arguments": {"x": "é ü\\n"}}\n</tool_call>', "  two  spaces\tand tab"]:
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert b"".join(by_id[i] for i in ids) == text.encode()


def test_the_grammar_admits_valid_calls_and_nothing_else(tokenizer) -> None:  # type: ignore[no-untyped-def]
    strict = StrictCalls(tokenizer, _hermes(), tokenizer.convert_tokens_to_ids("<|im_end|>"))
    head = tokenizer.encode("Sure.<tool_call>", add_special_tokens=False)

    def walk(text: str) -> tuple[bool, list[int] | None]:
        """Feed the call text token by token; (every token allowed, what is allowed after it)."""
        c = strict.constraint([TOOL, OTHER])
        assert c is not None and c.allowed(head[:-1]) is None  # free text before the open tag
        so_far = list(head)
        for tok in tokenizer.encode(text, add_special_tokens=False):
            nxt = c.allowed(so_far)
            if nxt is None or tok not in nxt:
                return False, nxt
            so_far.append(tok)
        return True, c.allowed(so_far)

    ok, after = walk('\n{"name": "file_note", "arguments": {"path": "a.md", "mode": "full", "lines": 3}}\n</tool_call>')
    assert ok and after is None  # the call closed: the turn is free again
    assert walk('\n{"name": "clock", "arguments": {}}\n</tool_call>')[0]
    assert not walk(' {"name": "clock", "arguments": {}}')[0]  # the format's newline after the open tag is forced
    assert not walk('\n{"name": "file_note", "arguments": {"path": "a.md"}}')[0]  # required "mode" missing
    assert not walk('\n{"name": "file_note", "arguments": {"path": "a.md", "mode": "short"')[0]  # not in the enum
    assert not walk('\n{"name": "file_note", "arguments": {"path": "a.md", "mode": "full", "size": 1')[0]  # unknown key
    assert not walk('\n{"name": "rm", "arguments": {}}')[0]  # not a tool of the session
    assert not walk('\n{"name": "file_note", "arguments": {"path": "a.md", "mode": "full", "lines": 1.5')[0]
    assert strict.constraint([]) is None and strict.loose == []


def _hermes():  # type: ignore[no-untyped-def]
    from toolgym.models.formats import get_format

    return get_format("hermes")


def test_a_sampled_call_always_fits_its_schema() -> None:
    """The shipped base, sampled at temperature 1.5 (so that it slips): every strict call parses, names a tool and
    validates against its schema; without strict_calls some calls of the same sampling do not."""
    msgs = [{"role": "user", "content": 'Please call file_note with path "notes/kyoto.md" and mode "brief".'}]

    def sample(strict: bool) -> list:  # type: ignore[type-arg]
        pol = HFPolicy(BASE_DIR, temperature=1.5, max_tokens=96, seed=7, strict_calls=strict, num_threads=1)

        async def go() -> list:  # type: ignore[type-arg]
            try:
                sessions = [pol.open([TOOL, OTHER], {}) for _ in range(24)]
                return list(await asyncio.gather(*(s.act(msgs) for s in sessions)))
            finally:
                await pol.aclose()

        return asyncio.run(go())

    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in (TOOL, OTHER)}

    def valid(turn) -> bool:  # type: ignore[no-untyped-def]
        if not turn.parse_ok or not turn.tool_calls:
            return False
        for call in turn.tool_calls:
            if call.name not in schemas or not call.parse_ok or call.arguments is None:
                return False
            if list(jsonschema.Draft202012Validator(schemas[call.name]).iter_errors(call.arguments)):
                return False
        return True

    strict, free = sample(True), sample(False)
    called = [t for t in strict if t.tool_calls or "<tool_call>" in (t.raw_text or "")]
    assert len(called) >= 12  # the base calls the tool in most turns
    finished = [t for t in called if t.finish_reason == "stop"]
    assert finished and all(valid(t) for t in finished), [t.raw_text for t in finished if not valid(t)]
    assert sum(not valid(t) for t in free if t.finish_reason == "stop") >= 1  # what strict decoding removes


def test_strict_calls_refuse_a_format_they_cannot_constrain(tokenizer) -> None:  # type: ignore[no-untyped-def]
    from toolgym.models.formats import get_format

    with pytest.raises(ValueError, match="strict_calls supports the hermes tool format"):
        StrictCalls(tokenizer, get_format("pythonic"), 2)
