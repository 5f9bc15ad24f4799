"""The filesystem walkthrough's state reward: after the rollout, the notes folder (listed and read through the
server's own tools) holds exactly the fixture's notes changed as the task asked -- the new note with its text, or
todo.txt renamed -- and nothing from any other rollout."""

from __future__ import annotations

from typing import Any


async def own_state(env: Any, task: dict[str, Any]) -> float:
    listing = (await env.call("list_directory", path="notes")).text
    files = sorted(line.split(" ", 1)[1] for line in listing.splitlines() if line.startswith("[FILE] "))
    want = sorted(["inbox.txt", "todo.txt", task["file"]]) if task["kind"] == "write" \
        else sorted(["inbox.txt", task["file"]])
    if files != want:
        return 0.0
    text = (await env.call("read_text_file", path=f"notes/{task['file']}")).text
    return float(text.strip() == task["content"].strip())
