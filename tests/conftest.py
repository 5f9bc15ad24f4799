"""Shared fixtures: the anyio backend. Helpers live in `tg_testutil` and `tests/servers/` (tests run with
--import-mode=importlib, so both folders are put on sys.path here)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "servers"))  # openai_stub, flaky_server

if os.environ.get("PYTEST_XDIST_WORKER"):
    # pytest-xdist (`-n 2`) starts its workers with COLUMNS=80 and LINES=24, which rich consoles made at import
    # (toolgym.cli's) would keep for good, ignoring the COLUMNS a test gives the command it invokes; without them a
    # worker sizes its output as a plain `pytest` run does
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# The longest slow tests, measured in one process on the 2-core machine (2026-12-02): started first, so that under
# `-n 2` (CI's slow stage) the other worker runs the rest beside them instead of one worker finishing alone
LONGEST_FIRST = (
    "tests/test_toolcall_copy.py::",  # 694 s: the base fine-tuned for minutes copies unseen strings
    "tests/test_multi_server_training.py::",  # 398 s
    "tests/fuzz/test_sql_splitter.py::test_splits_exactly_heavy",  # 192 s
    "tests/test_getting_started.py::test_every_step_works_in_a_fresh_shell",  # 180 s
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        return next((i for i, p in enumerate(LONGEST_FIRST) if item.nodeid.startswith(p)), len(LONGEST_FIRST))

    items.sort(key=rank)  # stable: every other test keeps its order
