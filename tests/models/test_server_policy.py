"""`vllm-server:` policy: token ids in, sampled ids + logprobs out, against a stand-in for vLLM's /completions
(answered by the transformers engine over an httpx mock transport). The real server: `pytest -m vllm`."""

from __future__ import annotations

import asyncio
import json

import httpx
from toolgym_tictactoe.corpus import TTT_TOOLS

from toolgym.policies.batching import GenRequest, SamplingParams
from toolgym.policies.vllm_server import VLLMServerPolicy


def test_server_policy_tokens_roundtrip(tiny_dir, hf_policy):  # type: ignore[no-untyped-def]
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        assert request.url.path.endswith("/completions") and body["return_token_ids"] and body["logprobs"] == 1
        out = hf_policy.engine.generate_batch([GenRequest(body["prompt"], SamplingParams(
            temperature=body["temperature"], max_tokens=body["max_tokens"], seed=body.get("seed")))])[0]
        choice = {"index": 0, "text": "", "token_ids": out.token_ids, "finish_reason": out.finish_reason,
                  "logprobs": {"token_logprobs": out.logprobs, "tokens": [], "top_logprobs": []}}
        return httpx.Response(200, json={"id": "x", "object": "text_completion", "choices": [choice]})

    pol = VLLMServerPolicy(str(tiny_dir), base_url="http://fake/v1", temperature=1.0, max_tokens=16, seed=5)
    pol.client = httpx.AsyncClient(transport=httpx.MockTransport(handler))

    async def go():  # type: ignore[no-untyped-def]
        s = pol.open(TTT_TOOLS, {})
        msgs = [{"role": "system", "content": "Play."}, {"role": "user", "content": "Go."}]
        turns = []
        for k in range(2):
            t = await s.act(msgs)
            turns.append(t)
            msgs += [t.to_message(), {"role": "tool", "tool_call_id": "c", "name": "make_move", "content": f"You played {k}."}]
        await pol.aclose()
        return s, turns

    s, turns = asyncio.run(go())
    trace = s.token_trace()
    assert [i for i, m in zip(trace.ids, trace.mask) if m] == [i for t in turns for i in t.token_ids]
    # the second request's prompt is the first prompt + the first sample verbatim + the template delta
    assert seen[1]["prompt"][: len(seen[0]["prompt"]) + len(turns[0].token_ids)] == seen[0]["prompt"] + turns[0].token_ids
    assert seen[0]["stop_token_ids"] == pol.renderer.stop_ids and seen[0]["model"] == str(tiny_dir)
    assert pol.stats["requests"] == 2
