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


# --------------------------------------------------------------------------------------------- statement tokens
_WORD = re.compile(r"[A-Za-z_\u0080-\U0010ffff][A-Za-z0-9_$\u0080-\U0010ffff]*")
_NUMBER = re.compile(r"[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?|\.[0-9]+([eE][-+]?[0-9]+)?|0[xX][0-9A-Fa-f]+")


def tokens(sql: str, dialect: str = "postgresql") -> list[str]:
    """The tokens of one statement for the checks below, in order: identifiers and keywords lowercased, a quoted
    identifier as `"` + its name lowercased (`name()` strips the mark; lowercased because these checks over-refuse
    rather than miss a name), one `'` per string literal, `0` per number, and every other character on its own
    (`(`, `)`, `,`, `.`, operators). Comments are dropped. A PostgreSQL `U&"..."` identifier becomes `u&"` followed by
    its raw text (its escapes are not decoded: `refused_functions` refuses it). SQLite also quotes identifiers with
    `[...]` and backticks; in PostgreSQL `[` is a subscript. Raises SQLRefused on an unterminated literal."""
    out: list[str] = []
    i, n = 0, len(sql)
    sqlite = dialect == "sqlite"
    while i < n:
        c = sql[i]
        if c.isspace():
            i += 1
        elif c == "'":
            i = _quoted_end(sql, i, "'")
            out.append("'")
        elif c == '"':
            j = _quoted_end(sql, i, '"')
            out.append('"' + sql[i + 1 : j - 1].replace('""', '"').lower())
            i = j
        elif sqlite and c == "[":
            j = sql.find("]", i + 1)
            if j < 0:
                raise SQLRefused("unterminated [identifier]")
            out.append('"' + sql[i + 1 : j].lower())
            i = j + 1
        elif sqlite and c == "`":
            j = _quoted_end(sql, i, "`")
            out.append('"' + sql[i + 1 : j - 1].replace("``", "`").lower())
            i = j
        elif c in "uU" and sql.startswith('&"', i + 1):
            j = _quoted_end(sql, i + 2, '"')
            out.append('u&"' + sql[i + 3 : j - 1])
            i = j
        elif c in "eExXbBnN" and i + 1 < n and sql[i + 1] == "'":  # E'...', X'...', B'...', N'...'
            i = _quoted_end(sql, i + 1, "'", backslash=c in "eE" and not sqlite)
            out.append("'")
        elif _ident_start(c):
            m = _WORD.match(sql, i)
            out.append(m.group(0).lower())
            i = m.end()
        elif c.isdigit() or (c == "." and i + 1 < n and sql[i + 1].isdigit()):
            m = _NUMBER.match(sql, i)
            out.append("0")
            i = m.end() if m else i + 1
        elif c == "-" and sql.startswith("--", i):
            j = i + 2
            while j < n and sql[j] not in "\r\n":
                j += 1
            i = j
        elif c == "/" and sql.startswith("/*", i):
            if sqlite:  # SQLite's block comments do not nest, and may run to the end of the text
                j = sql.find("*/", i + 2)
                j = n if j < 0 else j + 2
            else:
                depth, j = 1, -1
                for m in _COMMENT_MARK.finditer(sql, i + 2):
                    depth += 1 if m.group(0) == "/*" else -1
                    if depth == 0:
                        j = m.end()
                        break
                if j < 0:
                    raise SQLRefused("unterminated /* comment")
            i = j
        elif c == "$" and not sqlite and (m := _DOLLAR.match(sql, i)):
            tag = m.group(0)
            j = sql.find(tag, m.end())
            if j < 0:
                raise SQLRefused("unterminated dollar-quoted string")
            out.append("'")
            i = j + len(tag)
        else:
            out.append(c)
            i += 1
    return out


# PostgreSQL functions a session role may not call (the reviewed list of docs/security.md): each reaches beyond the
# session's own database, or changes what the server enforces per call. The server also revokes EXECUTE on them from
# PUBLIC in the session databases when its admin may (a superuser); this text check is the first gate, and the only
# one when it may not.
PG_REFUSED_FUNCTIONS: dict[str, str] = {}
for _names, _why in (
    ("set_config", "it changes session settings (the time limit, the role)"),
    (("pg_advisory_lock pg_advisory_lock_shared pg_advisory_xact_lock pg_advisory_xact_lock_shared pg_try_advisory_lock "
      "pg_try_advisory_lock_shared pg_try_advisory_xact_lock pg_try_advisory_xact_lock_shared pg_advisory_unlock "
      "pg_advisory_unlock_shared pg_advisory_unlock_all"),
     "advisory locks live in PostgreSQL's lock table, shared by every session and database"),
    (("lo_open lo_close loread lowrite lo_lseek lo_lseek64 lo_tell lo_tell64 lo_truncate lo_truncate64 lo_creat "
      "lo_create lo_unlink lo_import lo_export lo_from_bytea lo_put lo_get"),
     "large objects live outside the tables (and are written even in a read-only transaction)"),
    ("pg_notify", "notifications go through a queue shared by the whole cluster"),
    ("pg_logical_emit_message", "it writes to the write-ahead log"),
    ("pg_cancel_backend pg_terminate_backend", "it signals server processes"),
    ("query_to_xml query_to_xmlschema query_to_xml_and_xmlschema cursor_to_xml cursor_to_xmlschema ts_stat",
     "it runs SQL given as text, which these checks cannot see"),
):
    for _n in _names.split():
        PG_REFUSED_FUNCTIONS[_n] = _why


def name(tok: str) -> str:
    """The name a token of `tokens()` spells: a quoted identifier without its mark, anything else as it is."""
    return tok[1:] if tok[:1] == '"' else tok


def is_name(tok: str) -> bool:
    """Whether a token of `tokens()` is an identifier or keyword (quoted or not)."""
    return tok[:1] == '"' or _ident_start(tok[:1])


def refused_functions(stmt: str) -> None:
    """Refuse a PostgreSQL statement that names a function of `PG_REFUSED_FUNCTIONS` (as any identifier, quoted or
    schema-qualified) or uses a Unicode-escaped identifier (`U&"..."`, which could spell one)."""
    for tok in tokens(stmt, "postgresql"):
        if tok.startswith('u&"'):
            raise SQLRefused('Unicode-escaped identifiers (U&"...") are not allowed')
        why = PG_REFUSED_FUNCTIONS.get(name(tok))
        if why:
            raise SQLRefused(f"function {name(tok)}() is not allowed: {why}")


def _cte_bodies(toks: list[str]) -> dict[str, tuple[int, int]]:
    """`name [(cols)] AS [NOT] [MATERIALIZED] ( body )` anywhere in the tokens: name -> (start, end) of the body (the
    tokens inside the parentheses). Also matches `WINDOW w AS (...)`, which only over-counts. A name defined twice
    keeps its longer body."""
    defs: dict[str, tuple[int, int]] = {}
    n = len(toks)
    for i, t in enumerate(toks):
        if t != "as" or i == 0:
            continue
        j = i - 1
        if toks[j] == ")":  # a column list: back to its "("
            depth = 0
            while j >= 0:
                depth += toks[j] == ")"
                depth -= toks[j] == "("
                if depth == 0:
                    break
                j -= 1
            j -= 1
        if j < 0 or not is_name(toks[j]):
            continue
        cte = name(toks[j])
        k = i + 1
        if k < n and toks[k] == "not":
            k += 1
        if k < n and toks[k] == "materialized":
            k += 1
        if k >= n or toks[k] != "(":
            continue
        depth, m = 0, k
        while m < n:
            depth += toks[m] == "("
            depth -= toks[m] == ")"
            if depth == 0:
                break
            m += 1
        start, end = k + 1, m
        if cte not in defs or end - start > defs[cte][1] - defs[cte][0]:
            defs[cte] = (start, end)
    return defs


def expanded_size(stmt: str, views: dict[str, str], dialect: str = "sqlite", limit: int = 10**9) -> int:
    """An upper estimate of how many tokens a query compiler copies into the statement when it replaces every
    reference to a common table expression or a view by its definition (SQLite does this while it *prepares* a
    statement, where no time limit is checked: 18 CTEs each naming the previous one twice took 46 s and 383 MB).
    Each reference counts its body's size with the body's own references expanded; a body's references to itself
    (recursive CTEs, iterated rather than copied) count once. The statement's own text does not count (its size has
    a limit of its own). Stops counting past `limit`. `views`: view name (lowercase) -> its CREATE VIEW text."""
    memo: dict[tuple[str, str], int] = {}

    def size_of(toks: list[str], start: int, end: int, defs: dict[str, tuple[int, int]], scope: str,
                stack: tuple, stop: int = limit) -> int:
        total = end - start
        for tok in toks[start:end]:
            if total > stop:
                return total
            if not is_name(tok):
                continue
            t = name(tok)
            if t in defs and ("cte", scope, t) not in stack:
                key = (scope, t)
                if key not in memo:
                    s, e = defs[t]
                    memo[key] = size_of(toks, s, e, defs, scope, (*stack, ("cte", scope, t)))
                total += memo[key]
            elif t in views and ("view", t) not in stack:
                key = ("view", t)
                if key not in memo:
                    vt = tokens(views[t], dialect)
                    memo[key] = size_of(vt, 0, len(vt), _cte_bodies(vt), "view:" + t, (*stack, ("view", t)))
                total += memo[key]
        return total

    toks = tokens(stmt, dialect)
    try:
        return size_of(toks, 0, len(toks), _cte_bodies(toks), "", (), limit + len(toks)) - len(toks)
    except RecursionError:
        return limit + 1
