"""The search index: one SQLite file with an FTS5 table ranked by bm25 (SQLite's own; no hand-written ranker).

Layout: `pages(id, title, key)`, `sections(id, page_id, ord, heading, chars)` and
`fts(title, heading, body)` whose rowid is the section id (section text lives only in the FTS table, so it is
stored once). Ranking is `bm25(fts, 10, 4, 1)`: a hit in the title weighs ten times a hit in the body.

Building: into a temporary file next to the target, then `os.replace` — atomic, so concurrent first builds of the
same corpus cannot corrupt the cache (the last one to finish wins; both are identical). The cache file name is a
hash of the schema version and the corpus fingerprint. Queries open the file read-only (`mode=ro&immutable=1`):
a query never writes to it.

Query language: user text is never passed to FTS5 as syntax. Words become quoted terms OR-ed together (bm25 ranks
pages matching more and rarer terms first); `"a phrase"` stays a phrase; `word*` is a prefix search; everything
else (NEAR, AND/OR/NOT, `col:` filters, parentheses, `^`, `-`) is plain text. Very common English words are dropped
unless nothing else is left. At most 32 terms of the first 2,000 characters are used. On large corpora, words that
occur in more than 5% of all sections are dropped too when rarer words remain (`WikiIndex.match_for`).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import sqlite3
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp_server_wiki.corpus import Article, corpus_fingerprint, iter_corpus

SCHEMA_VERSION = 1
BM25_WEIGHTS = (10.0, 4.0, 1.0)
MAX_QUERY_CHARS = 2000
MAX_TERMS = 32
MAX_K = 50
PRUNE_FRAC, PRUNE_MIN = 0.05, 200  # see WikiIndex.match_for
TOKENIZER = "porter unicode61 remove_diacritics 2"
STOPWORDS = frozenset(
    "a an and are as at be by did do does for from had has have he her his how in is it its of on or she that the "
    "their them they this to was were what when where which who whom whose why with".split()
)
_QUERY_TOKEN = re.compile(r'"([^"]*)"?|(\w+)(\*?)')


def default_index_dir() -> Path:
    """`$TOOLGYM_WIKI_INDEX_DIR`, else `$XDG_CACHE_HOME/toolgym/wiki`, else `~/.cache/toolgym/wiki`."""
    if d := os.environ.get("TOOLGYM_WIKI_INDEX_DIR"):
        return Path(d).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "toolgym" / "wiki"


def index_path(spec: str, index_dir: str | os.PathLike[str] | None = None) -> Path:
    key = hashlib.sha256(f"schema{SCHEMA_VERSION}:{corpus_fingerprint(spec)}".encode()).hexdigest()[:20]
    return Path(index_dir or default_index_dir()) / f"{key}.sqlite"


def title_key(title: str) -> str:
    return " ".join(title.replace("_", " ").split()).casefold()


def query_terms(query: str) -> list[str]:
    """Free text -> safe FTS5 terms (quoted words, phrases, prefixes), deduplicated, at most MAX_TERMS."""
    terms: list[str] = []
    stops: list[str] = []
    for m in _QUERY_TOKEN.finditer(query[:MAX_QUERY_CHARS]):
        if m.group(1) is not None:
            words = re.findall(r"\w+", m.group(1))
            if words:
                terms.append('"' + " ".join(words) + '"')
        else:
            word, star = m.group(2), m.group(3)
            term = f'"{word}"' + ("*" if star and len(word) >= 2 else "")
            (stops if word.casefold() in STOPWORDS and not star else terms).append(term)
    return list(dict.fromkeys(terms or stops))[:MAX_TERMS]


def build_match(query: str) -> str | None:
    """Turn free text into a safe FTS5 MATCH expression (see the module docstring); None when it has no words."""
    terms = query_terms(query)
    return " OR ".join(terms) if terms else None


@dataclass
class BuildStats:
    path: str
    articles: int
    sections: int
    skipped: int
    seconds: float
    bytes: int


def build_index(articles: Iterable[Article], path: str | os.PathLike[str], spec: str = "") -> BuildStats:
    """Build an index file at `path` from `articles` (atomically: temp file + rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    n_pages = n_secs = skipped = 0
    try:
        con = sqlite3.connect(tmp)
        con.executescript(
            f"""
            PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA page_size=4096;
            CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);
            CREATE TABLE pages(id INTEGER PRIMARY KEY, title TEXT NOT NULL, key TEXT NOT NULL UNIQUE);
            CREATE TABLE sections(id INTEGER PRIMARY KEY, page_id INTEGER NOT NULL, ord INTEGER NOT NULL,
                                  heading TEXT NOT NULL, chars INTEGER NOT NULL);
            CREATE VIRTUAL TABLE fts USING fts5(title, heading, body, tokenize='{TOKENIZER}');
            """
        )
        sec_rows: list[tuple[Any, ...]] = []
        fts_rows: list[tuple[Any, ...]] = []

        def flush() -> None:
            con.executemany("INSERT INTO sections VALUES (?,?,?,?,?)", sec_rows)
            con.executemany("INSERT INTO fts(rowid, title, heading, body) VALUES (?,?,?,?)", fts_rows)
            sec_rows.clear()
            fts_rows.clear()

        for art in articles:
            cur = con.execute("INSERT OR IGNORE INTO pages(title, key) VALUES (?, ?)", (art.title, title_key(art.title)))
            if cur.rowcount == 0:  # duplicate title (dumps have redirects/duplicates): keep the first
                skipped += 1
                continue
            pid = cur.lastrowid
            n_pages += 1
            for ord_, (heading, text) in enumerate(art.sections):
                n_secs += 1
                sec_rows.append((n_secs, pid, ord_, heading, len(text)))
                fts_rows.append((n_secs, art.title, heading, text))
            if len(fts_rows) >= 5000:
                flush()
        flush()
        con.execute("CREATE INDEX sections_page ON sections(page_id, ord)")
        con.execute("INSERT INTO fts(fts, rank) VALUES ('rank', ?)", (f"bm25({', '.join(map(str, BM25_WEIGHTS))})",))
        con.execute("INSERT INTO fts(fts) VALUES ('optimize')")
        seconds = time.perf_counter() - t0
        meta = {"schema_version": SCHEMA_VERSION, "corpus": spec, "articles": n_pages, "sections": n_secs,
                "skipped_duplicates": skipped, "build_seconds": round(seconds, 3), "sqlite": sqlite3.sqlite_version}
        con.executemany("INSERT INTO meta VALUES (?, ?)", [(k, json.dumps(v)) for k, v in meta.items()])
        con.commit()
        con.execute("VACUUM")
        con.close()
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return BuildStats(str(path), n_pages, n_secs, skipped, time.perf_counter() - t0, path.stat().st_size)


def ensure_index(spec: str = "world", index_dir: str | os.PathLike[str] | None = None,
                 rebuild: bool = False) -> Path:
    """The cached index of corpus `spec`, building it first if missing (or if `rebuild`)."""
    path = index_path(spec, index_dir)
    if rebuild or not path.exists():
        build_index(iter_corpus(spec), path, spec=spec)
    return path


class PageNotFound(LookupError):
    pass


class SectionNotFound(LookupError):
    pass


@dataclass
class Hit:
    title: str
    section: str
    snippet: str
    score: float


@dataclass
class Section:
    heading: str
    chars: int
    id: int


class WikiIndex:
    """Read-only queries over one index file (thread-safe: one connection behind a lock)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"no index at {self.path}")
        uri = "file:" + urllib.request.pathname2url(str(self.path.resolve())) + "?mode=ro&immutable=1"
        self._con = sqlite3.connect(uri, uri=True, check_same_thread=False)
        self._lock = threading.Lock()
        self.meta = {k: json.loads(v) for k, v in self._con.execute("SELECT key, value FROM meta")}
        self.n_sections = int(self.meta.get("sections", 0))
        self._df_cache: dict[str, int] = {}
        if self.meta.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"index {self.path} has schema {self.meta.get('schema_version')}, need {SCHEMA_VERSION}")

    def close(self) -> None:
        self._con.close()

    def _q(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._con.execute(sql, args).fetchall()

    def search(self, query: str, k: int = 5) -> list[Hit]:
        """Top `k` pages for `query` (best section of each, with a snippet), best first."""
        match = self.match_for(query)
        if match is None:
            return []
        k = max(1, min(int(k), MAX_K))
        rows = self._q("SELECT rowid, rank FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?", (match, k * 5))
        best: dict[int, tuple[int, float]] = {}
        page_of = {}
        if rows:
            ids = [r[0] for r in rows]
            marks = ",".join("?" * len(ids))
            page_of = dict(self._q(f"SELECT id, page_id FROM sections WHERE id IN ({marks})", tuple(ids)))
        for rowid, rank in rows:
            pid = page_of[rowid]
            if pid not in best:
                best[pid] = (rowid, rank)
        chosen = list(best.values())[:k]
        if not chosen:
            return []
        marks = ",".join("?" * len(chosen))
        snips = {r[0]: r[1:] for r in self._q(  # snippets only for the rows shown (one query)
            f"SELECT rowid, title, heading, snippet(fts, 2, '**', '**', '…', 20) FROM fts "
            f"WHERE fts MATCH ? AND rowid IN ({marks})", (match, *(r for r, _ in chosen)))}
        return [Hit(snips[r][0], snips[r][1], " ".join(snips[r][2].split()), -rank) for r, rank in chosen]

    def match_for(self, query: str) -> str | None:
        """`build_match`, minus terms found in more than PRUNE_FRAC of all sections (when there are other terms).

        Such terms add almost nothing to bm25 (tiny idf) but make FTS5 score a large share of the corpus: on the
        100k-article world, dropping them cuts the latency of question-like queries several-fold. Document
        frequencies come from the index itself (a count per term, cached in memory)."""
        terms = query_terms(query)
        if not terms:
            return None
        limit = max(PRUNE_FRAC * self.n_sections, PRUNE_MIN)
        dfs = {t: self._df(t) for t in terms if not t.endswith("*") and " " not in t}
        kept = [t for t in terms if dfs.get(t, 0) <= limit]
        if not kept:  # only very common words: keep the rarest few
            kept = sorted(terms, key=lambda t: dfs.get(t, 0))[:3]
        return " OR ".join(kept)

    def _df(self, term: str) -> int:
        df = self._df_cache.get(term)
        if df is None:
            df = self._q("SELECT count(*) FROM fts WHERE fts MATCH ?", (term,))[0][0]
            if len(self._df_cache) > 200_000:
                self._df_cache.clear()
            self._df_cache[term] = df
        return df

    def bare_search(self, match: str, k: int = 5) -> list[tuple[int, float]]:
        """The raw FTS5 query with no grouping or snippets (the benchmark's baseline)."""
        return self._q("SELECT rowid, rank FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?", (match, k))

    def resolve(self, title: str) -> tuple[int, str]:
        """(page id, canonical title) for a title, case- and underscore-insensitive; PageNotFound otherwise."""
        rows = self._q("SELECT id, title FROM pages WHERE key = ?", (title_key(title),))
        if rows:
            return rows[0]
        sugg = self.suggest(title)
        hint = f" Did you mean: {'; '.join(sugg)}?" if sugg else ""
        raise PageNotFound(f"Unknown page {title!r}.{hint} Use search to find page titles.")

    def suggest(self, title: str, n: int = 3) -> list[str]:
        """Titles close to a misspelt one: title-prefix matches of its words, ordered by string similarity."""
        words = re.findall(r"\w+", title)[:8]
        if not words:
            return []
        match = "title : (" + " OR ".join(f'"{w[:max(3, len(w) * 2 // 3)]}"*' for w in words) + ")"
        rows = self._q("SELECT DISTINCT title FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT 50", (match,))
        key = title_key(title)
        cands = sorted({r[0] for r in rows}, key=lambda t: -difflib.SequenceMatcher(None, key, title_key(t)).ratio())
        return cands[:n]

    def sections(self, page_id: int) -> list[Section]:
        rows = self._q("SELECT heading, chars, id FROM sections WHERE page_id = ? ORDER BY ord", (page_id,))
        return [Section(*r) for r in rows]

    def find_section(self, title: str, section: str) -> tuple[str, Section]:
        pid, canon = self.resolve(title)
        secs = self.sections(pid)
        want = " ".join(str(section).split()).casefold()
        for s in secs:
            if s.heading.casefold() == want:
                return canon, s
        if want.isdigit() and 1 <= int(want) <= len(secs):
            return canon, secs[int(want) - 1]
        names = "; ".join(s.heading for s in secs)
        raise SectionNotFound(f"Page {canon!r} has no section {section!r}. Its sections: {names}.")

    def section_text(self, section_id: int) -> str:
        return self._q("SELECT body FROM fts WHERE rowid = ?", (section_id,))[0][0]

    def page_count(self) -> int:
        return self._q("SELECT count(*) FROM pages")[0][0]
