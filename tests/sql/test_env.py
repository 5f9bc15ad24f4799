"""The SQL environment end to end: the reference player scores 1.0 on every bundled task, wrong answers and partial
writes score 0, gold answers are deterministic, user data imports, and the rewards come from the database."""

from __future__ import annotations

import json
import sqlite3

import pytest
from toolgym import load_env, load_policy
from toolgym.eval import evaluate
from toolgym_sql import SqlEnv
from toolgym_sql.grading import is_ordered, rows_equal
from toolgym_sql.tasks import LEVELS, build_tasks

pytestmark = pytest.mark.anyio


async def _run(env, player, tasks):
    policy = load_policy(f"scripted:{player}", env)
    try:
        trajs, summary = await evaluate(env, policy, tasks, concurrency=8)
    finally:
        await env.aclose()
    assert all(t.error is None for t in trajs), [t.error for t in trajs if t.error][:3]
    return trajs


@pytest.fixture(scope="module")
def bundled():
    return build_tasks()


def test_bundled_tasks_cover_levels_and_are_deterministic(bundled):
    assert {t["level"] for t in bundled} == set(LEVELS)
    assert len(bundled) >= 40
    again = build_tasks()
    assert [t["gold_sql" if t["kind"] == "question" else "gold_writes"] for t in again] == \
           [t["gold_sql" if t["kind"] == "question" else "gold_writes"] for t in bundled]
    other = build_tasks(seed=1)
    assert [t["prompt"] for t in other] != [t["prompt"] for t in bundled]
    # gold answers are real results: non-empty for most questions, goal states differ from the start
    qs = [t for t in bundled if t["kind"] == "question"]
    assert sum(bool(t["gold"]["rows"]) for t in qs) >= len(qs) - 2
    assert all(t["goal_state"] for t in bundled if t["kind"] == "write")


def test_result_comparison_rules():
    assert rows_equal([[1, "a"], [2, "b"]], [[2, "b"], [1.0, "a"]])
    assert not rows_equal([[1, "a"], [2, "b"]], [[2, "b"], [1, "a"]], ordered=True)
    assert rows_equal([[0.1 + 0.2]], [[0.3]])
    assert not rows_equal([[1]], [[1], [1]])
    assert not rows_equal([[1, 2]], [[1]])
    assert not rows_equal([[None]], [[0]])
    assert is_ordered("SELECT a FROM t ORDER BY a") and not is_ordered("SELECT a FROM (SELECT a FROM t ORDER BY a) x")


async def test_reference_player_scores_one_on_every_bundled_task(bundled):
    env = load_env("sql")
    assert isinstance(env, SqlEnv)
    trajs = await _run(env, "reference", bundled)
    assert len(trajs) == len(bundled)
    bad = [(t.task["id"], t.info.get("grade")) for t in trajs if t.reward != 1.0]
    assert not bad, bad
    for t in trajs:  # the reward of each kind came from its own check
        key = "execution_match" if t.task["kind"] == "question" else "state_match"
        assert t.rewards[key] == 1.0
        assert t.stop_reason == "answered"


async def test_wrong_player_scores_zero(bundled):
    env = load_env("sql")
    trajs = await _run(env, "wrong", bundled)
    assert all(t.reward == 0.0 for t in trajs), [(t.task["id"], t.reward) for t in trajs if t.reward]


async def test_partial_write_scores_zero_on_state_match(bundled):
    multi = [t for t in bundled if t["kind"] == "write" and len(t["gold_writes"]) > 1]
    single = [t for t in bundled if t["kind"] == "write" and len(t["gold_writes"]) == 1]
    assert multi and single
    env = load_env("sql")
    trajs = await _run(env, "partial", multi + single)
    for t in trajs:
        assert t.rewards["state_match"] == 0.0, t.task["id"]
        assert "state_diff" in t.info["grade"]
    # the partial player did make real changes on the multi-statement tasks
    assert all(any(c.name == "execute" and c.exec_ok for c in t.calls) for t in trajs[: len(multi)])


async def test_model_errors_and_refusals_are_counted():
    env = SqlEnv()
    tasks = [t for t in build_tasks(per_template=1) if t["kind"] == "question"][:1]
    from toolgym import AssistantTurn, ScriptedPolicy
    from toolgym.policies.scripted import call

    def act(messages, memory):
        i = memory["i"] = memory.get("i", -1) + 1
        steps = [call("run_query", sql="ATTACH DATABASE 'x.db' AS x"), call("execute", sql="PRAGMA writable_schema=1"),
                 call("run_query", sql="SELECT nope"), call("submit_answer", sql="SELECT nope FROM nowhere")]
        return AssistantTurn(tool_calls=[steps[i]]) if i < len(steps) else AssistantTurn(content="done")

    try:
        trajs, _ = await evaluate(env, ScriptedPolicy(act, "attacker"), tasks)
    finally:
        await env.aclose()
    t = trajs[0]
    assert t.error is None
    assert t.metrics["refusals"] == 2 and t.metrics["tool_errors"] == 3
    assert t.reward == 0.0 and "answer_error" in t.info["grade"]


async def test_question_graded_on_a_fresh_copy():
    """A model that plants the answer in its own session (a view) and submits a query over it scores 0."""
    env = SqlEnv()
    task = next(t for t in build_tasks(per_template=1) if t["kind"] == "question")
    rows = ", ".join("(" + ", ".join(repr(v) if not isinstance(v, str) else "'" + v.replace("'", "''") + "'"
                                     for v in r) + ")" for r in task["gold"]["rows"])
    from toolgym import AssistantTurn, ScriptedPolicy
    from toolgym.policies.scripted import call

    steps = [call("execute", sql=f"CREATE VIEW planted AS VALUES {rows}"),
             call("run_query", sql="SELECT * FROM planted"), call("submit_answer", sql="SELECT * FROM planted")]

    def act(messages, memory):
        i = memory["i"] = memory.get("i", -1) + 1
        return AssistantTurn(tool_calls=[steps[i]])

    try:
        trajs, _ = await evaluate(env, ScriptedPolicy(act, "planter"), [task])
    finally:
        await env.aclose()
    t = trajs[0]
    assert t.error is None and all(c.exec_ok for c in t.calls), [c.error for c in t.calls]
    assert t.reward == 0.0 and "no such table" in t.info["grade"]["answer_error"]


async def test_tagged_final_message_is_accepted():
    env = SqlEnv()
    task = next(t for t in build_tasks(per_template=1) if t["kind"] == "question")
    from toolgym import AssistantTurn, ScriptedPolicy

    def act(messages, memory):
        return AssistantTurn(content=f"The query is <answer>{task['gold_sql']}</answer>")

    try:
        trajs, _ = await evaluate(env, ScriptedPolicy(act, "tagged"), [task])
    finally:
        await env.aclose()
    assert trajs[0].reward == 1.0


async def test_import_user_sqlite_and_jsonl(tmp_path):
    db = tmp_path / "shop.db"
    con = sqlite3.connect(db)
    con.executescript("CREATE TABLE pets(id INTEGER PRIMARY KEY, name TEXT, kind TEXT, age INT);"
                      "INSERT INTO pets VALUES (1,'Rex','dog',3),(2,'Tom','cat',5),(3,'Kit','cat',1);")
    con.commit()
    con.close()
    rows = [{"question_id": 7, "question": "How many cats are there?", "SQL": "SELECT COUNT(*) FROM pets WHERE kind='cat';",
             "evidence": "kind is 'cat' for cats", "difficulty": "simple"},
            {"question": "Names of pets older than 2, oldest first", "query": "SELECT name FROM pets WHERE age > 2 ORDER BY age DESC"},
            {"instruction": "Tom had a birthday: add one to his age.", "gold_writes": ["UPDATE pets SET age = age + 1 WHERE name = 'Tom'"]}]
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text("\n".join(json.dumps(r) for r in rows))
    env = load_env("sql", db=str(db), tasks=str(tasks_file))
    tasks = env.build_dataset()
    assert [t["kind"] for t in tasks] == ["question", "question", "write"]
    assert tasks[0]["gold"]["rows"] == [[2]] and "Hint:" in tasks[0]["prompt"] and tasks[0]["id"] == "7"
    assert tasks[1]["ordered"] and tasks[1]["gold"]["rows"] == [["Tom"], ["Rex"]]
    trajs = await _run(env, "reference", tasks)
    assert [t.reward for t in trajs] == [1.0, 1.0, 1.0]
    env2 = load_env("sql", db=str(db), tasks=str(tasks_file))
    trajs = await _run(env2, "wrong", env2.build_dataset())
    assert [t.reward for t in trajs] == [0.0, 0.0, 0.0]
    # the user's file is never modified
    con = sqlite3.connect(db)
    assert con.execute("SELECT age FROM pets WHERE name='Tom'").fetchone() == (5,)


@pytest.mark.slow
async def test_reference_player_over_stdio(bundled):
    env = load_env("sql", transport="stdio")
    trajs = await _run(env, "reference", bundled[:8])
    assert [t.reward for t in trajs] == [1.0] * 8


@pytest.mark.postgres
async def test_reference_and_wrong_players_on_postgres(bundled, pg_url):
    """The same bundled tasks (gold computed on SQLite) score 1.0 / 0 against a PostgreSQL-backed server."""
    env = load_env("sql", db=pg_url)
    trajs = await _run(env, "reference", bundled)
    bad = [(t.task["id"], t.info.get("grade")) for t in trajs if t.reward != 1.0]
    assert not bad, bad
    env = load_env("sql", db=pg_url)
    trajs = await _run(env, "wrong", bundled)
    assert all(t.reward == 0.0 for t in trajs)
    multi = [t for t in bundled if t["kind"] == "write" and len(t["gold_writes"]) > 1]
    env = load_env("sql", db=pg_url)
    trajs = await _run(env, "partial", multi)
    assert all(t.rewards["state_match"] == 0.0 for t in trajs)


@pytest.mark.postgres
async def test_import_user_postgres_database(tmp_path, pg_url):
    import sqlalchemy as sa

    admin = sa.create_engine(pg_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.exec_driver_sql("DROP DATABASE IF EXISTS petshop")
        c.exec_driver_sql("CREATE DATABASE petshop")
    admin.dispose()
    eng = sa.create_engine(sa.engine.make_url(pg_url).set(database="petshop"))
    with eng.begin() as c:
        c.exec_driver_sql("CREATE TABLE pets(id int PRIMARY KEY, name text, kind text, age int)")
        c.exec_driver_sql("INSERT INTO pets VALUES (1,'Rex','dog',3),(2,'Tom','cat',5),(3,'Kit','cat',1)")
    eng.dispose()
    rows = [{"question": "How many cats?", "query": "SELECT COUNT(*) FROM pets WHERE kind = 'cat'"},
            {"instruction": "Kit is now 2 years old.", "gold_writes": ["UPDATE pets SET age = 2 WHERE name = 'Kit'"]}]
    f = tmp_path / "t.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(ValueError, match="template_db"):
        load_env("sql", db=pg_url, tasks=str(f)).build_dataset()
    env = load_env("sql", db=pg_url, template_db="petshop", tasks=str(f))
    tasks = env.build_dataset()
    assert tasks[0]["gold"]["rows"] == [[2]]
    trajs = await _run(env, "reference", tasks)
    assert [t.reward for t in trajs] == [1.0, 1.0]
    eng = sa.create_engine(sa.engine.make_url(pg_url).set(database="petshop"))
    with eng.connect() as c:  # the user's database itself is unchanged
        assert c.exec_driver_sql("SELECT age FROM pets WHERE name = 'Kit'").scalar() == 1
    eng.dispose()
