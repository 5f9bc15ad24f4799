"""The transformers engine end to end: token-exact multi-turn tic-tac-toe rollouts, logprobs, batching, tiny model."""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from tg_testutil import legal_moves, run_env
from toolgym_tictactoe.corpus import TTT_TOOLS

from toolgym.models.chat import (
    ChatRenderer,
    TemplateNotPrefixPreservingError,
    check_prefix_preservation,
    tokenize_conversation,
)
from toolgym.models.tiny import CHAT_TEMPLATE
from toolgym.policies.hf import HFPolicy


def fresh_logprobs(model, ids: list[int], temperature: float = 1.0) -> list[float]:  # type: ignore[no-untyped-def]
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([ids])).logits[0].float() / temperature, -1)
    return [0.0] + [float(lp[i - 1, ids[i]]) for i in range(1, len(ids))]


def test_tiny_model_reloads_and_is_deterministic(tiny_dir, tmp_path):  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolgym.models.tiny import init_tiny

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    assert model.config.model_type == "qwen2" and 64 <= model.config.hidden_size <= 256
    for special in ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"):
        assert len(tok(special, add_special_tokens=False)["input_ids"]) == 1, special
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tools=TTT_TOOLS, tokenize=False, add_generation_prompt=True)
    assert '"name": "make_move"' in text and text.endswith("<|im_start|>assistant\n")
    again = init_tiny(tmp_path / "again", seed=0)
    assert (again / "model.safetensors").read_bytes() == (tiny_dir / "model.safetensors").read_bytes()
    assert (again / "tokenizer.json").read_bytes() == (tiny_dir / "tokenizer.json").read_bytes()


def test_cli_init_tiny(tmp_path):  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from toolgym.models.cli import app

    res = CliRunner().invoke(app, ["init-tiny", "--out", str(tmp_path / "m"), "--size", "tiny", "--seed", "3"])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "m" / "toolgym_tiny.json").read_text())["seed"] == 3


def test_uri_scheme_registered(tiny_dir):  # type: ignore[no-untyped-def]
    from toolgym.policies import load_policy

    pol = load_policy(f"hf:{tiny_dir}", temperature=0.0, max_tokens=4)
    assert isinstance(pol, HFPolicy) and pol.tool_format.name == "hermes"


def test_tictactoe_rollouts_are_token_exact(tiny_dir):  # type: ignore[no-untyped-def]
    policy = HFPolicy(str(tiny_dir), temperature=1.0, max_tokens=64, seed=0, allowed_outputs=legal_moves)
    env, trajs = run_env(policy, n=4, concurrency=4)
    r = policy.renderer
    tools = env.model_tools()
    multi_turn = 0
    for tr in trajs:
        assert tr.error is None, tr.error
        assert tr.metrics["turn_parse_ok"] == 1.0 and tr.metrics["tool_exec_ok"] == 1.0
        multi_turn += tr.metrics["turns"] >= 2
        trace = tr.tokens
        assert trace is not None and len(trace.ids) == len(trace.mask) == len(trace.logprobs)
        last = max(i for i, m in enumerate(tr.messages) if m["role"] == "assistant")
        conv = tr.messages[: last + 1]
        # re-tokenising the final conversation with the template gives exactly the stored ids
        assert r.encode(r.render(conv, tools, False)) == trace.ids
        # the mask covers exactly the assistant-generated tokens (independently derived from the template)
        assert tokenize_conversation(r, conv, tools).mask == trace.mask
        assert sum(trace.mask) > 0
        # stored logprobs equal a fresh forward pass's (temperature 1)
        fresh = fresh_logprobs(policy.model, trace.ids)
        diffs = [abs(a - b) for a, b, m in zip(fresh, trace.logprobs, trace.mask) if m]
        assert max(diffs) < 1e-4
        assert all(lp == 0.0 for lp, m in zip(trace.logprobs, trace.mask) if not m)
    assert multi_turn == len(trajs)


def test_unconstrained_sampling_trace(hf_policy):  # type: ignore[no-untyped-def]
    """The random model's raw samples: appended verbatim, masked, logprobs exact, prompts as template deltas."""
    r = hf_policy.renderer

    async def go():  # type: ignore[no-untyped-def]
        s = hf_policy.open(TTT_TOOLS, {})
        msgs = [{"role": "system", "content": "Play."}, {"role": "user", "content": "Your move."}]
        turns = []
        for k in range(3):
            t = await s.act(msgs)
            turns.append(t)
            msgs.append(t.to_message())
            msgs.append({"role": "tool", "tool_call_id": "c", "name": "make_move", "content": f"You played {k}."})
        return s, msgs, turns

    s, msgs, turns = asyncio.run(go())
    trace = s.token_trace()
    sampled = [i for t in turns for i in t.token_ids]
    assert [i for i, m in zip(trace.ids, trace.mask) if m] == sampled
    assert all(t.raw_text is not None and len(t.token_ids) == len(t.logprobs) for t in turns)
    first = r.encode(r.render(msgs[:2], TTT_TOOLS, True))
    assert trace.ids[: len(first)] == first and not any(trace.mask[: len(first)])
    fresh = fresh_logprobs(hf_policy.model, trace.ids)
    assert max(abs(a - b) for a, b, m in zip(fresh, trace.logprobs, trace.mask) if m) < 1e-4


def test_batched_equals_single_greedy(hf_policy):  # type: ignore[no-untyped-def]
    from toolgym.policies.batching import GenRequest, SamplingParams

    r = hf_policy.renderer
    prompts = [r.encode(r.render([{"role": "user", "content": "x" * n}], TTT_TOOLS, True)) for n in (1, 7, 30)]
    p = SamplingParams(temperature=0.0, max_tokens=12)
    batched = hf_policy.engine.generate_batch([GenRequest(x, p) for x in prompts])
    for x, b in zip(prompts, batched):
        single = hf_policy.engine.generate_batch([GenRequest(x, p)])[0]
        assert single.token_ids == b.token_ids
        assert max(abs(u - v) for u, v in zip(single.logprobs, b.logprobs)) < 1e-4
    # a seeded request samples the same tokens whatever batch it lands in
    ps = SamplingParams(temperature=1.0, max_tokens=12, seed=7)
    alone = hf_policy.engine.generate_batch([GenRequest(prompts[0], ps)])[0]
    crowd = hf_policy.engine.generate_batch([GenRequest(q, ps) for q in prompts])[0]
    assert alone.token_ids == crowd.token_ids


def test_64_concurrent_rollouts_are_batched(tiny_dir):  # type: ignore[no-untyped-def]
    policy = HFPolicy(str(tiny_dir), temperature=1.0, max_tokens=12, seed=1)
    env, trajs = run_env(policy, n=64, concurrency=64, max_turns=2)
    assert len(trajs) == 64 and all(t.error is None for t in trajs)
    stats = policy.stats
    assert stats["requests"] == sum(int(t.metrics["turns"]) for t in trajs)
    assert stats["mean_batch_size"] > 1, stats
    assert all(t.tokens is not None and sum(t.tokens.mask) > 0 for t in trajs)


QWEN3_LIKE = CHAT_TEMPLATE.replace(
    "{%- for message in messages %}",
    "{%- set ns = namespace(last_user=-1) %}{%- for m in messages %}{%- if m.role == 'user' %}"
    "{%- set ns.last_user = loop.index0 %}{%- endif %}{%- endfor %}\n{%- for message in messages %}",
    1,
).replace(
    "{%- if message.reasoning_content is defined and message.reasoning_content is not none %}",
    "{%- if message.reasoning_content is defined and message.reasoning_content is not none and loop.index0 > ns.last_user %}",
)


def test_prefix_check_fails_loudly(tiny_dir):  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    assert QWEN3_LIKE != CHAT_TEMPLATE
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    r = ChatRenderer(tok, QWEN3_LIKE)
    with pytest.raises(TemplateNotPrefixPreservingError, match="prefix-preserving") as e:
        check_prefix_preservation(r, "strict")
    assert "chat_template=" in str(e.value)  # names the fix
    check_prefix_preservation(r, "tools")  # one user message: Qwen3-style templates are fine
    with pytest.raises(TemplateNotPrefixPreservingError):
        HFPolicy(str(tiny_dir), chat_template=QWEN3_LIKE)
    HFPolicy(str(tiny_dir), chat_template=QWEN3_LIKE, check_template="tools")


def test_tokenizer_corpus_from_teacher_rows(tiny_dir, tmp_path):  # type: ignore[no-untyped-def]
    """`--corpus-file rows.jsonl` (toolgym synth output) teaches the tokenizer the env's own text: a teacher thought
    tokenizes shorter than with the built-in corpus alone."""
    import json

    from transformers import AutoTokenizer

    from toolgym.models.tiny import corpus_file_texts, init_tiny

    thought = "Scanning: fork on the anti-diagonal; zugzwang avoided, so I play the quixotic corner."
    row = {"messages": [{"role": "user", "content": "Board?"},
                        {"role": "assistant", "content": "", "reasoning_content": thought,
                         "tool_calls": [{"type": "function", "function": {"name": "make_move", "arguments": "{}"}}]}],
           "tools": [{"type": "function", "function": {"name": "make_move", "parameters": {}}}]}
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(json.dumps(row) for _ in range(50)) + "\n")
    texts = corpus_file_texts(rows)
    assert thought in texts and any("make_move" in t for t in texts) and "Board?" in texts
    with_rows = AutoTokenizer.from_pretrained(init_tiny(tmp_path / "t", size="tiny", extra_corpus_files=[rows]))
    plain = AutoTokenizer.from_pretrained(tiny_dir)
    assert len(with_rows(thought)["input_ids"]) < len(plain(thought)["input_ids"])


def _sample_all(model, prompts, min_shared_prefix: int, max_tokens: int = 40):  # type: ignore[no-untyped-def]
    from toolgym.policies.batching import GenRequest, SamplingParams
    from toolgym.policies.hf import HFEngine

    eng = HFEngine(model, 0, [1], num_threads=1)
    eng.MIN_SHARED_PREFIX = min_shared_prefix
    reqs = [GenRequest(p, SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=i)) for i, p in enumerate(prompts)]
    return eng.generate_batch(reqs)


def test_shared_prompt_prefix_is_prefilled_once_with_the_same_samples(tiny_dir):  # type: ignore[no-untyped-def]
    """Prompts that start alike (system prompt + tools) are prefilled as one row whose cache every row reads, the
    rows' tails left-padded after it: tokens and logprobs equal the unshared path and a fresh forward pass, for
    tails of different lengths (one tail a single token)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    g = torch.Generator().manual_seed(1)
    head = torch.randint(5, 200, (30,), generator=g).tolist()
    prompts = [head + torch.randint(5, 200, (n,), generator=g).tolist() for n in (1, 7, 3, 12)]
    shared = _sample_all(model, prompts, 16)
    plain = _sample_all(model, prompts, 10**9)
    for a, b, p in zip(shared, plain, prompts, strict=True):
        assert a.token_ids == b.token_ids and len(a.token_ids) > 0
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
        ref = fresh_logprobs(model, p + a.token_ids)[len(p):]
        assert a.logprobs == pytest.approx(ref, abs=1e-4)


def test_preallocated_cache_appends_in_place_and_grows_when_full():  # type: ignore[no-untyped-def]
    """The decode cache writes each token into spare room; past its room it grows by copying, contents intact."""
    from transformers.cache_utils import DynamicCache

    from toolgym.policies.kv_cache import preallocate_cache

    cache = DynamicCache()
    k, v = torch.randn(2, 1, 5, 4), torch.randn(2, 1, 5, 4)
    cache.update(k, v, 0)
    assert preallocate_cache(cache, 2)
    layer = cache.layers[0]
    buf = layer.kbuf
    new = [torch.randn(2, 1, 1, 4) for _ in range(4)]
    for x in new[:2]:
        cache.update(x, x, 0)
    assert layer.kbuf is buf  # in place while there is room
    for x in new[2:]:
        cache.update(x, x, 0)
    assert layer.kbuf is not buf and cache.get_seq_length() == 9
    assert torch.equal(layer.keys, torch.cat([k, *new], dim=-2))
    assert torch.equal(layer.values, torch.cat([v, *new], dim=-2))
    assert not preallocate_cache(object(), 3)  # not a DynamicCache: left alone
