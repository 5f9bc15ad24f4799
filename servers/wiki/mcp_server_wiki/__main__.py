"""mcp-server-wiki: a wiki search MCP server.

  mcp-server-wiki [--transport stdio|streamable-http] [--host H] [--port P] [--corpus SPEC] [--index-dir DIR]
  mcp-server-wiki index --corpus SPEC [--index-dir DIR] [--rebuild]      build (or find) the cached index
  mcp-server-wiki export-world --out articles.jsonl [--questions q.jsonl] [--seed N] [--articles N] [--n N]

SPEC: `world` (the bundled synthetic encyclopedia, default), `world:seed=N,articles=N`, a JSONL file
(`title` + `text` or `sections`; .gz/.bz2 ok), a folder of Markdown files, or a WikiExtractor `--json` folder.
"""

from __future__ import annotations

import argparse
import json
import sys

from mcp_server_wiki.index import BuildStats, build_index, default_index_dir, index_path


def _serve(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="mcp-server-wiki", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8766)
    p.add_argument("--corpus", default="world", help="corpus spec (default: world)")
    p.add_argument("--index-dir", default=None, help=f"index cache folder (default: {default_index_dir()})")
    p.add_argument("--index", default=None, help="open this prebuilt index file instead")
    a = p.parse_args(argv)
    from mcp_server_wiki.server import build_server

    srv = build_server(corpus=a.corpus, index_dir=a.index_dir, index_path=a.index)
    if a.transport == "stdio":
        srv.run("stdio")
    else:
        srv.run("streamable-http", host=a.host, port=a.port)


def _index(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="mcp-server-wiki index", description="Build the cached index of a corpus.")
    p.add_argument("--corpus", default="world")
    p.add_argument("--index-dir", default=None)
    p.add_argument("--rebuild", action="store_true", help="rebuild even if a cached index exists")
    a = p.parse_args(argv)
    from mcp_server_wiki.corpus import iter_corpus

    path = index_path(a.corpus, a.index_dir)
    if path.exists() and not a.rebuild:
        print(json.dumps({"path": str(path), "cached": True, "bytes": path.stat().st_size}))
        return
    stats: BuildStats = build_index(iter_corpus(a.corpus), path, spec=a.corpus)
    print(json.dumps({**stats.__dict__, "cached": False}))


def _export_world(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="mcp-server-wiki export-world",
                                description="Write the synthetic world's articles (and questions) as JSONL.")
    p.add_argument("--out", required=True)
    p.add_argument("--questions", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--articles", type=int, default=400)
    p.add_argument("--n", type=int, default=300, help="number of questions")
    a = p.parse_args(argv)
    from mcp_server_wiki.corpus import write_jsonl
    from mcp_server_wiki.world import generate_questions, generate_world

    w = generate_world(seed=a.seed, articles=a.articles)
    n = write_jsonl(w.articles(), a.out)
    if a.questions:
        with open(a.questions, "w", encoding="utf-8") as f:
            for q in generate_questions(w, a.n):
                f.write(json.dumps(q, ensure_ascii=False) + "\n")
    print(json.dumps({"articles": n, "out": a.out, "questions": a.questions}))


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["index"]:
        _index(argv[1:])
    elif argv[:1] == ["export-world"]:
        _export_world(argv[1:])
    else:
        _serve(argv)


if __name__ == "__main__":
    main()
