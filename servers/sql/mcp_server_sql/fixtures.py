"""Bundled data: a deterministic, seeded generator of a small business database.

`business` (the default fixture): customers, employees (with a manager hierarchy), products, orders, order_items,
payments, with primary and foreign keys, NULLs (missing emails, unshipped orders, unpaid payments), dates and
money (NUMERIC(10,2)). The same seed gives the same rows on SQLite and PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import sqlalchemy as sa

FIRST = ["Ada", "Ben", "Chloe", "Dev", "Eva", "Farid", "Grace", "Hugo", "Ines", "Jon", "Kira", "Luis", "Mara",
         "Nils", "Olga", "Paul", "Quinn", "Rosa", "Sami", "Tara", "Uma", "Victor", "Wen", "Yara", "Zoe"]
LAST = ["Smith", "Garcia", "Chen", "Muller", "Rossi", "Kowalski", "Silva", "Novak", "Ito", "Dubois", "Larsen",
        "Okafor", "Haddad", "Patel", "Moreau"]
CITIES = [("Berlin", "Germany"), ("Munich", "Germany"), ("Paris", "France"), ("Lyon", "France"),
          ("Madrid", "Spain"), ("Lisbon", "Portugal"), ("Rome", "Italy"), ("Warsaw", "Poland"),
          ("Oslo", "Norway"), ("Boston", "USA"), ("Austin", "USA"), ("Toronto", "Canada")]
SEGMENTS = ["consumer", "small_business", "enterprise"]
CATEGORIES = {
    "Office": ["Stapler", "Desk Lamp", "Notebook Pack", "Ergo Chair", "Whiteboard", "Paper Shredder"],
    "Electronics": ["USB-C Hub", "Webcam HD", "Wireless Mouse", "Mechanical Keyboard", "27in Monitor", "Headset"],
    "Kitchen": ["Coffee Grinder", "Kettle", "Espresso Cups", "Water Filter", "Toaster"],
    "Outdoor": ["Camping Stove", "Trail Backpack", "Rain Jacket", "Headlamp", "Water Bottle"],
    "Books": ["SQL Primer", "Data Patterns", "Cooking Basics", "City Atlas"],
}
TITLES = ["Sales Rep", "Sales Rep", "Sales Rep", "Account Manager", "Sales Director"]
STATUSES = ["pending", "shipped", "delivered", "delivered", "delivered", "cancelled"]
METHODS = ["card", "card", "bank_transfer", "paypal"]

START = dt.date(2025, 1, 1)


def business_metadata() -> sa.MetaData:
    md = sa.MetaData()
    sa.Table("customers", md,
             sa.Column("customer_id", sa.Integer, primary_key=True, autoincrement=False),
             sa.Column("name", sa.String(80), nullable=False),
             sa.Column("email", sa.String(120), nullable=True),
             sa.Column("city", sa.String(40), nullable=False),
             sa.Column("country", sa.String(40), nullable=False),
             sa.Column("segment", sa.String(20), nullable=False),
             sa.Column("signup_date", sa.Date, nullable=False))
    sa.Table("employees", md,
             sa.Column("employee_id", sa.Integer, primary_key=True, autoincrement=False),
             sa.Column("name", sa.String(80), nullable=False),
             sa.Column("title", sa.String(40), nullable=False),
             sa.Column("manager_id", sa.Integer, sa.ForeignKey("employees.employee_id"), nullable=True),
             sa.Column("hire_date", sa.Date, nullable=False),
             sa.Column("salary", sa.Numeric(10, 2), nullable=False))
    sa.Table("products", md,
             sa.Column("product_id", sa.Integer, primary_key=True, autoincrement=False),
             sa.Column("name", sa.String(80), nullable=False, unique=True),
             sa.Column("category", sa.String(40), nullable=False),
             sa.Column("unit_price", sa.Numeric(10, 2), nullable=False),
             sa.Column("stock", sa.Integer, nullable=False),
             sa.Column("discontinued", sa.Integer, nullable=False, server_default="0"))
    sa.Table("orders", md,
             sa.Column("order_id", sa.Integer, primary_key=True, autoincrement=False),
             sa.Column("customer_id", sa.Integer, sa.ForeignKey("customers.customer_id"), nullable=False),
             sa.Column("employee_id", sa.Integer, sa.ForeignKey("employees.employee_id"), nullable=True),
             sa.Column("order_date", sa.Date, nullable=False),
             sa.Column("status", sa.String(20), nullable=False),
             sa.Column("shipped_date", sa.Date, nullable=True))
    sa.Table("order_items", md,
             sa.Column("order_id", sa.Integer, sa.ForeignKey("orders.order_id"), primary_key=True),
             sa.Column("product_id", sa.Integer, sa.ForeignKey("products.product_id"), primary_key=True),
             sa.Column("quantity", sa.Integer, nullable=False),
             sa.Column("unit_price", sa.Numeric(10, 2), nullable=False),
             sa.Column("discount", sa.Numeric(4, 2), nullable=False, server_default="0"))
    sa.Table("payments", md,
             sa.Column("payment_id", sa.Integer, primary_key=True, autoincrement=False),
             sa.Column("order_id", sa.Integer, sa.ForeignKey("orders.order_id"), nullable=False),
             sa.Column("amount", sa.Numeric(10, 2), nullable=False),
             sa.Column("method", sa.String(20), nullable=False),
             sa.Column("paid_date", sa.Date, nullable=True))
    return md


def business_rows(seed: int = 0, scale: int = 1) -> dict[str, list[dict]]:
    """Rows of the business fixture; deterministic in (seed, scale)."""
    rng = random.Random(seed)
    n_cust, n_orders = 40 * scale, 120 * scale
    rows: dict[str, list[dict]] = {k: [] for k in ["customers", "employees", "products", "orders", "order_items", "payments"]}
    used = set()
    for cid in range(1, n_cust + 1):
        while True:
            name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
            if name not in used:
                used.add(name)
                break
            if len(used) >= len(FIRST) * len(LAST):
                name = f"{name} {cid}"
                break
        city, country = rng.choice(CITIES)
        email = None if rng.random() < 0.15 else name.lower().replace(" ", ".") + "@example.com"
        rows["customers"].append(dict(customer_id=cid, name=name, email=email, city=city, country=country,
                                      segment=rng.choice(SEGMENTS),
                                      signup_date=START - dt.timedelta(days=rng.randint(0, 700))))
    emp_names = rng.sample([f"{f} {l}" for f in FIRST for l in LAST], 8)
    for eid, name in enumerate(emp_names, 1):
        title = "Sales Director" if eid == 1 else ("Account Manager" if eid <= 3 else "Sales Rep")
        mgr = None if eid == 1 else (1 if eid <= 3 else rng.choice([2, 3]))
        salary = Decimal({"Sales Director": 9500, "Account Manager": 6200, "Sales Rep": 4100}[title] + rng.randint(0, 900))
        rows["employees"].append(dict(employee_id=eid, name=name, title=title, manager_id=mgr,
                                      hire_date=START - dt.timedelta(days=rng.randint(100, 2500)),
                                      salary=salary.quantize(Decimal("0.01"))))
    pid = 0
    prices: dict[int, Decimal] = {}
    for cat, names in CATEGORIES.items():
        for name in names:
            pid += 1
            price = Decimal(rng.randint(300, 45000)) / 100
            prices[pid] = price
            rows["products"].append(dict(product_id=pid, name=name, category=cat, unit_price=price,
                                         stock=rng.randint(0, 120), discontinued=1 if rng.random() < 0.1 else 0))
    payment_id = 0
    for oid in range(1, n_orders + 1):
        # a few customers never order (subquery questions need them)
        cid = rng.randint(1, n_cust - 4 * scale)
        odate = START + dt.timedelta(days=rng.randint(0, 540))
        status = rng.choice(STATUSES)
        shipped = odate + dt.timedelta(days=rng.randint(1, 6)) if status in ("shipped", "delivered") else None
        emp = None if rng.random() < 0.05 else rng.randint(2, 8)
        rows["orders"].append(dict(order_id=oid, customer_id=cid, employee_id=emp, order_date=odate,
                                   status=status, shipped_date=shipped))
        total = Decimal(0)
        for p in sorted(rng.sample(range(1, pid + 1), rng.randint(1, 4))):
            qty = rng.randint(1, 6)
            disc = rng.choice([Decimal("0.00")] * 4 + [Decimal("0.05"), Decimal("0.10")])
            rows["order_items"].append(dict(order_id=oid, product_id=p, quantity=qty, unit_price=prices[p], discount=disc))
            total += qty * prices[p] * (1 - disc)
        if status != "cancelled":
            payment_id += 1
            paid = None if status == "pending" and rng.random() < 0.6 else odate + dt.timedelta(days=rng.randint(0, 3))
            rows["payments"].append(dict(payment_id=payment_id, order_id=oid, amount=total.quantize(Decimal("0.01")),
                                         method=rng.choice(METHODS), paid_date=paid))
    return rows


def load_business(engine: sa.Engine, seed: int = 0, scale: int = 1) -> None:
    """Create the business tables in `engine` and fill them."""
    md = business_metadata()
    md.create_all(engine)
    rows = business_rows(seed, scale)
    with engine.begin() as conn:
        for t in md.sorted_tables:
            if rows[t.name]:
                conn.execute(t.insert(), rows[t.name])


FIXTURES = {"business": load_business}


def load_fixture(name: str, engine: sa.Engine, seed: int = 0) -> None:
    try:
        fn = FIXTURES[name]
    except KeyError:
        raise ValueError(f"unknown fixture {name!r}; known: {sorted(FIXTURES)}") from None
    fn(engine, seed=seed)
