"""Console entry point: `mcp-server-tictactoe [--transport stdio|streamable-http] [--host H] [--port P]`."""

from __future__ import annotations

import argparse

from mcp_server_tictactoe.server import build_server


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="mcp-server-tictactoe", description=__doc__)
    p.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--max-games", type=int, default=100_000,
                   help="games kept in memory (the least recently used game not in use is evicted for room)")
    p.add_argument("--max-client-games", type=int, default=None,
                   help="games one client may hold (default: half of --max-games)")
    p.add_argument("--idle-s", type=float, default=300.0,
                   help="a game with a call this recent is in use and never evicted")
    a = p.parse_args(argv)
    srv = build_server(max_games=a.max_games, max_client_games=a.max_client_games, idle_s=a.idle_s)
    if a.transport == "stdio":
        srv.run("stdio")
    else:
        srv.run("streamable-http", host=a.host, port=a.port)


if __name__ == "__main__":
    main()
