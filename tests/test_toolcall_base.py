"""The tool-calling base (`toolgym.models.toolcall`): its tokenizer keeps a value's tokens the same after any
punctuation (as transformers loads it: `Qwen2Tokenizer` with Qwen2's own split), its random conversations are
valid (every call against its tool's schema, every stated value in the prompt, every answer in the result or the
prompt), pre-training runs and saves a loadable model, and the shipped base (`toolgym/models/toolcall_base`) is
what its card says. The few-minutes fine-tuning check is in `test_toolcall_copy.py` (slow)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from toolgym.accuracy import validate_args
from toolgym.models.toolcall import WORD_SPLIT, conversation, copy_drill, scene, toolcall_corpus
from toolgym.train.pretrain import pretrain
from toolgym.train.recipe import default_base

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import Qwen2Config

    from toolgym.models.tiny import train_tokenizer

    out = tmp_path_factory.mktemp("tok")
    tok = train_tokenizer(list(toolcall_corpus(random.Random(0), 300)), 1024, WORD_SPLIT)
    tok.save_pretrained(out)
    Qwen2Config(vocab_size=len(tok), hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1, intermediate_size=64).save_pretrained(out)
    return out


def test_a_value_has_the_same_tokens_after_any_punctuation(tok_dir: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_dir)
    assert type(tok).__name__ == "Qwen2Tokenizer"  # what transformers 5 loads for a qwen2 model

    def pieces(text: str) -> list[str]:
        return tok.convert_ids_to_tokens(tok(text, add_special_tokens=False)["input_ids"])

    for value in ("Nairobi", "kavuto-rest.md", "apple river", "Asia/Tokyo"):
        after = {p: pieces(p + value)[1:] for p in ('"', "'", ">", "/", "(")}
        assert len({tuple(v) for v in after.values()}) == 1, after  # `"x`, `>x`, `/x` ...: the same pieces of x
    words = pieces(" river kettle")
    assert words[0].startswith("Ġ") and len(words[0]) > 1  # a word after a space starts with one token `Ġ`+letter
    assert pieces(" lisbon.md")[1:] != pieces('"lisbon.md')[1:]  # but after a space a name is other pieces:
    # `[FILE] lisbon.md` in a listing vs `"lisbon.md"` in a call (`copy_drill(unquoted=...)` drills that mapping)


def test_random_conversations_are_valid_and_copyable() -> None:
    rng = random.Random(1)
    kinds = set()
    for _ in range(300):
        row = conversation(rng, requests=rng.randint(1, 4))
        tools = {t["function"]["name"]: t["function"]["parameters"] for t in row["tools"]}
        kinds.update(row["kinds"])
        msgs = row["messages"]
        for i, m in enumerate(msgs):
            for c in m.get("tool_calls") or []:
                fn = c["function"]
                assert validate_args(tools[fn["name"]], fn["arguments"]) is None
                prompt = next(x["content"] for x in reversed(msgs[:i]) if x["role"] == "user")
                stated = [v for v in fn["arguments"].values() if json.dumps(v, ensure_ascii=False) in prompt]
                assert stated or "entry of that result" in prompt or not fn["arguments"]
            if m["role"] == "assistant" and m["content"].startswith("<answer>"):
                answer = m["content"][len("<answer>"):-len("</answer>")]
                source = next(x["content"] for x in reversed(msgs[:i]) if x["role"] in ("tool", "user"))
                assert answer in source or json.dumps(answer, ensure_ascii=False) in source
    assert kinds == {"call", "chain", "chain_ref", "none"}
    drill = copy_drill(rng, requests=5)
    assert drill["tools"] == [] and len(drill["messages"]) == 11


def test_unquoted_drills_write_the_value_bare_after_a_space() -> None:
    """`copy_drill(unquoted=1)`: every value stands bare after a space in the request (no quote around it) and is
    answered exactly; `unquoted=0` quotes every value, as the shipped base's stream did."""
    from toolgym.tasks.sampling import Vocabulary

    rng = random.Random(4)
    for share, bare in ((1.0, True), (0.0, False)):
        row = copy_drill(rng, Vocabulary(novel=0.6), 30, unquoted=share)
        msgs = row["messages"][1:]
        for user, answer in zip(msgs[::2], msgs[1::2], strict=True):
            value = answer["content"].removeprefix("<answer>").removesuffix("</answer>")
            quoted = json.dumps(value, ensure_ascii=False) in user["content"] or f"'{value}'" in user["content"]
            assert quoted is not bare, (share, user["content"])
            if bare:
                assert f" {value}" in user["content"]


def test_pretrain_writes_values_bare_only_once_copying_had_half_its_stage(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """`pretrain(unquoted_share=s)`: the first half of the copy stage draws quoted drills only (copying forms on
    them), its second half and the tool stage draw `s` of the drill values bare."""
    import toolgym.train.pretrain as pre
    from toolgym.models.tiny import init_tiny

    seen: list[float] = []
    real = pre.scene

    def spy(*args: object) -> list[dict[str, object]]:
        seen.append(tuple(float(a) for a in args[5:]))  # type: ignore[arg-type]  # call, bare, ref, ref call shares
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(pre, "scene", spy)
    init = init_tiny(tmp_path / "init", size="tiny", split=WORD_SPLIT,
                     corpus_sources=["chatml", lambda rng: toolcall_corpus(rng, 100)])
    pretrain(init, tmp_path / "out", steps=8, batch_size=2, micro_batch_size=2, copy_share=0.5, unquoted_share=0.4,
             ref_share=0.3, ref_call_share=0.2, call_share=0.1)
    # steps 1-2: quoted drills only; 3-4 (copy, 2nd half): bare values and reference drills; 5-8 (tools): call and
    # reference call drills too
    assert seen == [(0.0, 0.0, 0.0, 0.0)] * 2 + [(0.0, 0.4, 0.3, 0.0)] * 2 + [(0.1, 0.4, 0.3, 0.2)] * 4


def test_reference_drills_name_an_entry_the_listing_holds() -> None:
    """`ref_drill` / `ref_call_drill`: the answer (or the second call's value) is exactly the entry the request names
    by its place, as `entries` reads the listing; and a `ref` share of 0 leaves the copy drills' stream as shipped."""
    import random

    from toolgym.models.toolcall import copy_drill, ref_call_drill, ref_drill, ref_drill_tools
    from toolgym.tasks.sampling import Vocabulary, entries
    from toolgym.tasks.templates import ORDINALS

    rng, vocab = random.Random(3), Vocabulary(novel=0.6)
    for _ in range(200):
        user, answer = ref_drill(rng, vocab)
        text = user["content"]
        word = next(w for w in ORDINALS if f"the {w} entry of" in text)
        listing = "\n".join(ln for ln in text.splitlines() if "entry of" not in ln and ln != "Here is a result:")
        assert answer["content"] == f"<answer>{entries(listing)[ORDINALS.index(word)]}</answer>"
    for _ in range(50):
        row = ref_call_drill(rng, vocab, ref_drill_tools(rng, vocab, 3), 2)
        for i in (0, 6):
            prompt, listing, second = (row["messages"][1 + i]["content"], row["messages"][3 + i]["content"],
                                       row["messages"][4 + i]["tool_calls"][0]["function"]["arguments"])
            word = next(w for w in ORDINALS if f"the {w} entry of that result" in prompt)
            assert entries(listing)[ORDINALS.index(word)] in second.values()
    a, b = random.Random(9), random.Random(9)
    assert copy_drill(a, vocab, 6) == copy_drill(b, vocab, 6, ref=0.0)
    mixed = copy_drill(random.Random(4), vocab, 40, ref=0.5)
    assert 5 < mixed["kinds"].count("ref") < 35 and len(mixed["messages"]) == 81


def test_call_drills_state_every_value_they_call_with() -> None:
    from toolgym.tasks.sampling import Vocabulary

    rng, vocab = random.Random(3), Vocabulary(novel=0.6)
    n_calls, plain = 0, 0
    for _ in range(60):
        rows = scene(rng, vocab, 3, drill_share=0.0, call_share=1.0)
        assert all(r["tools"] is rows[0]["tools"] for r in rows)  # one tool set per scene (shared prefix)
        tools = {t["function"]["name"]: t["function"]["parameters"] for t in rows[0]["tools"]}
        assert 1 <= len(tools) <= 3 and all(1 <= len(p["properties"]) <= 3 for p in tools.values())
        for row in rows:
            assert set(row["kinds"]) == {"call_drill"} and 3 <= len(row["kinds"]) <= 8
            msgs = row["messages"]
            for i, m in enumerate(msgs):
                for c in m.get("tool_calls") or []:
                    fn = c["function"]
                    assert validate_args(tools[fn["name"]], fn["arguments"]) is None
                    assert set(fn["arguments"]) == set(tools[fn["name"]]["properties"])  # every parameter given
                    prompt = msgs[i - 1]["content"]
                    assert all(json.dumps(v, ensure_ascii=False) in prompt for v in fn["arguments"].values())
                    n_calls += 1
                    plain += prompt.startswith(f"Call {fn['name']} with ")
                    assert msgs[i + 2]["content"] == f"<answer>{msgs[i + 1]['content']}</answer>"
    assert n_calls > 500 and 0.4 < plain / n_calls < 0.8  # half plain "Call NAME with k = v", half other phrasings
    # without call drills a scene's stream is what it was (the shipped base's build is reproducible)
    a = scene(random.Random(5), Vocabulary(novel=0.6), 2)
    b = scene(random.Random(5), Vocabulary(novel=0.6), 2, call_share=0.0)
    assert a == b


def test_pretrain_runs_and_saves_a_loadable_model(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolgym.models.tiny import init_tiny

    init = init_tiny(tmp_path / "init", size="tiny", split=WORD_SPLIT,
                     corpus_sources=["chatml", lambda rng: toolcall_corpus(rng, 200)])
    last = pretrain(init, tmp_path / "out", steps=4, batch_size=2, micro_batch_size=2, copy_share=0.5)
    assert last["step"] == 4 and last["loss"] > 0
    lines = [json.loads(x) for x in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2, 3, 4]
    # copy drills first, then tool use; each stage warms up from its own first step
    assert [x["stage"] for x in lines] == ["copy", "copy", "tools", "tools"]
    assert lines[2]["lr"] < lines[1]["lr"] and lines[2]["lr"] < lines[3]["lr"]
    AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    AutoTokenizer.from_pretrained(tmp_path / "out")
    with pytest.raises(ValueError, match="exactly one"):
        pretrain(init, tmp_path / "x", steps=1, minutes=1.0)
    with pytest.raises(ValueError, match="copy_share"):
        pretrain(init, tmp_path / "x", steps=1, copy_share=1.0)


@pytest.mark.skipif(not (default_base() / "config.json").exists(), reason="the tool-calling base is not built")
def test_a_base_can_reuse_the_shipped_tokenizer(tmp_path: Path) -> None:
    """`init_tiny(tokenizer_from=...)` (`toolgym pretrain --tokenizer`): the new model's tokenizer is the shipped
    base's, token for token, whatever the generator now renders into a tokenizer corpus."""
    from transformers import AutoTokenizer

    from toolgym.models.tiny import init_tiny

    init = init_tiny(tmp_path / "init", size="tiny", tokenizer_from=default_base())
    ours, shipped = AutoTokenizer.from_pretrained(init), AutoTokenizer.from_pretrained(default_base())
    assert ours.get_vocab() == shipped.get_vocab()
    text = '[FILE] lisbon.md <tool_call>{"path": "lisbon.md"}</tool_call><|im_end|>'
    assert ours(text)["input_ids"] == shipped(text)["input_ids"]
    assert json.loads((init / "config.json").read_text())["vocab_size"] == len(shipped)


def test_a_folder_without_a_tokenizer_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    from toolgym.models.tiny import init_tiny

    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        init_tiny(tmp_path / "init", tokenizer_from=tmp_path / "empty")
    assert not (tmp_path / "init").exists()


@pytest.mark.skipif(not (default_base() / "config.json").exists(), reason="the tool-calling base is not built")
def test_the_shipped_base_is_what_its_card_says() -> None:
    info = json.loads((default_base() / "toolgym_tiny.json").read_text())
    assert info["base"] == "toolcall" and info["steps"] == 3200 and info["batch_size"] == 16
    assert info["copy_share"] == 0.75 and info["tokens"] == 17_143_710  # in steps of 16, with the drills below
    # the reference-drill base (docs/models.md): `toolgym pretrain --steps 3200 --batch-size 16 --copy-share 0.75
    # --unquoted-share 0.5 --ref-share 0.3 --ref-call-share 0.15 --tokenizer ...`
    assert (info["unquoted_share"], info["ref_share"], info["ref_call_share"]) == (0.5, 0.3, 0.15)
    # rebuilt alone from a fresh clone on the 2 cores: 28.9 min, weights byte-identical to the first build's
    assert info["num_threads"] == 2 and info["build_s"] <= 30 * 60
    assert info["eval"]["copy_ok"]["rate"] >= 0.9  # 94.5 % of fresh quoted drills copied exactly
    assert info["eval"]["copy_unquoted_ok"]["rate"] >= 0.8  # 85.5 % bare (36 % before the unquoted drills)
    assert info["eval"]["ref_ok"]["rate"] >= 0.1  # 19 % of "the n-th entry" drills (0 % without them)
    assert (default_base() / "model.safetensors").stat().st_size < 8 * 2**20
    for key in ("call_match", "abstain_ok", "answer_ok"):
        assert 0.0 <= info["eval"][key]["lo"] <= info["eval"][key]["rate"] <= info["eval"][key]["hi"] <= 1.0


@pytest.mark.skipif(not (default_base() / "config.json").exists(), reason="the tool-calling base is not built")
def test_eval_base_measures_copying_on_fresh_drills() -> None:
    """`copy_ok`: the shipped base answers fresh quoted values back exactly most of the time (64 % of 200 when
    measured, docs/models.md); a base that stopped copying, or an eval that compared the wrong text, fails."""
    from toolgym.models.toolcall import eval_toolcall

    res = eval_toolcall(default_base(), n=30, seed=7)
    assert res["copy_ok"]["n"] == 30 and res["copy_unquoted_ok"]["n"] == 30
    assert res["ref_ok"]["n"] == 30 and res["ref_call_ok"]["n"] == 30
    assert res["copy_ok"]["rate"] >= 0.35
    assert res["abstain_ok"]["n"] + res["call_match"]["n"] == 30
