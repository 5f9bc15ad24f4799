"""A policy backed by any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, llama.cpp, SGLang, ...).

Sends the conversation with the native `tools` parameter and sampling arguments; retries 429/5xx/connection errors
with exponential backoff and jitter. Tool calls come from the response's `tool_calls`; argument strings that are not
JSON objects become `parse_ok = False` calls (raw text kept). With `return_tokens=True` it asks the server for token
ids and logprobs (`logprobs`, and vLLM's `return_token_ids`) and stores them on the turn when the server sends them.
Several base URLs can be given (comma-separated or a list): requests are spread over them (least in-flight first)
and an endpoint that fails is skipped for a cool-down while the others carry on; outages are counted in `stats`.

Endpoints that cannot be reached at all stop a run early instead of failing every rollout: `preflight()` raises
`PolicyUnavailable` when every base URL refuses connections, and so does a request once `max_connect_failures`
consecutive connection failures (every endpoint, no success in between) have piled up -- at once before the first
successful request, and after one only when the failures span `unavailable_after_s` too (a server restart of a few
seconds does not stop a long run). While unavailable, requests fail at once for a cool-down, then probe again.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from typing import Any

import httpx

from toolgym.policies.base import Policy, PolicySession, PolicyUnavailable, check_policy_options
from toolgym.types import MAX_ARG_DEPTH, AssistantTurn, ToolCall, argument_error, kept_text, nesting_depth

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class EndpointError(RuntimeError):
    """Every endpoint failed for one request, after retries."""


class _Endpoint:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.in_flight = 0
        self.down_until = 0.0
        self.failures = 0
        self.requests = 0


class OpenAIPolicy(Policy):
    """`openai:MODEL` -- chat completions from OpenAI-compatible endpoints (see the module docstring).

    Args:
        base_url: Base URL(s) of the endpoint, comma-separated or a list (requests are spread over them).
        api_key: Bearer token (default: $OPENAI_API_KEY).
        temperature: Sampling temperature (default: the server's).
        top_p: Nucleus sampling mass (default: the server's).
        max_tokens: Most tokens per turn (default: the server's).
        seed: Sampling seed, for servers that take one.
        extra_body: More fields for every request body.
        max_retries: Retries of a failed request (429/5xx/connection errors).
        backoff_s: First retry wait; doubles per attempt, with jitter.
        timeout_s: Seconds one request may take.
        cooldown_s: Seconds a failed endpoint is skipped.
        return_tokens: Ask for token ids and logprobs (vLLM's `return_token_ids`).
        max_connect_failures: Consecutive connection failures after which the policy is unavailable.
        unavailable_after_s: After a first success, how long failures must last before the policy is unavailable.
    """

    def __init__(
        self,
        model: str,
        /,
        base_url: str | list[str] = "https://api.openai.com/v1",
        api_key: str | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        extra_body: dict[str, Any] | None = None,
        max_retries: int = 5,
        backoff_s: float = 0.5,
        timeout_s: float = 120.0,
        cooldown_s: float = 10.0,
        return_tokens: bool = False,
        max_connect_failures: int = 8,
        unavailable_after_s: float = 60.0,
    ) -> None:
        self.name = f"openai:{model}"
        self.model = model
        urls = base_url.split(",") if isinstance(base_url, str) else list(base_url)
        self.endpoints = [_Endpoint(u.strip()) for u in urls if u.strip()]
        if not self.endpoints:
            raise ValueError("no base URL given for the OpenAI-compatible policy")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "EMPTY")
        self.sampling = {k: v for k, v in {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens,
                                           "seed": seed}.items() if v is not None}
        self.extra_body = extra_body or {}
        self.max_retries, self.backoff_s, self.cooldown_s = max_retries, backoff_s, cooldown_s
        self.return_tokens = return_tokens
        self._client = httpx.AsyncClient(timeout=timeout_s, headers={"Authorization": f"Bearer {self.api_key}"})
        self.stats = {"requests": 0, "retries": 0, "failovers": 0, "endpoint_errors": 0}
        if max_connect_failures < 1:
            raise ValueError("max_connect_failures must be >= 1")
        self.max_connect_failures, self.unavailable_after_s = max_connect_failures, unavailable_after_s
        self._connect_failures = 0  # consecutive, reset by any answer
        self._first_failure = 0.0
        self._ever_answered = False
        self._unavailable: tuple[float, str] | None = None  # (until, message)

    def _unreachable_message(self, last: str) -> str:
        urls = ", ".join(e.url for e in self.endpoints)
        return (f"the model endpoint cannot be reached ({urls}): {self._connect_failures} connection attempts in a "
                f"row failed, last: {last}. Is the server running at that --base-url?")

    def _connect_failed(self, last: str) -> None:
        now = time.monotonic()
        if self._connect_failures == 0:
            self._first_failure = now
        self._connect_failures += 1
        if self._connect_failures >= self.max_connect_failures and (
                not self._ever_answered or now - self._first_failure >= self.unavailable_after_s):
            msg = self._unreachable_message(last)
            self._unavailable = (now + self.cooldown_s, msg)
            raise PolicyUnavailable(msg)

    async def preflight(self) -> None:
        """Raise `PolicyUnavailable` if every endpoint refuses connections (any HTTP answer, even 404, passes)."""
        errors = []
        # a client of its own: preflight may run in another event loop than the requests (e.g. before `serve`)
        async with httpx.AsyncClient(timeout=10.0, headers={"Authorization": f"Bearer {self.api_key}"}) as client:
            for ep in self.endpoints:
                try:
                    await client.get(f"{ep.url}/models")
                    return
                except (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol) as exc:
                    errors.append(f"{ep.url}: {type(exc).__name__}: {exc}")
                except httpx.HTTPError:
                    return  # it answered, if oddly: leave the verdict to the requests
        raise PolicyUnavailable(f"the model endpoint cannot be reached: {'; '.join(errors)}. Is the server running "
                                f"at that --base-url?")

    def open(self, tools: list[dict[str, Any]], task: dict[str, Any]) -> PolicySession:
        return _OpenAISession(self, tools)

    def open_seeded(self, tools: list[dict[str, Any]], task: dict[str, Any], seed: int) -> PolicySession:
        """A session sending `seed` (within 0..2**31-1) as every request's sampling seed, for servers that take one."""
        return _OpenAISession(self, tools, seed % 2**31)

    def _pick(self, exclude: set[str]) -> _Endpoint:
        now = time.monotonic()
        live = [e for e in self.endpoints if e.down_until <= now and e.url not in exclude]
        pool = live or [e for e in self.endpoints if e.url not in exclude] or self.endpoints
        return min(pool, key=lambda e: (e.in_flight, e.requests))

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                       seed: int | None = None) -> dict[str, Any]:
        """POST /chat/completions with retries and failover; return the JSON response (`seed`: this request's sampling
        seed instead of the policy's)."""
        sampling = self.sampling if seed is None else {**self.sampling, "seed": seed}
        body: dict[str, Any] = {"model": self.model, "messages": _clean(messages), **sampling, **self.extra_body}
        if tools:
            body["tools"] = tools
        if self.return_tokens:
            body.setdefault("logprobs", True)
            body.setdefault("return_token_ids", True)
        if self._unavailable is not None:
            until, msg = self._unavailable
            if time.monotonic() < until:
                raise PolicyUnavailable(msg)
            self._unavailable = None  # cool-down over: probe again
        last: str = ""
        tried: set[str] = set()
        prev: str | None = None
        for attempt in range(self.max_retries + 1):
            ep = self._pick(tried if len(tried) < len(self.endpoints) else set())
            if prev is not None and ep.url != prev:  # a retry sent elsewhere: after a dead endpoint or an HTTP 5xx/429
                self.stats["failovers"] += 1
            prev = ep.url
            ep.in_flight += 1
            ep.requests += 1
            self.stats["requests"] += 1
            try:
                resp = await self._client.post(f"{ep.url}/chat/completions", json=body)
                self._connect_failures, self._ever_answered = 0, True
                if resp.status_code == 200:
                    ep.failures = 0
                    return resp.json()
                last = f"{ep.url}: HTTP {resp.status_code}: {resp.text[:300]}"
                if resp.status_code not in RETRY_STATUS:
                    raise EndpointError(last)
            except httpx.TransportError as exc:
                last = f"{ep.url}: {type(exc).__name__}: {exc}"
                ep.down_until = time.monotonic() + self.cooldown_s
                self.stats["endpoint_errors"] += 1
                if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
                    self._connect_failed(last)
            finally:
                ep.in_flight -= 1
            ep.failures += 1
            tried.add(ep.url)
            if attempt < self.max_retries:
                self.stats["retries"] += 1
                live_other = any(e.down_until <= time.monotonic() and e.url not in tried for e in self.endpoints)
                if not live_other:
                    await asyncio.sleep(self.backoff_s * 2**attempt * (0.5 + random.random()))
        raise EndpointError(f"chat completion failed after {self.max_retries + 1} attempts: {last}")

    async def aclose(self) -> None:
        await self._client.aclose()


class _OpenAISession(PolicySession):
    def __init__(self, policy: OpenAIPolicy, tools: list[dict[str, Any]], seed: int | None = None) -> None:
        self.policy, self.tools, self.seed = policy, tools, seed

    async def act(self, messages: list[dict[str, Any]]) -> AssistantTurn:
        data = await self.policy.complete(messages, self.tools, self.seed)
        return parse_completion(data)


def parse_completion(data: dict[str, Any]) -> AssistantTurn:
    """Turn an OpenAI chat-completion response into an `AssistantTurn`. An answer without a choice (`choices: []`,
    none at all, or not an object) raises `EndpointError`: the rollout fails -- so `--resume` runs it again --
    rather than counting as a clean turn without calls. Arguments nested deeper than `MAX_ARG_DEPTH`, or too long to
    parse, are a parse error of their call."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        shown = json.dumps(data)[:300] if isinstance(data, (dict, list)) else repr(data)[:300]
        raise EndpointError(f"the endpoint answered HTTP 200 without a choice: {shown}")
    choice = choices[0]
    msg = choice.get("message") or {}
    calls: list[ToolCall] = []
    errors = []
    for i, tc in enumerate(msg.get("tool_calls") or []):
        fn = tc.get("function") or {}
        raw = fn.get("arguments")
        name = fn.get("name") or ""
        args: dict[str, Any] | None = None
        err = None
        if isinstance(raw, dict):
            args = raw
        else:
            try:
                err = argument_error(None, raw) if isinstance(raw, str) else None
                parsed = json.loads(raw) if raw not in (None, "") and err is None else {}
                if err is None and isinstance(parsed, dict):
                    args = parsed
                elif err is None:
                    err = f"arguments are a JSON {type(parsed).__name__}, not an object"
            except (ValueError, TypeError, RecursionError) as exc:  # also a >4300-digit int, deep nesting
                err = f"invalid JSON arguments: {exc}"
        if args is not None and (too := argument_error(args)):
            args, err = None, too
        if err:
            errors.append(f"{name}: {err}")
        if isinstance(raw, str) or raw is None:
            raw_text = raw
        elif nesting_depth(raw) > MAX_ARG_DEPTH:  # json.dumps would recurse as deep
            raw_text = f"<arguments nested deeper than {MAX_ARG_DEPTH} levels, not kept>"
        else:
            raw_text = json.dumps(raw)
        calls.append(ToolCall(name=name, arguments=args, id=tc.get("id") or f"call_{i}",
                              raw_arguments=kept_text(raw_text), parse_error=err))
    turn = AssistantTurn(
        content=msg.get("content"),
        tool_calls=calls,
        reasoning=msg.get("reasoning_content") or msg.get("reasoning"),
        parse_ok=not errors,
        parse_error="; ".join(errors) or None,
        raw_text=msg.get("content"),
        finish_reason=choice.get("finish_reason"),
        usage=data.get("usage"),
    )
    token_ids = choice.get("token_ids")
    lp = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
    if token_ids:
        turn.token_ids = list(token_ids)
    if lp:
        turn.logprobs = [float(t.get("logprob", 0.0)) for t in lp]
    return turn


def _clean(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Drop toolgym-only keys that strict servers reject."""
    out = []
    for m in messages:
        m = {k: v for k, v in m.items() if k not in ("reasoning_content",)}
        if m.get("role") == "tool":
            m.pop("name", None)
        out.append(m)
    return out


def load_openai(target: str, env: Any = None, **options: Any) -> Policy:
    """`openai:MODEL` -> `OpenAIPolicy` (base URL from the `base_url` option, else $OPENAI_BASE_URL, else OpenAI's);
    options set to None are left at their defaults, an unknown one is a `PolicyOptionError`."""
    options = check_policy_options(OpenAIPolicy, options, f"openai:{target}")
    base = options.pop("base_url", None) or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
    return OpenAIPolicy(target, base_url=base, **{k: v for k, v in options.items() if v is not None})
