"""Token-exact policy against a vLLM (OpenAI-compatible) server: `vllm-server:MODEL` (+ `base_url`).

The chat-completions path (`openai:MODEL` with `return_tokens=True`) gets token ids and logprobs per turn, but the
server renders the conversation itself, so earlier turns are re-tokenised, not the sampled tokens. This policy
keeps the exact trajectory instead: it renders prompts locally with the model's tokenizer and chat template
(`toolgym.models.chat.TokenTracker`, the same code as `hf:`/`vllm:`), sends **token ids** to the server's
`/completions` endpoint (`prompt` as a list of ids, `return_token_ids`, `logprobs`) and appends the returned
sampled ids verbatim. The server does the batching, so requests go straight out (no local queue).

Options: `base_url` (default `http://127.0.0.1:8000/v1`), `api_key` (default `$OPENAI_API_KEY`), `tokenizer` (path
or name; default MODEL), `served_model_name` (default MODEL), `timeout_s`, plus the sampling/format options of
`hf:`.
Needs `transformers` (tokenizer only, no torch) and a vLLM server >= 0.10.2 (`return_token_ids`).
"""

from __future__ import annotations

import os
import time
from typing import Any

from toolgym.models.chat import ChatRenderer, load_chat_template
from toolgym.policies.batching import GenOutput, GenRequest, SamplingParams
from toolgym.policies.model import ModelPolicy


class VLLMServerPolicy(ModelPolicy):
    """`vllm-server:MODEL`. Takes the options of `ModelPolicy` (sampling, tool format; not `allowed_outputs`; the
    batching options have no effect: the server batches) and:

    Args:
        base_url: The server's OpenAI-compatible base URL.
        api_key: Bearer token for the server (default: $OPENAI_API_KEY, if set).
        tokenizer: Tokenizer path or name, or a tokenizer object (default: MODEL).
        served_model_name: The model name the server serves (default: MODEL).
        chat_template: A chat template, inline text or a .jinja path (default: the tokenizer's).
        template_kwargs: Extra chat-template variables, e.g. {"enable_thinking": False}.
        timeout_s: Seconds one request may take.
        trust_remote_code: Let transformers run the tokenizer repository's own code.
    """

    name = "vllm-server"

    def __init__(
        self,
        target: str,
        /,
        *,
        base_url: str = "http://127.0.0.1:8000/v1",
        api_key: str | None = None,
        tokenizer: Any = None,
        served_model_name: str | None = None,
        chat_template: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
        timeout_s: float = 600.0,
        trust_remote_code: bool = False,
        **options: Any,
    ) -> None:
        import httpx
        from transformers import AutoTokenizer

        if options.get("allowed_outputs") is not None:
            raise ValueError("allowed_outputs (choice constraints) is supported by hf: only")
        if options.get("strict_calls"):
            raise ValueError("strict_calls (schema-constrained tool calls) is supported by hf: only")
        if api_key is None:
            api_key = os.environ.get("OPENAI_API_KEY")

        if tokenizer is None or isinstance(tokenizer, str):
            tokenizer = AutoTokenizer.from_pretrained(tokenizer or target, trust_remote_code=trust_remote_code)
        self.model_name = served_model_name or target
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.AsyncClient(timeout=timeout_s, headers=headers)
        self._requests = 0
        self._tokens = 0
        self._busy = 0.0
        renderer = ChatRenderer(tokenizer, load_chat_template(chat_template), template_kwargs)
        super().__init__(renderer, **options)

    def body(self, prompt_ids: list[int], p: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model_name,
            "prompt": list(prompt_ids),
            "max_tokens": p.max_tokens,
            "temperature": max(p.temperature, 0.0),
            "top_p": p.top_p,
            "logprobs": 1,
            "return_token_ids": True,
            "stop_token_ids": list(self.renderer.stop_ids),
            "skip_special_tokens": False,
        }
        if p.top_k > 0:
            body["top_k"] = p.top_k
        if p.seed is not None:
            body["seed"] = int(p.seed) % (2**31)
        return body

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams | None = None, allowed: list[list[int]] | None = None,
        constraint: Any = None,
    ) -> GenOutput:
        if allowed or constraint is not None:
            raise NotImplementedError("allowed_outputs and strict_calls are supported by hf: only")
        t0 = time.perf_counter()
        resp = await self.client.post(f"{self.base_url}/completions", json=self.body(prompt_ids, params or self.sampling))
        resp.raise_for_status()
        out = parse_completion_tokens(resp.json())
        self._requests += 1
        self._tokens += len(out.token_ids)
        self._busy += time.perf_counter() - t0
        return out

    def generate_batch(self, requests: list[GenRequest]) -> list[GenOutput]:  # pragma: no cover - not used
        raise NotImplementedError("VLLMServerPolicy sends requests directly")

    @property
    def stats(self) -> dict[str, float]:  # type: ignore[override]
        return {"requests": self._requests, "generated_tokens": self._tokens, "request_s": self._busy}

    def reload_weights(self, weights_dir: str, timeout_s: float = 600.0) -> None:
        """Make the server load new weights in place from `weights_dir` (safetensors in checkpoint format, on a
        filesystem the server can read): vLLM's dev-mode `/collective_rpc` -> `reload_weights(weights_path=...)`,
        then `/reset_prefix_cache`. The server must run with `VLLM_SERVER_DEV_MODE=1` (vLLM >= 0.1x)."""
        import httpx

        root = self.base_url.removesuffix("/v1")
        body = {"method": "reload_weights", "kwargs": {"weights_path": str(weights_dir), "is_checkpoint_format": True},
                "timeout": timeout_s}
        r = httpx.post(f"{root}/collective_rpc", json=body, headers=self.client.headers, timeout=timeout_s)
        if r.status_code == 404:
            raise RuntimeError(f"{root} has no /collective_rpc: start the vLLM server with VLLM_SERVER_DEV_MODE=1 "
                               "to let the trainer push weights")
        r.raise_for_status()
        httpx.post(f"{root}/reset_prefix_cache", headers=self.client.headers, timeout=timeout_s).raise_for_status()

    async def aclose(self) -> None:
        await self.client.aclose()


def parse_completion_tokens(data: dict[str, Any]) -> GenOutput:
    """Sampled ids, logprobs and finish reason from a vLLM `/completions` response with `return_token_ids`."""
    choice = data["choices"][0]
    ids = choice.get("token_ids")
    if ids is None:
        raise RuntimeError("the server returned no token_ids: needs vLLM >= 0.10.2 (return_token_ids)")
    lp = (choice.get("logprobs") or {}).get("token_logprobs") or []
    lps = [float(x) if x is not None else 0.0 for x in lp][: len(ids)]
    lps += [0.0] * (len(ids) - len(lps))
    return GenOutput(list(ids), lps, "stop" if choice.get("finish_reason") == "stop" else "length")
