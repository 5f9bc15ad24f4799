"""Tool-call accuracy (BFCL-aligned): argument validation against the tool's `inputSchema` and AST-style matching
of a call against an expected call.

`validate_args` also rejects argument names the schema does not list (unless it sets `additionalProperties`).

Expected calls in a task use BFCL's ground-truth shape, each argument listing its acceptable values:
`{"name": "make_move", "arguments": {"position": [4]}}`. A plain (non-list) value is read as a one-value list, so a
list-valued argument is written as a list of options: `{"cells": [[1, 2]]}`. A parameter whose
list contains `""` (or None) is optional. Matching rules (BFCL AST checker): same function name; no unexpected
arguments; every required argument present; a value matches if it equals one acceptable value, where strings compare
case-insensitively ignoring spaces and common punctuation, ints are accepted for floats, and lists/dicts compare
element-wise with the same rules.
"""

from __future__ import annotations

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


def value_matches(value: Any, accepted: Any) -> bool:
    """BFCL-style equality of one argument value against one acceptable value."""
    if isinstance(accepted, bool) or isinstance(value, bool):
        return value is accepted or value == accepted and type(value) is type(accepted)
    if isinstance(accepted, float) and isinstance(value, int | float):
        return abs(float(value) - accepted) <= 1e-9 * max(1.0, abs(accepted))
    if isinstance(accepted, int) and isinstance(value, int):
        return value == accepted
    if isinstance(accepted, str) and isinstance(value, str):
        return _norm_str(value) == _norm_str(accepted)
    if isinstance(accepted, list) and isinstance(value, list | tuple):
        return len(value) == len(accepted) and all(value_matches(v, a) for v, a in zip(value, accepted, strict=True))
    if isinstance(accepted, dict) and isinstance(value, dict):
        return set(value) == set(accepted) and all(value_matches(value[k], accepted[k]) for k in accepted)
    return bool(value == accepted)


def call_matches(name: str, args: dict[str, Any] | None, expected: dict[str, Any]) -> bool:
    """Whether a call equals an expected call under BFCL AST rules (see module docstring)."""
    if args is None or name != expected.get("name"):
        return False
    spec: dict[str, Any] = expected.get("arguments", {})
    if set(args) - set(spec):
        return False
    for param, accepted in spec.items():
        options = accepted if isinstance(accepted, list) else [accepted]
        optional = any(o == "" or o is None for o in options)
        if param not in args:
            if not optional:
                return False
            continue
        if not any(value_matches(args[param], o) for o in options if not (o == "" or o is None)):
            return False
    return True


def match_sequence(calls: list[tuple[str, dict[str, Any] | None]], expected: list[dict[str, Any]]) -> list[bool]:
    """Position-wise match of the model's calls against the expected calls (one flag per model call)."""
    flags = []
    for i, (name, args) in enumerate(calls):
        flags.append(i < len(expected) and call_matches(name, args, expected[i]))
    return flags
