"""`toolgym.accuracy`: argument validation against an inputSchema and BFCL AST call matching."""

from __future__ import annotations

import pytest

from toolgym.accuracy import call_matches, match_sequence, validate_args, value_matches

SCHEMA = {"type": "object", "properties": {"position": {"type": "integer", "minimum": 0, "maximum": 8},
                                           "note": {"type": "string"}}, "required": ["position"]}


def test_validate_args() -> None:
    assert validate_args(SCHEMA, {"position": 3}) is None
    assert validate_args(SCHEMA, {"position": 3, "note": "x"}) is None
    assert "'position' is a required property" in validate_args(SCHEMA, {})
    assert "is not of type 'integer'" in validate_args(SCHEMA, {"position": "3"})
    assert "argument 'position'" in validate_args(SCHEMA, {"position": 9})
    assert "unexpected argument(s) ['colour']" in validate_args(SCHEMA, {"position": 1, "colour": "red"})
    # a schema that declares additionalProperties decides for itself
    assert validate_args({**SCHEMA, "additionalProperties": True}, {"position": 1, "colour": "red"}) is None
    assert "colour" in validate_args({**SCHEMA, "additionalProperties": False}, {"position": 1, "colour": "red"})
    assert validate_args({"type": "object"}, {"anything": 1}) is None


def test_value_matches_rules() -> None:
    assert value_matches(3, 3.0) and value_matches(3.0, 3.0)  # int accepted for float
    assert not value_matches(3.5, 3)  # but not a float for an int
    assert value_matches("New York, NY", "new york ny")  # case, spaces, punctuation ignored
    assert not value_matches("New Jersey", "new york")
    assert value_matches([1, 2.0], [1, 2.0]) and not value_matches([1, 2], [2, 1]) and not value_matches([1], [1, 2])
    assert value_matches({"a": "X y"}, {"a": "xy"}) and not value_matches({"a": 1, "b": 2}, {"a": 1})
    assert value_matches(True, True) and not value_matches(1, True) and not value_matches(True, 1)


def test_call_matches_bfcl() -> None:
    exp = {"name": "book", "arguments": {"city": ["Paris", "paris, france"], "nights": [2], "breakfast": [True, ""]}}
    assert call_matches("book", {"city": "PARIS", "nights": 2}, exp)  # optional omitted
    assert call_matches("book", {"city": "Paris France", "nights": 2.0, "breakfast": True}, exp)
    assert not call_matches("book", {"city": "Paris", "nights": 2, "breakfast": False}, exp)
    assert not call_matches("book", {"city": "Paris"}, exp)  # required missing
    assert not call_matches("book", {"city": "Paris", "nights": 2, "pets": 1}, exp)  # unexpected argument
    assert not call_matches("hotel", {"city": "Paris", "nights": 2}, exp)  # wrong name
    assert not call_matches("book", None, exp)  # unparsable arguments
    # a plain value is one option; a list-valued argument is a list of options
    assert call_matches("f", {"x": 4}, {"name": "f", "arguments": {"x": 4}})
    assert call_matches("f", {"cells": [1, 2]}, {"name": "f", "arguments": {"cells": [[1, 2], [2, 1]]}})
    assert call_matches("f", {"cells": [2, 1]}, {"name": "f", "arguments": {"cells": [[1, 2], [2, 1]]}})
    assert not call_matches("f", {"cells": [1]}, {"name": "f", "arguments": {"cells": [[1, 2]]}})
    assert call_matches("f", {}, {"name": "f"})


@pytest.mark.parametrize(("calls", "flags"), [
    ([("a", {"x": 1}), ("b", {})], [True, True]),
    ([("b", {}), ("a", {"x": 1})], [False, False]),
    ([("a", {"x": 1}), ("b", {}), ("c", {})], [True, True, False]),
    ([], []),
])
def test_match_sequence(calls, flags) -> None:
    expected = [{"name": "a", "arguments": {"x": [1]}}, {"name": "b", "arguments": {}}]
    assert match_sequence(calls, expected) == flags
