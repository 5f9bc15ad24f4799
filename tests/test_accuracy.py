"""`toolgym.accuracy`: argument validation against an inputSchema and BFCL AST call matching."""

from __future__ import annotations

import pytest

from toolgym.accuracy import call_matches, check_mode, match_sequence, validate_args, value_matches

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


def test_normalized_mode_keeps_the_bfcl_rules() -> None:
    """`normalized` is the BFCL AST checker's comparison, kept as a named mode (it was the only one)."""
    def vm(v, a):  # type: ignore[no-untyped-def]
        return value_matches(v, a, "normalized")

    assert vm(3, 3.0) and vm(3.0, 3.0)  # int accepted for float
    assert not vm(3.5, 3)  # but not a float for an int
    assert vm("New York, NY", "new york ny")  # case, spaces, punctuation ignored
    assert not vm("New Jersey", "new york")
    assert vm([1, 2.0], [1, 2.0]) and not vm([1, 2], [2, 1]) and not vm([1], [1, 2])
    assert vm({"a": "X y"}, {"a": "xy"}) and not vm({"a": 1, "b": 2}, {"a": 1})
    assert vm(True, True) and not vm(1, True) and not vm(True, 1)


# issue 30: wrong calls that BFCL normalisation accepted (call_match 1.0 on 5 of 24 wrong calls)
LOOSE = [
    ("SELECT price FROM products WHERE name = 'wool-rug'", "SELECT price FROM products WHERE name = 'Wool Rug'"),
    ("SELECT name FROM products WHERE price = 1999", "SELECT name FROM products WHERE price = 19.99"),
    ("SELECT name price FROM products", "SELECT name, price FROM products"),  # a comma dropped
    ("", "."),  # repo_path "" for "."
    ("Wool Rug", "wool rug"),
]


@pytest.mark.parametrize(("value", "accepted"), LOOSE)
def test_exact_is_the_default_and_refuses_what_normalisation_accepts(value: str, accepted: str) -> None:
    assert value_matches(value, accepted, "normalized")  # the old rule said these match
    assert not value_matches(value, accepted)  # exact, the default, does not
    assert not call_matches("q", {"x": value}, {"name": "q", "arguments": {"x": [accepted, "never"]}})
    assert call_matches("q", {"x": value}, {"name": "q", "arguments": {"x": [accepted]}, "match": "normalized"})
    assert call_matches("q", {"x": value}, {"name": "q", "arguments": {"x": [accepted]}}, default="normalized")


def test_exact_mode() -> None:
    assert value_matches("Wool Rug", "Wool Rug") and not value_matches("wool rug", "Wool Rug")
    assert value_matches(2, 2.0) and value_matches(2.0, 2)  # JSON numbers by value
    assert not value_matches(1999, 19.99) and not value_matches("19.99", 19.99)  # no type coercion
    assert not value_matches(1, True) and not value_matches(True, 1) and value_matches(False, False)
    assert value_matches([1, "a"], [1, "a"]) and not value_matches(["a", 1], [1, "a"])
    assert value_matches({"k": [1]}, {"k": [1]}) and not value_matches({"k": [1], "j": 0}, {"k": [1]})
    assert value_matches(None, None) and not value_matches("", None)


def test_case_insensitive_numeric_regex_and_set_modes() -> None:
    assert value_matches("WOOL RUG", "Wool Rug", "case_insensitive")
    assert not value_matches("Wool-Rug", "Wool Rug", "case_insensitive")  # punctuation still counts
    assert value_matches(["A", "b"], ["a", "B"], "case_insensitive")
    tol = {"mode": "numeric", "tolerance": 0.01}
    assert value_matches(19.995, 19.99, tol) and not value_matches(20.01, 19.99, tol)
    assert not value_matches("19.99", 19.99, tol) and not value_matches(True, 1, tol)
    assert value_matches(1.0000001, 1, "numeric") and not value_matches(1.001, 1, "numeric")
    assert value_matches("SELECT  count(*) FROM t", r"(?i)select\s+count\(\*\)\s+from\s+t", "regex")
    assert not value_matches("SELECT count(*) FROM t WHERE 1", r"(?i)select\s+count\(\*\)\s+from\s+t", "regex")
    assert value_matches(42, r"4\d", "regex")  # a number matches as its JSON text
    assert value_matches(["b", "a", "a"], ["a", "b"], "set") and not value_matches(["a"], ["a", "b"], "set")
    assert not value_matches(["a", "c"], ["a", "b"], "set") and not value_matches("ab", ["a", "b"], "set")
    exp = {"name": "f", "arguments": {"tags": [["x", "y"]], "who": ["Ann"]}, "match": {"tags": "set"}}
    assert call_matches("f", {"tags": ["y", "x"], "who": "Ann"}, exp)
    assert not call_matches("f", {"tags": ["y", "x"], "who": "ann"}, exp)  # who: the default, exact
    assert call_matches("f", {"tags": ["y", "x"], "who": "ann"}, exp, default="case_insensitive")
    with pytest.raises(ValueError, match="did you mean 'exact'"):
        value_matches(1, 1, "exakt")


def test_check_mode_names_what_is_wrong() -> None:
    assert check_mode("regex") is None and check_mode({"mode": "numeric", "tolerance": 0.5}) is None
    assert "did you mean 'set'" in check_mode("sett")
    assert "takes no option" in check_mode({"mode": "exact", "tolerance": 1})
    assert "tolerance must be a number" in check_mode({"mode": "numeric", "tolerance": "x"})
    assert "is a name" in check_mode(3)


def test_call_matches_bfcl() -> None:
    exp = {"name": "book", "arguments": {"city": ["Paris", "paris, france"], "nights": [2], "breakfast": [True, ""]},
           "match": "normalized"}
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


def test_call_similarity_gives_partial_credit_for_near_copies() -> None:
    from toolgym.accuracy import call_similarity

    want = [{"name": "save", "arguments": {"title": ["vetane_jasmine"], "body": ["clean beacon zobulte"],
                                           "tag": ["", "x"]}}]
    exact = call_similarity([("save", {"title": "vetane_jasmine", "body": "clean beacon zobulte"})], want)
    near = call_similarity([("save", {"title": "vetane_jasmine", "body": "cleansaacon zobulte"})], want)
    far = call_similarity([("save", {"title": "vetane_jasmine", "body": "zzz"})], want)
    assert exact == 1.0 and 0.9 < near < 1.0 and 0.6 < far < near
    # a missing required argument and an unexpected one score 0 for that parameter; the wrong tool scores 0
    assert call_similarity([("save", {"title": "vetane_jasmine"})], want) == pytest.approx(2 / 3)
    assert call_similarity([("save", {"title": "vetane_jasmine", "body": "clean beacon zobulte", "x": 1})],
                           want) == pytest.approx(3 / 4)
    assert call_similarity([("load", {"title": "vetane_jasmine", "body": "clean beacon zobulte"})], want) == 0.0
    assert call_similarity([("save", None)], want) == 0.0
    # numbers are right or wrong; a missing or extra call costs a whole call; no expected call: abstain or 0
    two = [{"name": "add", "arguments": {"a": [2], "b": [3]}}, {"name": "save", "arguments": {"title": ["t"]}}]
    assert call_similarity([("add", {"a": 2, "b": 4})], two) == pytest.approx(0.25)
    assert call_similarity([("add", {"a": 2, "b": 3}), ("save", {"title": "t"}), ("save", {"title": "t"})],
                           two) == pytest.approx(2 / 3)
    assert call_similarity([], []) == 1.0 and call_similarity([("add", {})], []) == 0.0
    # a value that matches under the call's mode is full credit; an inexact call never reaches 1
    ci = [{"name": "f", "arguments": {"q": ["Wool Rug"]}, "match": "normalized"}]
    assert call_similarity([("f", {"q": "wool-rug"})], ci) == 1.0
    assert call_similarity([("f", {"q": "Wool Rug", "r": "x"})], [{"name": "f", "arguments": {"q": ["Wool Rug"],
                                                                   "r": ["y" * 500 + "x"]}}]) < 1.0


def test_calls_match_is_the_whole_sequence_rule():
    from toolgym.accuracy import calls_match

    exp = [{"name": "a", "arguments": {"x": [1]}}, {"name": "b", "arguments": {}}]
    assert calls_match([("a", {"x": 1}), ("b", {})], exp)
    assert not calls_match([("a", {"x": 1})], exp) and not calls_match([("a", {"x": 1}), ("b", {}), ("b", {})], exp)
    assert not calls_match([("b", {}), ("a", {"x": 1})], exp) and not calls_match([("a", None), ("b", {})], exp)
    assert calls_match([], []) and not calls_match([("a", {"x": 1})], [])
