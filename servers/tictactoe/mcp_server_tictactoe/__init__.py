"""mcp-server-tictactoe: a tic-tac-toe MCP server (X vs a tunable minimax opponent)."""

from mcp_server_tictactoe.server import build_server

__all__ = ["build_server"]
