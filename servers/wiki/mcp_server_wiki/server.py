"""The wiki MCP server: search a corpus, open pages, read sections.

Tools (all read-only, results are plain text meant for a model to read):
- `search(query, k=5)`: ranked pages (bm25 over title, section heading and text), each with its best section and
  a snippet with matched words in **bold**.
- `open_page(title)`: the page's numbered section list and its introduction.
- `read_section(title, section, offset=0)`: one section's text (by heading or number), in chunks of 4,000 chars.
- `find_in_page(title, text)`: sentences of a page that contain `text` (case-insensitive), with their sections.

Unknown pages and sections raise errors that say what exists (with "did you mean" suggestions), which MCP turns
into error results. The server is stateless: any number of clients can share one process.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from mcp_server_wiki.index import MAX_K, PageNotFound, SectionNotFound, WikiIndex, ensure_index

CHUNK = 4000
INTRO_CHARS = 1500
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
F = TypeVar("F", bound=Callable[..., Any])

# Tool parameters: types plus the description every MCP client shows (schemas are derived from these signatures).
Title = Annotated[str, Field(description="Page title as search shows it (case- and underscore-insensitive).")]
Query = Annotated[str, Field(description='Words to look for, e.g. a name or a few keywords; "a phrase" in double '
                                         "quotes, word* for a prefix.")]
K = Annotated[int, Field(description=f"How many pages to return (1 to {MAX_K}).")]
Section = Annotated[str, Field(description="Section heading (case-insensitive) or its number in open_page's list.")]
Offset = Annotated[int, Field(description="Character offset to continue a long section from (0: the start).")]
Needle = Annotated[str, Field(description="Text to find in the page (case-insensitive).")]


def _tool(srv: MCPServer) -> Callable[[F], F]:
    """`@srv.tool()` with the docstring as the description, its paragraphs unwrapped (MCPServer takes `__doc__`
    as is, indentation and line breaks included)."""
    def register(fn: F) -> F:
        paragraphs = inspect.cleandoc(fn.__doc__ or "").split("\n\n")
        return srv.tool(description="\n\n".join(" ".join(p.split()) for p in paragraphs))(fn)
    return register


def build_server(corpus: str = "world", index_dir: str | os.PathLike[str] | None = None,
                 index_path: str | os.PathLike[str] | None = None, rebuild: bool = False) -> MCPServer:
    """A server over `corpus` (a spec, see `mcp_server_wiki.corpus`), building its cached index if needed.

    `index_path` opens a prebuilt index file directly; `index_dir` overrides the cache folder.
    """
    path = index_path or ensure_index(corpus, index_dir, rebuild=rebuild)
    idx = WikiIndex(path)
    srv = MCPServer(
        "wiki",
        instructions=(
            f"An encyclopedia of {idx.page_count():,} pages. Find pages with search, then open_page to see a "
            "page's sections and read_section to read one. Page titles are case-insensitive."
        ),
        log_level="WARNING",  # the SDK logs every request at INFO through rich: ~30 % of a call's CPU
    )
    srv.wiki_index = idx  # type: ignore[attr-defined]  # for in-process callers (benchmarks, tests)

    def _resolve(title: str) -> tuple[int, str]:
        try:
            return idx.resolve(title)
        except PageNotFound as e:
            raise ToolError(str(e)) from None

    @_tool(srv)
    def search(query: Query, k: K = 5) -> str:
        """Full-text search over all pages; returns the best-matching pages, best first, each with its best section
        and a snippet. Words match in any order: pages with more and rarer matching words rank higher."""
        if k < 1:
            raise ToolError("k must be at least 1")
        hits = idx.search(query, min(k, MAX_K))
        if not hits:
            return f"No pages match {query[:200]!r}." if query.strip() else "Empty query: give some words to search."
        lines = [f"{i}. {h.title} (section: {h.section})\n   {h.snippet}" for i, h in enumerate(hits, 1)]
        note = f" (k capped at {MAX_K})" if k > MAX_K else ""
        return f"Top {len(hits)} results{note}:\n" + "\n".join(lines)

    @_tool(srv)
    def open_page(title: Title) -> str:
        """Open a page: its numbered list of sections and the text of its introduction."""
        pid, canon = _resolve(title)
        secs = idx.sections(pid)
        outline = "\n".join(f"{i}. {s.heading} ({s.chars} chars)" for i, s in enumerate(secs, 1))
        intro = idx.section_text(secs[0].id)
        if len(intro) > INTRO_CHARS:
            intro = intro[:INTRO_CHARS] + "… (read_section for the rest)"
        return f"# {canon}\n\nSections:\n{outline}\n\n## {secs[0].heading}\n{intro}"

    @_tool(srv)
    def read_section(title: Title, section: Section, offset: Offset = 0) -> str:
        """Read one section of a page, 4,000 characters at a time (a note tells the offset of the rest)."""
        try:
            canon, sec = idx.find_section(title, section)
        except (PageNotFound, SectionNotFound) as e:
            raise ToolError(str(e)) from None
        text = idx.section_text(sec.id)
        if offset < 0 or (offset >= len(text) and offset > 0):
            raise ToolError(f"offset {offset} is outside the section ({len(text)} chars)")
        chunk = text[offset : offset + CHUNK]
        rest = len(text) - offset - len(chunk)
        more = f"\n… ({rest} more chars: call read_section again with offset={offset + len(chunk)})" if rest > 0 else ""
        return f"## {canon} — {sec.heading}\n{chunk}{more}"

    @_tool(srv)
    def find_in_page(title: Title, text: Needle) -> str:
        """Find the sentences of a page that contain some text (case-insensitive), like Ctrl+F."""
        needle = " ".join(text.split()).casefold()
        if not needle:
            raise ToolError("text to find is empty")
        pid, canon = _resolve(title)
        found = []
        for s in idx.sections(pid):
            for sent in _SENTENCE.split(idx.section_text(s.id)):
                if needle in " ".join(sent.split()).casefold():
                    found.append(f"[{s.heading}] {sent.strip()}")
        if not found:
            return f"{text[:200]!r} does not occur in {canon!r}."
        shown = found[:20]
        extra = f"\n… and {len(found) - 20} more" if len(found) > 20 else ""
        return f"{len(found)} match(es) in {canon!r}:\n" + "\n".join(shown) + extra

    return srv
