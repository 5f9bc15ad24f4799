"""Write the seed database `shop.db` and `tasks.jsonl` for the mcp-server-sqlite walkthrough. Deterministic.
Run: `python make_tasks.py`.

24 tasks of four kinds (`kind`), each with its answer and the expected call:
- `price`: a product's price (`read_query`, exact SQL);
- `count`: how many products cost more than a price (`read_query`, SQL matched by a regex: any spacing and case;
  `reference` is the call the reference player sends, which `toolgym check` verifies the regex accepts);
- `columns`: a table's columns (`describe_table`, the table name matched case-insensitively);
- `tables`: which tables exist (`list_tables`, no arguments).
"""

import json
import sqlite3
from pathlib import Path

HERE = Path(__file__).parent
PRODUCTS = [("Wool Rug", 19.99, 12), ("Desk Lamp", 34.5, 7), ("Oak Shelf", 89.0, 3), ("Glass Vase", 12.25, 40),
            ("Linen Throw", 45.0, 9), ("Steel Kettle", 27.75, 15), ("Cotton Towel", 8.5, 60), ("Clay Pot", 15.0, 22)]
ORDERS = [(1, "Wool Rug", 2), (2, "Desk Lamp", 1), (3, "Glass Vase", 5), (4, "Wool Rug", 1), (5, "Clay Pot", 3)]


def make_db(path: Path) -> None:
    path.unlink(missing_ok=True)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE products (name TEXT PRIMARY KEY, price REAL, stock INTEGER)")
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, product TEXT, quantity INTEGER)")
        db.executemany("INSERT INTO products VALUES (?, ?, ?)", PRODUCTS)
        db.executemany("INSERT INTO orders VALUES (?, ?, ?)", ORDERS)


def make_tasks() -> list[dict]:
    rows: list[dict] = []
    for name, price, _ in PRODUCTS:
        rows.append({"kind": "price", "prompt": f"What does the {name} cost? Query the database, then give the price "
                     "inside <answer></answer>.", "answer": f"{price}",
                     "expected_calls": [{"name": "read_query", "arguments": {
                         "query": [f"SELECT price FROM products WHERE name = '{name}'"]}}]})
    for limit in (10, 15, 20, 25, 30, 40, 50, 80):
        n = sum(p > limit for _, p, _ in PRODUCTS)
        rows.append({"kind": "count", "prompt": f"How many products cost more than {limit}? Query the database, "
                     "then give the number inside <answer></answer>.", "answer": f"{n}",
                     "expected_calls": [{"name": "read_query", "arguments": {
                         "query": [rf"(?i)\s*SELECT\s+COUNT\(\*\)\s+FROM\s+products\s+WHERE\s+price\s*>\s*{limit}\s*;?\s*"]},
                         "match": {"query": "regex"},
                         "reference": {"query": f"SELECT COUNT(*) FROM products WHERE price > {limit}"}}]})
    for table, column in (("products", "price"), ("products", "stock"), ("orders", "quantity"), ("orders", "product")):
        rows.append({"kind": "columns", "prompt": f"Does the {table} table have a column named {column}? Look at its "
                     "schema, then answer inside <answer></answer>.", "answer": column,
                     "expected_calls": [{"name": "describe_table", "arguments": {"table_name": [table]},
                                         "match": "case_insensitive"}]})
    for table, ask in (("products", "Is there a table named {}? List the tables"),
                       ("orders", "Is there a table named {}? List the tables"),
                       ("products", "Does the database hold a table called {}? List its tables"),
                       ("orders", "Does the database hold a table called {}? List its tables")):
        rows.append({"kind": "tables", "prompt": ask.format(table) + ", then answer inside <answer></answer>.",
                     "answer": table, "expected_calls": [{"name": "list_tables", "arguments": {}}]})
    return rows


if __name__ == "__main__":
    make_db(HERE / "shop.db")
    rows = make_tasks()
    (HERE / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {HERE / 'shop.db'} and {len(rows)} tasks")
