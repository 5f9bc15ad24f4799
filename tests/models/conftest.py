"""Fixtures for the model tests: one tiny model per session (built locally, no hub)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):  # type: ignore[no-untyped-def]
    from toolgym.models.tiny import init_tiny

    return init_tiny(tmp_path_factory.mktemp("models") / "tiny", size="tiny", seed=0)


@pytest.fixture(scope="session")
def hf_policy(tiny_dir):  # type: ignore[no-untyped-def]
    from toolgym.policies.hf import HFPolicy

    return HFPolicy(str(tiny_dir), temperature=1.0, max_tokens=24, seed=0)
