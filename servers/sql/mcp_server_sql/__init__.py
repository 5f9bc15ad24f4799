"""mcp-server-sql: an MCP server over a SQL database with an isolated, sandboxed database per MCP session."""

from mcp_server_sql.server import build_server, format_table

__all__ = ["build_server", "format_table"]
__version__ = "0.1.0"
