"""A small synthetic MCP server (stdio) whose tools take free strings: any title, tag, user name or text is valid,
so generated tasks draw them from the built-in vocabulary and a held-out task's strings are values no training task
has. For `tests/test_toolcall_copy.py`: `python notes_server.py`."""

from __future__ import annotations

import hashlib

from mcp.server.mcpserver import MCPServer

srv = MCPServer("notes")


@srv.tool()
def save_note(title: str, body: str) -> str:
    """Save a note under a title.

    Args:
        title: The note's title.
        body: The text of the note.
    """
    return f"Saved note {title!r} ({len(body)} characters)."


@srv.tool()
def tag_photo(photo_id: str, tag: str) -> str:
    """Add a tag to a photo.

    Args:
        photo_id: The photo's id.
        tag: The tag to add.
    """
    return f"Photo {photo_id} tagged {tag}."


@srv.tool()
def lookup_user(username: str) -> dict:
    """Look a user up by name.

    Args:
        username: The user's name.
    """
    return {"username": username, "user_id": int(hashlib.sha256(username.encode()).hexdigest()[:6], 16)}


if __name__ == "__main__":
    srv.run("stdio")
