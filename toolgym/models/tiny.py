"""A tiny offline chat model: byte-level BPE trained here on the environments' own text + a random `Qwen2` model.

No hub access is needed: `init_tiny(out_dir, size="tiny", seed=0)` trains a tokenizer with `tokenizers` on a
synthetic corpus (ChatML conversations with tool schemas, tic-tac-toe boards, tool calls and `<think>` text), adds
ChatML specials and single-token `<tool_call>`, `</tool_call>`, `<tool_response>`, `</tool_response>`, `<think>`,
`</think>`, sets a Qwen2.5-style jinja chat template that renders `tools` (and `reasoning_content`, so the template is
prefix-preserving for multi-turn tool use), builds a `Qwen2ForCausalLM` with random weights and saves everything
with `save_pretrained`. The directory reloads with `AutoTokenizer` / `AutoModelForCausalLM` -- the same code path
that loads hub names such as `Qwen/Qwen3-0.6B`. Output is deterministic given the seed.

The corpus builder is extensible: `register_corpus(name)(fn)` adds a generator of text lines; `build_corpus`
takes source names and extra files.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]

# Qwen2.5-style ChatML template with tools. Differences from Qwen2.5's: tool-call `arguments` may be a JSON string
# (OpenAI format) or a dict, and `reasoning_content` is rendered as a `<think>` block in every assistant turn
# (never dropped), which keeps multi-turn renders prefix-preserving.
CHAT_TEMPLATE = r"""{%- macro render_call(tc) -%}
{%- if tc.function is defined %}{%- set tc = tc.function %}{%- endif -%}
<tool_call>
{"name": "{{ tc.name }}", "arguments": {% if tc.arguments is string %}{{ tc.arguments }}{% else %}{{ tc.arguments | tojson }}{% endif %}}
</tool_call>
{%- endmacro -%}
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}{{- messages[0].content }}{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}{{- "\n" }}{{- tool | tojson }}{%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {{- '<|im_start|>assistant\n' }}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {{- '<think>\n' + (message.reasoning_content | trim) + '\n</think>\n\n' }}
        {%- endif %}
        {%- set content = (message.content or '') | trim %}
        {{- content }}
        {%- if message.tool_calls %}
            {%- for tc in message.tool_calls %}
                {%- if content or not loop.first %}{{- '\n' }}{%- endif %}
                {{- render_call(tc) }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\n' }}{%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
"""

SIZES: dict[str, dict[str, int]] = {
    # head_dim is 32 everywhere: vLLM's CPU attention supports head sizes 32, 64, 80, ... (not 16)
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, intermediate_size=256),
    "small": dict(hidden_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, intermediate_size=512),
    "base": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4, intermediate_size=1024),
}

CorpusFn = Callable[[random.Random], Iterable[str]]
CORPORA: dict[str, CorpusFn] = {}


def register_corpus(name: str) -> Callable[[CorpusFn], CorpusFn]:
    """Decorator: register a corpus source `fn(rng) -> iterable of texts` under `name`."""

    def deco(fn: CorpusFn) -> CorpusFn:
        CORPORA[name] = fn
        return fn

    return deco


# ---------------------------------------------------------------------------------------------------------------
# corpus sources


def _ttt_render(board: str) -> str:
    rows = []
    for r in range(3):
        cells = [board[3 * r + i] if board[3 * r + i] != "." else str(3 * r + i) for i in range(3)]
        rows.append(" " + " | ".join(cells))
    return "\n---+---+---\n".join(rows)


TTT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_board",
            "description": "Show the current board, whose move it is and the free cells.",
            "parameters": {"type": "object", "properties": {}, "required": []},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "make_move",
            "description": "Place your X on a free cell (0-8, row by row); the opponent replies at once.",
            "parameters": {
                "type": "object",
                "properties": {"position": {"type": "integer", "description": "The cell to play, 0 (top left) to 8 (bottom right)."}},
                "required": ["position"],
            },
        },
    },
]


# the tic-tac-toe env's line scan (`toolgym_tictactoe.scan_lines`): rows, columns, diagonals
_TTT_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6))


@register_corpus("tictactoe")
def tictactoe_corpus(rng: random.Random) -> Iterator[str]:
    """Boards, tool results, tool calls, thoughts and prompts of the tic-tac-toe environment."""
    yield "You are playing tic-tac-toe as X against an opponent (O). Cells are numbered 0-8, row by row."
    yield "Call make_move with the cell you want to play. Think step by step inside <think></think> first."
    for tool in TTT_TOOLS:
        yield json.dumps(tool)
    for _ in range(300):
        board = ["."] * 9
        side = rng.choice("XO")
        for _ in range(rng.randint(0, 8)):
            free = [i for i, c in enumerate(board) if c == "."]
            cell = rng.choice(free)
            board[cell] = side
            side = "O" if side == "X" else "X"
        b = "".join(board)
        free = ", ".join(str(i) for i, c in enumerate(b) if c == ".")
        pos = rng.choice([i for i, c in enumerate(b) if c == "."] or [4])
        xs = ", ".join(str(i) for i, c in enumerate(b) if c == "X") or "none"
        os_ = ", ".join(str(i) for i, c in enumerate(b) if c == "O") or "none"
        yield f"{_ttt_render(b)}\nX: {xs}. O: {os_}.\nYou are X. Your move. Free cells: {free}."
        yield f"You played {pos}. Opponent played {rng.randint(0, 8)}.\n{_ttt_render(b)}"
        yield json.dumps({"name": "make_move", "arguments": {"position": pos}})
        scan = "\n".join(
            "".join(map(str, line)) + ": " + " ".join(b[i] if b[i] != "." else str(i) for i in line)
            + rng.choice(["", "", f" win {line[0]}", f" block {line[2]}"])
            for line in _TTT_LINES
        )
        verdict = rng.choice([f"I win at {pos}.", f"O wins at {pos}; I block.", "No threats.", "I'll play somewhere free."])
        yield f"<think>\n{scan}\n{verdict} I play {pos}.\n</think>"
        yield f"<think>\nThe free cells are {free}. I will play {pos} to block the opponent and make a line.\n</think>"
        yield rng.choice(
            [
                f"cell {pos} is already taken; free cells: {free}",
                f"invalid position {pos + 9}: choose a free cell from 0 to 8",
                "Game over: you won.",
                "Game over: you lost.",
                "Game over: draw.",
                "the game is over (draw); no more moves",
            ]
        )


@register_corpus("chatml")
def chatml_corpus(rng: random.Random) -> Iterator[str]:
    """Generic chat / tool-calling scaffolding and some plain text, so any prompt tokenizes compactly."""
    yield CHAT_TEMPLATE
    yield "You are a helpful assistant. You may call one or more functions to assist with the user query."
    words = (
        "the a to of and in is it you that for on with as are this be at or have from an by not what all were "
        "when we there can your which their if do will each about how up out them then she many some so these "
        "would other into has more her two like him see time could no make than first been its who now people "
        "my made over did down only way find use may water long little very after words called just where most "
        "know get through back much before go good new write our used me man too any day same right look think "
        "also around another came come work three word must because does part even place well such here take "
        "why things help put years different away again off went old number great tell men say small every found "
        "still between name should home big give air line set own under read last never us left end along while "
        "might next sound below saw something thought both few those always looked show large often together "
        "asked house don't world going want school important until form food keep children feet land side without "
        "boy once animals life enough took sometimes four head above kind began almost live page got earth need "
        "error result value true false null string integer number object array arguments function tool call"
    ).split()
    for _ in range(400):
        n = rng.randint(4, 16)
        s = " ".join(rng.choice(words) for _ in range(n))
        yield s.capitalize() + rng.choice([".", "?", "!", ":"])
        yield json.dumps({rng.choice(words): rng.choice([rng.randint(0, 999), rng.choice(words), True, None])})


def corpus_file_texts(path: Path, max_rows: int = 2000) -> list[str]:
    """Texts of a corpus file: the lines of a text file, or, for `.jsonl` chat rows (`toolgym synth` output), every
    message's content and reasoning and the tool schemas of the first `max_rows` rows -- so the tokenizer learns the
    env's own prompts, tool results and teacher thoughts."""
    if path.suffix != ".jsonl":
        return path.read_text(encoding="utf-8").splitlines()
    texts: list[str] = []
    with path.open(encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= max_rows:
                break
            row = json.loads(line)
            for m in row.get("messages", []):
                texts.extend(str(m[k]) for k in ("content", "reasoning_content") if m.get(k))
                texts.extend(json.dumps(c.get("function", c)) for c in m.get("tool_calls") or [])
            if row.get("tools"):
                texts.append(json.dumps(row["tools"]))
    return texts


def build_corpus(sources: Iterable[str] = ("chatml", "tictactoe"), seed: int = 0, extra_files: Iterable[str | Path] = ()) -> list[str]:
    """Texts for tokenizer training from registered sources plus any extra text files."""
    rng = random.Random(seed)
    texts: list[str] = []
    for name in sources:
        if name not in CORPORA:
            raise ValueError(f"unknown corpus source {name!r}; known: {sorted(CORPORA)}")
        texts.extend(CORPORA[name](rng))
    for f in extra_files:
        texts.extend(corpus_file_texts(Path(f)))
    # a few full rendered conversations, so template scaffolding merges well
    from toolgym.models.formats import HermesFormat

    fmt = HermesFormat()
    for i in range(20):
        pos = rng.randint(0, 8)
        texts.append(
            "<|im_start|>assistant\n"
            + fmt.render_turn(None, [{"name": "make_move", "arguments": {"position": pos}}], reasoning=f"I play {pos}.")
            + "<|im_end|>\n<|im_start|>user\n<tool_response>\n"
            + f"You played {pos}.\n{_ttt_render('.' * 9)}\n</tool_response><|im_end|>\n"
        )
    return texts


# ---------------------------------------------------------------------------------------------------------------
# tokenizer + model


def train_tokenizer(texts: list[str], vocab_size: int = 2048) -> Any:
    """A byte-level BPE (`PreTrainedTokenizerFast`) with ChatML and tool-call special tokens and the chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=SPECIAL_TOKENS[3:],
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def init_tiny(
    out_dir: str | Path,
    size: str = "tiny",
    seed: int = 0,
    vocab_size: int = 2048,
    corpus_sources: Iterable[str] = ("chatml", "tictactoe"),
    extra_corpus_files: Iterable[str | Path] = (),
    max_position_embeddings: int = 4096,
) -> Path:
    """Build and save the tiny model + tokenizer to `out_dir`; returns the path. Deterministic given `seed`."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; known: {sorted(SIZES)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(build_corpus(corpus_sources, seed=seed, extra_files=extra_corpus_files), vocab_size)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    pad = tok.convert_tokens_to_ids("<|endoftext|>")
    cfg = Qwen2Config(
        vocab_size=len(tok),
        max_position_embeddings=max_position_embeddings,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=pad,
        torch_dtype="float32",
        **SIZES[size],
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    model.generation_config = GenerationConfig(eos_token_id=[eos], pad_token_id=pad, bos_token_id=None)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "toolgym_tiny.json").write_text(
        json.dumps({"size": size, "seed": seed, "vocab_size": len(tok), "params": sum(p.numel() for p in model.parameters())}, indent=2)
    )
    return out
