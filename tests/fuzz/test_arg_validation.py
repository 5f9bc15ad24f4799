"""Fuzzing the validation of a model's tool arguments against the tool's MCP `inputSchema` (toolgym.accuracy).

`validate_args(schema, args)` decides `args_ok` before a call reaches a server. Properties: for any JSON object of
arguments (unknown keys, wrong types, huge or deeply nested values, unicode, NUL) it never raises, returns None or a
non-empty reason, and agrees with jsonschema's own verdict plus the documented extra rule (an argument the schema
does not name is refused unless the schema says `additionalProperties`). Schemas: the real ones of the bundled SQL
server (as a client lists them), and generated ones in the shapes MCP servers derive from typed functions.
"""

from __future__ import annotations

import functools
import json

import anyio
import jsonschema
import mcp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from toolgym.accuracy import validate_args

FAST = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
HEAVY = settings(max_examples=3000, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@functools.cache
def sql_server_schemas() -> dict[str, dict]:
    """inputSchema of every tool of mcp-server-sql, through an MCP client."""
    from mcp_server_sql import build_server

    srv = build_server()

    async def go():
        async with mcp.Client(srv) as c:
            return {t.name: t.input_schema for t in (await c.list_tools()).tools}
    try:
        return anyio.run(go)
    finally:
        srv.registry.close()


# ------------------------------------------------------------------------------------------- strategies
keys = st.sampled_from(["sql", "session", "table", "max_rows", "sample_rows", "tables", "position", "q"]) | st.text(max_size=12)
scalars = (st.none() | st.booleans() | st.integers() | st.integers(-2**70, 2**70) | st.floats()
           | st.text(max_size=30) | st.sampled_from(["", "\x00", "é" * 3, "1" * 5000, "x" * 100_000]))
values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=5) | st.dictionaries(keys, kids, max_size=5),
                      max_leaves=25)
deep = st.integers(1, 900).map(lambda n: functools.reduce(lambda v, _: [v], range(n), 0))
arguments = st.dictionaries(keys, values | deep, max_size=6)

leaf_schemas = st.sampled_from([
    {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"},
    {"type": "string", "minLength": 1, "maxLength": 10}, {"type": "integer", "minimum": 0, "maximum": 8},
    {"enum": ["a", "b", 1, None]}, {"const": 4}, {"type": "string", "pattern": "^[a-z_]+$"},
    {"anyOf": [{"type": "string"}, {"type": "null"}]}, {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
    {"type": ["string", "integer"]}, {},
])
property_schemas = st.recursive(leaf_schemas, lambda kids: st.builds(lambda i: {"type": "array", "items": i}, kids)
                                | st.builds(lambda p, r: {"type": "object", "properties": p,
                                                          "required": sorted(set(r) & set(p))},
                                            st.dictionaries(keys, kids, max_size=4), st.lists(keys, max_size=3)),
                                max_leaves=8)


@st.composite
def tool_schemas(draw) -> dict:
    props = draw(st.dictionaries(keys, property_schemas, max_size=5))
    schema = {"type": "object", "properties": props,
              "required": sorted(draw(st.sets(st.sampled_from(sorted(props)), max_size=3))) if props else []}
    if draw(st.booleans()):
        schema["additionalProperties"] = draw(st.booleans() | leaf_schemas)
    if draw(st.booleans()):
        schema["title"] = draw(st.text(max_size=10))
    return schema


def expected_verdict(schema: dict, args: dict) -> bool:
    props = schema.get("properties")
    if isinstance(props, dict) and "additionalProperties" not in schema and set(args) - set(props):
        return False
    return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema).is_valid(args)


def _check(schema: dict, args: dict) -> None:
    verdict = validate_args(schema, args)
    assert verdict is None or (isinstance(verdict, str) and verdict), verdict
    assert (verdict is None) == expected_verdict(schema, args), (schema, args, verdict)
    assert validate_args(schema, args) == verdict  # deterministic (validators are cached per schema)
    json.dumps(verdict)  # the reason goes back to the model as text


# ------------------------------------------------------------------------------------------- properties
@FAST
@given(tool=st.sampled_from(sorted(sql_server_schemas())), args=arguments)
def test_sql_server_schemas(tool, args):
    _check(sql_server_schemas()[tool], args)


@FAST
@given(schema=tool_schemas(), args=arguments)
def test_generated_schemas(schema, args):
    _check(schema, args)


@FAST
@given(schema=tool_schemas(), data=st.data())
def test_arguments_built_from_the_schema(schema, data):
    """Arguments drawn from the schema's own property names (most fuzzed ones are refused at once for unknown keys)."""
    names = sorted(schema["properties"])
    args = data.draw(st.dictionaries(st.sampled_from(names), values, max_size=len(names)) if names else st.just({}))
    _check(schema, args)


@pytest.mark.slow
@HEAVY
@given(schema=tool_schemas() | st.sampled_from(sorted(sql_server_schemas())).map(lambda t: sql_server_schemas()[t]),
       args=arguments)
def test_validation_heavy(schema, args):
    _check(schema, args)


def test_huge_and_deep_arguments_are_answered_quickly():
    import time

    schema = sql_server_schemas()["run_query"]
    for args in ({"sql": "x" * 1_000_000}, {"sql": functools.reduce(lambda v, _: [v], range(900), 0)},
                 {"sql": "SELECT 1", **{f"k{i}": i for i in range(10_000)}}, {"max_rows": 2**200, "sql": "s"}):
        t0 = time.perf_counter()
        verdict = validate_args(schema, args)
        assert time.perf_counter() - t0 < 1.0
        assert (verdict is None) == expected_verdict(schema, args)
