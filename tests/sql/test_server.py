"""mcp-server-sql through real MCP clients: tools, formatting, safety refusals, per-session isolation.

Every test that takes `db_url` runs on SQLite and (marker `postgres`) on a PostgreSQL server started by conftest.
"""

from __future__ import annotations

import json
import sys
import time

import anyio
import mcp
import pytest
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp_server_sql import build_server
from mcp_server_sql.sqlcheck import SQLRefused, check_sql, split_statements

pytestmark = pytest.mark.anyio
SERVER_CMD = [sys.executable, "-m", "mcp_server_sql"]


def text(res) -> str:
    return res.content[0].text


@pytest.fixture
def server(db_url):
    srv = build_server(db=db_url, timeout_s=1.5, max_rows=20)
    yield srv
    srv.registry.close()


async def _open(c) -> str:
    return json.loads(text(await c.call_tool("open_session", {})))["session"]


async def _call(c, tool, sid, **args):
    return await c.call_tool(tool, {**args, "session": sid})


# ------------------------------------------------------------------------------------------- static checks
def test_split_statements_respects_literals_and_comments():
    assert split_statements("SELECT ';' AS x -- ; not a split\n") == ["SELECT ';' AS x"]
    assert len(split_statements("SELECT 1; SELECT 2;")) == 2
    assert split_statements("SELECT $t$ ; $t$") == ["SELECT $t$ ; $t$"]
    assert split_statements('SELECT "a;b" FROM t /* ; */') == ['SELECT "a;b" FROM t']
    with pytest.raises(SQLRefused, match="one SQL statement"):
        check_sql("SELECT 1; DROP TABLE orders", "read")
    with pytest.raises(SQLRefused, match="ATTACH"):
        check_sql("attach database 'x' as y", "write")
    with pytest.raises(SQLRefused, match="CREATE FUNCTION"):
        check_sql("CREATE FUNCTION f() RETURNS int AS 'select 1' LANGUAGE sql", "write")
    assert check_sql("  WITH x AS (SELECT 1) SELECT * FROM x; ", "read").startswith("WITH")


# ------------------------------------------------------------------------------------------- tools
async def test_tools_listing_and_basic_use(server):
    async with mcp.Client(server) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert {"list_tables", "describe_table", "run_query", "execute", "explain_query", "open_session",
                "close_session", "dump_tables", "query_json"} <= names
        sid = await _open(c)
        out = text(await _call(c, "list_tables", sid))
        assert "customers" in out and "order_items" in out and "(6 tables)" in out
        desc = text(await _call(c, "describe_table", sid, table="orders"))
        assert "order_id" in desc and "PK" in desc and "FK -> customers.customer_id" in desc and "sample rows" in desc
        res = await _call(c, "run_query", sid, sql="SELECT COUNT(*) AS n FROM orders")
        assert not res.is_error and "120" in text(res) and "(1 row)" in text(res)
        res = await _call(c, "run_query", sid, sql="SELECT name, email FROM customers WHERE email IS NULL")
        assert "NULL" in text(res)
        res = await _call(c, "run_query", sid, sql="SELECT COUNT(*) FROM customers WHERE email LIKE '%@example.com'")
        assert not res.is_error and text(res).splitlines()[2].strip().isdigit(), text(res)
        res = await _call(c, "execute", sid, sql="UPDATE products SET stock = stock + 5 WHERE category = 'Books'")
        assert not res.is_error and "4 rows affected" in text(res)
        plan = await _call(c, "explain_query", sid, sql="SELECT * FROM orders WHERE order_id = 3")
        assert not plan.is_error and text(plan).strip()
        bad = await _call(c, "run_query", sid, sql="SELECT nope FROM orders")
        assert bad.is_error and "SQL error" in text(bad)


async def test_row_cap_and_truncation_note(server):
    async with mcp.Client(server) as c:
        sid = await _open(c)
        res = await _call(c, "run_query", sid, sql="SELECT * FROM order_items")
        body = text(res)
        assert "truncated at the row cap" in body
        assert len(body.splitlines()) == 2 + 20 + 1  # header, rule, 20 rows, note
        res = await _call(c, "run_query", sid, sql="SELECT order_id FROM orders", max_rows=5)
        assert len(text(res).splitlines()) == 2 + 5 + 1
        res = await _call(c, "run_query", sid, sql="SELECT 1", max_rows=100000)
        assert res.is_error and "max_rows may be at most" in text(res)


# ------------------------------------------------------------------------------------------- security
ATTACKS = {
    "attach": ("run_query", "ATTACH DATABASE '/tmp/other.db' AS other", "ATTACH"),
    "attach_write": ("execute", "ATTACH DATABASE ':memory:' AS other", "ATTACH"),
    "multi_statement": ("run_query", "SELECT 1; DELETE FROM orders", "one SQL statement"),
    "multi_statement_comment": ("run_query", "SELECT 1 /* x */; DROP TABLE customers --", "one SQL statement"),
    "write_in_read": ("run_query", "DELETE FROM orders", "run_query only runs read queries"),
    "pragma": ("execute", "PRAGMA foreign_keys = OFF", "PRAGMA"),
    "set": ("execute", "SET statement_timeout = 0", "settings"),
    "create_function": ("execute", "CREATE FUNCTION f() RETURNS int AS 'SELECT 1' LANGUAGE sql", "not allowed"),
    "copy": ("execute", "COPY orders TO '/tmp/x.csv'", "COPY"),
    "vacuum_into": ("execute", "VACUUM INTO '/tmp/copy.db'", "VACUUM"),
    "virtual_table": ("execute", "CREATE VIRTUAL TABLE v USING fts5(x)", "not allowed"),
    "trigger": ("execute", "CREATE TRIGGER t AFTER INSERT ON orders BEGIN DELETE FROM orders; END", "allowed"),
    "transaction": ("execute", "BEGIN", "transaction"),
}
SQLITE_ATTACKS = {
    "load_extension": ("run_query", "SELECT load_extension('/tmp/evil.so')", "load_extension"),
    "readfile": ("run_query", "SELECT readfile('/etc/passwd')", "readfile"),
    "pragma_function": ("run_query", "SELECT * FROM pragma_table_info('orders')", "PRAGMA"),
}
PG_ATTACKS = {
    "pg_read_file": ("run_query", "SELECT pg_read_file('/etc/passwd')", "permission denied"),
    "pg_ls_dir": ("run_query", "SELECT pg_ls_dir('.')", "permission denied"),
    "lo_import": ("run_query", "SELECT lo_import('/etc/passwd')", "lo_import() is not allowed"),
    "cte_write_in_read": ("run_query", "WITH d AS (DELETE FROM payments RETURNING 1) SELECT count(*) FROM d",
                          "data-modifying"),
}


async def test_attacks_refused_and_server_healthy(server, db_url):
    attacks = dict(ATTACKS, **(PG_ATTACKS if db_url else SQLITE_ATTACKS))
    async with mcp.Client(server) as c:
        sid = await _open(c)
        before = text(await _call(c, "run_query", sid, sql="SELECT COUNT(*) FROM orders"))
        for name, (tool, sql, needle) in attacks.items():
            res = await _call(c, tool, sid, sql=sql)
            assert res.is_error, f"{name} was not refused: {text(res)}"
            assert needle.lower() in text(res).lower(), f"{name}: unclear error {text(res)!r}"
        # still healthy and unchanged
        assert text(await _call(c, "run_query", sid, sql="SELECT COUNT(*) FROM orders")) == before
        assert "customers" in text(await _call(c, "list_tables", sid))


async def test_runaway_recursive_cte_times_out(server):
    async with mcp.Client(server) as c:
        sid = await _open(c)
        t0 = time.perf_counter()
        res = await _call(c, "run_query", sid,
                          sql="WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c")
        assert res.is_error and "timed out" in text(res)
        assert time.perf_counter() - t0 < 10
        ok = await _call(c, "run_query", sid, sql="SELECT COUNT(*) FROM customers")
        assert not ok.is_error and "40" in text(ok)


async def test_billion_row_result_is_capped(server):
    async with mcp.Client(server) as c:
        sid = await _open(c)
        t0 = time.perf_counter()
        res = await _call(c, "run_query", sid, sql="WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
                                                  "WHERE x < 1000000000) SELECT x FROM c")
        assert not res.is_error and "truncated" in text(res)
        assert len(text(res).splitlines()) == 2 + 20 + 1
        assert time.perf_counter() - t0 < 5
        big = await _call(c, "run_query", sid, sql="SELECT x FROM (VALUES (1)) AS t(x)", max_rows=10**9)
        assert big.is_error and "max_rows" in text(big)


async def test_read_only_mode(db_url):
    srv = build_server(db=db_url, read_only=True)
    try:
        async with mcp.Client(srv) as c:
            sid = await _open(c)
            res = await _call(c, "execute", sid, sql="DELETE FROM payments")
            assert res.is_error and "read-only" in text(res)
            assert "94" in text(await _call(c, "run_query", sid, sql="SELECT COUNT(*) FROM payments"))
    finally:
        srv.registry.close()


async def test_sqlite_database_size_cap():
    srv = build_server(max_db_mb=1, timeout_s=10)
    try:
        async with mcp.Client(srv) as c:
            sid = await _open(c)
            res = await _call(c, "execute", sid, sql="CREATE TABLE big AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL "
                                                     "SELECT x + 1 FROM c) SELECT x, randomblob(1000) AS b FROM c")
            assert res.is_error and "size limit" in text(res)
            assert "40" in text(await _call(c, "run_query", sid, sql="SELECT COUNT(*) FROM customers"))
    finally:
        srv.registry.close()


async def test_handshake_session_database_dropped_on_disconnect(server):
    import gc

    async with mcp.Client(server, mode="legacy") as c:
        assert not (await c.call_tool("run_query", {"sql": "SELECT 1"})).is_error
        assert len(server.registry) == 1
    for _ in range(50):
        gc.collect()
        if len(server.registry) == 0:
            break
        await anyio.sleep(0.05)
    assert len(server.registry) == 0


@pytest.mark.postgres
def test_postgres_session_databases_and_roles_are_dropped(pg_url):
    import sqlalchemy as sa

    srv = build_server(db=pg_url, pg_pool=2)

    async def go():
        async with mcp.Client(srv) as c:
            for _ in range(3):
                await _open(c)
    anyio.run(go)
    eng = sa.create_engine(pg_url)
    mine = sorted(srv.registry.backend.sessions)  # the opened sessions plus the ready clones of the pool
    assert len(mine) >= 3
    q = sa.text("SELECT count(*) FROM pg_database WHERE datname = ANY(:n)").bindparams(n=mine)
    r = sa.text("SELECT count(*) FROM pg_roles WHERE rolname = ANY(:n)").bindparams(n=mine)
    with eng.connect() as conn:
        assert conn.execute(q).scalar() >= 3  # (a pool clone may still be in progress)
    srv.registry.close()
    with eng.connect() as conn:
        assert conn.execute(q).scalar() == 0
        assert conn.execute(r).scalar() == 0
        su = conn.exec_driver_sql("SELECT rolsuper FROM pg_roles WHERE rolname = 'toolgym_sql_sessions'").scalar()
        assert su is False
    eng.dispose()


# ------------------------------------------------------------------------------------------- isolation
async def test_concurrent_sessions_are_isolated(server):
    """Two sessions write conflicting rows at once; each sees only its own, and neither can name the other."""
    async with mcp.Client(server) as c1, mcp.Client(server) as c2:
        s1, s2 = await _open(c1), await _open(c2)
        assert s1 != s2

        async def write(c, sid, who):
            for i in range(5):
                r = await _call(c, "execute", sid, sql=f"UPDATE customers SET name = '{who}-{i}' WHERE customer_id = 1")
                assert not r.is_error, text(r)
                r = await _call(c, "execute", sid, sql=f"INSERT INTO payments VALUES ({1000 + i}, 1, {i}.5, '{who}', NULL)")
                assert not r.is_error, text(r)

        async with anyio.create_task_group() as tg:
            tg.start_soon(write, c1, s1, "alice")
            tg.start_soon(write, c2, s2, "bob")
        n1 = text(await _call(c1, "run_query", s1, sql="SELECT name FROM customers WHERE customer_id = 1"))
        n2 = text(await _call(c2, "run_query", s2, sql="SELECT name FROM customers WHERE customer_id = 1"))
        assert "alice-4" in n1 and "bob" not in n1
        assert "bob-4" in n2 and "alice" not in n2
        m1 = text(await _call(c1, "run_query", s1, sql="SELECT DISTINCT method FROM payments WHERE payment_id >= 1000"))
        assert "alice" in m1 and "bob" not in m1
        # a fresh session sees the pristine fixture
        s3 = await _open(c1)
        n3 = text(await _call(c1, "run_query", s3, sql="SELECT COUNT(*) FROM payments"))
        assert "94" in n3
        # cross-session read attempts: a made-up handle, and naming another database
        res = await _call(c1, "run_query", "s-not-a-real-handle", sql="SELECT * FROM customers")
        assert res.is_error and "unknown or closed session" in text(res)
        other = await _call(c1, "run_query", s1, sql="SELECT * FROM other.customers")
        assert other.is_error
        # closing drops the database
        assert text(await c1.call_tool("close_session", {"session": s2})) == "closed"
        res = await _call(c2, "run_query", s2, sql="SELECT 1")
        assert res.is_error and "unknown or closed session" in text(res)


async def test_legacy_handshake_sessions_isolated_without_handles(server):
    """On the handshake-era protocol the MCP session itself is the key: no handle needed."""
    async with mcp.Client(server, mode="legacy") as c1, mcp.Client(server, mode="legacy") as c2:
        r = await c1.call_tool("execute", {"sql": "DELETE FROM payments WHERE payment_id > 10"})
        assert not r.is_error, text(r)
        assert "10" in text(await c1.call_tool("run_query", {"sql": "SELECT COUNT(*) FROM payments"}))
        assert "94" in text(await c2.call_tool("run_query", {"sql": "SELECT COUNT(*) FROM payments"}))


async def test_sessionless_call_without_handle_is_refused(server):
    async with mcp.Client(server) as c:  # 2026 protocol in-memory: no session identity
        res = await c.call_tool("run_query", {"sql": "SELECT 1"})
        if res.is_error:
            assert "open_session" in text(res)
        else:  # an SDK that still negotiates a session-ful protocol: then the connection is the session
            assert "1" in text(res)


@pytest.mark.slow
async def test_stdio_processes_are_separate_sessions(db_url):
    args = ["--timeout-s", "2"] + (["--db", db_url] if db_url else [])

    def params():
        return stdio_client(StdioServerParameters(command=SERVER_CMD[0], args=[*SERVER_CMD[1:], *args]))

    async with mcp.Client(params()) as c1, mcp.Client(params()) as c2:
        r = await c1.call_tool("execute", {"sql": "DELETE FROM payments"})  # no handle: the process is the session
        assert not r.is_error, text(r)
        assert "(1 row)" in text(await c1.call_tool("run_query", {"sql": "SELECT COUNT(*) FROM payments"}))
        assert "0" in text(await c1.call_tool("run_query", {"sql": "SELECT COUNT(*) FROM payments"}))
        assert "94" in text(await c2.call_tool("run_query", {"sql": "SELECT COUNT(*) FROM payments"}))
        att = await c2.call_tool("run_query", {"sql": "ATTACH DATABASE '/etc/passwd' AS p"})
        assert att.is_error and "ATTACH" in text(att)


@pytest.mark.slow
def test_streamable_http_transport():
    import subprocess

    from tg_testutil import free_port, wait_port

    port = free_port()
    proc = subprocess.Popen([*SERVER_CMD, "--transport", "streamable-http", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)

        async def go():
            url = f"http://127.0.0.1:{port}/mcp"
            async with mcp.Client(url) as c1, mcp.Client(url) as c2:
                s1, s2 = await _open(c1), await _open(c2)
                r = await _call(c1, "execute", s1, sql="DELETE FROM order_items WHERE order_id = 1")
                assert not r.is_error, text(r)
                q = "SELECT COUNT(*) FROM order_items WHERE order_id = 1"
                assert text(await _call(c1, "run_query", s1, sql=q)).splitlines()[2].strip() == "0"
                assert text(await _call(c2, "run_query", s2, sql=q)).splitlines()[2].strip() != "0"
        anyio.run(go)
    finally:
        proc.terminate()
        proc.wait(10)
