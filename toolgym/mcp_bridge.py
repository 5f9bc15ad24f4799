"""MCP bridge: connect to any MCP server (stdio command, streamable-HTTP URL, in-process object), list its tools as
OpenAI-style schemas, and call them with a timeout.

Each `MCPSession` is owned by a background task that enters and leaves the `mcp.Client` context (anyio requires
both in one task), so a session can be opened and closed from anywhere and shared by concurrent rollouts.
A session whose server died or hung past the call timeout is marked `broken`; `SessionProvider` then opens a new
one (a new process for stdio, a relaunched process for a managed HTTP server) for the next rollout. An HTTP server
behind a broken session is *suspect*: before the next session it must answer a ping within `PING_TIMEOUT_S`, or it is
replaced (launched by toolgym: stopped and relaunched) or fails fast (a URL only) -- a stopped (SIGSTOP) or hung
server still counts as a live process and accepts connections, so without the ping every later rollout waited out
the 60 s connect timeout.

Written against the API common to mcp 2.0.0 and the newest 2.x: `mcp.Client(target)` with target a URL, a
transport (`stdio_client(...)`) or a server object; results read through `content`/`is_error`/`structured_content`.

Server processes toolgym starts (stdio commands, launched HTTP servers):
- get a small environment: `BASE_ENV_VARS` of the caller's, the names the spec's `env_passthrough` allows (globs;
  `["*"]` passes everything) and the spec's `env`, where `${VAR}` is expanded from the caller's environment when the
  process starts (the values never enter a spec, a message or a run folder);
- write their stderr to a per-server log file (`server_log_path`; `set_server_log_dir` points it into a run folder),
  never to the terminal; a server that dies while starting is reported with the last lines of its log;
- die with the toolgym process, even after SIGKILL (Linux: PR_SET_PDEATHSIG, set by a tiny exec wrapper for stdio
  commands and by `preexec_fn` for launched servers);
- an mcp 1.x server (which logs a long warning on the 2.x client's `server/discover` probe) is probed once: later
  sessions of the same provider connect with the legacy handshake directly.
"""

from __future__ import annotations

import asyncio
import collections
import atexit
import contextlib
import ctypes
import fnmatch
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import httpx

from toolgym.sandbox import (PLACEHOLDERS, Fixture, Sandbox, SandboxError, check_placeholders, env_refs,
                             expand_env_refs, placeholders, substitute, uses_sandbox)

log = logging.getLogger("toolgym.mcp")
# in-process MCPServer objects configure the root logger at INFO; keep client/transport chatter out of the way
for _name in ("mcp", "httpx", "httpx2", "httpcore", "httpcore2"):
    logging.getLogger(_name).setLevel(logging.WARNING)


class ToolCallError(RuntimeError):
    """A call could not complete because the server connection failed (crash, hang, transport error)."""


class ServerStartError(ToolCallError):
    """A server could not be started or connected to: its command is missing, it exited while starting, or it did
    not answer. `server` is its name in a multi-server env (else None); `log` the path of its stderr log."""

    def __init__(self, message: str, server: str | None = None, log: Path | None = None) -> None:
        super().__init__(message)
        self.server, self.log = server, log


BASE_ENV_VARS = ("HOME", "LOGNAME", "USER", "PATH", "SHELL", "TERM", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ",
                 "TMPDIR", "PYTHONPATH", "VIRTUAL_ENV")
"""The caller's environment variables every server process gets (no credentials; PYTHONPATH and VIRTUAL_ENV so a
Python server runs the code the caller runs); `env_passthrough` adds more."""


def server_environment(env: dict[str, str] | None, passthrough: list[str] | tuple[str, ...] | None = None,
                       where: str = "server") -> dict[str, str]:
    """The environment of a server process: `BASE_ENV_VARS` and the variables `passthrough` names (shell-style globs:
    `AWS_*`; `*` for all) from the caller's, then `env` with its `${VAR}` references expanded (an unset one is a
    `SandboxError` naming `where.env.KEY`)."""
    pats = tuple(passthrough or ())
    out = {k: v for k, v in os.environ.items() if k in BASE_ENV_VARS or any(fnmatch.fnmatchcase(k, p) for p in pats)}
    out.update({k: expand_env_refs(v, f"{where}.env.{k}") for k, v in (env or {}).items()})
    return out


_log_dir: Path | None = None
_default_log_dir: Path | None = None


def set_server_log_dir(path: Path | str | None) -> None:
    """Write the servers' stderr logs (`NAME.log`) into `path` from now on (eval: `RUN/servers/`); None: a temporary
    folder of this process, removed at exit."""
    global _log_dir
    _log_dir = Path(path) if path is not None else None


@contextlib.contextmanager
def server_logs(path: Path | str | None) -> Any:
    """`set_server_log_dir(path)` for the block, the previous folder restored after it."""
    previous = _log_dir
    set_server_log_dir(path)
    try:
        yield
    finally:
        set_server_log_dir(previous)


def server_log_path(name: str) -> Path:
    """The stderr log file of server `name` (its folder is created)."""
    global _default_log_dir
    folder = _log_dir
    if folder is None:
        if _default_log_dir is None:
            _default_log_dir = Path(tempfile.mkdtemp(prefix="toolgym-server-logs-"))
            atexit.register(shutil.rmtree, _default_log_dir, True)
        folder = _default_log_dir
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{''.join(c if c.isalnum() or c in '._-' else '_' for c in name) or 'server'}.log"


def log_tail(path: Path | None, start: int = 0, lines: int = 3, limit: int = 400) -> str:
    """The last `lines` non-empty lines of a log written from byte `start` on, joined with " | " (each cut to `limit`
    characters), for one-line error messages."""
    if path is None or not path.exists():
        return ""
    with path.open("rb") as f:
        f.seek(start)
        text = f.read()[-20_000:].decode(errors="replace")
    kept = [ln.strip()[:limit] for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(kept)


_PDEATH = ("import ctypes,os,sys\n"
           "try: ctypes.CDLL(None, use_errno=True).prctl(1, 15)\n"  # PR_SET_PDEATHSIG = SIGTERM, kept across exec
           "except Exception: pass\n"
           "if os.getppid() != int(sys.argv[1]): sys.exit(143)\n"  # the parent died before prctl
           "os.execvp(sys.argv[2], sys.argv[2:])")


def with_parent_death(cmd: list[str]) -> list[str]:
    """`cmd` run through a tiny exec wrapper that has the kernel SIGTERM it when this process dies (Linux; the
    wrapper is replaced by the command, same pid, ~20 ms). For children spawned by code that takes no `preexec_fn`
    (the MCP SDK's stdio client)."""
    if sys.platform != "linux":
        return cmd
    return [sys.executable, "-I", "-S", "-c", _PDEATH, str(os.getpid()), *cmd]


def check_command(cmd: str, where: str = "server.command") -> str:
    """The executable a server command runs (`resolve_command`), or a `ServerStartError` saying it is missing."""
    exe = resolve_command(cmd)
    if (os.sep in exe and os.access(exe, os.X_OK)) or (os.sep not in exe and shutil.which(exe)):
        return exe
    beside = os.path.dirname(sys.executable)
    hint = "give a path that exists" if os.sep in cmd else f"it is not on PATH nor in {beside}; install it or give " \
        "its full path"
    raise ServerStartError(f"{where}: command {cmd!r} not found ({hint})")


@lru_cache(maxsize=256)
def _compiled(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.M) if patterns else None


PING_TIMEOUT_S = 5.0
"""How long a suspect HTTP server has to answer a ping (any HTTP answer) before it counts as hung."""


async def http_responds(url: str, timeout: float = PING_TIMEOUT_S) -> bool:
    """Whether anything answers HTTP at `url` within `timeout` seconds (any status: it is alive, if oddly)."""
    try:
        async with httpx.AsyncClient() as client:
            await asyncio.wait_for(client.get(url, timeout=timeout), timeout)
        return True
    except (httpx.HTTPError, OSError, TimeoutError):
        return False


@dataclass(frozen=True)
class ToolInfo:
    """A server tool: its name, description and JSON-schema of its arguments."""

    name: str
    description: str
    input_schema: dict[str, Any]

    def to_openai(self, hidden_args: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
        """OpenAI `tools` entry, with `hidden_args` removed from the schema the model sees and from the description
        (docstring lines such as `game_id: The game.` in an `Args:` section)."""
        schema = json.loads(json.dumps(self.input_schema or {"type": "object", "properties": {}}))
        schema.setdefault("type", "object")
        props = schema.setdefault("properties", {})
        for arg in hidden_args:
            props.pop(arg, None)
        if "required" in schema:
            schema["required"] = [r for r in schema["required"] if r not in hidden_args]
            if not schema["required"]:
                del schema["required"]
        schema.pop("title", None)
        description = self.description
        if hidden_args:
            doc_line = re.compile(rf"\s*(?:{'|'.join(map(re.escape, hidden_args))})\s*(?:\([^)]*\))?\s*:")
            description = "\n".join(line for line in description.splitlines() if not doc_line.match(line))
        return {"type": "function", "function": {"name": self.name, "description": description, "parameters": schema}}


@dataclass
class ToolResult:
    """What a tool call returned: the text the model will see, whether the server flagged an error, and any
    structured content."""

    text: str
    is_error: bool = False
    structured: Any = None
    latency_s: float = 0.0

    def json(self) -> Any:
        """The structured result, else the text parsed as JSON."""
        if self.structured is not None:
            inner = self.structured
            if isinstance(inner, dict) and set(inner) == {"result"}:
                return inner["result"]
            return inner
        return json.loads(self.text)


def _set_pdeathsig() -> None:  # pragma: no cover - runs in the child
    """Linux: ask the kernel to SIGTERM the child when its parent dies (no orphaned servers after kill -9)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _drain(stream: Any, tail: collections.deque[bytes], log: Path | None = None) -> None:
    """Read a child's stderr until it closes, keeping the last lines (for error messages) and appending every line
    to `log`."""
    with contextlib.suppress(Exception), stream, (log.open("ab") if log else contextlib.nullcontext()) as out:
        for line in iter(stream.readline, b""):
            tail.append(line)
            if out is not None:
                out.write(line)
                out.flush()


def resolve_command(cmd: str) -> str:
    """A command on PATH, else the one installed beside this Python (a venv used without activating it)."""
    if os.sep in cmd or shutil.which(cmd):
        return cmd
    beside = os.path.join(os.path.dirname(sys.executable), cmd)
    return beside if os.path.exists(beside) else cmd


class ManagedProcess:
    """A server process toolgym launched itself (a streamable-HTTP server): started on demand, restarted when
    dead, terminated on close, and tied to this process's life (PDEATHSIG)."""

    def __init__(self, command: list[str], url: str, env: dict[str, str] | None = None, start_timeout: float = 30.0,
                 cwd: str | None = None, passthrough: list[str] | None = None, log_name: str = "server"):
        self.command, self.url, self.env, self.start_timeout, self.cwd = command, url, env, start_timeout, cwd
        self.passthrough, self.log = passthrough, server_log_path(log_name)
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: collections.deque[bytes] = collections.deque(maxlen=200)  # the tail of the server's stderr
        self._lock = asyncio.Lock()
        self.suspect = False  # a session to it broke: ping before trusting it again
        self.replaced_hung = 0  # times it was alive but did not answer a ping, and was relaunched

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    async def _answers(self) -> bool:
        """Alive and not suspect, or suspect and answering a ping within PING_TIMEOUT_S (then no longer suspect)."""
        if not self.alive:
            return False
        if self.suspect:
            if not await http_responds(self.url, PING_TIMEOUT_S):
                log.warning("server %s at %s is running but does not answer (stopped or hung): relaunching it",
                            self.command, self.url)
                self.replaced_hung += 1
                return False
            self.suspect = False
        return True

    async def ensure_running(self) -> None:
        async with self._lock:
            if await self._answers():
                return
            self.suspect = False
            self.terminate()
            env = server_environment(self.env, self.passthrough)
            cmd = [expand_env_refs(c, f"server.launch[{i}]") for i, c in enumerate(self.command)]
            self._log.clear()
            self.proc = subprocess.Popen(  # noqa: S603 - the user's own server command
                [check_command(cmd[0], "server.launch"), *cmd[1:]],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=env,
                cwd=self.cwd,
                preexec_fn=_set_pdeathsig if sys.platform == "linux" else None,  # noqa: PLW1509
                # its own process group: terminate() reaches what the command spawns (a wrapper script, npx -> node)
                start_new_session=os.name == "posix",
            )
            # drain stderr for the server's whole life (a full pipe blocks its logging, and so the server itself)
            threading.Thread(target=_drain, args=(self.proc.stderr, self._log, self.log), daemon=True).start()
            deadline = time.monotonic() + self.start_timeout
            async with httpx.AsyncClient() as client:
                while time.monotonic() < deadline:
                    if self.proc.poll() is not None:
                        await asyncio.sleep(0.1)  # let the drain thread read the last words
                        err = " | ".join(ln.decode(errors="replace").strip() for ln in list(self._log)[-3:])
                        raise ServerStartError(f"server command {self.command} exited with {self.proc.returncode} "
                                               f"while starting: {err or '(no output)'} (log: {self.log})",
                                               log=self.log)
                    with contextlib.suppress(httpx.HTTPError):
                        await client.get(self.url, timeout=1.0)
                        return
                    await asyncio.sleep(0.1)
            self.terminate()
            raise ServerStartError(f"server {self.command} did not answer at {self.url} within {self.start_timeout}s "
                                   f"(log: {self.log})", log=self.log)

    def terminate(self) -> None:
        """SIGTERM the server and everything it spawned (its process group), SIGKILL what is left after 5 s."""
        if self.proc is None:
            return
        group = self.proc.pid if os.name == "posix" else None  # start_new_session: its pid is the group id

        def signal_all(sig: int) -> None:
            with contextlib.suppress(OSError):  # gone already
                if group is not None:
                    os.killpg(group, sig)
                elif sig != signal.SIGCONT:
                    self.proc.send_signal(sig)  # type: ignore[union-attr]

        if self.proc.poll() is None:
            signal_all(signal.SIGTERM)
            signal_all(signal.SIGCONT)  # a stopped (SIGSTOP) process handles SIGTERM only once continued
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                signal_all(signal.SIGKILL)
                self.proc.wait()
        signal_all(signal.SIGKILL)  # children the server left behind when it exited
        self.proc = None


@dataclass
class ServerSpec:
    """How to reach an MCP server.

    - `ServerSpec.stdio(["mcp-server-x", "--flag"])`: spawn the command, talk over stdin/stdout (one process per
      session);
    - `ServerSpec.http("http://127.0.0.1:8000/mcp")`: a running streamable-HTTP server; add `launch=[cmd...]` to have
      toolgym start (and restart) it;
    - `ServerSpec.inprocess(server_or_factory)`: an `MCPServer` object (or a zero-argument factory), in memory.

    Per-rollout sandboxes (`toolgym.sandbox`): `{rollout_dir}`, `{rollout_id}` and `{port}` in `command`, `url`,
    `launch`, `env` values or `cwd`, or any `fixtures`, give each session a fresh directory (fixtures copied in) that
    is removed when the session is released; with `{port}` in `url` and `launch`, an HTTP server is launched per
    session. `prestart=N` keeps N such sessions started ahead (a warm pool, `scope="rollout"` only); `keep_sandboxes`
    keeps the sandboxes rollouts used (warm-pool ones no rollout took are removed).

    `error_patterns`: regexes; a tool result whose text matches one counts as an error (`exec_ok` false), for servers
    that answer errors as ordinary text. `env_passthrough`: names (globs) of the caller's environment variables the
    process gets beyond `BASE_ENV_VARS`; `env` values may hold `${VAR}` (expanded from the caller's environment when
    the process starts).
    """

    kind: Literal["stdio", "http", "inprocess"]
    command: list[str] = field(default_factory=list)
    url: str = ""
    env: dict[str, str] | None = None
    cwd: str | None = None
    launch: list[str] | None = None
    target: Any = None
    fixtures: list[Fixture] = field(default_factory=list)
    prestart: int = 0
    keep_sandboxes: bool = False
    error_patterns: list[str] = field(default_factory=list)
    env_passthrough: list[str] | None = None

    def is_error_text(self, text: str) -> bool:
        """Whether a result text is an error by `error_patterns` (regexes searched in the text, `^` at line starts)."""
        rx = _compiled(tuple(self.error_patterns))
        return rx is not None and rx.search(text) is not None

    def _texts(self) -> list[tuple[str, str]]:
        out = [(f"command[{i}]", c) for i, c in enumerate(self.command)] + [("url", self.url)]
        out += [(f"launch[{i}]", c) for i, c in enumerate(self.launch or [])]
        out += [(f"env.{k}", v) for k, v in (self.env or {}).items()]
        return out + ([("cwd", self.cwd)] if self.cwd else [])

    @property
    def sandboxed(self) -> bool:
        """Whether each session gets its own sandbox (placeholders or fixtures)."""
        return bool(self.fixtures) or uses_sandbox([t for _, t in self._texts()])

    def check(self, where: str = "server") -> None:
        """Raise `SandboxError` for a placeholder that is not a sandbox one, a `${VAR}` the caller's environment does
        not set, or an `error_patterns` entry that is not a regex (naming the entry)."""
        for name, text in self._texts():
            check_placeholders(text, f"{where}.{name}")
            for var in env_refs(text):
                if var not in os.environ:
                    raise SandboxError(f"{where}.{name}: ${{{var}}} is not set in your environment; export {var} "
                                       "before running, or remove the reference", f"{where}.{name}")
        for i, pat in enumerate(self.error_patterns):
            try:
                re.compile(pat)
            except re.error as exc:
                raise SandboxError(f"{where}.error_patterns[{i}]: {pat!r} is not a valid regex: {exc}",
                                   f"{where}.error_patterns") from None
        if self.prestart < 0:
            raise ValueError(f"{where}.prestart must be >= 0")

    def fill(self, box: Sandbox) -> ServerSpec:
        """This spec with the sandbox's values in place of the placeholders."""
        v = box.values()

        def sub(text: str, where: str) -> str:
            return substitute(text, v, f"server.{where}", PLACEHOLDERS)

        return replace(self, command=[sub(c, f"command[{i}]") for i, c in enumerate(self.command)],
                       url=sub(self.url, "url"),
                       launch=[sub(c, f"launch[{i}]") for i, c in enumerate(self.launch)] if self.launch else None,
                       env={k: sub(x, f"env.{k}") for k, x in self.env.items()} if self.env else None,
                       cwd=sub(self.cwd, "cwd") if self.cwd else None)

    @classmethod
    def stdio(cls, command: str | list[str], env: dict[str, str] | None = None, cwd: str | None = None,
              **sandbox: Any) -> ServerSpec:
        cmd = command.split() if isinstance(command, str) else list(command)
        if not cmd:
            raise ValueError("empty server command")
        return cls(kind="stdio", command=cmd, env=env, cwd=cwd, **sandbox)

    @classmethod
    def http(cls, url: str, launch: list[str] | None = None, env: dict[str, str] | None = None,
             cwd: str | None = None, **sandbox: Any) -> ServerSpec:
        """`sandbox`: `fixtures`, `prestart`, `keep_sandboxes`, `error_patterns`, `env_passthrough` (see the class
        docstring)."""
        return cls(kind="http", url=url, launch=launch, env=env, cwd=cwd, **sandbox)

    @classmethod
    def inprocess(cls, server_or_factory: Any) -> ServerSpec:
        return cls(kind="inprocess", target=server_or_factory)

    def describe(self) -> str:
        if self.kind == "stdio":
            return "stdio:" + " ".join(self.command)
        if self.kind == "http":
            return self.url
        return f"inprocess:{getattr(self.target, '__name__', type(self.target).__name__)}"


class MCPSession:
    """One open client session to an MCP server. Use `await MCPSession.open(spec)`, then `call`, then `close`."""

    def __init__(self, spec: ServerSpec, server_obj: Any = None, log_name: str = "server", legacy: bool = False) -> None:
        self.spec = spec
        self._server_obj = server_obj
        self.log_name, self.legacy = log_name, legacy  # legacy: connect with the initialize handshake (no probe)
        self.log: Path | None = None  # the server's stderr log (a stdio server)
        self._log_start = 0
        self._errlog: Any = None
        self._client: Any = None
        self._owner: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._open_error: BaseException | None = None
        self.broken: str | None = None
        self.calls = 0
        self.sandbox: Sandbox | None = None  # the per-session sandbox and launched server, released with it
        self.process: ManagedProcess | None = None

    @classmethod
    async def open(cls, spec: ServerSpec, server_obj: Any = None, timeout: float = 60.0, log_name: str = "server",
                   legacy: bool = False) -> MCPSession:
        """Connect (`log_name`: the server's stderr log file, `server_log_path`; `legacy`: skip the version probe).
        A missing command or a server that exits while starting raises `ServerStartError` with its last log lines."""
        session = cls(spec, server_obj, log_name, legacy)
        if spec.kind == "stdio":
            check_command(expand_env_refs(spec.command[0], "server.command[0]"))
        session._owner = asyncio.create_task(session._run(), name=f"mcp-session:{spec.describe()}")
        try:
            await asyncio.wait_for(session._ready.wait(), timeout)
        except TimeoutError:
            await session.close()
            raise ToolCallError(f"could not connect to MCP server {spec.describe()} within {timeout}s") from None
        except BaseException:  # the caller was cancelled while connecting: stop the session and wait for it, so its
            session._stop.set()  # stdio child is reaped inside this loop (not left running, nor collected after the
            session._owner.cancel()  # loop closed)
            await asyncio.wait({session._owner}, timeout=timeout)
            raise
        if session._open_error is not None:
            if isinstance(session._open_error, SandboxError | ServerStartError):
                raise session._open_error
            tail = log_tail(session.log, session._log_start)
            if tail:
                raise ServerStartError(f"server {spec.describe()} exited while starting: {tail} (log: {session.log})",
                                       log=session.log) from session._open_error
            raise ServerStartError(
                f"could not connect to MCP server {spec.describe()}: {_describe_exc(session._open_error)}",
                log=session.log) from session._open_error
        return session

    def _target(self) -> Any:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        if self.spec.kind == "stdio":
            cmd = [expand_env_refs(c, f"server.command[{i}]") for i, c in enumerate(self.spec.command)]
            cmd = with_parent_death([resolve_command(cmd[0]), *cmd[1:]])
            env = server_environment(self.spec.env, self.spec.env_passthrough)
            cwd = expand_env_refs(self.spec.cwd, "server.cwd") if self.spec.cwd else None
            self.log = server_log_path(self.log_name)
            errlog = self.log.open("a")
            self._log_start = errlog.tell()
            self._errlog = errlog
            return stdio_client(StdioServerParameters(command=cmd[0], args=cmd[1:], env=env, cwd=cwd), errlog=errlog)
        if self.spec.kind == "http":
            return expand_env_refs(self.spec.url, "server.url")
        return self._server_obj

    async def _run(self) -> None:
        from mcp import Client

        try:
            target = self._target()
            client_cm = Client(target, mode="legacy") if self.legacy and self.spec.kind != "inprocess" else \
                Client(target)
            async with client_cm as client:
                self._client = client
                if self.spec.kind != "inprocess" and not self.legacy:
                    self.legacy = _is_legacy(client)
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - reported on the session, never raised into a foreign task
            if not self._ready.is_set():
                self._open_error = exc
            elif not self._stop.is_set():
                self.broken = self.broken or f"connection lost: {_describe_exc(exc)}"
            if isinstance(exc, asyncio.CancelledError) and not self._stop.is_set():
                pass
        finally:
            self._client = None
            if not self._stop.is_set() and self._ready.is_set():
                self.broken = self.broken or "connection closed by the server"
            if self._errlog is not None:
                self._errlog.close()
            self._ready.set()

    async def list_tools(self) -> list[ToolInfo]:
        client = self._require()
        res = await client.list_tools()
        return [ToolInfo(t.name, t.description or "", dict(t.input_schema or {})) for t in res.tools]

    async def call(self, name: str, arguments: dict[str, Any] | None, timeout: float | None = 30.0) -> ToolResult:
        """Call a tool. A server-side error comes back as `ToolResult(is_error=True)`; a dead or hung server raises
        `ToolCallError` and marks the session broken."""
        client = self._require()
        self.calls += 1
        t0 = time.perf_counter()
        try:
            if timeout is None:
                res = await client.call_tool(name, arguments or {})
            else:
                res = await asyncio.wait_for(client.call_tool(name, arguments or {}), timeout)
        except TimeoutError:
            self.broken = f"tool {name!r} timed out after {timeout}s (server hung?)"
            raise ToolCallError(self.broken) from None
        except Exception as exc:  # noqa: BLE001 - classify below
            if self.broken or self._client is None or _is_transport_error(exc):
                if not self.broken:
                    tail = log_tail(self.log, self._log_start, lines=2)  # a server that died: its last words
                    self.broken = f"connection lost during {name!r}: {_describe_exc(exc)}" + \
                        (f" (server stderr: {tail}; log: {self.log})" if tail else "")
                raise ToolCallError(self.broken) from exc
            # a protocol-level error for this call only (e.g. the server rejected the request): the session lives on
            return ToolResult(text=f"Error: {_describe_exc(exc)}", is_error=True, latency_s=time.perf_counter() - t0)
        text = "\n".join(_content_text(c) for c in (res.content or []))
        return ToolResult(
            text=text,
            is_error=bool(res.is_error),
            structured=getattr(res, "structured_content", None),
            latency_s=time.perf_counter() - t0,
        )

    @property
    def client(self) -> Any:
        """The underlying `mcp.Client` (raises `ToolCallError` when the session is broken or closed): for code that
        needs the raw SDK, such as the benchmarks' bare-client baselines."""
        return self._require()

    def _require(self) -> Any:
        if self.broken:
            raise ToolCallError(f"MCP session to {self.spec.describe()} is broken: {self.broken}")
        if self._client is None:
            raise ToolCallError(f"MCP session to {self.spec.describe()} is not open")
        return self._client

    async def close(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._owner is not None and not self._owner.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._owner), timeout)
            except (TimeoutError, asyncio.CancelledError):
                self._owner.cancel()
                with contextlib.suppress(BaseException):
                    await self._owner


def _is_legacy(client: Any) -> bool:
    """Whether a connected client fell back to the initialize handshake (an mcp 1.x server)."""
    try:
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

        return client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
    except Exception:  # noqa: BLE001 - an SDK without these names: keep probing
        return False


def _content_text(c: Any) -> str:
    text = getattr(c, "text", None)
    if text is not None:
        return str(text)
    return json.dumps(c.model_dump(mode="json") if hasattr(c, "model_dump") else str(c))


def _describe_exc(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _describe_exc(exc.exceptions[0])
    msg = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {msg}" if str(exc) else msg


def _is_transport_error(exc: BaseException) -> bool:
    import anyio

    transport = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, ConnectionError, OSError)
    if isinstance(exc, transport) or isinstance(exc, httpx.TransportError):
        return True
    text = str(exc).lower()
    return "connection closed" in text or "closed" in text and "stream" in text


class SessionProvider:
    """Hands out sessions to rollouts: a fresh one per rollout (`scope="rollout"`, for servers whose state is per
    session) or one shared session (`scope="shared"`), reopened after it breaks. Owns launched processes, in-process
    server objects and per-session sandboxes (`ServerSpec.sandboxed`); `aclose()` closes everything. `restarts`
    counts the sessions replaced because they broke (server crash, hang, lost connection). With `spec.prestart = N`
    and `scope="rollout"`, N sessions (sandbox + server + MCP session) are kept started ahead: `acquire` takes one
    and a background task starts the next (not with fixtures chosen by a task field, which need the task)."""

    def __init__(self, spec: ServerSpec, scope: Literal["rollout", "shared"] = "rollout", name: str = "server") -> None:
        """`name`: the server's name in logs and errors (its stderr goes to `server_log_path(name)`)."""
        self.spec, self.scope, self.name = spec, scope, name
        self._shared: MCPSession | None = None
        self._lock = asyncio.Lock()
        self._open: set[MCPSession] = set()
        self._managed = ManagedProcess(spec.launch, spec.url, spec.env, cwd=spec.cwd,
                                       passthrough=spec.env_passthrough, log_name=name) \
            if spec.kind == "http" and spec.launch and not spec.sandboxed else None
        self.legacy = False  # learned from the first session: an mcp 1.x server, connect without the probe
        self._used: set[MCPSession] = set()  # sessions handed to a rollout (their sandboxes are the ones kept)
        self._server_obj: Any = None
        self.restarts = 0
        task_fixtures = any(placeholders(f.src) for f in spec.fixtures)
        self.prestart = spec.prestart if scope == "rollout" and not task_fixtures else 0
        self._pool: list[MCPSession] = []
        self._fills: set[asyncio.Task[None]] = set()
        self._closed = False
        self.pool_hits = 0
        self.pool_errors: list[str] = []
        self._http_suspect = False  # an HTTP server toolgym did not launch, behind a broken session

    def _inprocess_server(self, fresh: bool) -> Any:
        target = self.spec.target
        if not callable(target) or hasattr(target, "_lowlevel_server") or hasattr(target, "run"):
            return target  # a server object: shared by every session (isolation is the server's job)
        if fresh or self._server_obj is None:
            self._server_obj = target()
        return self._server_obj

    async def _open_session(self, spec: ServerSpec, obj: Any) -> MCPSession:
        session = await MCPSession.open(spec, obj, log_name=self.name, legacy=self.legacy)
        self.legacy = self.legacy or session.legacy
        return session

    async def _new(self, task: dict[str, Any] | None = None) -> MCPSession:
        if not self.spec.sandboxed:
            if self._managed is not None:
                await self._managed.ensure_running()
            else:
                await self._check_http_live()
            obj = self._inprocess_server(fresh=False) if self.spec.kind == "inprocess" else None
            try:
                session = await self._open_session(self.spec, obj)
            except ToolCallError:
                self._mark_suspect()
                raise
            self._open.add(session)
            return session
        box = Sandbox.create(self.spec.fixtures, task, self.spec.keep_sandboxes)
        proc: ManagedProcess | None = None
        try:
            spec = self.spec.fill(box)
            if spec.kind == "http" and spec.launch:
                proc = ManagedProcess(spec.launch, spec.url, spec.env, cwd=spec.cwd, passthrough=spec.env_passthrough,
                                      log_name=self.name)
                await proc.ensure_running()
            session = await self._open_session(spec, self._inprocess_server(False) if spec.kind == "inprocess"
                                               else None)
        except BaseException:  # never a rollout's: removed even under keep_sandboxes (a cancelled warm-pool start too)
            if proc is not None:
                proc.terminate()
            box.remove(force=True)
            raise
        session.sandbox, session.process = box, proc
        self._open.add(session)
        return session

    @property
    def open_sessions(self) -> int:
        """Sessions opened and not released yet (the shared one and warm-pool ones included)."""
        return len(self._open)

    @property
    def shared(self) -> MCPSession | None:
        """The session shared by all rollouts (`scope="shared"`), once opened."""
        return self._shared

    async def acquire(self, task: dict[str, Any] | None = None, rollout: bool = True) -> MCPSession:
        """A session for one rollout (`task`: the rollout's task, for fixtures that name task fields; `rollout=False`:
        for the env itself, e.g. listing tools -- its sandbox is not kept by `keep_sandboxes`)."""
        session = await self._acquire(task)
        if rollout:
            self._used.add(session)
        return session

    async def _acquire(self, task: dict[str, Any] | None) -> MCPSession:
        if self.scope == "rollout":
            while self._pool:
                session = self._pool.pop(0)
                if not session.broken:
                    self.pool_hits += 1
                    self._refill()
                    return session
                await self._discard(session)
            session = await self._new(task)
            self._refill()
            return session
        async with self._lock:
            if self._shared is None or self._shared.broken:
                if self._shared is not None:
                    await self._discard(self._shared)
                self._shared = await self._new(task)
            return self._shared

    def _refill(self) -> None:
        if self._closed or len(self.pool_errors) >= 3:  # a server that fails to start: stop prestarting it
            return
        for _ in range(self.prestart - len(self._pool) - len(self._fills)):
            t = asyncio.get_running_loop().create_task(self._fill_one(), name="mcp-prestart")
            self._fills.add(t)
            t.add_done_callback(self._fills.discard)

    async def _fill_one(self) -> None:
        try:
            session = await self._new(None)
        except Exception as exc:  # noqa: BLE001 - counted; acquire then starts sessions itself
            self.pool_errors.append(_describe_exc(exc))
            return
        if self._closed:
            await self._discard(session)
        else:
            self._pool.append(session)

    async def prestart_now(self) -> None:
        """Fill the warm pool and wait for it (`env.start()` calls this, so the first rollouts find it full)."""
        self._refill()
        if self._fills:
            await asyncio.gather(*list(self._fills), return_exceptions=True)

    async def release(self, session: MCPSession) -> None:
        if self.scope == "rollout" or session.broken:
            await self._discard(session)
            if session is self._shared:
                self._shared = None

    async def _discard(self, session: MCPSession) -> None:
        if session.broken and session in self._open:
            self.restarts += 1  # counted once per broken session, in either scope
        self._open.discard(session)
        used = session in self._used
        self._used.discard(session)
        try:
            await session.close()
        finally:
            if session.process is not None:
                session.process.terminate()
            if session.sandbox is not None:
                session.sandbox.remove(force=not used)  # keep_sandboxes keeps only the rollouts' sandboxes
            if session.broken and self._managed is not None and not self._managed.alive:
                self._managed.terminate()
            elif session.broken:
                self._mark_suspect()

    # --- liveness of HTTP servers (a stopped or hung process still accepts connections) -------------------------
    def _mark_suspect(self) -> None:
        """A session to this provider's HTTP server broke (or could not open): the next session pings it first."""
        if self._managed is not None:
            self._managed.suspect = True
        elif self.spec.kind == "http" and not self.spec.sandboxed:
            self._http_suspect = True

    async def _check_http_live(self) -> None:
        """A suspect HTTP server that toolgym did not launch must answer a ping within PING_TIMEOUT_S, else the
        session fails at once with a clear error (instead of after the 60 s connect timeout)."""
        if not self._http_suspect:
            return
        if not await http_responds(self.spec.url, PING_TIMEOUT_S):
            raise ToolCallError(f"the MCP server at {self.spec.url} does not answer within {PING_TIMEOUT_S:g}s "
                                "(stopped or hung?)")
        self._http_suspect = False

    async def aclose(self) -> None:
        self._closed = True
        for t in list(self._fills):
            t.cancel()
        if self._fills:
            await asyncio.gather(*list(self._fills), return_exceptions=True)
        self._pool.clear()
        for s in list(self._open):
            await self._discard(s)
        self._shared = None
        if self._managed is not None:
            self._managed.terminate()


@dataclass
class ServerBinding:
    """One server of a multi-server env: a name (in metrics and errors), how to reach it, its session scope, the
    prefix its tool names get in the env (for clashes: `time_` makes `convert_time` `time_convert_time`) and the
    tools of it the model must not see (by their own names)."""

    name: str
    spec: ServerSpec
    scope: Literal["rollout", "shared"] = "shared"
    prefix: str = ""
    hidden_tools: tuple[str, ...] = ()


class MultiSession:
    """One rollout's sessions to several servers, seen as one session: the union of their tools (prefixed), each
    call routed to its server under the server's own tool name. Made and released by `MultiProvider`."""

    def __init__(self, parts: dict[str, MCPSession], provider: MultiProvider) -> None:
        self.parts, self.provider = parts, provider
        self.sandbox: Sandbox | None = None
        self.process: ManagedProcess | None = None

    @property
    def broken(self) -> str | None:
        return next((f"{n}: {s.broken}" for n, s in self.parts.items() if s.broken), None)

    @property
    def calls(self) -> int:
        return sum(s.calls for s in self.parts.values())

    async def list_tools(self) -> list[ToolInfo]:
        out: list[ToolInfo] = []
        for b in self.provider.bindings:
            for t in await self.parts[b.name].list_tools():
                out.append(ToolInfo(b.prefix + t.name, t.description, t.input_schema))
        return out

    async def call(self, name: str, arguments: dict[str, Any] | None, timeout: float | None = 30.0) -> ToolResult:
        route = self.provider.routes.get(name)
        if route is None:
            return ToolResult(text=f"Error: no server offers a tool named {name!r}", is_error=True)
        server, tool = route
        return await self.parts[server].call(tool, arguments, timeout)

    async def close(self, timeout: float = 10.0) -> None:
        """Nothing of its own: `MultiProvider.release` hands each part back to its server's provider."""


class MultiProvider:
    """`SessionProvider` for an env bound to several servers: one provider per server (each with its own scope,
    sandboxes and warm pool); `acquire` returns a `MultiSession` holding one session of each. `start()` learns the
    routes: every tool name (with its server's prefix) -> (server, the server's own name); two servers offering the
    same name without prefixes is an error naming both."""

    def __init__(self, bindings: list[ServerBinding]) -> None:
        names = [b.name for b in bindings]
        if not bindings or len(set(names)) != len(names):
            raise ValueError(f"servers need distinct names, got {names}")
        self.bindings = list(bindings)
        self.providers = {b.name: SessionProvider(b.spec, b.scope, b.name) for b in bindings}
        self.routes: dict[str, tuple[str, str]] = {}

    @property
    def restarts(self) -> int:
        return sum(p.restarts for p in self.providers.values())

    @property
    def pool_hits(self) -> int:
        return sum(p.pool_hits for p in self.providers.values())

    def describe(self) -> str:
        return ", ".join(f"{b.name}={b.spec.describe()}" for b in self.bindings)

    def server_of(self, tool: str) -> str | None:
        route = self.routes.get(tool)
        return route[0] if route else None

    async def start(self) -> None:
        """Connect to each server once and learn the routes."""
        session = await self.acquire(rollout=False)
        try:
            routes: dict[str, tuple[str, str]] = {}
            for b in self.bindings:
                for t in await session.parts[b.name].list_tools():
                    name = b.prefix + t.name
                    if name in routes:
                        raise ValueError(f"tool {name!r} is offered by servers {routes[name][0]!r} and {b.name!r}: "
                                         f"give one of them a prefix")
                    routes[name] = (b.name, t.name)
            self.routes = routes
        finally:
            await self.release(session)

    async def acquire(self, task: dict[str, Any] | None = None, rollout: bool = True) -> MultiSession:
        parts: dict[str, MCPSession] = {}
        try:
            for b in self.bindings:
                try:
                    parts[b.name] = await self.providers[b.name].acquire(task, rollout)
                except ServerStartError as exc:
                    if exc.server is None:
                        exc.server = b.name
                    raise
        except BaseException:
            for n, s in parts.items():
                await self.providers[n].release(s)
            raise
        return MultiSession(parts, self)

    async def release(self, session: MultiSession) -> None:
        for n, s in session.parts.items():
            await self.providers[n].release(s)

    async def prestart_now(self) -> None:
        for p in self.providers.values():
            await p.prestart_now()

    async def aclose(self) -> None:
        for p in self.providers.values():
            await p.aclose()
