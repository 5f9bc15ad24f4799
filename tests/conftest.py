"""Shared fixtures: the anyio backend. Helpers live in `tg_testutil` and `tests/servers/` (tests run with
--import-mode=importlib, so both folders are put on sys.path here)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent / "servers"))  # openai_stub, flaky_server


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
