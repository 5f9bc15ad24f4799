"""Fresh-value copies of teacher conversations (`toolgym.train.augment`), on constructed rows shaped like synth's."""

from __future__ import annotations

import json

import pytest

from toolgym.train.augment import augment_rows, copied_values

TOOLS = [{"type": "function", "function": {"name": "save_note", "description": "Save a note.", "parameters": {
    "type": "object", "properties": {
        "title": {"type": "string", "description": "The note's title."},
        "body": {"type": "string", "description": "The text of the note."},
        "color": {"type": "string", "enum": ["red", "blue"]},
        "at": {"type": "string", "description": "Time (HH:MM)"},
        "day": {"type": "string", "format": "date"}}}}}]


def _row(title: str = "Vormak tesh", body: str = "pack the lantern") -> dict:
    args = {"title": title, "body": body, "color": "red", "at": "09:30", "day": "2026-01-02"}
    return {"example_id": 7, "tools": TOOLS, "messages": [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": f'Save a note titled "{title}" with body "{body}", color "red", at "09:30" on '
                                    f'"2026-01-02". Then tell me its title. (Not {title}x.)'},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_0", "type": "function", "function": {
            "name": "save_note", "arguments": json.dumps(args)}}]},
        {"role": "tool", "tool_call_id": "call_0", "name": "save_note",
         "content": f"Saved note {title!r} ({len(body)} characters) at 09:30."},
        {"role": "assistant", "content": f"<answer>{title}</answer>"}]}


def test_copies_replace_each_stated_free_value_everywhere_and_nothing_else() -> None:
    row = _row()
    assert set(copied_values(row)) == {"Vormak tesh", "pack the lantern"}  # not the enum, the time or the date
    before = json.dumps(row)
    rows, counts = augment_rows([row], k=3, seed=1, exclude={"held out"})
    assert json.dumps(row) == before and rows[0] is row  # the original first, unchanged
    assert counts == {"rows": 1, "with_values": 1, "copies": 3} and len(rows) == 4
    titles = set()
    for c in rows[1:]:
        new_title, new_body = c["augmented"]["values"]["Vormak tesh"], c["augmented"]["values"]["pack the lantern"]
        titles.add(new_title)
        assert new_title not in ("Vormak tesh", "held out") and new_body != "pack the lantern"
        args = json.loads(c["messages"][2]["tool_calls"][0]["function"]["arguments"])
        assert args == {"title": new_title, "body": new_body, "color": "red", "at": "09:30", "day": "2026-01-02"}
        user = c["messages"][1]["content"]
        assert f'"{new_title}"' in user and f'"{new_body}"' in user and user.count("Vormak") == 1
        assert f"(Not {new_title}x.)" not in user and "(Not Vormak teshx.)" in user  # part of a longer word: kept
        assert c["messages"][3]["content"].startswith(f"Saved note {new_title!r}")
        assert c["messages"][4]["content"] == f"<answer>{new_title}</answer>"
    assert len(titles) == 3  # each copy draws its own values


def test_rows_without_a_value_to_copy_stay_single_and_the_draws_are_seeded() -> None:
    plain = _row()
    plain["messages"][1]["content"] = "Save the usual note."  # the request states no value: nothing is copied
    rows, counts = augment_rows([plain, _row()], k=2, seed=5)
    assert counts == {"rows": 2, "with_values": 1, "copies": 2} and rows[0] is plain
    again, _ = augment_rows([plain, _row()], k=2, seed=5)
    assert [r.get("augmented") for r in rows] == [r.get("augmented") for r in again]
    other, _ = augment_rows([plain, _row()], k=2, seed=6)
    assert [r.get("augmented") for r in rows] != [r.get("augmented") for r in other]
    assert augment_rows([_row()], k=0)[0] == [_row()]
    with pytest.raises(ValueError, match="k must be"):
        augment_rows([_row()], k=-1)


def test_the_recipe_writes_the_augmented_teacher_file_without_held_out_values(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from toolgym.train.recipe import augmented_teacher

    teacher, heldout = tmp_path / "teacher.jsonl", tmp_path / "tasks.heldout.jsonl"
    teacher.write_text("".join(json.dumps(_row(f"name{i}x", f"body of {i}")) + "\n" for i in range(5)))
    held = [{"expected_calls": [{"name": "save_note", "arguments": {"title": [f"held{i}"]}}]} for i in range(3)]
    heldout.write_text("".join(json.dumps(t) + "\n" for t in held))
    path = augmented_teacher(teacher, heldout, k=2, seed=0)
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert path.name == "teacher.aug.jsonl" and len(rows) == 15
    drawn = {v for r in rows if "augmented" in r for v in r["augmented"]["values"].values()}
    assert len(drawn) == 20 and not drawn & {"held0", "held1", "held2"}
    summary = json.loads((tmp_path / "teacher.aug.summary.json").read_text())
    assert summary == {"k": 2, "seed": 0, "novel": 0.3, "rows": 5, "with_values": 5, "copies": 10}
    mtime = path.stat().st_mtime_ns
    assert augmented_teacher(teacher, heldout, k=2, seed=0) == path and path.stat().st_mtime_ns == mtime  # reused
    augmented_teacher(teacher, heldout, k=1, seed=0)  # another k: rewritten
    assert len(path.read_text().splitlines()) == 10
    augmented_teacher(teacher, heldout, k=1, seed=0, novel=1.0)  # another word mix: rewritten
    assert json.loads((tmp_path / "teacher.aug.summary.json").read_text())["novel"] == 1.0


def test_a_value_in_exclude_is_never_drawn() -> None:
    rows, _ = augment_rows([_row()], k=1, seed=3)
    first = rows[1]["augmented"]["values"]
    again, _ = augment_rows([_row()], k=1, seed=3, exclude=set(first.values()))
    assert not set(again[1]["augmented"]["values"].values()) & set(first.values())


def test_fresh_words_mix_listed_and_invented_words_as_the_generator_does() -> None:
    """By default a copy's words come from the built-in word list and invented ones (the generator's mix): a model
    fine-tuned on invented words only wrote training words in place of listed ones it was asked to copy."""
    from toolgym.tasks.sampling import WORDS

    listed = set(WORDS)

    def share_listed(novel: float | None) -> float:
        kw = {} if novel is None else {"novel": novel}
        rows, _ = augment_rows([_row()], k=200, seed=9, **kw)
        words = [w.lower() for r in rows[1:] for v in r["augmented"]["values"].values()
                 for w in v.replace("-", " ").replace("_", " ").replace("/", " ").split()]
        return sum(w in listed for w in words) / len(words)

    assert 0.4 < share_listed(None) < 0.85  # 70 % of words drawn from the list (some listed values are numbers)
    assert share_listed(1.0) < 0.05  # invented syllable words only (one may spell a listed word by chance)


def test_a_value_taken_from_an_earlier_tool_result_is_copied_fresh_in_the_result_and_the_call() -> None:
    """A second call that uses "the first entry of that result": its value is stated by the tool result, not the
    request, and each copy renames it in both (and in nothing before the result)."""
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {
        "path": {"type": "string", "description": "Path."}}}}} for n in ("list_directory", "create_directory")]
    row = {"example_id": 3, "tools": tools, "messages": [
        {"role": "user", "content": 'List "shelf/books". Then create a directory named the first entry of that result.'},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "type": "function", "function": {
            "name": "list_directory", "arguments": json.dumps({"path": "shelf/books"})}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "[FILE] Marovel\n[FILE] quiet-harbor.md"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "create_directory", "arguments": json.dumps({"path": "Marovel"})}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Created Marovel"},
        {"role": "assistant", "content": "<answer>done</answer>"}]}
    assert set(copied_values(row)) == {"shelf/books", "Marovel"}
    unrelated = json.loads(json.dumps(row))
    unrelated["messages"][2]["content"] = "[FILE] other\n[FILE] quiet-harbor.md"  # no message states Marovel
    assert set(copied_values(unrelated)) == {"shelf/books"}
    rows, counts = augment_rows([row], k=2, seed=3)
    assert counts["copies"] == 2
    for c in rows[1:]:
        new = c["augmented"]["values"]["Marovel"]
        assert new != "Marovel" and c["messages"][2]["content"] == f"[FILE] {new}\n[FILE] quiet-harbor.md"
        assert json.loads(c["messages"][3]["tool_calls"][0]["function"]["arguments"]) == {"path": new}
        assert c["messages"][4]["content"] == f"Created {new}" and "Marovel" not in json.dumps(c["messages"])


def test_a_think_block_is_renamed_with_the_rest_of_the_conversation() -> None:
    row = _row()
    row["messages"][2]["reasoning_content"] = 'Save a note titled "Vormak tesh" with body "pack the lantern".'
    copy = augment_rows([row], k=1, seed=3)[0][1]
    new = copy["augmented"]["values"]
    assert copy["messages"][2]["reasoning_content"] == \
        f'Save a note titled "{new["Vormak tesh"]}" with body "{new["pack the lantern"]}".'
    assert row["messages"][2]["reasoning_content"].count("Vormak tesh") == 1  # the original unchanged
