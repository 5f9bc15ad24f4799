"""Helpers for tests that run an exported verifiers package under verifiers' own eval (`vf-eval`, verifiers 0.4.0,
subprocess runtime, `--no-push`, no platform account) in `.venv-verifiers` (`scripts/setup_verifiers_venv.sh`): a
scripted OpenAI-compatible chat endpoint (stdlib HTTP server in a thread; streaming and not) and the eval runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("TOOLGYM_VERIFIERS_VENV", ROOT / ".venv-verifiers"))
VF_EVAL = VENV / "bin" / "vf-eval"
TIME_ENV = ROOT / "examples" / "third_party_time" / "env.toml"

needs_venv = pytest.mark.skipif(
    not VF_EVAL.exists(), reason=f"{VENV} missing: run scripts/setup_verifiers_venv.sh (verifiers pins mcp==2.0.0)"
)
needs_time_server = pytest.mark.skipif(
    not (Path(sys.executable).parent / "mcp-server-time").exists() and os.system("command -v mcp-server-time >/dev/null"),
    reason="mcp-server-time not installed (pip install -e '.[examples]')",
)

Plan = Callable[[list[dict[str, Any]]], dict[str, Any]]


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


class ScriptedEndpoint:
    """`POST /v1/chat/completions` answered by `plan(messages) -> {"content", "tool_calls": [(name, args)]}`."""

    def __init__(self, plan: Plan) -> None:
        self.requests: list[dict[str, Any]] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, obj: Any) -> None:
                body = json.dumps(obj).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # /v1/models
                self._json({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

            def do_POST(self) -> None:
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append(req)
                reply = plan(req.get("messages", []))
                calls = [{"id": f"call_{uuid.uuid4().hex[:8]}", "type": "function",
                          "function": {"name": n, "arguments": json.dumps(a)}} for n, a in reply.get("tool_calls", [])]
                finish = "tool_calls" if calls else "stop"
                base = {"id": f"chatcmpl-{uuid.uuid4().hex[:8]}", "created": int(time.time()),
                        "model": req.get("model", "scripted")}
                usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
                if not req.get("stream"):
                    msg: dict[str, Any] = {"role": "assistant", "content": reply.get("content", "")}
                    if calls:
                        msg["tool_calls"] = calls
                    self._json({**base, "object": "chat.completion", "usage": usage,
                                "choices": [{"index": 0, "message": msg, "finish_reason": finish}]})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                chunk = {**base, "object": "chat.completion.chunk"}
                delta: dict[str, Any] = {"role": "assistant", "content": reply.get("content", "")}
                if calls:
                    delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(calls)]
                for obj in ({**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                            {**chunk, "choices": [], "usage": usage}):
                    self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def vf_eval(out: Path, pkg: str, n: int, endpoint: ScriptedEndpoint, tmp: Path,
            extra_path: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Run verifiers' own eval on the exported package; return its episodes ordered by task index (`extra_path`:
    folders the package's toolset needs on PYTHONPATH, e.g. for an env loaded as `module:Class`)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(out), *extra_path]), "SCRIPTED_KEY": "unused",
           "PYTHONUNBUFFERED": "1"}
    env.pop("PRIME_API_KEY", None)
    cmd = [str(VF_EVAL), pkg, "-n", str(n), "--model", "scripted", "--client.base-url", endpoint.url,
           "--client.api-key-var", "SCRIPTED_KEY", "--env.agent.runtime.type", "subprocess", "--no-push", "--no-rich",
           "-o", str(tmp / "outputs"), "-c", "2"]
    proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    traces = list((tmp / "outputs").glob("*/traces.jsonl"))
    assert len(traces) == 1, (traces, proc.stdout[-3000:])
    episodes = [json.loads(line) for line in traces[0].read_text().splitlines() if line.strip()]
    return sorted(episodes, key=lambda e: e["task"]["data"]["idx"])


def vf_scores(episode: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    trace = episode["traces"][0]
    assert not trace["errors"], trace["errors"]
    return {k: v["score"] for k, v in trace["rewards"].items()}, trace["metrics"]
