"""A local OpenAI-compatible chat-completions endpoint (starlette + uvicorn in a thread, loopback only) that plays
scripted calls: for a conversation whose first user message contains a key of `plays`, its first turn is that
key's tool call (a deliberately wrong one, for the matching tests), and its next turn answers with the last tool
result inside `<answer>` tags. A conversation no key matches gets a turn without a call.

    with FaultEndpoint({"Wool Rug": ("read_query", {"query": "SELECT ... 'wool-rug'"})}) as ep:
        ... toolgym eval ENV -m openai:fault --base-url {ep.url}
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from openai_stub import free_port


class FaultEndpoint:
    def __init__(self, plays: dict[str, tuple[str, dict[str, Any]]]) -> None:
        self.plays = plays
        self.requests = 0
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def turn(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        prompt = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
        tool_results = [m.get("content") or "" for m in messages if m.get("role") == "tool"]
        if tool_results:
            return {"role": "assistant", "content": f"<answer>{tool_results[-1]}</answer>"}
        for key, (name, args) in self.plays.items():
            if key in prompt:
                return {"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"call_{self.requests}", "type": "function",
                     "function": {"name": name, "arguments": json.dumps(args)}}]}
        return {"role": "assistant", "content": "<answer>I do not know</answer>"}

    async def chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        self.requests += 1
        msg = self.turn(body["messages"])
        return JSONResponse({"id": f"c{self.requests}", "object": "chat.completion", "created": int(time.time()),
                             "model": body.get("model", "fault"),
                             "choices": [{"index": 0, "message": msg,
                                          "finish_reason": "tool_calls" if msg.get("tool_calls") else "stop"}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    def __enter__(self) -> FaultEndpoint:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(5)
