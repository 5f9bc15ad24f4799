"""Speculative greedy decoding with n-gram drafts (`toolgym.policies.ngram_draft`, `ContinuousBatcher._spec_step`).

The drafter alone: what it learns, how it backs off to shorter contexts, its limits. The engine: for each
architecture the lean step claims (tiny random Qwen2, Qwen3, Llama built offline, as in test_lean_decode.py), every
speculative forward's logits equal the model's own transformers forward of the same tokens on a copy of the same slot
buffers; whole greedy generations with drafts equal those without, and equal solo static generation, with rows
joining a running batch, budgets and stop tokens cutting drafts short, and a conversation's next turn reusing KV whose
columns had holes (parked without them). Seeded sampled and constrained rows draw the same tokens with drafts as
without."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
import torch

from toolgym.policies.batching import GenRequest, SamplingParams
from toolgym.policies.hf import HFEngine
from toolgym.policies.ngram_draft import NgramDrafter

transformers = pytest.importorskip("transformers")

COMMON = {"vocab_size": 23, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
          "max_position_embeddings": 512, "pad_token_id": 0, "eos_token_id": 1, "initializer_range": 0.2}
STOP = [1, 2]  # with these weights every architecture ends some rows on a stop token and others on their budget
KINDS = ["qwen2", "qwen3", "llama"]


def _model(kind: str) -> torch.nn.Module:
    """A tiny random model with a small vocabulary and peaked logits (weights 10x the usual scale), so that its greedy
    outputs repeat and drafts are often right, and sometimes wrong."""
    torch.manual_seed(0)
    if kind == "qwen2":
        model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(num_attention_heads=4, num_key_value_heads=2,
                                                                       **COMMON))
    elif kind == "qwen3":
        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(num_attention_heads=4, num_key_value_heads=1,
                                                                       head_dim=16, **COMMON))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(num_attention_heads=4, num_key_value_heads=4,
                                                                       attention_bias=True, mlp_bias=True,
                                                                       tie_word_embeddings=False, **COMMON))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


def _requests(n: int, seed: int = 0, temperature: float = 0.0) -> list[GenRequest]:
    rng = random.Random(seed)
    return [GenRequest([rng.randrange(2, 23) for _ in range(rng.choice([3, 9, 30, 70]))],
                       SamplingParams(temperature=temperature, max_tokens=rng.randrange(5, 60), seed=rng.randrange(99)))
            for _ in range(n)]


def _run(eng: HFEngine, reqs: list[GenRequest], per_call: int = 2) -> tuple[dict[int, Any], dict[str, int]]:
    """Every request through the continuous batch, `per_call` joining each `run_until` (rows join a running batch):
    the outputs by index, and the step counters summed."""
    done: dict[int, Any] = {}
    counts: dict[str, int] = {}
    pending = list(enumerate(reqs))
    while pending or eng.running():
        admit, pending = pending[:per_call], pending[per_call:]
        outs, st = eng.run_until(admit, [], lambda: True)
        done.update(outs)
        for k in ("drafted_tokens", "accepted_tokens", "reused_tokens"):
            counts[k] = counts.get(k, 0) + st[k]
    return done, counts


# ---------------------------------------------------------------------------------------------------- the drafter
def test_the_drafter_follows_the_longest_context_it_has_seen_and_backs_off() -> None:
    d = NgramDrafter(4, orders=(3, 1))
    d.learn([5, 6, 7, 8, 9], first=0)
    assert d.draft([5, 6, 7]) == [8, 9]  # 5 6 7 -> 8, then 6 7 8 -> 9, then nothing follows 9
    assert d.draft([1, 2, 7]) == [8, 9]  # no order-3 context: order 1 (7 -> 8)
    assert d.draft([4]) == [] and d.draft([]) == []
    d.learn([1, 2, 7, 3], first=3)  # only token 3 is new: 2 7 -> 3 is not an order; order 1: 7 -> 3 (most recent)
    assert d.draft([1, 2, 7]) == [3]
    assert d.draft([5, 6, 7]) == [8, 9]  # the longer context still knows its own continuation
    assert d.draft([5, 6, 7], limit=1) == [8]
    d.learn([0, 0, 0, 0, 0, 0, 0], first=0)
    assert d.draft([0]) == [0, 0, 0, 0]  # never more than max_draft


def test_the_drafter_is_bounded_and_checks_its_arguments() -> None:
    d = NgramDrafter(2, orders=(1,), max_entries=3)
    d.learn([1, 2, 3, 4], first=0)
    assert len(d.tables[1]) == 3
    d.learn([4, 5], first=0)  # a full table starts afresh
    assert d.tables[1] == {(4,): 5}
    d.clear()
    assert d.draft([4]) == []
    with pytest.raises(ValueError, match="max_draft"):
        NgramDrafter(0)
    with pytest.raises(ValueError, match="orders"):
        NgramDrafter(3, orders=(0,))
    with pytest.raises(ValueError, match="draft_tokens"):
        HFEngine(_model("qwen2"), pad_id=0, stop_ids=STOP, draft_tokens=-1)


# ---------------------------------------------------------------------------------------------------- the engine
@pytest.mark.parametrize("kind", KINDS)
def test_every_speculative_forward_matches_the_transformers_forward(kind: str) -> None:
    model = _model(kind)
    eng = HFEngine(model, pad_id=0, stop_ids=STOP, draft_tokens=5)
    assert eng.drafter is not None
    seen = {"wide": 0, "worst": 0.0}
    forward = eng.lean.forward

    def checked(ids, pos, keys, values, mask, n, s, e):  # type: ignore[no-untyped-def]
        cache = copy.deepcopy(eng.slots.cache)
        for la in cache.layers:
            la.set_view(n, s, e)
        with torch.inference_mode():
            ref = model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache,
                        use_cache=True).logits
        got = forward(ids, pos, keys, values, mask, n, s, e)
        T = ids.shape[1]
        for kb, ck in zip(keys, cache.layers):  # both wrote the new tokens' keys at columns [e, e + T)
            assert torch.allclose(kb[:n, :, e : e + T], ck.kbuf[:n, :, e : e + T], atol=1e-5)
        seen["wide"] += T > 1
        seen["worst"] = max(seen["worst"], float((got - ref).abs().max()))
        return got

    eng.lean.forward = checked  # type: ignore[method-assign]
    done, _ = _run(eng, _requests(6))
    assert len(done) == 6 and seen["wide"] > 5, seen
    assert seen["worst"] < 1e-4, seen


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_generations_with_drafts_equal_those_without_and_solo_static_ones(kind: str) -> None:
    model = _model(kind)
    reqs = _requests(10, seed=3)
    plain = HFEngine(model, pad_id=0, stop_ids=STOP, draft_tokens=0)
    spec = HFEngine(model, pad_id=0, stop_ids=STOP, draft_tokens=6)
    (a, none), (b, counts) = _run(plain, reqs), _run(spec, reqs, per_call=3)
    solo = [plain.generate_batch([r])[0] for r in reqs]
    assert none["drafted_tokens"] == 0
    for i in range(10):
        assert b[i].token_ids == a[i].token_ids == solo[i].token_ids, i
        assert b[i].finish_reason == solo[i].finish_reason
        assert max(abs(x - y) for x, y in zip(b[i].logprobs, solo[i].logprobs)) < 1e-4
    # both paths ran: drafts kept and drafts refused; rows ended on a stop token and on their budgets
    assert 0 < counts["accepted_tokens"] < counts["drafted_tokens"], counts
    assert {b[i].finish_reason for i in range(10)} == {"stop", "length"}


@pytest.mark.parametrize("kind", ["qwen2"])
def test_a_next_turn_reuses_parked_kv_of_speculative_steps_and_matches_static_generation(kind: str) -> None:
    """Speculative steps leave holes (columns a row did not keep) in the batch; a finished row is parked with only
    the columns it attends, one per token, and its next turn extends that KV exactly."""
    model = _model(kind)
    spec = HFEngine(model, pad_id=0, stop_ids=STOP, draft_tokens=6)
    reqs = _requests(4, seed=5)
    first, counts = _run(spec, reqs)
    assert counts["accepted_tokens"] > 0 and len(spec.parked) == 4
    for e in spec.parked.entries:
        assert e.width == len(e.tokens) and bool(e.mask.all())  # compact: no hole was parked
    nxt = [GenRequest(list(r.prompt_ids) + list(first[i].token_ids) + [7, 8, 9],
                      SamplingParams(temperature=0.0, max_tokens=40)) for i, r in enumerate(reqs)]
    second, counts = _run(spec, nxt)
    assert counts["reused_tokens"] > 0 and counts["accepted_tokens"] > 0  # parked KV reused; drafts kept
    for i, r in enumerate(nxt):
        ref = spec.generate_batch([r])[0]
        assert second[i].token_ids == ref.token_ids, i


@pytest.mark.parametrize("kind", KINDS)
def test_seeded_sampled_and_constrained_rows_draw_the_same_tokens_with_drafts(kind: str) -> None:
    """A speculative step draws each position's token as a plain step does (one uniform per token from the row's
    own generator), so seeded sampling gives the same tokens with drafts, without them and alone in a static batch;
    in a batch mixing greedy, sampled (top-p, top-k) and constrained rows too."""
    model = _model(kind)
    reqs = _requests(8, seed=7, temperature=0.8)
    reqs[1].params.top_p, reqs[2].params.top_k, reqs[3].params.temperature = 0.9, 5, 0.0
    reqs[4] = GenRequest(reqs[4].prompt_ids, SamplingParams(temperature=1.0, max_tokens=12, seed=4),
                         allowed=[[5, 6, 7, 8, 1], [5, 6, 9, 1], [3, 3, 3, 3, 3, 3, 1]])
    outs, counts = {}, {}
    for k in (0, 6):
        outs[k], counts[k] = _run(HFEngine(model, pad_id=0, stop_ids=STOP, draft_tokens=k), reqs)
    solo = [HFEngine(model, pad_id=0, stop_ids=STOP, draft_tokens=0).generate_batch([r])[0] for r in reqs]
    for i in range(8):
        assert outs[6][i].token_ids == outs[0][i].token_ids == solo[i].token_ids, i
        assert max(abs(x - y) for x, y in zip(outs[6][i].logprobs, solo[i].logprobs)) < 1e-4
    assert outs[6][4].token_ids in reqs[4].allowed
    assert counts[0]["drafted_tokens"] == 0 and 0 < counts[6]["accepted_tokens"] < counts[6]["drafted_tokens"]
    assert len({tuple(outs[6][i].token_ids) for i in range(8)}) > 4


def test_the_engine_learns_from_the_first_tokens_of_a_short_prompt() -> None:
    """Contexts that start in the prompt are learnt too, also when prompt + output are shorter than the longest
    order: the prompt's last two tokens -> the first generated token."""
    eng = HFEngine(_model("qwen2"), pad_id=0, stop_ids=STOP, draft_tokens=6)
    done, _ = _run(eng, [GenRequest([5, 6], SamplingParams(temperature=0.0, max_tokens=3))])
    out = done[0].token_ids
    assert len(out) >= 2
    assert eng.drafter.tables[2][(6, out[0])] == out[1]
    assert eng.drafter.tables[3][(5, 6, out[0])] == out[1]
