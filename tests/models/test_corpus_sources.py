"""Corpus sources of the tiny model's tokenizer are found by name: `chatml` built in, the others through the
`toolgym.corpora` entry-point group (the tic-tac-toe env registers `tictactoe`). The lookup is tested with the entry
points patched, so it does not depend on what is installed."""

from __future__ import annotations

import random
from importlib.metadata import EntryPoint

import pytest

import toolgym.models.tiny as tiny


def _fake_entry_points(**sources: str):  # type: ignore[no-untyped-def]
    eps = [EntryPoint(name, value, tiny.CORPUS_GROUP) for name, value in sources.items()]
    return lambda group: [ep for ep in eps if ep.group == group]


def test_a_source_is_found_through_the_entry_point_group(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(tiny, "entry_points", _fake_entry_points(
        tictactoe="toolgym_tictactoe.corpus:tictactoe_corpus", words="textwrap:wrap"))
    from toolgym_tictactoe.corpus import tictactoe_corpus

    assert tiny.corpus_source("tictactoe") is tictactoe_corpus
    assert tiny.corpus_source("chatml") is tiny.chatml_corpus  # built in, whatever is installed
    texts = tiny.build_corpus(["chatml", "tictactoe"], seed=0)
    rng = random.Random(0)
    expected = [*tiny.chatml_corpus(rng), *tictactoe_corpus(rng)]
    assert texts[: len(expected)] == expected and len(texts) == len(expected) + 20  # + the scaffolding examples
    assert tiny.build_corpus(["chatml", tictactoe_corpus], seed=0) == texts  # a function instead of a name


def test_an_unknown_source_is_an_error_naming_the_known_ones(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(tiny, "entry_points", _fake_entry_points(tictactoe="toolgym_tictactoe.corpus:tictactoe_corpus"))
    with pytest.raises(ValueError, match=r"unknown corpus source 'tictactoes'; known: chatml, tictactoe .*toolgym\.corpora"):
        tiny.build_corpus(["chatml", "tictactoes"])
    monkeypatch.setattr(tiny, "entry_points", _fake_entry_points())  # the env not installed: no fallback
    with pytest.raises(ValueError, match="known: chatml "):
        tiny.corpus_source("tictactoe")


def test_the_env_package_declares_its_corpus_entry_point() -> None:
    """What `pip install -e envs/tictactoe` registers (read from the pyproject, not from the installed metadata)."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    project = tomllib.loads((root / "envs/tictactoe/pyproject.toml").read_text())["project"]
    assert project["entry-points"]["toolgym.corpora"] == {"tictactoe": "toolgym_tictactoe.corpus:tictactoe_corpus"}
