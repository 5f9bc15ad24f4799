"""Fixtures for training tests: one tiny model per session (built offline in ~10 s)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from toolgym.models.tiny import init_tiny

    return init_tiny(tmp_path_factory.mktemp("tiny") / "model", size="tiny", seed=0)
