"""A local OpenAI-compatible chat-completions endpoint for the tests (starlette + uvicorn in a thread).

POST /v1/chat/completions receives the real request (model, messages, tools) and **replays the tic-tac-toe env's
scripted minimax player** (`toolgym_tictactoe.minimax_player`) on those messages, answering with `tool_calls`
through the OpenAI wire format, so the whole HTTP policy path (request, tool schemas, response parsing, retries,
failover) is exercised end to end without a model. It refuses a request that carries no `make_move` tool.

Fault injection: `fail_first=N` answers 503 to the first N requests (to test retries with backoff); `respond=` a
function (request number, body) -> a JSON body answered with HTTP 200 instead of the player's turn, or None to play
(malformed answers: `choices: []`, deeply nested arguments); leaving the `with` block stops it (connections refused
from then on); `port=` restarts one on the same address.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class StubEndpoint:
    def __init__(self, fail_first: int = 0, port: int | None = None,
                 respond: Callable[[int, dict[str, Any]], dict[str, Any] | None] | None = None) -> None:
        from toolgym_tictactoe import minimax_player

        self.player = minimax_player(None, seed=0).fn
        self.fail_first = fail_first
        self.respond = respond
        self.requests = 0
        self.served = 0
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        with self.lock:
            self.requests += 1
            if self.requests <= self.fail_first:
                return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)
            self.bodies.append(body)
            n = self.requests
        if self.respond is not None and (custom := self.respond(n, body)) is not None:
            return JSONResponse(custom)
        names = [t["function"]["name"] for t in body.get("tools") or []]
        if "make_move" not in names:
            return JSONResponse({"error": {"message": f"no make_move tool in {names}"}}, status_code=400)
        turn = self.player(body["messages"], {"session_index": 0})
        msg: dict[str, Any] = {"role": "assistant", "content": turn.content or None,
                               "reasoning_content": turn.reasoning}
        if turn.tool_calls:
            msg["tool_calls"] = [{"id": f"call_{self.requests}_{i}", "type": "function",
                                  "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                                 for i, c in enumerate(turn.tool_calls)]
        with self.lock:
            self.served += 1
        return JSONResponse({"id": "cmpl", "object": "chat.completion", "model": body.get("model"),
                             "choices": [{"index": 0, "message": msg,
                                          "finish_reason": "tool_calls" if turn.tool_calls else "stop"}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    def __enter__(self) -> StubEndpoint:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("stub endpoint did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(10)
