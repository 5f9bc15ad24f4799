"""Static checks on SQL text before it reaches the database: one statement only, and an allowed kind.

This is the first of two gates (the second is the database itself: the SQLite authorizer, or a PostgreSQL role
that owns nothing but its session database plus READ ONLY transactions). The lexer understands string literals
(including PostgreSQL `E'...'` escapes), quoted identifiers, `--` and nested `/* */` comments and PostgreSQL dollar
quoting, so a `;` inside a literal is not a statement separator; where the dialects differ it follows the one that
could run a second statement (see `split_statements`).
"""

from __future__ import annotations

import re


class SQLRefused(Exception):
    """A statement refused by policy (the message says why; it becomes the MCP tool error text)."""


_COMMENT_MARK = re.compile(r"/\*|\*/")  # PostgreSQL block comments nest
_DOLLAR = re.compile(r"\$([A-Za-z_\u0080-\U0010ffff][A-Za-z0-9_\u0080-\U0010ffff]*)?\$")


def _ident_start(c: str) -> bool:
    return c == "_" or ("a" <= c <= "z") or ("A" <= c <= "Z") or c >= "\x80"


def _ident_cont(c: str) -> bool:
    return _ident_start(c) or ("0" <= c <= "9") or c == "$"


def _quoted_end(sql: str, i: int, q: str, backslash: bool = False) -> int:
    """Index just past the quote that closes the literal opened at `sql[i]` (a doubled quote escapes itself;
    with `backslash`, as in PostgreSQL E'...' strings, so does a backslash)."""
    j, n = i + 1, len(sql)
    while j < n:
        c = sql[j]
        if backslash and c == "\\":
            j += 2
            continue
        if c == q:
            if j + 1 < n and sql[j + 1] == q:
                j += 2
                continue
            return j + 1
        j += 1
    raise SQLRefused("unterminated quoted string or identifier")


def split_statements(sql: str) -> list[str]:
    """Split on top-level `;`. Returns the statements with comments replaced by a space, empty ones dropped.

    The lexer follows PostgreSQL's rules, the stricter of the two dialects wherever they differ (psycopg sends a
    statement without parameters in the simple protocol, which runs every statement in the text; Python's sqlite3
    refuses a text with more than one): `'...'` and `"..."` with doubled quotes, `E'...'` with backslash escapes,
    `$tag$...$tag$` (only at the start of a token: `$` is an identifier character, so `a$$` is a name), `--`
    comments ending at a line feed or carriage return, nested `/* */` comments. SQLite's `[name]` and `` `name` ``
    quoting is not recognised (in PostgreSQL `[` is a subscript): a `;` inside one splits the text, which refuses it
    rather than risking a second statement.
    """
    out: list[str] = []
    buf: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c == "'" or c == '"':
            j = _quoted_end(sql, i, c)
            buf.append(sql[i:j])
            i = j
        elif _ident_start(c):
            j = i + 1
            while j < n and _ident_cont(sql[j]):
                j += 1
            if j == i + 1 and c in "eE" and j < n and sql[j] == "'":  # E'...': backslash escapes
                j = _quoted_end(sql, j, "'", backslash=True)
            buf.append(sql[i:j])
            i = j
        elif c == "-" and sql.startswith("--", i):
            j = i + 2
            while j < n and sql[j] not in "\r\n":
                j += 1
            buf.append(" ")
            i = j
        elif c == "/" and sql.startswith("/*", i):
            depth, j = 1, -1
            for m in _COMMENT_MARK.finditer(sql, i + 2):
                depth += 1 if m.group(0) == "/*" else -1
                if depth == 0:
                    j = m.end()
                    break
            if j < 0:
                raise SQLRefused("unterminated /* comment")
            buf.append(" ")
            i = j
        elif c == "$" and (m := _DOLLAR.match(sql, i)):
            tag = m.group(0)
            j = sql.find(tag, m.end())
            if j < 0:
                raise SQLRefused("unterminated dollar-quoted string")
            buf.append(sql[i : j + len(tag)])
            i = j + len(tag)
        elif c == ";":
            out.append("".join(buf))
            buf = []
            i += 1
        else:
            buf.append(c)
            i += 1
    out.append("".join(buf))
    return [s.strip() for s in out if s.strip()]


def _words(stmt: str, k: int = 3) -> list[str]:
    return [w.upper() for w in re.findall(r"[A-Za-z_]+", stmt[:400])[:k]]


READ_FIRST = {"SELECT", "WITH", "VALUES"}
WRITE_FIRST = {"INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER", "WITH"}
CREATE_OK = {"TABLE", "INDEX", "UNIQUE", "VIEW"}
DROP_OK = {"TABLE", "INDEX", "VIEW"}
DENY_HINT = {
    "ATTACH": "ATTACH is not allowed: a session can only use its own database",
    "DETACH": "DETACH is not allowed",
    "PRAGMA": "PRAGMA is not allowed (use describe_table / list_tables to inspect the schema)",
    "BEGIN": "transaction control is not allowed: every execute call commits on its own",
    "COMMIT": "transaction control is not allowed: every execute call commits on its own",
    "ROLLBACK": "transaction control is not allowed: every execute call commits on its own",
    "SAVEPOINT": "transaction control is not allowed",
    "RELEASE": "transaction control is not allowed",
    "END": "transaction control is not allowed",
    "SET": "changing session settings is not allowed",
    "RESET": "changing session settings is not allowed",
    "LOAD": "loading extensions is not allowed",
    "COPY": "COPY (file or program access) is not allowed",
    "VACUUM": "VACUUM is not allowed",
    "GRANT": "privilege changes are not allowed",
    "REVOKE": "privilege changes are not allowed",
    "DO": "anonymous code blocks are not allowed",
    "CALL": "procedure calls are not allowed",
    "EXPLAIN": "use the explain_query tool for query plans",
}


def check_sql(sql: str, kind: str) -> str:
    """Validate `sql` for `kind` ('read' or 'write'); return the single statement to run (comments removed).

    Raises SQLRefused with a message meant for the model.
    """
    if not sql or not sql.strip():
        raise SQLRefused("empty SQL")
    stmts = split_statements(sql)
    if not stmts:
        raise SQLRefused("no SQL statement found (only comments?)")
    if len(stmts) > 1:
        raise SQLRefused(
            f"only one SQL statement per call is allowed (found {len(stmts)} separated by ';'); "
            "send them in separate calls"
        )
    stmt = stmts[0]
    words = _words(stmt)
    first = words[0] if words else ""
    if first in DENY_HINT:
        raise SQLRefused(DENY_HINT[first])
    if kind == "read":
        if first not in READ_FIRST:
            hint = " (use the execute tool for changes)" if first in WRITE_FIRST else ""
            raise SQLRefused(f"run_query only runs read queries (SELECT / WITH / VALUES), got {first or '?'}{hint}")
        return stmt
    if first not in WRITE_FIRST:
        hint = " (use run_query for SELECT)" if first in READ_FIRST else ""
        raise SQLRefused(
            f"execute runs INSERT / UPDATE / DELETE / CREATE TABLE|INDEX|VIEW / DROP / ALTER TABLE, got {first or '?'}{hint}"
        )
    second = words[1] if len(words) > 1 else ""
    if first == "CREATE" and second not in CREATE_OK:
        raise SQLRefused(f"CREATE {second} is not allowed (only CREATE TABLE, INDEX, VIEW)")
    if first == "DROP" and second not in DROP_OK:
        raise SQLRefused(f"DROP {second} is not allowed (only DROP TABLE, INDEX, VIEW)")
    if first == "ALTER" and second != "TABLE":
        raise SQLRefused(f"ALTER {second} is not allowed (only ALTER TABLE)")
    return stmt
