"""A tiny offline chat model: byte-level BPE trained here on the environments' own text + a random `Qwen2` model.

No hub access is needed: `init_tiny(out_dir, size="tiny", seed=0)` trains a tokenizer with `tokenizers` on a
synthetic corpus (ChatML conversations with tool schemas, tic-tac-toe boards, tool calls and `<think>` text), adds
ChatML specials and single-token `<tool_call>`, `</tool_call>`, `<tool_response>`, `</tool_response>`, `<think>`,
`</think>`, sets a Qwen2.5-style jinja chat template that renders `tools` (and `reasoning_content`, so the template is
prefix-preserving for multi-turn tool use), builds a `Qwen2ForCausalLM` with random weights and saves everything
with `save_pretrained`. The directory reloads with `AutoTokenizer` / `AutoModelForCausalLM` -- the same code path
that loads hub names such as `Qwen/Qwen3-0.6B`. Output is deterministic given the seed.

Corpus sources are found by name: `chatml` (generic chat and tool-calling text) is built in; any other name is
looked up in the `toolgym.corpora` entry-point group, where an installed package registers a function
`fn(rng) -> iterable of texts` (the tic-tac-toe env registers `tictactoe`:
`[project.entry-points."toolgym.corpora"] tictactoe = "toolgym_tictactoe.corpus:tictactoe_corpus"`). An unknown name
is an error naming the known ones. `build_corpus` takes sources (names or functions) and extra files.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Iterator
from importlib.metadata import entry_points
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
    "medium": dict(hidden_size=192, num_hidden_layers=4, num_attention_heads=6, num_key_value_heads=2, intermediate_size=768),
    "base": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4, intermediate_size=1024),
    # ~30M parameters: the no-hub GPU variant of the tic-tac-toe recipe (examples/tictactoe/gpu.sh nohub)
    "large": dict(hidden_size=512, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4, intermediate_size=2048),
}

CorpusFn = Callable[[random.Random], Iterable[str]]
CORPUS_GROUP = "toolgym.corpora"


# ---------------------------------------------------------------------------------------------------------------
# corpus sources


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


BUILTIN_CORPORA: dict[str, CorpusFn] = {"chatml": chatml_corpus}


def corpus_source(name: str) -> CorpusFn:
    """The corpus source `name`: built in (`chatml`) or registered by an installed package under the
    `toolgym.corpora` entry-point group. An unknown name is a ValueError naming the known ones."""
    if name in BUILTIN_CORPORA:
        return BUILTIN_CORPORA[name]
    eps = {ep.name: ep for ep in entry_points(group=CORPUS_GROUP)}
    if name not in eps:
        known = ", ".join(sorted({*BUILTIN_CORPORA, *eps}))
        raise ValueError(f"unknown corpus source {name!r}; known: {known} (packages add sources under the "
                         f"{CORPUS_GROUP!r} entry-point group)")
    fn: CorpusFn = eps[name].load()
    return fn


# The template scaffolding examples: one assistant call and its tool response, rendered whole. The call and the
# result are fixed texts (from tic-tac-toe, the first env, whatever the sources); they stay as they are because
# every tokenizer built so far, the committed checkpoint's and the documented runs' included, was trained on them.
_SCAFFOLD_TOOL = "make_move"
_SCAFFOLD_RESULT = " 0 | 1 | 2\n---+---+---\n 3 | 4 | 5\n---+---+---\n 6 | 7 | 8"


def build_corpus(sources: Iterable[str | CorpusFn] = ("chatml", "tictactoe"), seed: int = 0,
                 extra_files: Iterable[str | Path] = ()) -> list[str]:
    """Texts for tokenizer training from the sources (names, or the corpus functions themselves: where the package
    that registers one is importable but not installed) plus any extra files (`corpus_file_texts`)."""
    fns = [s if callable(s) else corpus_source(s) for s in sources]  # every name checked before any work
    rng = random.Random(seed)
    texts: list[str] = []
    for fn in fns:
        texts.extend(fn(rng))
    for f in extra_files:
        texts.extend(corpus_file_texts(Path(f)))
    # a few full rendered conversations, so template scaffolding merges well
    from toolgym.models.formats import HermesFormat

    fmt = HermesFormat()
    for i in range(20):
        pos = rng.randint(0, 8)
        texts.append(
            "<|im_start|>assistant\n"
            + fmt.render_turn(None, [{"name": _SCAFFOLD_TOOL, "arguments": {"position": pos}}], reasoning=f"I play {pos}.")
            + "<|im_end|>\n<|im_start|>user\n<tool_response>\n"
            + f"You played {pos}.\n{_SCAFFOLD_RESULT}\n</tool_response><|im_end|>\n"
        )
    return texts


# ---------------------------------------------------------------------------------------------------------------
# tokenizer + model


def train_tokenizer(texts: list[str], vocab_size: int = 2048, split: str | None = None) -> Any:
    """A byte-level BPE (`PreTrainedTokenizerFast`) with ChatML and tool-call special tokens and the chat template.
    `split`: a pre-tokenizer regex the merges are learned under (default: GPT-2's byte-level split); the tool-calling
    base passes `toolgym.models.toolcall.WORD_SPLIT`."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    if split is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
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
    if split is not None:
        tok = _space_merges_first(tok)
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


def _space_merges_first(tok: Any) -> Any:
    """The tokenizer with its space + letter merges (`Ġ r`) ranked first, so a word after a space always starts
    with one token carrying the space and its first letter (` river` -> `Ġr` `iver`, never a bare `Ġ` then `ri`
    `ver`): a bare `Ġ` before most words would leave a copying model nothing that marks where the next word begins."""
    from tokenizers import Tokenizer

    data = json.loads(tok.to_str())
    merges = data["model"]["merges"]
    pairs = [m if isinstance(m, list) else m.split(" ", 1) for m in merges]
    first = [p for p in pairs if p[0] == "\u0120" and len(p[1]) == 1 and p[1].isalpha()]
    data["model"]["merges"] = first + [p for p in pairs if p not in first]
    return Tokenizer.from_str(json.dumps(data))


def init_tiny(
    out_dir: str | Path,
    size: str = "tiny",
    seed: int = 0,
    vocab_size: int = 2048,
    corpus_sources: Iterable[str | CorpusFn] = ("chatml", "tictactoe"),
    extra_corpus_files: Iterable[str | Path] = (),
    max_position_embeddings: int = 4096,
    split: str | None = None,
    tokenizer_from: str | Path | None = None,
) -> Path:
    """Build and save the tiny model + tokenizer to `out_dir`; returns the path. Deterministic given `seed`.
    `tokenizer_from`: a model folder whose tokenizer to reuse instead of training one (the corpus, `vocab_size` and
    `split` are then unused) -- a tokenizer trained on generated text changes whenever the generator does."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; known: {sorted(SIZES)}")
    if tokenizer_from is not None and not (Path(tokenizer_from) / "tokenizer.json").is_file():
        raise FileNotFoundError(f"tokenizer_from={str(tokenizer_from)!r}: no tokenizer.json in that folder")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if tokenizer_from is not None:
        from transformers import PreTrainedTokenizerFast

        tok = PreTrainedTokenizerFast.from_pretrained(str(tokenizer_from))
        tok.chat_template = tok.chat_template or CHAT_TEMPLATE
    else:
        tok = train_tokenizer(build_corpus(corpus_sources, seed=seed, extra_files=extra_corpus_files), vocab_size,
                              split)
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
