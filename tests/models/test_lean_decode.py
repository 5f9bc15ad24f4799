"""The lean decode step (`toolgym.policies.lean_decode.LeanDecoder`) computes what the transformers forward computes.

For each architecture it claims (Qwen2 with attention biases and grouped-query heads, Qwen3 with its q/k norms,
Llama with full multi-head attention, MLP biases and llama3 rope scaling), a tiny random model is built offline, rows
of different lengths are admitted to the continuous batch, and every decode step's logits are compared with the
model's own forward on a copy of the same slot buffers; then whole greedy generations with and without it must be
identical. Models it does not claim (LoRA-wrapped layers, sliding windows) keep the transformers forward and still
generate. The committed tic-tac-toe checkpoint's equality is also covered by tests/models/test_continuous_batching.py
(continuous batching, now lean, against solo static generation)."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from toolgym.policies.batching import GenRequest, SamplingParams
from toolgym.policies.hf import HFEngine
from toolgym.policies.lean_decode import LeanDecoder

transformers = pytest.importorskip("transformers")

COMMON = {"vocab_size": 97, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
          "max_position_embeddings": 512, "pad_token_id": 0, "eos_token_id": 1}


def _model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "qwen2":
        cfg = transformers.Qwen2Config(num_attention_heads=4, num_key_value_heads=2, **COMMON)
        model = transformers.Qwen2ForCausalLM(cfg)
    elif kind == "qwen3":
        cfg = transformers.Qwen3Config(num_attention_heads=4, num_key_value_heads=1, head_dim=16, **COMMON)
        model = transformers.Qwen3ForCausalLM(cfg)
    elif kind == "llama":
        cfg = transformers.LlamaConfig(num_attention_heads=4, num_key_value_heads=4, attention_bias=True,
                                       mlp_bias=True, tie_word_embeddings=False,
                                       rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                        "original_max_position_embeddings": 64}, **COMMON)
        model = transformers.LlamaForCausalLM(cfg)
    else:
        raise AssertionError(kind)
    # random biases and norm weights, so that a term the lean step forgot changes its logits
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.3)
    return model.eval()


def _requests(n: int, seed: int = 0) -> list[GenRequest]:
    rng = random.Random(seed)
    return [GenRequest([rng.randrange(2, 97) for _ in range(rng.choice([3, 9, 30, 70]))],
                       SamplingParams(temperature=0.0, max_tokens=rng.randrange(5, 25))) for _ in range(n)]


@pytest.mark.parametrize("kind", ["qwen2", "qwen3", "llama"])
def test_every_decode_step_matches_the_transformers_forward(kind: str) -> None:
    model = _model(kind)
    assert LeanDecoder.supports(model)
    eng = HFEngine(model, pad_id=0, stop_ids=[1])
    assert eng.lean is not None
    calls = {"n": 0, "worst": 0.0}
    lean_step = eng.lean.step

    def checked(ids, pos, keys, values, mask, n, s, e):  # type: ignore[no-untyped-def]
        # the transformers forward on a copy of the same slot buffers, as the engine runs it without the lean step
        sl = eng.slots
        cache = copy.deepcopy(sl.cache)
        for la in cache.layers:
            la.set_view(n, s, e)
        with torch.inference_mode():
            ref = model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache,
                        use_cache=True).logits[:, -1]
        got = lean_step(ids, pos, keys, values, mask, n, s, e)
        for kb, ck in zip(keys, cache.layers):  # both wrote the new token's key at column e
            assert torch.allclose(kb[:n, :, e], ck.kbuf[:n, :, e], atol=1e-5)
        calls["n"] += 1
        calls["worst"] = max(calls["worst"], float((got - ref).abs().max()))
        return got

    eng.lean.step = checked  # type: ignore[method-assign]
    reqs = _requests(6)
    done: dict[int, object] = {}
    pending = list(enumerate(reqs))
    while pending or eng.running():
        admit = pending[:2]  # rows join a batch that is already decoding
        pending = pending[2:]
        outs, _ = eng.run_until(admit, [], lambda: True)
        done.update(outs)
    assert len(done) == 6 and calls["n"] > 20
    assert calls["worst"] < 1e-4, calls


@pytest.mark.parametrize("kind", ["qwen2", "qwen3", "llama"])
def test_greedy_generations_are_identical_with_and_without_it(kind: str) -> None:
    model = _model(kind)
    outs = {}
    for lean in (True, False):
        eng = HFEngine(model, pad_id=0, stop_ids=[1], lean_decode=lean)
        assert (eng.lean is not None) == lean
        outs[lean], _ = eng.run_until(list(enumerate(_requests(8, seed=3))), [], lambda: False)
        while eng.running():
            more, _ = eng.run_until([], [], lambda: False)
            outs[lean] += more
    a, b = dict(outs[True]), dict(outs[False])
    assert sorted(a) == sorted(b) == list(range(8))
    for i in range(8):
        assert a[i].token_ids == b[i].token_ids
        assert max(abs(x - y) for x, y in zip(a[i].logprobs, b[i].logprobs)) < 1e-4


def test_models_it_does_not_claim_keep_the_transformers_forward() -> None:
    peft = pytest.importorskip("peft")
    lora = peft.get_peft_model(_model("qwen2"), peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    assert not LeanDecoder.supports(lora) and not LeanDecoder.supports(lora.base_model.model)
    cfg = transformers.Qwen2Config(num_attention_heads=4, num_key_value_heads=2, use_sliding_window=True,
                                   sliding_window=8, max_window_layers=0,
                                   layer_types=["sliding_attention", "sliding_attention"], **COMMON)
    sliding = transformers.Qwen2ForCausalLM(cfg).eval()
    assert not LeanDecoder.supports(sliding)
    eng = HFEngine(sliding, pad_id=0, stop_ids=[1])
    assert eng.lean is None
    out = eng.generate_batch(_requests(2))
    assert all(len(o.token_ids) > 0 for o in out)
