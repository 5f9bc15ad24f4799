"""Shared fixtures: the anyio backend. Helpers live in `tg_testutil` (tests run with --import-mode=importlib, so
this folder is put on sys.path here for them)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
