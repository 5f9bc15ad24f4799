"""The synthetic world: deterministic, consistent across articles, and every question answerable from the text."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from mcp_server_wiki.corpus import LEAD
from mcp_server_wiki.world import extract_fact, generate_questions, generate_world


@pytest.fixture(scope="module")
def world():
    return generate_world()


@pytest.fixture(scope="module")
def pages(world):
    return {a.title: dict(a.sections) for a in world.articles()}


def test_same_seed_same_corpus_and_questions() -> None:
    a, b = generate_world(seed=5, articles=150), generate_world(seed=5, articles=150)
    assert [x.text() for x in a.articles()] == [x.text() for x in b.articles()]
    assert generate_questions(a, 60) == generate_questions(b, 60)
    c = generate_world(seed=6, articles=150)
    assert [x.title for x in c.articles()] != [x.title for x in a.articles()]


def test_bundled_world_size_and_shape(world, pages) -> None:
    kinds = Counter(e.kind for e in world.entities.values())
    assert len(pages) == 400 and set(kinds) == {"person", "city", "country", "org", "event"}
    assert all(len(secs) >= 2 for secs in pages.values())  # every article has sections
    assert len({t.casefold() for t in pages}) == len(pages)  # titles are unique


def test_every_question_is_derivable_from_the_text(world, pages) -> None:
    qs = generate_questions(world)
    assert len(qs) == 300
    assert Counter(q["hops"] for q in qs) == {1: 100, 2: 100, 3: 100}
    assert {q["difficulty"] for q in qs} == {"easy", "medium", "hard"}
    assert len({q["question"] for q in qs}) == 300
    for q in qs:
        subject = q["chain"][0]["subject"]
        assert subject in q["question"]
        for i, hop in enumerate(q["chain"]):
            assert hop["subject"] == subject  # each hop starts where the previous one's text led
            found = extract_fact(hop["kind"], hop["relation"], subject, pages[subject][hop["section"]])
            assert found == hop["object"], (q["question"], hop)
            if i < len(q["chain"]) - 1:
                assert found not in q["question"]  # intermediate entities must be found by reading
            subject = found
        assert subject == q["answer"] and q["answer"] in q["aliases"]


def test_facts_agree_across_articles(world, pages) -> None:
    """What one article says about another entity matches that entity's own article."""
    checked = 0
    for title, secs in pages.items():
        e = world.entities[title]
        if e.kind == "person":
            city = extract_fact("person", "birthplace", title, secs["Early life"])
            country = extract_fact("city", "country", city, pages[city][LEAD])
            assert f"from {country}." in secs[LEAD]
            spouse = extract_fact("person", "spouse", title, secs.get("Personal life", ""))
            if spouse:  # marriage is stated on both sides
                assert extract_fact("person", "spouse", spouse, pages[spouse]["Personal life"]) == title
        if e.kind == "city" and "Notable people" in secs:
            listed = re.sub(r"^People born in .+? include ", "", secs["Notable people"]).rstrip(".")
            for person in re.split(r", | and ", listed):
                assert extract_fact("person", "birthplace", person, pages[person]["Early life"]) == title
                checked += 1
        if e.kind == "country":
            capital = extract_fact("country", "capital", title, secs[LEAD])
            assert extract_fact("city", "country", capital, pages[capital][LEAD]) == title
    assert checked > 100


def test_extract_fact_does_not_confuse_relations() -> None:
    text = "Ada Lin was born in the year 1801. Ada Lin was born in Tarnholm."
    assert extract_fact("person", "birthplace", "Ada Lin", text) == "Tarnholm"
    assert extract_fact("person", "birth_year", "Ada Lin", text) == "1801"
    assert extract_fact("person", "birthplace", "Bo Lin", text) is None


@pytest.mark.slow
def test_world_scales_to_100k_articles() -> None:
    w = generate_world(seed=1, articles=100_000)
    assert len(w.entities) == 100_000
    qs = generate_questions(w, 30)
    pages = {a.title: dict(a.sections) for a in w.articles()}
    for q in qs:
        hop = q["chain"][-1]
        assert extract_fact(hop["kind"], hop["relation"], hop["subject"], pages[hop["subject"]][hop["section"]]) \
            == q["answer"]
