"""Corpora: what an index is built from. An `Article` (`mcp_server_wiki.article`, re-exported here) is a title and an
ordered list of (heading, text) sections.

Sources (`iter_corpus(spec)` picks one from the spec string):

- `world` / `world:seed=7,articles=400` — the bundled synthetic encyclopedia (`mcp_server_wiki.world`).
- a JSONL file (`.jsonl`, `.json`, optionally `.gz` / `.bz2`): one object per line with `title` and either
  `text` (Markdown `#`/`##` or wikitext `== H ==` headings split it into sections; text before the first heading
  is the "Introduction") or `sections` (a list of `{"heading"|"title": ..., "text": ...}` objects).
- a folder: every `*.md` / `*.markdown` file below it is one article (title: the first `# ` heading, else the file
  name), or, when it holds no Markdown, every other file is read as JSONL. The latter is the processed Wikipedia
  dump path: WikiExtractor's `--json` output folder (`extracted/AA/wiki_00`, ... lines of
  `{"id", "url", "title", "text"}`) can be given as is.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from mcp_server_wiki.article import LEAD, Article

_MD_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_WIKI_HEADING = re.compile(r"^(={2,6})\s*(.+?)\s*\1\s*$")


def split_sections(text: str, lead: str = LEAD) -> list[tuple[str, str]]:
    """Split text on Markdown (`## H`) or wikitext (`== H ==`) headings; the part before the first is the lead.

    A level-1 Markdown heading (`# Title`) is treated as the article title and skipped.
    """
    sections: list[tuple[str, list[str]]] = [(lead, [])]
    for line in text.splitlines():
        m = _MD_HEADING.match(line) or _WIKI_HEADING.match(line)
        if m:
            if m.group(1) == "#":
                continue
            sections.append((m.group(2).strip(), []))
        else:
            sections[-1][1].append(line)
    out = [(h, "\n".join(lines).strip()) for h, lines in sections]
    if out and not out[0][1] and len(out) > 1:
        out = out[1:]
    return out


def _dedupe_headings(sections: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: dict[str, int] = {}
    out = []
    for h, t in sections:
        h = h.strip() or "Section"
        n = seen.get(h.casefold(), 0)
        seen[h.casefold()] = n + 1
        out.append((h if n == 0 else f"{h} ({n + 1})", t))
    return out


def article_from_record(rec: dict[str, Any]) -> Article | None:
    """An Article from one JSONL object, or None when it has no title or no text."""
    title = str(rec.get("title") or "").strip()
    if not title:
        return None
    if isinstance(rec.get("sections"), list):
        secs = []
        for s in rec["sections"]:
            if isinstance(s, dict):
                secs.append((str(s.get("heading") or s.get("title") or "Section"), str(s.get("text") or "")))
            elif isinstance(s, (list, tuple)) and len(s) == 2:
                secs.append((str(s[0]), str(s[1])))
    else:
        secs = split_sections(str(rec.get("text") or ""))
    secs = [(h, t) for h, t in secs if t.strip()]
    if not secs:
        return None
    return Article(title, _dedupe_headings(secs))


def _open_text(path: Path):
    name = path.name.lower()
    if name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    if name.endswith(".bz2"):
        return bz2.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[Article]:
    """Articles from a JSONL file (lines that are not JSON objects with a title and text are skipped)."""
    with _open_text(Path(path)) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and (a := article_from_record(rec)) is not None:
                yield a


def markdown_article(path: Path) -> Article | None:
    text = path.read_text(encoding="utf-8", errors="replace")
    title = path.stem.replace("_", " ").strip()
    for line in text.splitlines():
        if line.strip():
            m = _MD_HEADING.match(line)
            if m and m.group(1) == "#":
                title = m.group(2).strip()
            break
    return article_from_record({"title": title, "text": text})


def _md_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in (".md", ".markdown"))


def iter_folder(folder: str | os.PathLike[str]) -> Iterator[Article]:
    folder = Path(folder)
    md = _md_files(folder)
    if md:
        for p in md:
            if (a := markdown_article(p)) is not None:
                yield a
        return
    for p in sorted(folder.rglob("*")):  # WikiExtractor --json output: extracted/AA/wiki_00 ...
        if p.is_file() and not p.name.startswith("."):
            yield from iter_jsonl(p)


def parse_world_spec(spec: str) -> dict[str, int] | None:
    """`world` / `world:seed=3,articles=1000` -> generator options; None when spec names no world."""
    if spec != "world" and not spec.startswith("world:"):
        return None
    opts: dict[str, int] = {}
    for part in spec[len("world:") :].split(",") if ":" in spec else []:
        if not part.strip():
            continue
        k, sep, v = part.partition("=")
        if not sep or k.strip() not in ("seed", "articles"):
            raise ValueError(f"bad world spec {spec!r}: expected world:seed=N,articles=N")
        opts[k.strip()] = int(v)
    return opts


def iter_corpus(spec: str) -> Iterator[Article]:
    """Articles of the corpus named by `spec` (see the module docstring)."""
    world_opts = parse_world_spec(spec)
    if world_opts is not None:
        from mcp_server_wiki.world import generate_world

        yield from generate_world(**world_opts).articles()
        return
    path = Path(spec).expanduser()
    if path.is_dir():
        yield from iter_folder(path)
    elif path.is_file():
        yield from iter_jsonl(path)
    else:
        raise FileNotFoundError(f"corpus {spec!r} is neither 'world[:seed=N,articles=N]' nor an existing file/folder")


def corpus_fingerprint(spec: str) -> str:
    """A key that changes when the corpus changes: the world's options, or the files' paths, sizes and mtimes."""
    world_opts = parse_world_spec(spec)
    h = hashlib.sha256()
    if world_opts is not None:
        from mcp_server_wiki.world import GENERATOR_VERSION, normalize_world_opts

        h.update(f"world:v{GENERATOR_VERSION}:{sorted(normalize_world_opts(**world_opts).items())}".encode())
        return h.hexdigest()
    path = Path(spec).expanduser().resolve()
    files: Iterable[Path] = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for p in files:
        st = p.stat()
        h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def write_jsonl(articles: Iterable[Article], path: str | os.PathLike[str]) -> int:
    """Write articles as JSONL (`title` + `sections`); returns the count."""
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for a in articles:
            rec = {"title": a.title, "sections": [{"heading": h, "text": t} for h, t in a.sections]}
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
            n += 1
    return n
