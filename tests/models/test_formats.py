"""Tool-call parsers per family, from hand-written model outputs. Parsing never raises."""

from __future__ import annotations

import pytest

from toolgym.models.formats import HermesFormat, Llama3Format, PythonicFormat, detect_format, get_format
from toolgym.models.tiny import CHAT_TEMPLATE

H, P, L = HermesFormat(), PythonicFormat(), Llama3Format()


def one(turn):  # type: ignore[no-untyped-def]
    assert len(turn.tool_calls) == 1, turn
    return turn.tool_calls[0]


# ------------------------------------------------------------------ hermes / qwen
def test_hermes_single():
    t = H.parse('<tool_call>\n{"name": "make_move", "arguments": {"position": 4}}\n</tool_call>')
    assert t.parse_ok and t.content is None
    c = one(t)
    assert (c.name, c.arguments, c.parse_ok) == ("make_move", {"position": 4}, True)


def test_hermes_several_and_prose():
    t = H.parse('I will look first.\n<tool_call>\n{"name": "get_board", "arguments": {}}\n</tool_call>\n'
                '<tool_call>{"name": "make_move", "arguments": {"position": 0}}</tool_call> done')
    assert t.parse_ok
    assert [c.name for c in t.tool_calls] == ["get_board", "make_move"]
    assert t.content == "I will look first.\ndone"


def test_hermes_think_and_call():
    t = H.parse('<think>\nCenter is best.\n</think>\n\n<tool_call>\n{"name": "make_move", "arguments": {"position": 4}}\n</tool_call>')
    assert t.parse_ok and t.reasoning == "Center is best." and one(t).arguments == {"position": 4}
    # generation prompt already opened <think> (Qwen3): a bare closing tag
    t = H.parse('Center.</think>\n<tool_call>{"name": "make_move", "arguments": {"position": 4}}</tool_call>')
    assert t.reasoning == "Center." and t.parse_ok


def test_hermes_truncated_json_and_unterminated():
    t = H.parse('<tool_call>\n{"name": "make_move", "arguments": {"position": 4\n</tool_call>')
    assert not t.parse_ok and "invalid JSON" in t.parse_error
    c = one(t)
    assert c.name == "make_move" and c.arguments is None and not c.parse_ok and c.raw_arguments
    t = H.parse('<tool_call>\n{"name": "make_move", "argu')
    assert not t.parse_ok and "unterminated" in t.parse_error and t.raw_text.endswith("argu")


def test_hermes_wrong_quotes():
    t = H.parse("<tool_call>{'name': 'make_move', 'arguments': {'position': 4}}</tool_call>")
    assert not t.parse_ok and one(t).name == "make_move" and one(t).arguments is None


def test_hermes_nested_unicode_stringargs():
    t = H.parse('<tool_call>{"name": "search", "arguments": {"q": "café ☕ 東京", "filters": {"tags": ["a", {"b": [1, 2]}]}}}</tool_call>')
    assert t.parse_ok and one(t).arguments == {"q": "café ☕ 東京", "filters": {"tags": ["a", {"b": [1, 2]}]}}
    t = H.parse('<tool_call>{"name": "make_move", "arguments": "{\\"position\\": 2}"}</tool_call>')
    assert t.parse_ok and one(t).arguments == {"position": 2}


def test_hermes_empty_and_unknown_tool():
    for text in ("<tool_call></tool_call>", "<tool_call>\n\n</tool_call>"):
        t = H.parse(text)
        assert not t.parse_ok and "empty" in t.parse_error
    t = H.parse('<tool_call>{"arguments": {}}</tool_call>')
    assert not t.parse_ok and "no name" in t.parse_error
    t = H.parse('<tool_call>{"name": "launch_rockets", "arguments": {}}</tool_call>')
    assert t.parse_ok and one(t).name == "launch_rockets"  # unknown tools are the env's business (name_ok)


def test_plain_text_and_garbage_never_raise():
    for fmt in (H, P, L):
        assert fmt.parse("Just talking.").parse_ok
        for junk in ("", "<think>", "</tool_call>", "<|tool_call_start|>[", "{", "<|python_tag|>", "\x00\ufffd"):
            t = fmt.parse(junk)
            assert t.raw_text == junk


def test_unterminated_think():
    t = H.parse("<think>still thinking")
    assert not t.parse_ok and t.reasoning == "still thinking" and t.tool_calls == []


# ------------------------------------------------------------------ LFM2 pythonic
def test_pythonic_single_several_prose():
    t = P.parse('<|tool_call_start|>[make_move(position=4)]<|tool_call_end|>')
    assert t.parse_ok and one(t).arguments == {"position": 4}
    t = P.parse('Let me see. <|tool_call_start|>[get_board(), make_move(position=0, note="x")]<|tool_call_end|>Done.')
    assert t.parse_ok and [c.name for c in t.tool_calls] == ["get_board", "make_move"]
    assert t.tool_calls[1].arguments == {"position": 0, "note": "x"} and t.content == "Let me see.\nDone."


def test_pythonic_think_nested_unicode():
    t = P.parse('<think>hmm</think><|tool_call_start|>[search(q="東京 ☕", opts={"deep": True, "n": [1, 2.5, None]})]<|tool_call_end|>')
    assert t.parse_ok and t.reasoning == "hmm"
    assert one(t).arguments == {"q": "東京 ☕", "opts": {"deep": True, "n": [1, 2.5, None]}}


def test_pythonic_never_evals():
    t = P.parse('<|tool_call_start|>[make_move(position=__import__("os").system("echo pwned"))]<|tool_call_end|>')
    assert not t.parse_ok and "not a literal" in t.parse_error
    t = P.parse('<|tool_call_start|>[make_move(4)]<|tool_call_end|>')
    assert not t.parse_ok and "positional" in t.parse_error


def test_pythonic_truncated_empty_unknown_quotes():
    assert not P.parse('<|tool_call_start|>[make_move(position=').parse_ok
    assert not P.parse('<|tool_call_start|>[make_move(position=4]<|tool_call_end|>').parse_ok
    assert not P.parse('<|tool_call_start|><|tool_call_end|>').parse_ok
    assert not P.parse('<|tool_call_start|>[]<|tool_call_end|>').parse_ok
    t = P.parse("<|tool_call_start|>[fly(to='moon')]<|tool_call_end|>")  # single quotes are valid Python
    assert t.parse_ok and one(t).name == "fly" and one(t).arguments == {"to": "moon"}
    t = P.parse('<|tool_call_start|>[make_move(position=“4”)]<|tool_call_end|>')  # curly quotes are not
    assert not t.parse_ok


# ------------------------------------------------------------------ Llama-3 JSON
def test_llama3_single_several_prose():
    t = L.parse('{"name": "make_move", "parameters": {"position": 4}}')
    assert t.parse_ok and one(t).arguments == {"position": 4}
    t = L.parse('<|python_tag|>{"name": "get_board", "parameters": {}}; {"name": "make_move", "parameters": {"position": 1}}')
    assert t.parse_ok and [c.name for c in t.tool_calls] == ["get_board", "make_move"]
    t = L.parse("The best move is the center.")
    assert t.parse_ok and t.tool_calls == [] and t.content == "The best move is the center."


def test_llama3_think_truncated_quotes_nested_empty_unknown():
    t = L.parse('<think>center</think>\n{"name": "make_move", "parameters": {"position": 4}}')
    assert t.parse_ok and t.reasoning == "center"
    assert not L.parse('{"name": "make_move", "parameters": {"position": ').parse_ok
    assert not L.parse("{'name': 'make_move', 'parameters': {'position': 4}}").parse_ok
    t = L.parse('{"name": "q", "parameters": {"a": {"b": ["ü", 1]}}}')
    assert t.parse_ok and one(t).arguments == {"a": {"b": ["ü", 1]}}
    assert not L.parse("{}").parse_ok
    assert L.parse('{"name": "nope", "parameters": {}}').tool_calls[0].name == "nope"


# ------------------------------------------------------------------ rendering round trips + detection
@pytest.mark.parametrize("fmt", [H, P, L])
def test_render_parse_roundtrip(fmt):  # type: ignore[no-untyped-def]
    calls = [{"name": "make_move", "arguments": {"position": 4}}, {"name": "note", "arguments": {"text": "ok ✓", "tags": ["a"], "flag": False}}]
    text = fmt.render_turn("Thinking done.", calls, reasoning="why")
    t = fmt.parse(text)
    assert t.parse_ok and t.reasoning == "why" and t.content == "Thinking done."
    assert [(c.name, c.arguments) for c in t.tool_calls] == [(c["name"], c["arguments"]) for c in calls]


def test_detect_and_override():
    assert detect_format(CHAT_TEMPLATE).name == "hermes"
    assert detect_format("{{ '<|tool_call_start|>' }}").name == "pythonic"
    assert detect_format("<|start_header_id|>ipython<|end_header_id|>").name == "llama3"
    assert detect_format(None).name == "hermes"
    assert get_format("lfm2").name == "pythonic" and get_format("qwen").name == "hermes"
    with pytest.raises(ValueError):
        get_format("nope")
