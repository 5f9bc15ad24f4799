"""The wiki MCP server: tools, ranking, search-syntax abuse, clear errors, the on-disk index, corpora, transports."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import mcp
import pytest
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_server_wiki import build_server
from mcp_server_wiki.corpus import iter_corpus
from mcp_server_wiki.index import WikiIndex, build_index, build_match, ensure_index, index_path

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def server():
    return build_server()


async def _call(server, tool: str, **args):
    async with mcp.Client(server) as c:
        r = await c.call_tool(tool, args)
        return r.is_error, r.content[0].text if r.content else ""


async def test_tools_are_typed_and_documented(server) -> None:
    async with mcp.Client(server) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert set(tools) == {"search", "open_page", "read_section", "find_in_page"}
    for t in tools.values():
        assert t.description and len(t.description) > 30
    assert tools["search"].input_schema["properties"]["k"]["type"] == "integer"
    assert tools["read_section"].input_schema["required"] == ["title", "section"]


async def test_search_ranks_the_named_page_first(server) -> None:
    titles = [a.title for a in iter_corpus("world")]
    rng = random.Random(0)
    async with mcp.Client(server) as c:
        for title in rng.sample(titles, 40):
            r = await c.call_tool("search", {"query": title, "k": 3})
            first = r.content[0].text.splitlines()[1]
            assert first.startswith(f"1. {title} (section:"), (title, r.content[0].text)
        r = await c.call_tool("search", {"query": "mathematician born", "k": 4})
        text = r.content[0].text
    assert text.startswith("Top 4 results") and text.count("**") >= 4  # snippets highlight matches


ABUSE = [
    '"', '"unterminated phrase', '""', 'NEAR(river city, 2)', 'NEAR', 'a* OR b*', '*', '**', 'river*', 'title:river',
    '{title heading}: city', 'body:x AND NOT y', 'OR OR AND', 'NOT', '^city', '(((', ')', 'a - b + c', "'; DROP TABLE pages; --",
    "x" * 10_240, "river " * 2000, "日本語の検索", "Zoë émigré naïve", "🙂🚀", "\x00\x01", "\u202e", "   ", "",
    "the of and", "a:b:c", "col:", ":", "-", "\\", "%_%", "NEAR(\"a\" \"b\")",
]


@pytest.mark.parametrize("query", ABUSE, ids=range(len(ABUSE)))
async def test_search_syntax_abuse_never_crashes(server, query: str) -> None:
    err, text = await _call(server, "search", query=query, k=5)
    assert not err, text
    assert text.startswith(("Top ", "No pages match", "Empty query"))
    assert build_match(query) is None or len(build_match(query)) < 3000


async def test_search_k_bounds(server) -> None:
    err, text = await _call(server, "search", query="city", k=10**9)
    assert not err and text.startswith("Top 50 results (k capped at 50)")
    err, text = await _call(server, "search", query="city", k=0)
    assert err and "k must be at least 1" in text
    err, text = await _call(server, "search", query="river city", k=2)
    assert not err and text.startswith("Top 2 results")


async def test_open_page_and_read_section(server) -> None:
    title = next(a for a in iter_corpus("world") if a.title.count(" ") == 1 and len(a.sections) >= 3)
    err, text = await _call(server, "open_page", title=title.title.upper())  # titles are case-insensitive
    assert not err and text.startswith(f"# {title.title}\n")
    for i, (heading, body) in enumerate(title.sections, 1):
        assert f"{i}. {heading} ({len(body)} chars)" in text
    heading, body = title.sections[1]
    err, text = await _call(server, "read_section", title=title.title, section=heading.lower())
    assert not err and text == f"## {title.title} — {heading}\n{body}"
    err, text2 = await _call(server, "read_section", title=title.title.replace(" ", "_"), section="2")
    assert not err and text2 == text
    word = body.split()[-1].strip(".")
    err, text = await _call(server, "find_in_page", title=title.title, text=word)
    assert not err and f"[{heading}]" in text


async def test_unknown_page_and_section_give_clear_errors(server) -> None:
    title = next(iter_corpus("world")).title
    err, text = await _call(server, "open_page", title=title[:-1])
    assert err and f"Unknown page {title[:-1]!r}" in text and f"Did you mean: {title}" in text
    err, text = await _call(server, "read_section", title="No Such Page Anywhere", section="History")
    assert err and "Unknown page 'No Such Page Anywhere'" in text and "Use search" in text
    err, text = await _call(server, "read_section", title=title, section="Nonexistent")
    assert err and f"Page {title!r} has no section 'Nonexistent'. Its sections: Introduction;" in text
    err, text = await _call(server, "read_section", title=title, section="99")
    assert err and "no section '99'" in text
    err, text = await _call(server, "find_in_page", title=title, text="   ")
    assert err and "empty" in text
    err, text = await _call(server, "open_page", title="")
    assert err and "Unknown page ''" in text


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def test_index_is_cached_and_queries_never_write(server, wiki_index_dir) -> None:
    path = ensure_index("world")
    assert path.parent == wiki_index_dir and path.suffix == ".sqlite"
    before, mtime = _sha(path), path.stat().st_mtime_ns
    assert ensure_index("world") == path and path.stat().st_mtime_ns == mtime  # not rebuilt
    async with mcp.Client(server) as c:
        for q in ABUSE[:12] + ["river", "city founded"]:
            await c.call_tool("search", {"query": q})
        await c.call_tool("open_page", {"title": "nope"})
    assert _sha(path) == before and path.stat().st_mtime_ns == mtime
    assert not list(path.parent.glob("*.tmp")) and not list(path.parent.glob("*-wal"))


def test_concurrent_first_builds_do_not_corrupt(tmp_path: Path) -> None:
    spec = "world:seed=4,articles=300"
    errors: list[BaseException] = []

    def build() -> None:
        try:
            build_index(iter_corpus(spec), index_path(spec, tmp_path), spec=spec)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=build) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert [p.name for p in tmp_path.iterdir()] == [index_path(spec, tmp_path).name]  # no temp files left
    idx = WikiIndex(index_path(spec, tmp_path))
    assert idx.page_count() == 300 and idx.meta["articles"] == 300
    assert idx._q("PRAGMA integrity_check")[0][0] == "ok"


def test_corpus_imports_jsonl_markdown_and_wikiextractor(tmp_path: Path) -> None:
    jl = tmp_path / "c.jsonl"
    long_text = "Lorem ipsum dolor. " * 600
    jl.write_text("\n".join(json.dumps(r) for r in [
        {"title": "Alpha Page", "text": "Alpha intro about quokkas.\n## Habitat\nQuokkas live on Rottnest.\n== Diet ==\nLeaves."},
        {"title": "Beta Page", "sections": [{"heading": "Intro", "text": "Beta text"}, {"title": "Long", "text": long_text}]},
        {"title": "", "text": "no title: skipped"}, {"title": "Empty"}, "not an object",
    ]) + "\nnot json\n")
    arts = {a.title: a.sections for a in iter_corpus(str(jl))}
    assert arts == {"Alpha Page": [("Introduction", "Alpha intro about quokkas."), ("Habitat", "Quokkas live on Rottnest."),
                                   ("Diet", "Leaves.")],
                    "Beta Page": [("Intro", "Beta text"), ("Long", long_text)]}
    md = tmp_path / "md"
    (md / "sub").mkdir(parents=True)
    (md / "first.md").write_text("# The First Note\nIntro line.\n## Details\nWombats dig burrows.\n")
    (md / "sub" / "second_note.md").write_text("Just text about echidnas.\n")
    assert {a.title: a.sections for a in iter_corpus(str(md))} == {
        "The First Note": [("Introduction", "Intro line."), ("Details", "Wombats dig burrows.")],
        "second note": [("Introduction", "Just text about echidnas.")]}
    wx = tmp_path / "extracted" / "AA"
    wx.mkdir(parents=True)
    (wx / "wiki_00").write_text(json.dumps({"id": "1", "url": "u", "title": "Platypus", "text": "Platypus lays eggs."})
                                + "\n" + json.dumps({"id": "2", "url": "u", "title": "Platypus", "text": "dup"}) + "\n")
    stats = build_index(iter_corpus(str(tmp_path / "extracted")), tmp_path / "wx.sqlite")
    assert (stats.articles, stats.skipped) == (1, 1)
    idx = WikiIndex(tmp_path / "wx.sqlite")
    assert [h.title for h in idx.search("eggs")] == ["Platypus"]


async def test_server_over_jsonl_corpus_pages_long_sections(tmp_path: Path) -> None:
    jl = tmp_path / "c.jsonl"
    jl.write_text(json.dumps({"title": "Beta Page", "sections": [
        {"heading": "Intro", "text": "Beta text"}, {"heading": "Long", "text": "word " * 2000}]}) + "\n")
    srv = build_server(corpus=str(jl))
    err, text = await _call(srv, "read_section", title="beta page", section="Long")
    assert not err and "more chars: call read_section again with offset=4000" in text
    err, text = await _call(srv, "read_section", title="beta page", section="Long", offset=8000)
    assert not err and text.endswith("word ") and "more chars" not in text
    err, text = await _call(srv, "read_section", title="beta page", section="Long", offset=20000)
    assert err and "outside the section" in text
    err, text = await _call(srv, "search", query="beta")
    assert not err and "1. Beta Page" in text


async def test_stdio_transport() -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server_wiki", "--corpus", "world"],
                                   env=dict(os.environ))
    async with mcp.Client(stdio_client(params)) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        r = await c.call_tool("search", {"query": '"unterminated NEAR(', "k": 3})
        r2 = await c.call_tool("open_page", {"title": "nowhere"})
    assert "search" in names and not r.is_error and r2.is_error and "Unknown page" in r2.content[0].text


async def test_streamable_http_transport() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "mcp_server_wiki", "--transport", "streamable-http", "--port",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "server did not start"
                time.sleep(0.1)
        async with mcp.Client(f"http://127.0.0.1:{port}/mcp") as c:
            r = await c.call_tool("search", {"query": "river", "k": 2})
        assert not r.is_error and r.content[0].text.startswith("Top 2 results")
    finally:
        proc.terminate()
        proc.wait(10)


def test_cli_index_and_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mcp_server_wiki.__main__ import main

    main(["export-world", "--out", str(tmp_path / "w.jsonl"), "--questions", str(tmp_path / "q.jsonl"),
          "--articles", "120", "--n", "12"])
    assert json.loads(capsys.readouterr().out)["articles"] == 120
    assert len((tmp_path / "q.jsonl").read_text().splitlines()) == 12
    args = ["index", "--corpus", str(tmp_path / "w.jsonl"), "--index-dir", str(tmp_path / "idx")]
    main(args)
    first = json.loads(capsys.readouterr().out)
    main(args)
    second = json.loads(capsys.readouterr().out)
    assert first["articles"] == 120 and not first["cached"]
    assert second["cached"] and second["path"] == first["path"]


def test_very_common_words_are_pruned_only_next_to_rarer_ones() -> None:
    idx = WikiIndex(ensure_index("world"))
    person = next(a.title for a in iter_corpus("world") if " " in a.title and "Society" not in a.title)
    assert idx._df('"born"') > 0.05 * idx.n_sections  # a very common word in this corpus
    assert '"born"' not in idx.match_for(f"{person} born")
    assert idx.match_for("born") == '"born"' and idx.search("born", 3)
    assert idx.search(f"{person} born", 1)[0].title == person
    assert build_match("the of") == '"the" OR "of"'  # only stopwords: they are kept
    assert set(idx.match_for("the of").split(" OR ")) == {'"the"', '"of"'}  # all common: the rarest 3 are kept
