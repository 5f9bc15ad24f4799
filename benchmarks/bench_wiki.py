"""Benchmark mcp-server-wiki: index build time and size (bundled world, 100k-article synthetic world) and search
latency p50/p99 per layer, each against the bare FTS5 query on the same index, measured in the same run.

    python benchmarks/bench_wiki.py [--big 100000] [--queries 400] [--json benchmarks/results/bench_wiki.json]

Indexes are built fresh into a temporary folder (the user cache is not touched). Queries: a mix of page titles,
2-3 keyword queries and full natural-language questions from the world's question generator. Layers:
  bare FTS5        `SELECT rowid, rank FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT 5`, MATCH = every query word
                   OR-ed (prebuilt): the plain library query, the baseline of every ratio
  bare FTS5 pruned the same with the server's term pruning applied (words in > 5% of sections dropped; prebuilt)
  index.search     the server's search (sanitising, pruning, bm25 over 25 sections, group by page, 5 snippets)
  MCP search       `mcp.Client(server).call_tool("search", ...)` in memory (text result)
  MCP read_section `call_tool("read_section", ...)` on the page of each title query
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import mcp

from mcp_server_wiki import build_server
from mcp_server_wiki.index import WikiIndex, build_index, build_match
from mcp_server_wiki.world import generate_questions, generate_world

_KEYWORDS = ["river", "founded", "mayor", "university", "born", "society", "treaty", "capital", "married", "museum",
             "festival", "company", "student", "history", "mathematician", "poet", "timber", "salt"]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def queries_for(world, n: int, seed: int = 0) -> tuple[list[str], list[tuple[str, str]]]:
    rng = random.Random(seed)
    titles = rng.sample(world.order, n // 3)
    qs = [q["question"] for q in generate_questions(world, n // 3, seed=seed + 11)]
    kws = [" ".join(rng.sample(_KEYWORDS, rng.randint(2, 3))) for _ in range(n - len(titles) - len(qs))]
    arts = {a.title: a for a in world.articles()} if len(world.order) < 5000 else None
    reads = []
    for t in titles:
        heading = arts[t].sections[-1][0] if arts else "Introduction"
        reads.append((t, heading))
    return titles + kws + qs, reads


def build(world, folder: Path, name: str) -> dict[str, float]:
    t0 = time.perf_counter()
    articles = world.articles()
    gen_s = time.perf_counter() - t0
    text_mb = sum(len(h) + len(t) for a in articles for h, t in a.sections) / 1e6
    stats = build_index(articles, folder / f"{name}.sqlite", spec=name)
    return {"articles": stats.articles, "sections": stats.sections, "render_s": gen_s, "build_s": stats.seconds,
            "index_mb": stats.bytes / 1e6, "text_mb": text_mb, "path": stats.path}


async def latencies(path: str, queries: list[str], reads: list[tuple[str, str]], reps: int = 2) -> dict:
    idx = WikiIndex(path)
    matches = [build_match(q) for q in queries]
    pruned = [idx.match_for(q) for q in queries]
    srv = build_server(index_path=path)
    out: dict[str, list[float]] = {"bare FTS5": [], "bare FTS5 pruned": [], "index.search": [], "MCP search": [],
                                   "MCP read_section": []}
    async with mcp.Client(srv) as c:
        for q, m in zip(queries[:20], matches[:20]):  # warm-up (page cache, code paths)
            idx.bare_search(m)
            idx.search(q)
            await c.call_tool("search", {"query": q})
        for _ in range(reps):  # interleaved per query, so machine noise hits every layer alike
            for q, m, pm in zip(queries, matches, pruned):
                t = time.perf_counter()
                idx.bare_search(pm, 5)
                t0 = time.perf_counter()
                out["bare FTS5 pruned"].append(t0 - t)
                idx.bare_search(m, 5)
                t1 = time.perf_counter()
                idx.search(q, 5)
                t2 = time.perf_counter()
                r = await c.call_tool("search", {"query": q, "k": 5})
                t3 = time.perf_counter()
                assert not r.is_error
                out["bare FTS5"].append(t1 - t0)
                out["index.search"].append(t2 - t1)
                out["MCP search"].append(t3 - t2)
            for title, sec in reads:
                t0 = time.perf_counter()
                r = await c.call_tool("read_section", {"title": title, "section": sec})
                out["MCP read_section"].append(time.perf_counter() - t0)
                assert not r.is_error, r.content[0].text
    idx.close()
    base = statistics.median(out["bare FTS5"])
    return {k: {"n": len(v), "p50_ms": 1000 * pct(v, 50), "p99_ms": 1000 * pct(v, 99),
                "mean_ms": 1000 * statistics.mean(v), "p50_vs_bare": pct(v, 50) / base} for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--big", type=int, default=100_000, help="articles in the large synthetic corpus (0: skip)")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--json", default=str(Path(__file__).parent / "results" / "bench_wiki.json"))
    a = ap.parse_args()
    results: dict = {"python": sys.version.split()[0], "corpora": {}}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sizes = [("bundled world (400)", 400)] + ([(f"synthetic {a.big:,}", a.big)] if a.big else [])
        for name, n in sizes:
            t0 = time.perf_counter()
            world = generate_world(seed=0, articles=n)
            gen_s = time.perf_counter() - t0
            b = build(world, folder, f"w{n}")
            b["generate_s"] = gen_s
            qs, reads = queries_for(world, a.queries)
            print(f"{name}: built in {b['build_s']:.2f} s, {b['index_mb']:.1f} MB; timing {len(qs)} queries...",
                  flush=True)
            b["latency"] = anyio.run(latencies, b.pop("path"), qs, reads, 2 if n < 5000 else 1)
            results["corpora"][name] = b

    try:
        from rich.console import Console
        from rich.table import Table

        console = Console()
        t = Table(title="wiki index build")
        for col in ("corpus", "articles", "sections", "text MB", "generate s", "render s", "build s", "index MB"):
            t.add_column(col, justify="right")
        for name, b in results["corpora"].items():
            t.add_row(name, f"{b['articles']:,}", f"{b['sections']:,}", f"{b['text_mb']:.1f}", f"{b['generate_s']:.2f}",
                      f"{b['render_s']:.2f}", f"{b['build_s']:.2f}", f"{b['index_mb']:.1f}")
        console.print(t)
        t = Table(title="search latency (ms), ratio = p50 / bare FTS5 p50 on the same index, same run")
        for col in ("corpus", "layer", "n", "p50", "p99", "mean", "p50 ratio"):
            t.add_column(col, justify="right")
        for name, b in results["corpora"].items():
            for layer, s in b["latency"].items():
                t.add_row(name, layer, str(s["n"]), f"{s['p50_ms']:.3f}", f"{s['p99_ms']:.3f}", f"{s['mean_ms']:.3f}",
                          f"{s['p50_vs_bare']:.1f}x")
        console.print(t)
    except ImportError:
        print(json.dumps(results, indent=2))
    Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    Path(a.json).write_text(json.dumps(results, indent=2))
    print(f"wrote {a.json}")


if __name__ == "__main__":
    main()
