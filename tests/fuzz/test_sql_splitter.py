"""Fuzzing the SQL statement splitter of mcp-server-sql (servers/sql/mcp_server_sql/sqlcheck.py).

`check_sql` is the gate that lets one statement through per call. Statements are generated from a grammar of the
lexical pieces that may hide a `;`: string literals ('', doubled quotes), PostgreSQL E'' strings with backslash
escapes, quoted identifiers, dollar quotes with tags, identifiers containing `$`, `--` comments ending at \\n or \\r,
nested block comments, parameters. Properties: the splitter returns exactly the generated statements (never a split
inside a literal, comment or dollar quote), `check_sql` refuses every text of two or more, and two databases agree:
SQLite's tokenizer (sqlite3.complete_statement) sees no statement end inside an accepted statement, and PostgreSQL
(marker `postgres`) runs exactly as many statements as the splitter found.
"""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from mcp_server_sql.sqlcheck import SQLRefused, check_sql, split_statements

FAST = settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
HEAVY = settings(max_examples=4000, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# characters that matter to a SQL lexer, plus some that do not
TRICKY = list(";'\"$-/*\\\r\n[]`eE_") + ["--", "/*", "*/", "$$", "$a$", "''", "é", "\x00", " ", "x", "1"]
content = st.lists(st.sampled_from(TRICKY) | st.text(max_size=3), max_size=12).map("".join)


def _quote(s: str, q: str) -> str:
    return q + s.replace(q, q + q) + q


# each piece: (text as written, text after the splitter replaced comments by a space)
def _same(t: str) -> tuple[str, str]:
    return t, t


string_lit = content.map(lambda s: _same(_quote(s, "'")))
ident_lit = content.filter(lambda s: "\x00" not in s).map(lambda s: _same(_quote(s, '"')))
e_string = content.map(lambda s: _same("E'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"))
names = st.from_regex(r"[A-Za-z_é][A-Za-z0-9_$é]{0,8}", fullmatch=True)


@st.composite
def dollar_lit(draw, body_text=content):
    tag = draw(st.sampled_from(["", "t", "tag_1", "é"]))
    body = draw(body_text)
    assume(f"${tag}$" not in body + "$")  # the body must not close the quote (nor end in half a tag)
    return _same(f"${tag}${body}${tag}$")


line_comment = st.tuples(content.map(lambda s: s.replace("\n", " ").replace("\r", " ")),
                         st.sampled_from(["\n", "\r", "\r\n"])).map(lambda t: ("--" + t[0] + t[1], " " + t[1]))


@st.composite
def block_comment(draw, depth=0):
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        if depth < 2 and draw(st.booleans()):
            parts.append(draw(block_comment(depth + 1))[0])
        else:
            body = draw(content)
            assume("/*" not in body and "*/" not in body and not body.endswith("/") and not body.endswith("*")
                   and not body.startswith("/") and not body.startswith("*"))
            parts.append(body)
    return "/*" + "|".join(parts) + "*/", " "


keyword = st.sampled_from(["SELECT", "FROM", "WHERE", "AS", "AND", "||", "=", "(", ")", ",", "1", "2.5", "$1",
                           "x.y", "ARRAY[1,2]", "[a]", "`b`", "-", "/", "*"]).map(_same)
piece = st.one_of(keyword, names.map(_same), string_lit, ident_lit, e_string, dollar_lit(), line_comment,
                  block_comment())


@st.composite
def statement(draw) -> tuple[str, str]:
    """A statement as written and as the splitter should return it (comments replaced, ends stripped)."""
    pieces = draw(st.lists(piece, min_size=1, max_size=10))
    first = draw(st.sampled_from(["SELECT", "WITH", "UPDATE", "VALUES", "INSERT"]))
    written = " ".join([first] + [w for w, _ in pieces])
    expected = " ".join([first] + [e for _, e in pieces])
    return written, expected.strip()


def _split_property(stmts: list[tuple[str, str]], seps: list[str]) -> None:
    text = "".join(w + s for (w, _), s in zip(stmts, seps))
    got = split_statements(text)
    assert got == [e for _, e in stmts], text
    if len(stmts) >= 2:
        for kind in ("read", "write"):
            with pytest.raises(SQLRefused, match="only one SQL statement"):
                check_sql(text, kind)


separators = st.sampled_from([";", "; ", ";\n", " ; ", ";-- c\n", ";/* c */"])


@FAST
@given(stmts=st.lists(statement(), min_size=1, max_size=4), data=st.data())
def test_splits_exactly_at_top_level_semicolons(stmts, data):
    seps = [data.draw(separators) for _ in stmts]
    _split_property(stmts, seps)


@pytest.mark.slow
@HEAVY
@given(stmts=st.lists(statement(), min_size=1, max_size=6), data=st.data())
def test_splits_exactly_heavy(stmts, data):
    _split_property(stmts, [data.draw(separators) for _ in stmts])


# ------------------------------------------------------------------------------------------- SQLite oracle
# the lexical subset SQLite shares with PostgreSQL: no E'' strings, no dollar quotes, no nested comments, \n endings
sqlite_piece = st.one_of(keyword.filter(lambda p: p[0] not in ("$1", "[a]", "`b`")), names.filter(lambda n: "$" not in n).map(_same),
                         string_lit, ident_lit,
                         line_comment.filter(lambda c: c[0].endswith("\n") and "\r" not in c[0]),
                         block_comment().filter(lambda c: c[0].count("/*") == 1))


@st.composite
def sqlite_statement(draw) -> str:
    return " ".join(["SELECT"] + [w for w, _ in draw(st.lists(sqlite_piece, min_size=1, max_size=10))])


def _sqlite_agrees(text: str) -> None:
    try:
        stmt = check_sql(text, "read")
    except SQLRefused:
        return
    if "\x00" in stmt:
        return  # Python's sqlite3 refuses a statement with a NUL character before SQLite sees it
    # SQLite's tokenizer must see no statement end inside what check_sql let through
    for i, ch in enumerate(stmt):
        if ch == ";":
            assert not sqlite3.complete_statement(stmt[: i + 1]), (text, stmt, i)


@FAST
@given(text=sqlite_statement() | st.lists(st.sampled_from(TRICKY) | st.text(max_size=4), max_size=30).map("".join))
def test_sqlite_tokenizer_sees_one_statement(text):
    _sqlite_agrees(text)


@pytest.mark.slow
@HEAVY
@given(text=sqlite_statement() | st.lists(st.sampled_from(TRICKY) | st.text(max_size=4), max_size=60).map("".join))
def test_sqlite_tokenizer_sees_one_statement_heavy(text):
    _sqlite_agrees(text)


# ------------------------------------------------------------------------------------------- PostgreSQL oracle
text_no_nul = content.map(lambda s: s.replace("\x00", ""))  # PostgreSQL refuses NUL in any text
literal = st.one_of(text_no_nul.map(lambda s: _quote(s, "'")),
                    text_no_nul.map(lambda s: "E'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"),
                    dollar_lit(text_no_nul).map(lambda p: p[0]))
pg_gap = st.one_of(st.just(" "), line_comment.map(lambda c: " " + c[0]), block_comment().map(lambda c: " " + c[0] + " "))


@st.composite
def pg_select(draw) -> str:
    """A valid PostgreSQL SELECT of literals, with comments between tokens: `SELECT lit || lit AS name, ...`."""
    cols = []
    for _ in range(draw(st.integers(1, 3))):
        lits = draw(st.lists(literal, min_size=1, max_size=3))
        col = f"{draw(pg_gap)}||{draw(pg_gap)}".join(lits)
        cols.append(f"{col}{draw(pg_gap)}AS{draw(pg_gap)}{_quote(draw(names), chr(34))}")
    return "SELECT" + draw(pg_gap) + ("," + draw(pg_gap)).join(cols)


@pytest.mark.postgres
def test_postgres_runs_as_many_statements_as_the_splitter_finds(pg_url):
    """psycopg sends a text without parameters in the simple protocol, where PostgreSQL runs every statement: the
    number it runs must be the number the splitter found (so one accepted statement is one statement there)."""
    import psycopg

    url = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET standard_conforming_strings = on")

        @settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(stmts=st.lists(pg_select(), min_size=1, max_size=3), data=st.data())
        def prop(stmts, data):
            text = "".join(s + data.draw(st.sampled_from([";", " ; ", ";\n", ";-- x\r"])) for s in stmts)
            assume("\x00" not in text)  # (a comment may still hold one)
            ours = len(split_statements(text))
            cur = conn.cursor()
            cur.execute(text)
            theirs = 1
            while cur.nextset():
                theirs += 1
            assert ours == theirs == len(stmts), text

        prop()


# ------------------------------------------------------------------------------------------- found and fixed
BYPASSES = {  # texts check_sql used to pass as one statement while PostgreSQL ran two (CREATE FUNCTION included)
    "identifier_with_dollars": "UPDATE products AS p$$$ SET stock = 1 WHERE false; CREATE FUNCTION f1() RETURNS int "
                               "LANGUAGE sql AS 'SELECT 1'; UPDATE products AS q$$$ SET stock = 1 WHERE false",
    "e_string_escape": "UPDATE products SET name = E'\\'' WHERE false; CREATE FUNCTION f2() RETURNS int LANGUAGE sql "
                       "AS 'SELECT 1'; -- '",
    "subscript_bracket": "UPDATE products SET stock = (ARRAY[1])[length(']')] WHERE false; CREATE FUNCTION f5() "
                         "RETURNS int LANGUAGE sql AS $$SELECT 1$$; -- '",
    "nested_comment": "UPDATE products SET stock = 1 WHERE false /* /* */ [ */ ; CREATE FUNCTION f4() RETURNS int "
                      "LANGUAGE sql AS 'SELECT 1'; -- ]",
    "cr_ends_line_comment": "UPDATE products SET stock = 1 WHERE false -- x\r; CREATE FUNCTION f3() RETURNS int "
                            "LANGUAGE sql AS 'SELECT 1'",
}


@pytest.mark.parametrize("case", sorted(BYPASSES))
def test_known_bypasses_are_refused(case):
    with pytest.raises(SQLRefused, match="only one SQL statement"):
        check_sql(BYPASSES[case], "write")


def test_splitter_is_linear():
    import time

    for text in ("/*" * 50_000 + "*/" * 50_000, "'" + "''" * 50_000 + "'", "a$" * 50_000, "E'" + "\\'" * 50_000 + "'",
                 "-- x\r" * 20_000, "$t$" + "x" * 100_000 + "$t$"):
        t0 = time.perf_counter()
        try:
            split_statements(text)
        except SQLRefused:
            pass
        assert time.perf_counter() - t0 < 1.0, text[:20]
