"""Tool schemas explain themselves: every tool of `toolgym serve`, of the bundled MCP servers and of the bundled
environments (including the tools an env implements itself) has a short description without a raw `Args:` block and
a `description` on every parameter; `toolgym tools ENV` shows them; closed sets are enums."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from mcp import Client
from pydantic import Field
from typer.testing import CliRunner

from toolgym import load_env, load_policy
from toolgym.cli import app
from toolgym.serve import build_agent_server
from toolgym.tool_schema import described_signature, parse_docstring, undescribed


def _problems(name: str, description: str | None, schema: dict[str, Any]) -> list[str]:
    out = []
    if not description or not description.strip():
        out.append(f"{name}: no description")
    elif "Args:" in description or "\n " in description:
        out.append(f"{name}: raw docstring in the description: {description!r}")
    out += [f"{name}.{p}: no description" for p in undescribed(schema)]
    return out


async def _mcp_problems(srv: Any) -> tuple[list[str], list[str]]:
    async with Client(srv) as client:
        tools = (await client.list_tools()).tools
    problems = [p for t in tools for p in _problems(t.name, t.description, t.input_schema)]
    return [t.name for t in tools], problems


@pytest.fixture
def wiki_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLGYM_WIKI_INDEX_DIR", str(tmp_path / "wiki-index"))


@pytest.mark.anyio
async def test_bundled_servers_describe_every_tool_and_parameter(wiki_cache: None) -> None:
    import mcp_server_sql
    import mcp_server_tictactoe
    import mcp_server_wiki

    names, problems = await _mcp_problems(mcp_server_tictactoe.build_server())
    assert {"new_game", "get_board", "make_move", "game_result", "end_game"} <= set(names)
    sql_names, sql_problems = await _mcp_problems(mcp_server_sql.build_server())
    assert {"run_query", "execute", "open_session", "dump_tables"} <= set(sql_names)
    wiki_names, wiki_problems = await _mcp_problems(mcp_server_wiki.build_server())
    assert {"search", "open_page", "read_section", "find_in_page"} <= set(wiki_names)
    assert not problems + sql_problems + wiki_problems, "\n".join(problems + sql_problems + wiki_problems)


@pytest.mark.anyio
async def test_served_agent_describes_its_tools() -> None:
    env = load_env("tictactoe", transport="inprocess")
    srv = build_agent_server(env, load_policy("scripted:minimax", env))
    async with Client(srv) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == {"run_agent", "suggest_move"}
        problems = [p for t in tools.values() for p in _problems(t.name, t.description, t.input_schema)]
        assert not problems, "\n".join(problems)
        side = tools["suggest_move"].input_schema["properties"]["agent_plays"]
        assert side["enum"] == ["X", "O"] and side["default"] == "X"
        res = await client.call_tool("suggest_move", {"board": "X.O.X....", "agent_plays": "Z"})
        assert res.is_error and "'X' or 'O'" in res.content[0].text
        res = await client.call_tool("suggest_move", {"board": "X.O.O...."})
        assert not res.is_error, res.content[0].text
    await env.aclose()


def test_tictactoe_prompt_is_what_the_committed_checkpoint_was_trained_on() -> None:
    """A tiny model reads its prompt literally: changing this text (the tool schemas the model sees) changes how the
    committed checkpoint plays (a changed make_move description once cost the previous checkpoint 1 % -> 11 % losses
    vs the optimal opponent). Change it only together with a retrained checkpoint."""
    env = load_env("tictactoe", transport="inprocess")

    async def tools() -> list[dict[str, Any]]:
        async with env:
            return env.model_tools()

    import asyncio

    assert asyncio.run(tools()) == [
        {"type": "function", "function": {
            "name": "get_board", "description": "Show the current board, whose move it is and the free cells.",
            "parameters": {"type": "object", "properties": {}}}},
        {"type": "function", "function": {
            "name": "make_move",
            "description": "Place your X on a free cell (0-8, row by row); the opponent replies at once.",
            "parameters": {"type": "object", "properties": {"position": {
                "description": "The cell to play, 0 (top left) to 8 (bottom right).", "title": "Position",
                "type": "integer"}}, "required": ["position"]}}},
    ]


@pytest.mark.parametrize("env_name", ["tictactoe", "sql", "wiki"])
def test_toolgym_tools_shows_the_descriptions(env_name: str, wiki_cache: None) -> None:
    """What the model sees (hidden tools and arguments removed), env tools (`submit_answer`, `answer`) included."""
    res = CliRunner().invoke(app, ["tools", env_name, "-a", "transport=inprocess"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    tools = {t["function"]["name"]: t["function"] for t in json.loads(res.output)}
    problems = [p for n, f in tools.items() for p in _problems(n, f["description"], f["parameters"])]
    assert not problems, "\n".join(problems)
    env_tool = {"sql": "submit_answer", "wiki": "answer", "tictactoe": "make_move"}[env_name]
    assert tools[env_tool]["parameters"]["properties"]


def test_google_docstrings_become_parameter_descriptions() -> None:
    async def fn(board: str, side: str = "X", depth: Annotated[int, Field(description="From the type.")] = 1,
                 note: Literal["a", "b"] = "a") -> str:
        """Do a thing
        over two lines.

        Second paragraph.

        Args:
            board: The position,
                continued on a second line.
            side (str): Who moves (choices: ["X", "O"]).
            depth: Ignored, the annotation has one.
            note: A note.

        Returns:
            Something.
        """
        return board

    description, sig = described_signature(fn)
    assert description == "Do a thing over two lines.\n\nSecond paragraph."
    import pydantic

    model = pydantic.create_model("m", **{n: (p.annotation, ... if p.default is p.empty else p.default)
                                          for n, p in sig.parameters.items()})
    props = model.model_json_schema()["properties"]
    assert props["board"]["description"] == "The position, continued on a second line."
    assert props["side"]["enum"] == ["X", "O"] and props["side"]["description"] == "Who moves."
    assert props["depth"]["description"] == "From the type."
    assert props["note"]["enum"] == ["a", "b"] and props["note"]["description"] == "A note."
    assert parse_docstring(None) == ("", {})
    assert parse_docstring("One line.") == ("One line.", {})


def test_first_sentence_and_the_brief_view_of_a_tool() -> None:
    from toolgym.tool_schema import brief_tool, first_sentence

    assert first_sentence("Read a file. Use with caution.") == "Read a file."
    assert first_sentence("Source zone (e.g. America/New_York). Use UTC if unsure.") == \
        "Source zone (e.g. America/New_York)."
    assert first_sentence("Use e.g. Foo here. Then bar.") == "Use e.g. Foo here."
    assert first_sentence("Version 2.5 is out. Next") == "Version 2.5 is out."
    assert first_sentence("No end here") == "No end here"
    assert first_sentence("First line\nSecond line. More.") == "First line"
    tool = {"type": "function", "function": {
        "name": "put", "description": "Store a note. Overwrites silently. Only within allowed folders.",
        "parameters": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "title": "putArgs",
                       "properties": {
                           "title": {"type": "string", "title": "Title", "description": "The title. Keep short."},
                           "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"], "title": "T"}},
                           "size": {"type": "integer", "minimum": 1, "description": "Bytes"}},
                       "required": ["title"]}}}
    brief = brief_tool(tool)
    fn = brief["function"]
    assert fn["description"] == "Store a note." and fn["name"] == "put"
    assert fn["parameters"] == {"type": "object", "required": ["title"], "properties": {
        "title": {"type": "string", "description": "The title."},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
        "size": {"type": "integer", "minimum": 1, "description": "Bytes"}}}
    assert tool["function"]["parameters"]["$schema"]  # the input is not changed
