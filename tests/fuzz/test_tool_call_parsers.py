"""Fuzzing the parsers of model output (toolgym.models.formats) and of OpenAI-style responses (policies.openai_http).

Contract under test (formats.py): parsing never raises; malformed markup gives `parse_ok=False` with a
`parse_error` that names every failed call, and the raw text is kept; a parser bug is never the reason (the
catch-all "parser error:" path stays unused); what `render_turn` writes parses back to the same calls; and a long
output parses in linear time.
"""

from __future__ import annotations

import json
import keyword
import time

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from toolgym.models.formats import HermesFormat, Llama3Format, PythonicFormat, ToolFormat
from toolgym.policies.openai_http import parse_completion
from toolgym.types import AssistantTurn, ToolCall

FAST = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
HEAVY = settings(max_examples=3000, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FORMATS = {"hermes": HermesFormat(), "pythonic": PythonicFormat(), "llama3": Llama3Format()}

# ------------------------------------------------------------------------------------------- strategies
MARKUP = ["<tool_call>", "</tool_call>", "<think>", "</think>", "<|tool_call_start|>", "<|tool_call_end|>",
          "<|python_tag|>", "{", "}", "[", "]", "(", ")", '"name"', '"arguments"', '"parameters"', '"function"', ":",
          ",", ";", "=", "\n", " ", '"', "'", "\\", "\x00", "**", "f(", "a=", "[f()]", "null", "NaN", "1e999",
          "\ud800", "é", "東京", "\u2028"]
json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(json_scalars, lambda kids: st.lists(kids, max_size=4)
                           | st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=20)
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True)


@st.composite
def call_like(draw) -> str:
    """Something shaped like a tool call in one of the families, often slightly wrong."""
    name = draw(names | st.text(max_size=10))
    args = draw(st.dictionaries(st.text(max_size=8), json_values, max_size=4) | json_values)
    kind = draw(st.sampled_from(["hermes", "llama3", "pythonic", "openai"]))
    if kind == "pythonic":
        inner = ", ".join(f"{k}={json.dumps(v)}" for k, v in (args.items() if isinstance(args, dict) else []))
        return f"<|tool_call_start|>[{name}({inner})]<|tool_call_end|>"
    obj = {"name": name, "arguments" if kind != "llama3" else "parameters": args}
    if kind == "openai":
        obj = {"function": {"name": name, "arguments": json.dumps(args)}}
    text = json.dumps(obj, ensure_ascii=draw(st.booleans()))
    if draw(st.booleans()):  # damage it
        cut = draw(st.integers(0, len(text)))
        text = text[:cut] + draw(st.sampled_from(MARKUP)) + text[cut + draw(st.integers(0, 3)):]
    return f"<tool_call>{text}</tool_call>" if kind == "hermes" else text


model_output = st.lists(st.sampled_from(MARKUP) | st.text(max_size=30) | call_like(), max_size=12).map("".join)


def check_contract(turn: AssistantTurn, text: str) -> None:
    assert isinstance(turn, AssistantTurn)
    assert turn.raw_text == text
    assert turn.parse_ok == (turn.parse_error is None), turn
    if turn.parse_error is not None:
        assert isinstance(turn.parse_error, str) and turn.parse_error
        assert not turn.parse_error.startswith("parser error:"), f"an exception escaped a parser: {turn.parse_error}"
    for call in turn.tool_calls:
        assert isinstance(call, ToolCall) and isinstance(call.name, str)
        if call.parse_error is None:
            assert isinstance(call.arguments, dict) and call.name, call
        else:
            assert call.arguments is None and not turn.parse_ok
            assert call.parse_error in turn.parse_error  # every failed call is reported in the turn's error
        assert json.loads(json.dumps(call.to_openai()))  # every call can be sent back to an OpenAI-style API


# ------------------------------------------------------------------------------------------- properties
def _never_raises(fmt: ToolFormat, text: str) -> None:
    check_contract(fmt.parse(text), text)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@FAST
@given(text=model_output)
def test_parsers_never_raise_and_report_every_malformed_call(fmt, text):
    _never_raises(FORMATS[fmt], text)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", sorted(FORMATS))
@HEAVY
@given(text=model_output | st.text(max_size=2000))
def test_parsers_never_raise_heavy(fmt, text):
    _never_raises(FORMATS[fmt], text)


literal_scalars = (st.none() | st.booleans() | st.integers(-2**63, 2**63) | st.floats(allow_nan=False, allow_infinity=False)
                   | st.text(max_size=20))
literal_values = st.recursive(literal_scalars, lambda kids: st.lists(kids, max_size=4)
                              | st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=15)
plain_text = st.text(max_size=40).filter(lambda s: not (set(s) & set("<{[|")) and s.strip() == s)


@st.composite
def turns(draw):
    calls = draw(st.lists(st.tuples(names, st.dictionaries(names, literal_values, max_size=4)), min_size=1, max_size=4))
    return draw(st.none() | plain_text), calls, draw(st.none() | plain_text)


def _round_trip(fmt: ToolFormat, turn) -> None:
    content, calls, reasoning = turn
    assume("think>" not in json.dumps(calls, ensure_ascii=False))  # see test_argument_holding_a_think_close_tag
    if isinstance(fmt, PythonicFormat):  # see test_pythonic_cannot_name_a_keyword
        assume(not any(keyword.iskeyword(n) or any(keyword.iskeyword(k) for k in a) for n, a in calls))
    text = fmt.render_turn(content, [{"name": n, "arguments": a} for n, a in calls], reasoning)
    parsed = fmt.parse(text)
    check_contract(parsed, text)
    assert parsed.parse_ok, (text, parsed.parse_error)
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == calls, text
    assert (parsed.reasoning or None) == (reasoning or None)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@FAST
@given(turn=turns())
def test_rendered_turns_parse_back(fmt, turn):
    _round_trip(FORMATS[fmt], turn)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", sorted(FORMATS))
@HEAVY
@given(turn=turns())
def test_rendered_turns_parse_back_heavy(fmt, turn):
    _round_trip(FORMATS[fmt], turn)


# ------------------------------------------------------------------------------------------- found by fuzzing
HOSTILE = {  # inputs that broke the contract before the fixes in formats.py (see the module docstring there)
    "deep_json": '<tool_call>{"name": "f", "arguments": {"a": ' + "[" * 5000 + "]" * 5000 + "}}</tool_call>",
    "huge_int": '<tool_call>{"name": "f", "arguments": {"a": ' + "1" * 5000 + "}}</tool_call>",
    "llama_deep": '{"name": "f", "parameters": {"a": ' + "[" * 5000 + "]" * 5000 + "}}",
    "llama_huge_int": '{"name": "f", "parameters": {"a": ' + "1" * 5000 + "}}",
    "pythonic_deep_expr": "<|tool_call_start|>[f(a=" + "1+" * 100000 + "1)]<|tool_call_end|>",
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_outputs_give_a_specific_error(case):
    text = HOSTILE[case]
    fmt = FORMATS["pythonic" if "tool_call_start" in text else "llama3" if text.startswith("{") else "hermes"]
    turn = fmt.parse(text)
    check_contract(turn, text)
    assert not turn.parse_ok and len(turn.tool_calls) == 1 and turn.tool_calls[0].name == "f", turn.parse_error


CLOSE_TAGS = ["</tool_call>", "<|tool_call_end|>", "<tool_call>", "<|tool_call_start|>"]


@pytest.mark.parametrize("fmt", ["hermes", "pythonic"])
@FAST
@given(before=st.text(max_size=6), tag=st.sampled_from(CLOSE_TAGS), after=st.text(max_size=6),
       quote_escape=st.booleans())
def test_a_call_tag_inside_an_argument_stays_in_the_argument(fmt, before, tag, after, quote_escape):
    """Found by the heavy round trip in CI: `A(A="<|tool_call_end|>")` was cut at the tag inside the string
    ("unterminated string literal"). The call's end is now looked for outside quoted strings, escapes included."""
    value = before + ('\\"' if quote_escape else "") + tag + after
    assume("think>" not in value)
    _round_trip(FORMATS[fmt], (None, [("f", {"a": value, "b": 1})], None))


def test_an_unbalanced_quote_still_ends_the_call_at_its_tag():
    """With no closing quote the first close tag ends the call (the old split), so the error is the call's own."""
    turn = FORMATS["hermes"].parse('<tool_call>{"name": "f", "arguments": {"a": "x}}</tool_call> after')
    assert not turn.parse_ok and turn.content == "after" and "invalid JSON" in turn.parse_error
    turn = FORMATS["pythonic"].parse("<|tool_call_start|>[f(a='x)]<|tool_call_end|> after")
    assert not turn.parse_ok and turn.content == "after" and "invalid pythonic call" in turn.parse_error


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_long_output_parses_in_linear_time(fmt):
    """Several thousand calls in one turn (a degenerate sample at a long max_tokens): the pythonic parser took
    296 s for 20,000 calls (ast.get_source_segment re-split the text for every call)."""
    f = FORMATS[fmt]
    calls = [{"name": "f", "arguments": {"a": i}} for i in range(20_000)]
    text = f.render_turn("x", calls)
    t0 = time.perf_counter()
    turn = f.parse(text)
    assert time.perf_counter() - t0 < 5.0
    assert turn.parse_ok and len(turn.tool_calls) == 20_000


# ------------------------------------------------------------------------------------------- OpenAI responses
arguments_field = (st.text(max_size=40) | json_values.map(json.dumps) | json_values
                   | st.sampled_from(["", "{", "null", "[]", '{"a": 1}', "[" * 900 + "]" * 900]))  # see test_openai_arguments_that_raise
tool_call_entry = st.fixed_dictionaries({"id": st.none() | st.text(max_size=8), "type": st.just("function"),
                                         "function": st.fixed_dictionaries({"name": st.text(max_size=12),
                                                                            "arguments": arguments_field})})
completion = st.fixed_dictionaries({"choices": st.lists(st.fixed_dictionaries({
    "message": st.fixed_dictionaries({"role": st.just("assistant"), "content": st.none() | st.text(max_size=40),
                                      "tool_calls": st.none() | st.lists(tool_call_entry, max_size=4)}),
    "finish_reason": st.sampled_from(["stop", "tool_calls", "length"])}), min_size=1, max_size=1)})


def _openai(data) -> None:
    turn = parse_completion(data)
    assert isinstance(turn, AssistantTurn)
    assert turn.parse_ok == (turn.parse_error is None)
    for call in turn.tool_calls:
        assert (call.arguments is None) == (call.parse_error is not None)
        if call.arguments is not None:
            assert isinstance(call.arguments, dict)
        else:
            assert call.parse_error in turn.parse_error


@FAST
@given(data=completion)
def test_openai_responses_with_any_arguments_parse(data):
    """What a server passes through from the model (`arguments`: any text, any JSON) never raises."""
    _openai(data)


@pytest.mark.slow
@HEAVY
@given(data=completion)
def test_openai_responses_with_any_arguments_parse_heavy(data):
    _openai(data)


@st.composite
def pythonic_sources(draw) -> str:
    """A list of calls as a model might lay it out: unicode strings, line breaks (\\n, \\r\\n, \\r) between items."""
    items = []
    ident = names.filter(lambda n: not keyword.iskeyword(n))  # a keyword is no Python name (a format limit, below)
    for name, args in draw(st.lists(st.tuples(ident, st.dictionaries(ident, literal_values, max_size=3)), max_size=6)):
        items.append(f"{name}(" + ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items()) + ")")
    seps = [draw(st.sampled_from([", ", ",\n", ",\r\n  ", ",\r", " ,  "])) for _ in items]
    return "[" + "".join(i + s for i, s in zip(items, seps)).rstrip(" ,\r\n") + "]"


@FAST
@given(source=pythonic_sources())
def test_pythonic_segments_match_the_stdlib(source):
    """The linear-time segmenter of formats.py returns what ast.get_source_segment returns."""
    import ast

    from toolgym.models.formats import source_segmenter

    tree = ast.parse(source, mode="eval")
    segment = source_segmenter(source)
    for node in ast.walk(tree):
        if hasattr(node, "lineno"):
            assert segment(node) == ast.get_source_segment(source, node)


# ------------------------------------------------------------------------------------------- not fixed here
def test_pythonic_cannot_name_a_keyword():
    """A limit of the pythonic (LFM2) format itself: a call is Python syntax, so a tool or an argument named like a
    Python keyword (`from`, `class`, `import`, ...) is rendered as text no parser can read back. The turn fails
    cleanly (parse_ok False, the name kept), which is the contract; a schema with such names needs another format."""
    f = FORMATS["pythonic"]
    for calls in ([{"name": "route", "arguments": {"from": "A", "to": "B"}}], [{"name": "import", "arguments": {}}]):
        text = f.render_turn(None, calls)
        turn = f.parse(text)
        check_contract(turn, text)
        assert not turn.parse_ok and turn.tool_calls[0].name == calls[0]["name"]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_argument_holding_a_think_close_tag(fmt):
    """A call whose argument holds `</think>` stays a call; a bare `</think>` before the call (a generation prompt
    that opened the block, as Qwen3's does) still ends the reasoning."""
    f = FORMATS[fmt]
    calls = [{"name": "write_file", "arguments": {"text": "a </think> b"}}]
    turn = f.parse(f.render_turn(None, calls))
    assert turn.parse_ok and [(c.name, c.arguments) for c in turn.tool_calls] == [("write_file", calls[0]["arguments"])]
    assert turn.reasoning is None
    opened = f.parse("I should write it.</think>" + f.render_turn(None, calls))
    assert opened.parse_ok and opened.reasoning == "I should write it."
    assert [(c.name, c.arguments) for c in opened.tool_calls] == [("write_file", calls[0]["arguments"])]


@pytest.mark.parametrize("arguments", ["1" * 5000, "[" * 3000 + "]" * 3000])
def test_openai_arguments_that_json_cannot_hold(arguments):
    """A >4300-digit integer (ValueError) or deep nesting (RecursionError) is a bad call, not an exception."""
    turn = parse_completion({"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}]}}]})
    assert not turn.parse_ok and turn.tool_calls[0].name == "f" and turn.tool_calls[0].arguments is None
    assert "invalid JSON arguments" in turn.parse_error
