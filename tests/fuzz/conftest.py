"""The fuzz suite (Hypothesis): tool-call parsers, tool-argument validation, the SQL statement splitter.

Each property runs 200 examples in the default suite (no deadline: a shared 2-core machine; no example database:
it would write `.hypothesis/` into the checkout) and has a heavier twin marked `slow` (`pytest -m slow`). The
PostgreSQL fixture of tests/sql is re-exported for the `postgres` oracle test of the splitter.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("toolgym_sql_conftest", Path(__file__).parent.parent / "sql" / "conftest.py")
_sql_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_sql_conftest)
pg_url = _sql_conftest.pg_url  # session-scoped: a PostgreSQL cluster started for the run, or a skip
