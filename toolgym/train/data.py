"""Data plumbing shared by synth, SFT and GRPO.

- `trajectory_row`: a finished `Trajectory` -> a chat-with-tools row {"messages", "tools", "reward", ...}.
- `tokenize_rows`: rows -> `TokenTrace`s with the assistant-only mask, via `toolgym.models.chat.tokenize_conversation`
  (the same template-delta method the hf policy uses for its traces, so SFT and RL train on identical masks).
- `pad_batch`: traces -> padded tensors (ids, attention, loss mask, sampler logprobs), right-padded, cut at max_len.
- `stratified_order`: the example order of a GRPO run (each step's slice spans every difficulty group).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from toolgym.types import TokenTrace, Trajectory


def trajectory_row(traj: Trajectory, tools: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "messages": traj.messages,
        "tools": tools,
        "reward": traj.reward,
        "rewards": traj.rewards,
        "metrics": traj.metrics,
        "example_id": traj.example_id,
        "task": traj.task,
    }


def read_rows(paths: list[Path]) -> list[dict[str, Any]]:
    """Rows from JSONL files or HF `datasets` folders (save_to_disk). Torn JSONL lines are an error here."""
    rows: list[dict[str, Any]] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            from datasets import load_from_disk

            ds = load_from_disk(str(p))
            for r in ds:
                r = dict(r)
                for k in ("messages", "tools"):
                    if isinstance(r.get(k), str):
                        r[k] = json.loads(r[k])
                rows.append(r)
        elif p.is_file():
            with p.open() as f:
                for n, line in enumerate(f, 1):
                    if line.strip():
                        try:
                            rows.append(json.loads(line))
                        except json.JSONDecodeError as exc:
                            raise ValueError(f"{p}:{n}: not JSON: {exc}") from None
        else:
            raise FileNotFoundError(f"data {p} not found")
    for i, r in enumerate(rows):
        if "messages" not in r:
            raise ValueError(f"row {i} has no 'messages'")
    return rows


def write_rows(rows: list[dict[str, Any]], jsonl: Path, hf_dir: Path | None = None) -> None:
    jsonl.parent.mkdir(parents=True, exist_ok=True)
    tmp = jsonl.with_suffix(jsonl.suffix + ".tmp")
    with tmp.open("w") as f:
        for r in rows:
            f.write(json.dumps(r, default=str) + "\n")
    tmp.replace(jsonl)
    if hf_dir is not None:
        from datasets import Dataset

        # messages/tools are nested and heterogeneous (tool_calls only on some turns): store them as JSON strings
        flat = [{"messages": json.dumps(r["messages"]), "tools": json.dumps(r.get("tools") or []),
                 "reward": float(r.get("reward", 0.0)), "example_id": int(r.get("example_id", 0))} for r in rows]
        Dataset.from_list(flat).save_to_disk(str(hf_dir))


def make_renderer(tokenizer: Any) -> Any:
    from toolgym.models.chat import ChatRenderer

    return ChatRenderer(tokenizer)


def tokenize_rows(renderer: Any, rows: list[dict[str, Any]]) -> list[TokenTrace]:
    from toolgym.models.chat import tokenize_conversation

    return [tokenize_conversation(renderer, r["messages"], r.get("tools") or None) for r in rows]


def pad_batch(traces: list[TokenTrace], pad_id: int, max_len: int) -> dict[str, Any]:
    """Right-padded tensors; `mask` is the loss mask (assistant tokens), `attn` the attention mask."""
    import torch

    T = min(max(len(t) for t in traces), max_len)
    B = len(traces)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    attn = torch.zeros((B, T), dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.float32)
    lps = torch.zeros((B, T), dtype=torch.float32)
    for i, t in enumerate(traces):
        n = min(len(t), T)
        ids[i, :n] = torch.tensor(t.ids[:n])
        attn[i, :n] = 1
        mask[i, :n] = torch.tensor(t.mask[:n], dtype=torch.float32)
        lps[i, :n] = torch.tensor(t.logprobs[:n], dtype=torch.float32)
    mask[:, 0] = 0  # the first token has no prediction
    return {"ids": ids, "attn": attn, "mask": mask, "sampler_logp": lps}


def answer_only(trace: TokenTrace, end_ids: list[int]) -> TokenTrace:
    """The trace with each assistant turn's reasoning (its sampled tokens up to and including the first `end_ids`
    sequence) taken out of the loss mask; the tokens stay in `ids` as context. A turn without `end_ids` (no
    reasoning block, or one cut off by max_tokens) keeps its whole mask."""
    mask = list(trace.mask)
    n, k, i = len(mask), len(end_ids), 0
    while i < n:
        if not mask[i]:
            i += 1
            continue
        j = i
        while j < n and mask[j]:
            j += 1  # [i, j) is one assistant turn
        for e in range(i, j - k + 1):
            if trace.ids[e : e + k] == end_ids:
                mask[i : e + k] = [0] * (e + k - i)
                break
        i = j
    return TokenTrace(ids=trace.ids, mask=mask, logprobs=trace.logprobs)


def stratified_order(num_examples: int, num_groups: int, seed: int, epoch: int) -> list[int]:
    """A permutation of range(num_examples) for one pass: groups (i % num_groups) shuffled separately, then interleaved
    round-robin, so any consecutive slice of k*num_groups examples holds k of each group. Pure function of its
    arguments: a resumed run sees the same order."""
    rng = random.Random(f"toolgym-order:{seed}:{epoch}")
    groups = [[i for i in range(num_examples) if i % num_groups == g] for g in range(num_groups)]
    for g in groups:
        rng.shuffle(g)
    out: list[int] = []
    for k in range(max(len(g) for g in groups)):
        for g in groups:
            if k < len(g):
                out.append(g[k])
    return out


def step_examples(step: int, batch_size: int, num_examples: int, num_groups: int, seed: int) -> list[int]:
    """The example indices of GRPO step `step` (0-based)."""
    out: list[int] = []
    pos = step * batch_size
    while len(out) < batch_size:
        epoch, off = divmod(pos, num_examples)
        order = stratified_order(num_examples, num_groups, seed, epoch)
        take = min(batch_size - len(out), num_examples - off)
        out.extend(order[off : off + take])
        pos += take
    return out
