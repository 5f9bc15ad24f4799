"""Wiki suite fixtures: every index goes to one temporary cache folder (also seen by server subprocesses)."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def wiki_index_dir(tmp_path_factory: pytest.TempPathFactory):
    d = tmp_path_factory.mktemp("wiki-index")
    old = os.environ.get("TOOLGYM_WIKI_INDEX_DIR")
    os.environ["TOOLGYM_WIKI_INDEX_DIR"] = str(d)
    yield d
    if old is None:
        os.environ.pop("TOOLGYM_WIKI_INDEX_DIR", None)
    else:
        os.environ["TOOLGYM_WIKI_INDEX_DIR"] = old


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
