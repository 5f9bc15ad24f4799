"""Per-rollout sandboxes: a fresh directory (and port) for each rollout's server, so that servers that keep their
state in files (a knowledge-graph file, a SQLite database, a folder of documents) start every rollout from the same
state and leave nothing behind.

A `ServerSpec` whose `command`, `url`, `launch`, `env` values or `cwd` hold a placeholder, or that lists
`fixtures`, gets a sandbox per session (with `scope="rollout"`, one per rollout):

    {rollout_dir}   the sandbox directory (created empty, fixtures copied in, removed after the rollout)
    {rollout_id}    a unique id of the rollout's sandbox (also the start of the directory's name)
    {port}          a free TCP port (for an HTTP server launched per rollout)

`{{` and `}}` are literal braces. Fixtures are files or folders copied into the sandbox before the server starts;
a fixture's source may name task fields (`fixtures/{db}`), filled from the rollout's task. Sandboxes live under
`$TOOLGYM_SANDBOX_DIR` (default: the system temp folder) in `toolgym-sandboxes/`, and are removed when their
session is released (after a normal end, a crashed server, a timeout or a cancelled run), at interpreter exit for
any left over, and -- for a process killed with SIGKILL -- by the next toolgym process that opens a sandbox, which
removes the sandboxes of processes that no longer exist. `keep_sandboxes` (or `TOOLGYM_KEEP_SANDBOXES=1`) keeps
them for debugging.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import re
import shutil
import socket
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PLACEHOLDERS = ("rollout_dir", "rollout_id", "port")
_TOKEN = re.compile(r"\$\{\w*\}|\{\{|\}\}|\{(\w*)\}")  # ${VAR}: an environment variable, not a placeholder
_ENV_REF = re.compile(r"\$\{(\w*)\}")
_counter = itertools.count()
_live: dict[str, Path] = {}  # sandboxes of this process not removed yet (removed at exit unless kept)


class SandboxError(ValueError):
    """A bad placeholder, a missing fixture or a sandbox that cannot be made; the message starts with the config
    entry (`server.env.DB: ...`), also kept as `where` (a config file's loader adds the file and line)."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(message)
        self.where = where


@dataclass(frozen=True)
class Fixture:
    """A file or folder copied into each sandbox: `src` (absolute; may name task fields as `{field}`) to `dest`
    (a path inside the sandbox; default: the source's name)."""

    src: str
    dest: str = ""


def placeholders(text: str) -> list[str]:
    """The `{name}` placeholders in `text` (escaped braces and `${VAR}` references skipped)."""
    return [m.group(1) for m in _TOKEN.finditer(text) if m.group(1) is not None]


def env_refs(text: str) -> list[str]:
    """The `${VAR}` references (environment variables of the caller) in `text`."""
    return _ENV_REF.findall(text)


def expand_env_refs(text: str, where: str, environ: Any = None) -> str:
    """`text` with each `${VAR}` replaced by the caller's environment variable; an unset one is a `SandboxError`
    naming `where`. Done when a server starts, so the values live only in the server's process (never in a spec, a
    message or a run folder)."""
    env = os.environ if environ is None else environ

    def repl(m: re.Match[str]) -> str:
        name = m.group(1)
        if not name or name not in env:
            raise SandboxError(f"{where}: ${{{name}}} is not set in your environment; export {name or 'it'} before "
                               "running, or remove the reference", where)
        return str(env[name])

    return _ENV_REF.sub(repl, text)


def substitute(text: str, values: dict[str, Any], where: str, allowed: tuple[str, ...] | None = None) -> str:
    """`text` with `{name}` replaced from `values`; an unknown name is a `SandboxError` naming `where`."""

    def repl(m: re.Match[str]) -> str:
        if m.group(0).startswith("$"):
            return m.group(0)  # ${VAR}: expanded when the server starts (expand_env_refs)
        if m.group(0) == "{{":
            return "{"
        if m.group(0) == "}}":
            return "}"
        name = m.group(1)
        if name not in values:
            valid = ", ".join("{" + p + "}" for p in (allowed or tuple(values)))
            raise SandboxError(f"{where}: unknown placeholder {{{name}}} in {text!r} (valid: {valid}; "
                               f"write {{{{ and }}}} for literal braces)", where)
        return str(values[name])

    return _TOKEN.sub(repl, text)


def check_placeholders(text: str, where: str, extra: tuple[str, ...] = ()) -> None:
    """Fail now (at config load) for a placeholder that is not a sandbox one (or one of `extra`)."""
    substitute(text, {p: "" for p in (*PLACEHOLDERS, *extra)}, where)


def uses_sandbox(strings: list[str]) -> bool:
    return any(p in PLACEHOLDERS for s in strings for p in placeholders(s))


def sandbox_root() -> Path:
    return Path(os.environ.get("TOOLGYM_SANDBOX_DIR") or tempfile.gettempdir()) / "toolgym-sandboxes"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale(root: Path | None = None) -> int:
    """Remove the sandboxes of toolgym processes that no longer exist (killed with SIGKILL); returns how many."""
    root = root or sandbox_root()
    removed = 0
    if not root.is_dir():
        return 0
    for d in root.iterdir():
        pid = d.name.split("-", 1)[0]
        if d.is_dir() and pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)) \
                and not (d / ".keep").exists():
            shutil.rmtree(d, ignore_errors=True)
            removed += 1
    return removed


_swept = False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Sandbox:
    """One rollout's directory, id and port. `Sandbox.create(fixtures, task)`, then `values`, then `remove()`."""

    def __init__(self, path: Path, rollout_id: str, keep: bool = False) -> None:
        self.path, self.id, self.keep = path, rollout_id, keep
        self._port: int | None = None
        self.removed = False

    @classmethod
    def create(cls, fixtures: list[Fixture] | tuple[Fixture, ...] = (), task: dict[str, Any] | None = None,
               keep: bool = False) -> Sandbox:
        global _swept
        root = sandbox_root()
        root.mkdir(parents=True, exist_ok=True)
        if not _swept:
            _swept = True
            sweep_stale(root)
        rollout_id = f"{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:8]}"
        path = root / rollout_id
        path.mkdir()
        keep = keep or os.environ.get("TOOLGYM_KEEP_SANDBOXES", "") not in ("", "0")
        box = cls(path, rollout_id, keep)
        _live[rollout_id] = path
        if keep:
            (path / ".keep").touch()
        try:
            for i, fx in enumerate(fixtures):
                box._copy(fx, i, task)
        except BaseException:
            box.remove(force=True)
            raise
        return box

    def _copy(self, fx: Fixture, i: int, task: dict[str, Any] | None) -> None:
        if placeholders(fx.src) and task is None:
            return  # a task-selected fixture and no task (listing the server's tools): nothing to copy
        src = Path(substitute(fx.src, {k: v for k, v in (task or {}).items()}, f"server.fixtures[{i}]"))
        if not src.exists():
            raise SandboxError(f"server.fixtures[{i}]: {src} does not exist", f"server.fixtures[{i}]")
        dest = (self.path / (fx.dest or src.name)).resolve()
        if self.path.resolve() not in (dest, *dest.parents):
            raise SandboxError(f"server.fixtures[{i}]: dest {fx.dest!r} is outside the sandbox",
                               f"server.fixtures[{i}]")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dest, dirs_exist_ok=True)
        else:
            shutil.copy2(src, dest)

    @property
    def port(self) -> int:
        if self._port is None:
            self._port = free_port()
        return self._port

    def values(self) -> dict[str, Any]:
        """The placeholder values (a port is only taken when `{port}` is used)."""
        return {"rollout_dir": str(self.path), "rollout_id": self.id, "port": _LazyPort(self)}

    def remove(self, force: bool = False) -> None:
        """Delete the directory (unless kept; `force` deletes a kept one too)."""
        if self.removed:
            return
        self.removed = True
        _live.pop(self.id, None)
        if force or not self.keep:
            shutil.rmtree(self.path, ignore_errors=True)


class _LazyPort:
    def __init__(self, box: Sandbox) -> None:
        self.box = box

    def __str__(self) -> str:
        return str(self.box.port)


@atexit.register
def _remove_leftovers() -> None:  # pragma: no cover - interpreter exit
    for rid, path in list(_live.items()):
        if not (path / ".keep").exists():
            with contextlib.suppress(Exception):
                shutil.rmtree(path, ignore_errors=True)
        _live.pop(rid, None)


__all__ = ["PLACEHOLDERS", "Fixture", "Sandbox", "SandboxError", "check_placeholders", "env_refs", "expand_env_refs",
           "free_port", "placeholders", "substitute", "sweep_stale", "uses_sandbox"]
