"""mcp-server-wiki: full-text wiki search over MCP (SQLite FTS5 + bm25), with a bundled synthetic encyclopedia."""

from mcp_server_wiki.server import build_server

__all__ = ["build_server"]
