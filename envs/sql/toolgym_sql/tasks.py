"""Tasks over the bundled business database, and import of user tasks (Spider/BIRD-like JSONL).

A task row:
  question: {"id", "kind": "question", "level", "prompt", "gold_sql", "ordered", "gold": {"columns", "rows"}}
  write:    {"id", "kind": "write", "level": "write", "prompt", "gold_writes": [sql, ...],
             "goal_state": {table: {columns, rows}} (the tables the gold writes change),
             "other_digest": digest of every other table (must stay as it was)}
Gold answers and goal states are computed by running the gold SQL on a fresh clone of the same template the
server uses (`mcp_server_sql.db.make_backend`), so they come from the database, never from hand-written values.

Levels: single_table, join, aggregation, grouping, subquery, write. The generator is deterministic in `seed`:
parameters (cities, customers, orders, ...) are drawn from the fixture's own rows with `random.Random(seed)`.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mcp_server_sql.db import Limits, make_backend, py_value
from mcp_server_sql.fixtures import CATEGORIES, business_rows

from toolgym_sql.grading import is_ordered, state_digest

TODAY = "2026-11-22"
LEVELS = ["single_table", "join", "aggregation", "grouping", "subquery", "write"]


def _q(s: str) -> str:
    return "'" + str(s).replace("'", "''") + "'"


# --- question templates: (level, fn(rng, data) -> (prompt, sql)) ------------------------------------------------
def _t_city_count(r, d):
    city = r.choice(sorted({c["city"] for c in d["customers"]}))
    return f"How many customers are based in {city}?", f"SELECT COUNT(*) FROM customers WHERE city = {_q(city)}"


def _t_products_over(r, d):
    cat = r.choice(sorted(CATEGORIES))
    prices = sorted(float(p["unit_price"]) for p in d["products"] if p["category"] == cat)
    p = int(prices[len(prices) // 3])
    return (f"List the name and unit price of every product in the {cat} category that costs more than {p}, "
            "most expensive first.",
            f"SELECT name, unit_price FROM products WHERE category = {_q(cat)} AND unit_price > {p} "
            "ORDER BY unit_price DESC")


def _t_no_email(r, d):
    seg = r.choice(["consumer", "small_business", "enterprise"])
    return (f"Which customers in the '{seg}' segment have no email address on file? Give their names.",
            f"SELECT name FROM customers WHERE email IS NULL AND segment = {_q(seg)}")


def _t_orders_between(r, d):
    m = r.randint(1, 12)
    y = r.choice([2025, 2026]) if m <= 6 else 2025
    d1, d2 = f"{y}-{m:02d}-01", f"{y}-{m:02d}-15"
    return (f"How many orders were placed between {d1} and {d2}, both days included?",
            f"SELECT COUNT(*) FROM orders WHERE order_date BETWEEN {_q(d1)} AND {_q(d2)}")


def _t_orders_of_customer(r, d):
    cids = sorted({o["customer_id"] for o in d["orders"]})
    cid = r.choice(cids)
    c = next(x for x in d["customers"] if x["customer_id"] == cid)
    return (f"List the order id and order date of every order placed by the customer named {c['name']}, "
            "oldest first (ties by order id).",
            "SELECT o.order_id, o.order_date FROM orders o JOIN customers c ON c.customer_id = o.customer_id "
            f"WHERE c.name = {_q(c['name'])} ORDER BY o.order_date, o.order_id")


def _t_items_of_order(r, d):
    oid = r.randint(1, len(d["orders"]))
    return (f"Which products are in order {oid}, and in what quantity? Give product name and quantity.",
            "SELECT p.name, oi.quantity FROM order_items oi JOIN products p ON p.product_id = oi.product_id "
            f"WHERE oi.order_id = {oid}")


def _t_manager(r, d):
    e = r.choice([x for x in d["employees"] if x["manager_id"] is not None])
    return (f"What is the name of the manager of the employee {e['name']}?",
            "SELECT m.name FROM employees e JOIN employees m ON m.employee_id = e.manager_id "
            f"WHERE e.name = {_q(e['name'])}")


def _t_order_value(r, d):
    oid = r.randint(1, len(d["orders"]))
    return (f"What is the total value of order {oid}: the sum over its items of quantity x unit price x "
            "(1 - discount)?",
            f"SELECT SUM(quantity * unit_price * (1 - discount)) FROM order_items WHERE order_id = {oid}")


def _t_avg_price(r, d):
    cat = r.choice(sorted(CATEGORIES))
    return (f"What is the average unit price of the products in the {cat} category?",
            f"SELECT AVG(unit_price) FROM products WHERE category = {_q(cat)}")


def _t_paid_by_method(r, d):
    m = r.choice(["card", "bank_transfer", "paypal"])
    return (f"What is the total amount of payments made by {m} that have a paid date?",
            f"SELECT SUM(amount) FROM payments WHERE method = {_q(m)} AND paid_date IS NOT NULL")


def _t_status_counts(r, d):
    y = r.choice([2025, 2026])
    return (f"For each order status, how many orders placed in {y} have that status?",
            f"SELECT status, COUNT(*) FROM orders WHERE order_date BETWEEN '{y}-01-01' AND '{y}-12-31' GROUP BY status")


def _t_country_having(r, d):
    k = r.choice([3, 4, 5])
    return (f"For each country with at least {k} customers, give the country and its number of customers.",
            f"SELECT country, COUNT(*) FROM customers GROUP BY country HAVING COUNT(*) >= {k}")


def _t_category_qty(r, d):
    st = r.choice(["cancelled", "pending"])
    return (f"For each product category, what is the total quantity ordered across all orders that are not {st}?",
            "SELECT p.category, SUM(oi.quantity) FROM order_items oi JOIN products p ON p.product_id = oi.product_id "
            f"JOIN orders o ON o.order_id = oi.order_id WHERE o.status <> {_q(st)} GROUP BY p.category")


def _t_employee_orders(r, d):
    st = r.choice(["delivered", "shipped", "pending"])
    return (f"List each employee who handled at least one '{st}' order, with the number of such orders, "
            "most orders first (ties by employee name).",
            "SELECT e.name, COUNT(*) AS n FROM orders o JOIN employees e ON e.employee_id = o.employee_id "
            f"WHERE o.status = {_q(st)} GROUP BY e.name ORDER BY n DESC, e.name")


def _t_never_ordered(r, d):
    return ("Which customers have never placed an order? Give their names.",
            "SELECT name FROM customers WHERE customer_id NOT IN (SELECT customer_id FROM orders)")


def _t_above_cat_avg(r, d):
    cat = r.choice(sorted(CATEGORIES))
    return (f"Which products of the {cat} category cost more than the average unit price of that category?",
            f"SELECT name FROM products WHERE category = {_q(cat)} AND unit_price > "
            f"(SELECT AVG(unit_price) FROM products WHERE category = {_q(cat)})")


def _t_bought_category(r, d):
    cat = r.choice(sorted(CATEGORIES))
    city = r.choice(sorted({c["city"] for c in d["customers"]}))
    return (f"Which customers from {city} have ordered at least one product of the {cat} category? Give their names.",
            f"SELECT name FROM customers WHERE city = {_q(city)} AND customer_id IN (SELECT o.customer_id FROM orders o "
            "JOIN order_items oi ON oi.order_id = o.order_id JOIN products p ON p.product_id = oi.product_id "
            f"WHERE p.category = {_q(cat)})")


def _t_big_spenders(r, d):
    k = r.choice([2, 3])
    return (f"Which customers placed more than {k} orders and never had an order cancelled? Give their names.",
            "SELECT c.name FROM customers c WHERE (SELECT COUNT(*) FROM orders o WHERE o.customer_id = c.customer_id) "
            f"> {k} AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id AND o.status = 'cancelled')")


QUESTION_TEMPLATES: list[tuple[str, Callable]] = [
    ("single_table", _t_city_count), ("single_table", _t_products_over), ("single_table", _t_no_email),
    ("single_table", _t_orders_between),
    ("join", _t_orders_of_customer), ("join", _t_items_of_order), ("join", _t_manager),
    ("aggregation", _t_order_value), ("aggregation", _t_avg_price), ("aggregation", _t_paid_by_method),
    ("grouping", _t_status_counts), ("grouping", _t_country_having), ("grouping", _t_category_qty),
    ("grouping", _t_employee_orders),
    ("subquery", _t_never_ordered), ("subquery", _t_above_cat_avg), ("subquery", _t_bought_category),
    ("subquery", _t_big_spenders),
]


# --- write templates: fn(rng, data) -> (prompt, [sql, ...]) ----------------------------------------------------
def _w_ship(r, d):
    o = r.choice([o for o in d["orders"] if o["status"] == "pending"])
    oid = o["order_id"]
    return (f"Order {oid} shipped today ({TODAY}). Record it: set the order's status to 'shipped' and its shipped "
            "date to today, and reduce the stock of each product in the order by the quantity ordered.",
            [f"UPDATE orders SET status = 'shipped', shipped_date = '{TODAY}' WHERE order_id = {oid}",
             "UPDATE products SET stock = stock - (SELECT oi.quantity FROM order_items oi WHERE oi.order_id = "
             f"{oid} AND oi.product_id = products.product_id) WHERE product_id IN "
             f"(SELECT product_id FROM order_items WHERE order_id = {oid})"])


def _w_restock(r, d):
    p = r.choice(d["products"])
    n = r.choice([10, 25, 40, 60])
    return (f"We received {n} more units of the product '{p['name']}'. Add them to its stock, and make sure the "
            "product is marked as not discontinued (discontinued = 0).",
            [f"UPDATE products SET stock = stock + {n}, discontinued = 0 WHERE name = {_q(p['name'])}"])


def _w_payment(r, d):
    paid = {p["order_id"] for p in d["payments"]}
    o = r.choice([o for o in d["orders"] if o["order_id"] not in paid and o["status"] != "cancelled"] or d["orders"])
    pid = len(d["payments"]) + 1
    amount = r.randint(2000, 90000) / 100
    m = r.choice(["card", "paypal", "bank_transfer"])
    return (f"Record a new payment for order {o['order_id']}: payment id {pid}, amount {amount:.2f}, method "
            f"'{m}', paid on {TODAY}.",
            [f"INSERT INTO payments (payment_id, order_id, amount, method, paid_date) VALUES "
             f"({pid}, {o['order_id']}, {amount:.2f}, {_q(m)}, '{TODAY}')"])


def _w_cancel(r, d):
    o = r.choice([o for o in d["orders"] if o["status"] == "pending"])
    oid = o["order_id"]
    return (f"Cancel order {oid}: set its status to 'cancelled' and delete any payment of that order that has no "
            "paid date yet.",
            [f"UPDATE orders SET status = 'cancelled' WHERE order_id = {oid}",
             f"DELETE FROM payments WHERE order_id = {oid} AND paid_date IS NULL"])


def _w_new_customer(r, d):
    cid = len(d["customers"]) + 1
    first, last = r.choice(["Iris", "Omar", "Lena", "Theo"]), r.choice(["Berg", "Costa", "Nguyen", "Walsh"])
    city, country = r.choice([("Berlin", "Germany"), ("Paris", "France"), ("Austin", "USA")])
    email = f"{first.lower()}.{last.lower()}@example.com"
    return (f"Add a new customer: id {cid}, name '{first} {last}', email {email}, city {city}, country {country}, "
            f"segment 'consumer', signed up on {TODAY}.",
            ["INSERT INTO customers (customer_id, name, email, city, country, segment, signup_date) VALUES "
             f"({cid}, {_q(first + ' ' + last)}, {_q(email)}, {_q(city)}, {_q(country)}, 'consumer', '{TODAY}')"])


def _w_price_rise(r, d):
    cat = r.choice(sorted(CATEGORIES))
    pct = r.choice([5, 10, 20])
    return (f"Raise the unit price of every product in the {cat} category by {pct}%, rounded to whole cents.",
            [f"UPDATE products SET unit_price = ROUND(unit_price * {1 + pct / 100:.2f}, 2) WHERE category = {_q(cat)}"])


WRITE_TEMPLATES: list[Callable] = [_w_ship, _w_restock, _w_payment, _w_cancel, _w_new_customer, _w_price_rise]


# --- building ------------------------------------------------------------------------------------------------
class GoldRunner:
    """Runs gold SQL on fresh clones of a template (bundled fixture or a user database)."""

    def __init__(self, db: str | None = None, fixture: str = "business", fixture_seed: int = 0,
                 template_db: str | None = None):
        self.backend = make_backend(db, fixture=fixture, seed=fixture_seed, limits=Limits(timeout_s=60),
                                    template_db=template_db, pg_pool=0)
        self._base = None

    def answer(self, sql: str) -> dict[str, Any]:
        s = self.backend.new_session()
        try:
            res = s.query_all(sql)
            return {"columns": res.columns, "rows": [[py_value(v) for v in row] for row in res.rows]}
        finally:
            s.close()

    def base_dump(self) -> dict:
        if self._base is None:
            s = self.backend.new_session()
            try:
                self._base = s.dump()
            finally:
                s.close()
        return self._base

    def goal(self, writes: list[str]) -> tuple[dict, str]:
        s = self.backend.new_session()
        try:
            for w in writes:
                s.execute(w)
            after = s.dump()
        finally:
            s.close()
        base = self.base_dump()
        changed = {t: after[t] for t in after if t not in base or after[t] != base[t]}
        others = {t: v for t, v in after.items() if t not in changed}
        return changed, state_digest(others)

    def close(self):
        self.backend.close()


def question_task(runner: GoldRunner, tid: str, level: str, prompt: str, sql: str, **extra) -> dict[str, Any]:
    return {"id": tid, "kind": "question", "level": level, "prompt": prompt, "gold_sql": sql,
            "ordered": is_ordered(sql), "gold": runner.answer(sql), **extra}


def write_task(runner: GoldRunner, tid: str, prompt: str, writes: list[str], **extra) -> dict[str, Any]:
    goal, digest = runner.goal(writes)
    return {"id": tid, "kind": "write", "level": "write", "prompt": prompt, "gold_writes": list(writes),
            "goal_state": goal, "other_digest": digest, **extra}


def build_tasks(n: int | None = None, seed: int = 0, per_template: int = 2, fixture_seed: int = 0,
                kinds: Iterable[str] = ("question", "write")) -> list[dict[str, Any]]:
    """The bundled task set: `per_template` instances of each template, interleaved across levels so that any
    prefix mixes levels; `n` truncates (or cycles with new parameters when larger)."""
    data = business_rows(fixture_seed)
    rng = random.Random(seed)
    runner = GoldRunner(fixture_seed=fixture_seed)
    kinds = set(kinds)
    try:
        per = per_template
        if n is not None:
            n_templates = len(QUESTION_TEMPLATES) * ("question" in kinds) + len(WRITE_TEMPLATES) * ("write" in kinds)
            per = max(per, -(-n // max(1, n_templates)))
        out: list[dict[str, Any]] = []
        seen: set[str] = set()
        for rep in range(per):
            batch = []
            if "question" in kinds:
                for i, (level, fn) in enumerate(QUESTION_TEMPLATES):
                    prompt, sql = fn(rng, data)
                    if sql in seen:
                        prompt, sql = fn(rng, data)  # one retry for a fresh parameter
                        if sql in seen:  # a template without parameters: keep one instance
                            continue
                    seen.add(sql)
                    batch.append(question_task(runner, f"q{i:02d}-{rep}", level, prompt, sql))
            if "write" in kinds:
                for i, fn in enumerate(WRITE_TEMPLATES):
                    prompt, writes = fn(rng, data)
                    batch.append(write_task(runner, f"w{i:02d}-{rep}", prompt, writes))
            rng.shuffle(batch)
            out.extend(batch)
        return out[:n] if n is not None else out
    finally:
        runner.close()


# --- import of user data ---------------------------------------------------------------------------------------
def load_tasks_jsonl(path: str | Path, db: str, template_db: str | None = None) -> list[dict[str, Any]]:
    """Tasks over a user database from a JSONL file (Spider/BIRD-like).

    Each line: a question {"question": ..., "SQL" | "query" | "gold_sql": ..., "evidence"?: hint (BIRD),
    "difficulty"? | "level"?} or a write task {"instruction" | "question": ..., "gold_writes": [sql, ...]}.
    `db` is the same SQLite file / database URL the server is started with; gold results and goal states are
    computed on it (on clones: the database itself is never changed). For PostgreSQL, `db` is the admin URL and
    `template_db` the database holding the data (cloned per session, as the server does with --template-db).
    """
    if db.startswith("postgres") and not template_db:
        raise ValueError("user tasks on PostgreSQL need template_db=NAME (the database holding the data)")
    runner = GoldRunner(db=db, template_db=template_db)
    out = []
    try:
        for i, line in enumerate(Path(path).read_text().splitlines()):
            if not line.strip():
                continue
            row = json.loads(line)
            tid = str(row.get("id", row.get("question_id", i)))
            text = row.get("question") or row.get("instruction") or row.get("prompt")
            if not text:
                raise ValueError(f"{path}:{i + 1}: no question/instruction")
            if row.get("evidence"):
                text = f"{text}\nHint: {row['evidence']}"
            level = str(row.get("level") or row.get("difficulty") or "imported")
            if row.get("gold_writes"):
                out.append(write_task(runner, tid, text, row["gold_writes"]))
            else:
                sql = row.get("SQL") or row.get("query") or row.get("gold_sql")
                if not sql:
                    raise ValueError(f"{path}:{i + 1}: no SQL/query/gold_sql")
                sql = re.sub(r";\s*$", "", sql.strip())
                out.append(question_task(runner, tid, level, text, sql))
    finally:
        runner.close()
    return out
