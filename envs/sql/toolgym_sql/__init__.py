"""SQL agent environment over `mcp-server-sql`: questions answered with SQL, and write tasks judged by the final
database state.

One MCP session per rollout (`session_scope = "rollout"`), and in it one database session: `setup_state` calls the
hidden `open_session` tool, and the handle is injected as the hidden `session` argument of every SQL tool (the 2026
MCP protocol that `mcp.Client` negotiates is sessionless, so the handle is what isolates rollouts on every
transport); `cleanup` closes it. Rollouts never see each other's writes.

How the model answers: it calls the env tool `submit_answer(sql)`. For a question, `sql` is the SELECT whose
result answers it; for a change request it makes the changes with `execute` and calls `submit_answer()` with no
query. `submit_answer` ends the rollout. Fallback (no call): a final assistant message with the query inside
`<answer>...</answer>` (or a ```sql block) counts as the submission.

Rewards (weight 1 each; a task gets its reward from the one that applies to its kind, the other returns 0):

- `execution_match`: the submitted query's result, run on a fresh copy of the database, equals the gold result
  (multiset of rows, in order when the gold query has a top-level ORDER BY; numbers with tolerance);
- `state_match`: every table of the session database, dumped at the end through a hidden tool, equals the goal
  state (tables the gold writes change, compared row by row; all other tables unchanged, by digest). A database
  grown past the server's grading caps (rows per table, value size, total size) scores 0, with the refusal in the
  grade's `state_diff`; so does a submitted query whose result is over them (`answer_error`);
- `efficiency`: optional (weight `efficiency_weight`, default 0 = metric): min(1, gold calls / model calls).

Metrics: correct, refusals (calls refused by the server's safety policy), tool_errors, num_sql_calls.
Tool-call accuracy (parse/name/args/exec) comes from the framework.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import Field
from typing_extensions import TypedDict

from toolgym import AssistantTurn, HiddenCallError, Rubric, ScriptedPolicy, ServerSpec, StatefulToolEnv, env_tool, stop
from toolgym.policies.scripted import call

from toolgym_sql.grading import rows_equal, state_digest, states_equal
from toolgym_sql.tasks import build_tasks, load_tasks_jsonl

SYSTEM_PROMPT = (
    "You are a careful data analyst working on a SQL database through tools. Inspect the schema with list_tables and "
    "describe_table, explore with run_query (one read-only statement per call) and change data with execute (one "
    "statement per call; it commits). When you have the answer to a question, call submit_answer with the single "
    "SELECT query whose result answers it (exactly the columns asked for). When the task asks you to change data, "
    "make all the changes with execute and then call submit_answer with no query."
)

SQL_KEYS = {"run_query", "execute"}
_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_FENCE = re.compile(r"```sql\s*(.*?)```", re.S | re.I)


def _coerce(v: Any) -> Any:
    if isinstance(v, str):
        if v.lower() in ("true", "false"):
            return v.lower() == "true"
        for t in (int, float):
            try:
                return t(v)
            except ValueError:
                pass
    return v


class SqlAnswer(TypedDict):
    """What a served SQL request returns beside the generic fields."""

    answer: Annotated[str, Field(description="The query the agent submitted (empty for a change, or when it "
                                             "submitted none).")]


class SqlEnv(StatefulToolEnv):
    name = "sql"
    session_scope = "rollout"
    hidden_tools = {"dump_tables", "query_json", "open_session", "close_session"}
    hidden_args = {t: {"session": "db_session"}  # the argument `session`, filled from state["db_session"]
                   for t in ("list_tables", "describe_table", "run_query", "execute", "explain_query")}
    system_prompt = SYSTEM_PROMPT
    default_policy = "scripted:reference"
    max_turns = 12

    def __init__(self, db: str | None = None, tasks: str | None = None, template_db: str | None = None,
                 transport: Literal["inprocess", "stdio", "http"] = "inprocess",
                 fixture_seed: int = 0, per_template: Annotated[int, Field(ge=1)] = 2, read_only: bool = False,
                 timeout_s: Annotated[float, Field(gt=0)] = 5.0, max_rows: Annotated[int, Field(ge=1)] = 50,
                 efficiency_weight: Annotated[float, Field(ge=0)] = 0.0, **options: Any) -> None:
        """
        Args:
            db: Database URL (sqlite:///file.db, postgresql+psycopg://...) or SQLite file (default: the generated
                fixture; a PostgreSQL URL clones the fixture per session).
            tasks: A JSONL task file to use instead of the generated tasks (needs db).
            template_db: A SQLite file each session's database starts as a copy of.
            transport: How the SQL server runs: in this process, a stdio subprocess or streamable HTTP.
            fixture_seed: Seed of the generated fixture database and its tasks.
            per_template: Tasks generated per task template.
            read_only: Refuse every write (queries only).
            timeout_s: Per-statement time limit of the server, in seconds.
            max_rows: Rows a query shows the model at most.
            efficiency_weight: Weight of the reward for few calls (0: a metric only).
        """
        self.db, self.tasks_path, self.template_db = db, tasks, template_db
        self.fixture_seed, self.per_template = int(_coerce(fixture_seed)), int(_coerce(per_template))
        self.efficiency_weight = float(_coerce(efficiency_weight))
        self.server_args = {"read_only": bool(_coerce(read_only)), "timeout_s": float(_coerce(timeout_s)),
                            "max_rows": int(_coerce(max_rows))}
        options = {k: _coerce(v) for k, v in options.items()}
        server = options.pop("server", None) or self._server_for(transport)
        super().__init__(server=server, **options)
        self._cache: dict[tuple, list[dict[str, Any]]] = {}

    # ------------------------------------------------------------ server and data
    def _cli_args(self) -> list[str]:
        a = ["--timeout-s", str(self.server_args["timeout_s"]), "--max-rows", str(self.server_args["max_rows"]),
             "--seed", str(self.fixture_seed)]
        if self.db:
            a += ["--db", self.db]
        if self.template_db:
            a += ["--template-db", self.template_db]
        if self.server_args["read_only"]:
            a.append("--read-only")
        return a

    def _server_for(self, transport: str) -> ServerSpec:
        if transport == "stdio":
            return ServerSpec.stdio(["mcp-server-sql", *self._cli_args()])
        if transport == "inprocess":
            from mcp_server_sql import build_server

            return ServerSpec.inprocess(build_server(db=self.db, seed=self.fixture_seed, template_db=self.template_db,
                                                     **self.server_args))
        if transport == "http":
            from toolgym.sandbox import free_port

            port = free_port()
            return ServerSpec.http(f"http://127.0.0.1:{port}/mcp", launch=[
                "mcp-server-sql", "--transport", "streamable-http", "--port", str(port), *self._cli_args()])
        raise ValueError(f"unknown transport {transport!r}: use stdio, http or inprocess")

    def build_dataset(self, n: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
        key = (n, seed)
        if key not in self._cache:
            if self.tasks_path:
                if not self.db:
                    raise ValueError("tasks=FILE.jsonl needs db=... (the SQLite file or URL the tasks are about)")
                rows = load_tasks_jsonl(self.tasks_path, self.db, self.template_db)
                rows = rows[:n] if n is not None else rows
            else:
                rows = build_tasks(n, seed=seed, per_template=self.per_template, fixture_seed=self.fixture_seed)
            self._cache[key] = rows
        return [dict(r) for r in self._cache[key]]

    async def setup_state(self, state: dict[str, Any], task: dict[str, Any]) -> None:
        # an explicit handle works on every transport and protocol version (the 2026 protocol has no sessions)
        state["db_session"] = _json(await self.call("open_session"))["session"]

    async def cleanup(self, state: dict[str, Any]) -> None:
        if "db_session" in state:
            await self.call("close_session", session=state["db_session"])

    def initial_messages(self, task: dict[str, Any], state: dict[str, Any]) -> list[dict[str, Any]]:
        how = ("Answer with submit_answer(sql=...), the query whose result answers the question."
               if task.get("kind") == "question" else
               "Make the change with execute, then call submit_answer() with no query.")
        return [{"role": "system", "content": self.system_prompt},
                {"role": "user", "content": f"{task['prompt']}\n\n{how}"}]

    # ------------------------------------------------------------ serving (`toolgym serve`)
    def serve_task(self, request: str, kind: Literal["question", "change"] = "question", seed: int = 0
                   ) -> dict[str, Any]:
        """Run the SQL agent on a request against its database: a question (it answers with the SELECT query whose
        result answers it) or a change (it makes the change with execute). Returns its answer (the submitted query),
        the outcome, its turn count and a trace of its calls (the queries it ran and their results).

        Args:
            request: The question or the change, in plain language.
            kind: "question" (answer with a query) or "change" (change the data).
            seed: Seeds the agent's sampling: the same request and seed give the same answer.
        """
        return {"prompt": request, "kind": kind, "seed": seed}

    def serve_result(self, trajectory: Any) -> SqlAnswer:
        """The query the agent submitted (its answer)."""
        return {"answer": submitted_sql(trajectory.info, trajectory.messages) or ""}

    # ------------------------------------------------------------ the final-answer tool
    @env_tool
    async def submit_answer(self, state: dict[str, Any], sql: Annotated[str, Field(
            description="The SELECT query whose result answers the question; empty for a task that changes data."
            )] = "") -> str:
        """Finish the task. For a question pass the SELECT query whose result is the answer; after making requested
        changes call it with no query."""
        state["answer_sql"] = sql.strip()
        state["submitted"] = True
        return "Submitted."

    @stop
    def answered(self, state: dict[str, Any]) -> bool:
        return bool(state.get("submitted"))

    # ------------------------------------------------------------ rewards
    def build_rubric(self) -> Rubric:
        return Rubric([
            (execution_match, 1.0), (state_match, 1.0), (efficiency, self.efficiency_weight),
            (correct, 0.0), (refusals, 0.0), (tool_errors, 0.0), (num_sql_calls, 0.0),
        ])

    def scripted_players(self) -> dict[str, Any]:
        return {  # they take no options (`toolgym.policies.scripted`)
            "reference": lambda env, /: ScriptedPolicy(_reference_player(), "scripted:reference", answer_key=True),
            "wrong": lambda env, /: ScriptedPolicy(_wrong_player(), "scripted:wrong"),
            "partial": lambda env, /: ScriptedPolicy(_partial_player(), "scripted:partial"),
        }


# ---------------------------------------------------------------- reward functions
def submitted_sql(state: dict[str, Any], messages: list[dict[str, Any]]) -> str | None:
    """The submitted query: from submit_answer, else from a tagged final assistant message."""
    if state.get("submitted"):
        return state.get("answer_sql") or ""
    for m in reversed(messages):
        if m.get("role") == "assistant":
            text = m.get("content") or ""
            hit = _TAG.search(text) or _FENCE.search(text)
            return hit.group(1).strip() if hit else None
    return None


def _json(res) -> Any:  # type: ignore[no-untyped-def]
    v = res.json()
    return json.loads(v) if isinstance(v, str) else v


async def _grade(env: SqlEnv, state: dict[str, Any], task: dict[str, Any], messages) -> dict[str, Any]:
    if "grade" in state:
        return state["grade"]
    g: dict[str, Any] = {"execution_match": 0.0, "state_match": 0.0}
    if task.get("kind") == "question":
        sql = submitted_sql(state, messages)
        if sql:
            # run on a fresh copy of the database: changes the model made in its session (a table or view holding
            # the answer, deleted rows) cannot make a wrong query match
            fresh = _json(await env.call("open_session"))["session"]
            try:
                got = _json(await env.call("query_json", sql=sql, session=fresh))
                g["execution_match"] = float(not got["truncated"] and
                                             rows_equal(got["rows"], task["gold"]["rows"], task.get("ordered", False)))
            except HiddenCallError as exc:  # the model's query fails: wrong answer, not an infrastructure error
                g["answer_error"] = str(exc)[-300:]
            finally:
                await env.call("close_session", session=fresh)
    else:
        try:
            dump = _json(await env.call("dump_tables", session=state["db_session"]))
        except HiddenCallError as exc:
            if "Refused: grading:" not in str(exc):
                raise  # the server failed: an error on this rollout
            # the model grew its database past the graders' caps: a wrong final state, said why
            g["state_diff"] = "grading: " + str(exc).split("Refused: grading:", 1)[1].strip()[:300]
            state["grade"] = g
            return g
        goal = task["goal_state"]
        ok, why = states_equal({t: dump.get(t, {"columns": [], "rows": []}) for t in goal}, goal)
        others = {t: v for t, v in dump.items() if t not in goal}
        if ok and state_digest(others) != task["other_digest"]:
            ok, why = False, "tables outside the task changed"
        g["state_match"] = float(ok)
        if why:
            g["state_diff"] = why
    state["grade"] = g
    return g


async def execution_match(env, state, task, messages) -> float:  # type: ignore[no-untyped-def]
    """Questions: 1 when the submitted query's result equals the gold result (0 for write tasks)."""
    return (await _grade(env, state, task, messages))["execution_match"]


async def state_match(env, state, task, messages) -> float:  # type: ignore[no-untyped-def]
    """Write tasks: 1 when the session's final tables equal the goal state (0 for questions)."""
    return (await _grade(env, state, task, messages))["state_match"]


async def correct(env, state, task, messages) -> float:  # type: ignore[no-untyped-def]
    g = await _grade(env, state, task, messages)
    return max(g["execution_match"], g["state_match"])


def efficiency(task, calls) -> float:  # type: ignore[no-untyped-def]
    """min(1, calls the reference player needs / calls made)."""
    need = 2 if task.get("kind") == "question" else len(task.get("gold_writes", [])) + 1
    return min(1.0, need / len(calls)) if calls else 0.0


def refusals(calls) -> float:  # type: ignore[no-untyped-def]
    """Calls the server refused by its safety policy (ATTACH, PRAGMA, multi-statement, read-only, ...)."""
    return float(sum(1 for c in calls if not c.exec_ok and c.error and "Refused:" in c.error))


def tool_errors(calls) -> float:  # type: ignore[no-untyped-def]
    return float(sum(1 for c in calls if not c.exec_ok))


def num_sql_calls(calls) -> float:  # type: ignore[no-untyped-def]
    return float(sum(1 for c in calls if c.name in SQL_KEYS))


# ---------------------------------------------------------------- scripted players
def _steps_reference(task: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    if task.get("kind") == "question":
        return [("run_query", {"sql": task["gold_sql"]}), ("submit_answer", {"sql": task["gold_sql"]})]
    return [("execute", {"sql": w}) for w in task["gold_writes"]] + [("submit_answer", {})]


def _script(plan):  # type: ignore[no-untyped-def]
    def act(messages: list[dict[str, Any]], memory: dict[str, Any]) -> AssistantTurn:
        steps = memory.setdefault("steps", plan(memory["task"]))
        i = memory.get("i", 0)
        memory["i"] = i + 1
        if i >= len(steps):
            return AssistantTurn(content="Done.")
        name, args = steps[i]
        return AssistantTurn(content="", tool_calls=[call(name, **args)])
    return act


def _reference_player():  # type: ignore[no-untyped-def]
    """Runs the gold SQL through the tools (run_query then submit_answer; or each gold write, then submit)."""
    return _script(_steps_reference)


def _wrong_player():  # type: ignore[no-untyped-def]
    """Answers wrong: submits a query over the wrong rows; for write tasks changes the wrong row."""
    def plan(task):  # type: ignore[no-untyped-def]
        if task.get("kind") == "question":
            gold = task["gold"]
            ncols = max(1, len(gold["columns"]))
            cols = ", ".join(f"{-7777 - i}" for i in range(ncols))  # one impossible row with the right width
            return [("submit_answer", {"sql": f"SELECT {cols}"})]
        return [("execute", {"sql": "UPDATE products SET stock = stock + 1 WHERE product_id = 1"}), ("submit_answer", {})]
    return _script(plan)


def _partial_player():  # type: ignore[no-untyped-def]
    """Does every gold write but the last (a partial job; nothing for one-statement tasks); answers questions right."""
    def plan(task):  # type: ignore[no-untyped-def]
        if task.get("kind") == "question":
            return _steps_reference(task)
        writes = task["gold_writes"][:-1] if len(task["gold_writes"]) > 1 else []
        return [("execute", {"sql": w}) for w in writes] + [("submit_answer", {})]
    return _script(plan)


def load_environment(**kwargs: Any) -> SqlEnv:
    return SqlEnv(**kwargs)
