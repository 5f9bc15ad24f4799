"""Tool schemas that explain themselves: a tool's description and one `description` per parameter, derived from a
typed, documented Python function (the MCP SDK's rule: schemas are derived, never hand-written).

A parameter's description comes from its annotation, `Annotated[str, Field(description="...")]` (what the MCP SDK
reads), or else from a Google-style `Args:` section of the docstring (what TRL and transformers read):

    async def suggest_move(board: str, agent_plays: str = "X") -> dict:
        '''Ask the agent for its move on a board.

        Args:
            board: The position, 9 cells row by row.
            agent_plays: The side the agent plays (choices: ["X", "O"]).
        '''

A description ending in `(choices: [...])` (a JSON list, the transformers convention) turns the parameter into an
enum (`Literal[...]`). The tool's description is the docstring without its sections (`Args:`, `Returns:`, ...), each
paragraph on one line. Used for the tools an env implements itself (`@env_tool`) and for the tools an env adds to
`toolgym serve` (`serve_tools`).

`brief_tool` is the other direction: the short view of a server's tool an env may show a small model instead of the
server's own wording (`tool_descriptions = "brief"`).
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic.fields import FieldInfo

_SECTION = re.compile(r"^(Args|Arguments|Parameters|Params|Returns|Return|Yields|Raises|Examples?|Notes?|"
                      r"Attributes|See Also|Warnings?|Todo):\s*$")
_ARG = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_CHOICES = re.compile(r"\s*\(choices:\s*(\[.*\])\)\s*\.?\s*$")


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """`(description, {parameter: description})` from a Google-style docstring. The description is the text before
    the first section header, paragraphs kept, each paragraph's lines joined; parameter texts likewise."""
    lines = inspect.cleandoc(doc or "").splitlines()
    body: list[str] = []
    params: dict[str, list[str]] = {}
    section: str | None = None
    current: str | None = None
    indent = 0
    for line in lines:
        stripped = line.strip()
        header = _SECTION.match(stripped) if line == line.lstrip() else None
        if header:
            section, current = header.group(1), None
            continue
        if section is None:
            body.append(line)
        elif section in ("Args", "Arguments", "Parameters", "Params") and stripped:
            level = len(line) - len(line.lstrip())
            m = _ARG.match(stripped)
            if m and (current is None or level <= indent):
                current, indent = m.group(1), level
                params[current] = [m.group(2)]
            elif current is not None:
                params[current].append(stripped)
    paragraphs = "\n".join(body).strip().split("\n\n")
    description = "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())
    return description, {k: " ".join(" ".join(v).split()) for k, v in params.items()}


def _has_description(annotation: Any) -> bool:
    if typing.get_origin(annotation) is not Annotated:
        return False
    return any(isinstance(m, FieldInfo) and m.description for m in annotation.__metadata__)


def describe_annotation(annotation: Any, text: str | None) -> Any:
    """`annotation` with `text` as its description (unless it has one); `(choices: [...])` makes it a Literal."""
    if not text or _has_description(annotation):
        return annotation
    m = _CHOICES.search(text)
    if m:
        choices = tuple(json.loads(m.group(1)))
        text = text[: m.start()].rstrip() or text
        text += "" if text.endswith((".", "!", "?")) else "."
        base = Literal[choices]  # type: ignore[valid-type]
        if typing.get_origin(annotation) is Annotated:
            return Annotated[(base, *annotation.__metadata__, FieldInfo(description=text))]
        return Annotated[base, FieldInfo(description=text)]
    if typing.get_origin(annotation) is Annotated:
        return Annotated[(typing.get_args(annotation)[0], *annotation.__metadata__, FieldInfo(description=text))]
    return Annotated[annotation, FieldInfo(description=text)]


def described_signature(fn: Callable[..., Any]) -> tuple[str, inspect.Signature]:
    """The tool description and a signature whose annotations are resolved types carrying each parameter's
    description (from `Annotated` metadata or the docstring's `Args:`)."""
    description, docs = parse_docstring(fn.__doc__)
    hints = typing.get_type_hints(fn, include_extras=True)
    sig = inspect.signature(fn)
    params = [p.replace(annotation=describe_annotation(hints.get(name, Any), docs.get(name)))
              for name, p in sig.parameters.items()]
    return description, sig.replace(parameters=params, return_annotation=hints.get("return", sig.return_annotation))


def for_mcp(fn: Callable[..., Any]) -> tuple[Callable[..., Any], str]:
    """`fn` ready for `MCPServer.add_tool(fn, description=...)`: its `__signature__` set to the described one (the
    SDK reads `__signature__` and derives the JSON schema from it), and its description."""
    description, sig = described_signature(fn)
    fn.__signature__ = sig  # type: ignore[attr-defined]
    return fn, description


def undescribed(schema: dict[str, Any]) -> list[str]:
    """Names of the properties of a JSON object schema that have no `description` (for tests and checks)."""
    return [name for name, prop in (schema.get("properties") or {}).items() if not prop.get("description")]


_SENTENCE_END = re.compile(r"[.!?](?=\s+[A-Z0-9(\"'`])")
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "approx.", "cf.", "incl.", "no.")
_BRIEF_DROP = ("$schema", "title")


def first_sentence(text: str) -> str:
    """The first sentence of `text` (up to its first `.`, `!` or `?` followed by a space and a capital, a digit or an
    opening bracket or quote, outside brackets and not ending an abbreviation such as "e.g."; at most its first
    line); the whole text when there is no such end."""
    line = text.strip().split("\n", 1)[0].strip()
    for m in _SENTENCE_END.finditer(line):
        head = line[: m.end()]
        if head.count("(") != head.count(")") or head.count("[") != head.count("]"):
            continue
        if head.lower().endswith(_ABBREVIATIONS):
            continue
        return head
    return line


def _brief_schema(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key in _BRIEF_DROP and not isinstance(value, dict):  # keywords (a property named "title" is under
                # "properties", below, and stays)
                continue
            if key == "description" and isinstance(value, str):
                out[key] = first_sentence(value)
            elif key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
                out[key] = {name: _brief_schema(sub) for name, sub in value.items()}
            else:
                out[key] = _brief_schema(value)
        return out
    if isinstance(node, list):
        return [_brief_schema(v) for v in node]
    return node


def brief_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """The brief view of an OpenAI-style `tools` entry: the tool's and every parameter's description cut to its
    first sentence (`first_sentence`), and the `$schema` and `title` keywords dropped -- wording a model reads and
    a validator does not need (types, enums, formats, patterns, ranges, `required` all stay). Server tool
    descriptions run to several sentences of advice ("Use with caution ...", "Only works within allowed
    directories."): for the npm filesystem server's six tools of `examples/own_server` the prompt falls from
    1,444 to 748 tokens under the tool-calling base's tokenizer."""
    fn = dict(tool.get("function") or {})
    if isinstance(fn.get("description"), str):
        fn["description"] = first_sentence(fn["description"])
    if isinstance(fn.get("parameters"), dict):
        fn["parameters"] = _brief_schema(fn["parameters"])
    return {**tool, "function": fn}


__all__ = ["brief_tool", "describe_annotation", "described_signature", "first_sentence", "for_mcp", "parse_docstring",
           "undescribed"]
