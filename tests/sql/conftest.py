"""Fixtures for the SQL suite: a real PostgreSQL server started for the session (marker `postgres`).

The cluster is created with initdb under a temporary directory, owned by the `postgres` OS user (initdb refuses to
run as root), listening on 127.0.0.1 only with trust auth and the C locale, and stopped at the end. Without
PostgreSQL binaries (Debian: `apt-get install -y postgresql`) the postgres tests are skipped with the reason.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile

import pytest


@pytest.fixture
def anyio_backend():
    return "asyncio"


def _pg_bindir() -> str | None:
    env = os.environ.get("PG_BINDIR")
    if env and os.path.exists(os.path.join(env, "initdb")):
        return env
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(d, "initdb")):
            return d
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_pg_user(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", "postgres", "--", *cmd]
    return ["su", "postgres", "-c", " ".join(cmd)]


@pytest.fixture(scope="session")
def pg_url():
    """A database URL of a superuser on a fresh PostgreSQL cluster (skips when PostgreSQL is not installed)."""
    bindir = _pg_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL binaries not found (install Debian's `postgresql` or set PG_BINDIR)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install 'mcp-server-sql[postgres]')")
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root and no `postgres` OS user to run initdb as")
    base = tempfile.mkdtemp(prefix="toolgym-pg-")
    os.chmod(base, 0o777)
    data = os.path.join(base, "data")
    port = _free_port()
    user = "postgres" if os.geteuid() == 0 else os.environ.get("USER", "postgres")
    subprocess.run(_as_pg_user([f"{bindir}/initdb", "-D", data, "-U", user, "--auth=trust", "--locale=C",
                                "-E", "UTF8"]), check=True, capture_output=True)
    log = os.path.join(base, "log")
    opts = f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={base} -c fsync=off " \
           f"-c max_connections=200"
    subprocess.run(_as_pg_user([f"{bindir}/pg_ctl", "-D", data, "-l", log, "-o", opts, "-w", "start"]),
                   check=True, capture_output=True)
    url = f"postgresql+psycopg://{user}@127.0.0.1:{port}/postgres"
    try:
        yield url
    finally:
        subprocess.run(_as_pg_user([f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"]), capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request):
    """Run a test on SQLite (the bundled fixture, in memory) and on PostgreSQL."""
    if request.param == "sqlite":
        return None
    return request.getfixturevalue("pg_url")
