"""Tool-call accuracy (BFCL-aligned): argument validation against the tool's `inputSchema` and matching of a call
against an expected call.

`validate_args` also rejects argument names the schema does not list (unless it sets `additionalProperties`).

Expected calls in a task use BFCL's ground-truth shape, each argument listing its acceptable values:
`{"name": "make_move", "arguments": {"position": [4]}}`. A plain (non-list) value is read as a one-value list, so a
list-valued argument is written as a list of options: `{"cells": [[1, 2]]}`. A parameter whose list contains `""`
(or None) is optional. A call matches when it has the same name, no unexpected arguments, every required argument,
and each value equals one acceptable value under the argument's **matching mode** (`MATCH_MODES`):

- `exact` (the default): equal JSON values -- strings character for character, numbers by value (`2` equals `2.0`,
  `1999` does not equal `19.99`), booleans only booleans, lists in order, objects key by key;
- `case_insensitive`: as exact, strings compared case-folded;
- `normalized`: BFCL's AST checker -- strings compared case-insensitively ignoring spaces and common punctuation
  (`'wool-rug'` equals `'Wool Rug'`), ints accepted for floats;
- `numeric`: numbers within `tolerance` (absolute, default 1e-6): `{"mode": "numeric", "tolerance": 0.01}`;
- `regex`: each acceptable value is a pattern the whole value must match (`re.fullmatch`; a number is matched as
  its JSON text);
- `set`: lists equal as sets (order and repeats ignored; elements compared exactly).

An expected call names modes in its `match` key: one mode for every argument (`"match": "case_insensitive"`) or one
per argument (`"match": {"query": "normalized", "limit": {"mode": "numeric", "tolerance": 1}}`); arguments it does
not name use the env's default (`StatefulToolEnv.call_match_mode`, `[tasks] match` in a config env: `exact`).
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

import jsonschema

_PUNCT = re.compile(r"[\s,./\-_*^'\"]")


_VALIDATORS: dict[int, tuple[dict[str, Any], Any]] = {}


def _validator(schema: dict[str, Any]) -> Any:
    """A compiled validator per schema object (schemas are built once per env and kept alive)."""
    hit = _VALIDATORS.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    v = cls(schema)
    if len(_VALIDATORS) > 4096:
        _VALIDATORS.clear()
    _VALIDATORS[id(schema)] = (schema, v)
    return v


def validate_args(schema: dict[str, Any], args: dict[str, Any]) -> str | None:
    """Return None when `args` satisfies `schema`, else a short, model-readable reason.

    An argument the schema does not name is rejected (BFCL: no unexpected arguments) unless the schema says
    `additionalProperties` itself: MCP servers derive schemas from typed functions without it and silently drop
    unknown keys, which would hide a hallucinated parameter from the model."""
    props = schema.get("properties")
    if isinstance(props, dict) and "additionalProperties" not in schema:
        unknown = sorted(k for k in args if k not in props)
        if unknown:
            return f"unexpected argument(s) {unknown}; the tool takes: {', '.join(sorted(props)) or 'none'}"
    validator = _validator(schema)
    errors = sorted(validator.iter_errors(args), key=lambda e: list(e.path))
    if not errors:
        return None
    e = errors[0]
    where = ".".join(str(p) for p in e.path)
    return f"argument {where!r}: {e.message}" if where else e.message


def _norm_str(s: str) -> str:
    return _PUNCT.sub("", s).lower()


MATCH_MODES = ("exact", "case_insensitive", "normalized", "numeric", "regex", "set")
"""The names of the argument matching modes (see the module docstring)."""


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _same(value: Any, accepted: Any, leaf: Any) -> bool:
    """Structural equality: lists in order and objects key by key, scalars compared by `leaf(value, accepted)`."""
    if isinstance(accepted, list) and isinstance(value, list | tuple):
        return len(value) == len(accepted) and all(_same(v, a, leaf) for v, a in zip(value, accepted, strict=True))
    if isinstance(accepted, dict) and isinstance(value, dict):
        return set(value) == set(accepted) and all(_same(value[k], accepted[k], leaf) for k in accepted)
    if isinstance(accepted, list | dict) or isinstance(value, list | tuple | dict):
        return False
    if isinstance(accepted, bool) or isinstance(value, bool):
        return type(value) is type(accepted) and value == accepted
    return bool(leaf(value, accepted))


def _exact_leaf(v: Any, a: Any) -> bool:
    if _is_num(v) and _is_num(a):
        return bool(v == a)
    return type(v) is type(a) and bool(v == a)


def _ci_leaf(v: Any, a: Any) -> bool:
    if isinstance(v, str) and isinstance(a, str):
        return v.casefold() == a.casefold()
    return _exact_leaf(v, a)


def _bfcl_leaf(v: Any, a: Any) -> bool:
    if isinstance(a, float) and _is_num(v):
        return abs(float(v) - a) <= 1e-9 * max(1.0, abs(a))
    if isinstance(a, int) and isinstance(v, int):
        return bool(v == a)
    if isinstance(a, str) and isinstance(v, str):
        return _norm_str(v) == _norm_str(a)
    return bool(v == a)


def _mode_of(spec: Any) -> tuple[str, dict[str, Any]]:
    """`(mode, options)` of a mode spec: a name, or `{"mode": name, ...options}`."""
    if isinstance(spec, str):
        return spec, {}
    if isinstance(spec, dict) and isinstance(spec.get("mode"), str):
        return spec["mode"], {k: v for k, v in spec.items() if k != "mode"}
    raise ValueError(f"a matching mode is a name ({', '.join(MATCH_MODES)}) or {{\"mode\": name, ...}}, not {spec!r}")


def check_mode(spec: Any) -> str | None:
    """None when `spec` is a valid matching mode, else why not (for `toolgym check`)."""
    try:
        mode, opts = _mode_of(spec)
    except ValueError as exc:
        return str(exc)
    if mode not in MATCH_MODES:
        close = difflib.get_close_matches(mode, MATCH_MODES, 1)
        return f"unknown matching mode {mode!r}" + (f" (did you mean {close[0]!r}?)" if close else "") + \
            f"; modes: {', '.join(MATCH_MODES)}"
    extra = set(opts) - ({"tolerance"} if mode == "numeric" else set())
    if extra:
        return f"matching mode {mode!r} takes no option(s) {sorted(extra)}"
    if mode == "numeric" and "tolerance" in opts and not (_is_num(opts["tolerance"]) and opts["tolerance"] >= 0):
        return f"numeric tolerance must be a number >= 0, not {opts['tolerance']!r}"
    return None


def value_matches(value: Any, accepted: Any, mode: Any = "exact") -> bool:
    """Whether one argument value equals one acceptable value under matching mode `mode` (a name or a
    `{"mode": ..., ...}` spec; see the module docstring). An unknown mode raises `ValueError`."""
    name, opts = _mode_of(mode)
    if name == "exact":
        return _same(value, accepted, _exact_leaf)
    if name == "case_insensitive":
        return _same(value, accepted, _ci_leaf)
    if name == "normalized":
        return _same(value, accepted, _bfcl_leaf)
    if name == "numeric":
        tol = float(opts.get("tolerance", 1e-6))
        return _same(value, accepted, lambda v, a: _is_num(v) and _is_num(a) and abs(v - a) <= tol + 1e-12)
    if name == "regex":
        if not isinstance(accepted, str):
            return False
        text = value if isinstance(value, str) else json.dumps(value) if _is_num(value) else None
        return text is not None and re.fullmatch(accepted, text) is not None
    if name == "set":
        if not (isinstance(value, list | tuple) and isinstance(accepted, list)):
            return False
        return all(any(_same(v, a, _exact_leaf) for a in accepted) for v in value) and \
            all(any(_same(v, a, _exact_leaf) for v in value) for a in accepted)
    raise ValueError(check_mode(mode) or f"unknown matching mode {mode!r}")


def argument_modes(expected: dict[str, Any], default: Any = "exact") -> dict[str, Any]:
    """The matching mode of each argument of an expected call: its `match` entry (one mode, or one per argument),
    else `default`."""
    spec = expected.get("match")
    params = expected.get("arguments", {}) or {}
    if spec is None:
        return {p: default for p in params}
    if isinstance(spec, dict) and "mode" not in spec:
        return {p: spec.get(p, default) for p in params}
    return {p: spec for p in params}


def is_optional_marker(option: Any) -> bool:
    """Whether an acceptable value is BFCL's "may be left out" marker (`""` or None)."""
    return option is None or (isinstance(option, str) and option == "")


def call_matches(name: str, args: dict[str, Any] | None, expected: dict[str, Any], default: Any = "exact") -> bool:
    """Whether a call equals an expected call (see the module docstring); `default`: the mode of arguments the
    expected call's `match` does not name."""
    if args is None or name != expected.get("name"):
        return False
    return all(s == 1.0 for s in _argument_scores(args, expected, default, partial=False))


def _argument_scores(args: dict[str, Any], expected: dict[str, Any], default: Any, partial: bool) -> list[float]:
    """One score per argument of a call whose name is the expected one: 0 for an unexpected argument or a missing
    required one, 1 for a left-out optional one or a value an option accepts under its mode; a value no option
    accepts scores 0, or with `partial` (strings only) its best `difflib` ratio against the string options."""
    spec: dict[str, Any] = expected.get("arguments", {}) or {}
    modes = argument_modes(expected, default)
    scores = [0.0 for p in args if p not in spec]
    for param, accepted in spec.items():
        options = accepted if isinstance(accepted, list) else [accepted]
        real = [o for o in options if not is_optional_marker(o)]
        if param not in args:
            scores.append(1.0 if len(real) < len(options) else 0.0)
        elif any(value_matches(args[param], o, modes[param]) for o in real):
            scores.append(1.0)
        elif partial and isinstance(args[param], str):
            scores.append(max((difflib.SequenceMatcher(None, args[param], o, autojunk=False).ratio()
                               for o in real if isinstance(o, str)), default=0.0))
        else:
            scores.append(0.0)
    return scores


def calls_match(calls: list[tuple[str, dict[str, Any] | None]], expected: list[dict[str, Any]],
                default: Any = "exact") -> bool:
    """Whether a rollout made exactly the expected calls: as many, in order, each `call_matches` (the `call_match`
    reward's rule; no expected calls: no call made)."""
    return len(calls) == len(expected) and all(
        call_matches(name, args, e, default) for (name, args), e in zip(calls, expected, strict=True))


def match_sequence(calls: list[tuple[str, dict[str, Any] | None]], expected: list[dict[str, Any]],
                   default: Any = "exact") -> list[bool]:
    """Position-wise match of the model's calls against the expected calls (one flag per model call)."""
    flags = []
    for i, (name, args) in enumerate(calls):
        flags.append(i < len(expected) and call_matches(name, args, expected[i], default))
    return flags


def call_similarity(calls: list[tuple[str, dict[str, Any] | None]], expected: list[dict[str, Any]],
                    default: Any = "exact") -> float:
    """Partial credit for a rollout's calls against the expected calls, in [0, 1] -- a denser reward than
    `call_matches` for RL on copying (an argument one character off scores near 1, not 0; fine-grained tool rewards
    as in ToolRL, Qian et al. 2025). Position by position: a call with the wrong name (or unparsed arguments) scores
    0, an exactly matching one 1, else the mean over the expected and given parameters of: 1 for a matching value
    (or a left-out optional one), the string similarity for a string that does not match, 0 for a missing required
    or an unexpected argument. Summed over positions and divided by the longer of the two lists, so a missing or an
    extra call costs a whole call. No expected calls: 1 when no call was made, else 0. Only the expected calls score
    1 (an inexact call is capped at 0.999)."""
    if not expected:
        return float(not calls)
    total = 0.0
    for (name, args), exp in zip(calls, expected):  # noqa: B905 -- positions past the shorter list score 0
        if args is None or name != exp.get("name"):
            continue
        if call_matches(name, args, exp, default):
            total += 1.0
            continue
        scores = _argument_scores(args, exp, default, partial=True)
        total += min(sum(scores) / len(scores), 0.999) if scores else 0.0
    return total / max(len(calls), len(expected))
