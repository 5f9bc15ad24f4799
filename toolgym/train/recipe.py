"""From a server to a trained tool caller in one command: `toolgym tasks train ENV_CONFIG -o runs/mine` (the main CLI
registers `toolgym.train.cli.tasks_train_cmd` under `toolgym tasks`).

Phases, each skipped when its output exists (re-run a phase by deleting it):

1. `generate`: verified tasks and a held-out split (`toolgym.tasks.generate`) -> `tasks.jsonl`, `tasks.heldout.jsonl`;
2. `env`: the user's env config with those tasks and the generated tasks' rewards (`correct`, from
   `toolgym.tasks.rewards`, weight 1; `call_match`, weight 0.5), relative paths made absolute and the held-out
   eval's sampling (`EVAL_SAMPLING`) as `[env.sampling]`, so `toolgym eval`/`serve` of it sample as the report
   did -> `env.json`;
3. `synth`: teacher data -- the answer key replays each task's expected calls through the live server and answers
   with what the result says (the `correct` reward's rule) -> `teacher.jsonl`;
4. `sft`: fine-tuning from the base (default: the tool-calling base shipped in `toolgym.models`) -> `sft/final`;
   with `augment` K > 0, on the teacher rows and K fresh-value copies of each (`toolgym.train.augment`) ->
   `teacher.aug.jsonl`;
5. `grpo`: GRPO from the SFT model on the training tasks, held-out evals along the way -> `grpo/final`;
6. `eval`: the base, SFT and GRPO models on the held-out tasks (greedy) -> `eval/<phase>/`, and the report:
   `report.json`, `report.md` (rates with 95 % Wilson intervals, beside what trivial players score) and
   `heldout.png`, `grpo_curves.png`.
"""

from __future__ import annotations

import json
import os
import re
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.train.augment import NOVEL

PHASES = ("generate", "env", "synth", "sft", "grpo", "eval")
CALL_REWARDS = ("call_match", "call_similarity")  # the calls' term of the generated tasks' reward


def generated_rewards(call_reward: str = "call_match") -> list[dict[str, Any]]:
    """The rewards of generated tasks: the live answer (`correct`, weight 1) and the calls (weight 0.5): exact
    (`call_match`) or partial credit for near-copies (`call_similarity`, `toolgym.accuracy.call_similarity`)."""
    if call_reward not in CALL_REWARDS:
        raise ValueError(f"call_reward must be one of {', '.join(CALL_REWARDS)}, got {call_reward!r}")
    return [{"name": "correct", "type": "python", "function": "toolgym.tasks.rewards:correct", "weight": 1.0},
            {"type": call_reward, "weight": 0.5}]



def default_base() -> Path:
    """The tool-calling base shipped with toolgym (`toolgym/models/toolcall_base`)."""
    return Path(__file__).resolve().parent.parent / "models" / "toolcall_base"


@dataclass
class RecipeOptions:
    """The recipe's knobs (defaults sized for a 2-core CPU; see docs/train-your-server.md)."""

    env: Path
    out: Path
    base: str = ""
    n_train: int = 2000
    n_heldout: int = 200
    seed: int = 0
    gen: dict[str, Any] = field(default_factory=dict)          # more GenOptions fields
    sft: dict[str, Any] = field(default_factory=dict)          # SFTConfig overrides
    grpo: dict[str, Any] = field(default_factory=dict)         # GRPOConfig overrides
    phases: tuple[str, ...] = PHASES
    eval_models: tuple[str, ...] = ("base", "sft", "grpo")
    concurrency: int = 8
    num_threads: int | None = None
    augment: int = 0  # fresh-value copies per teacher row for SFT (`toolgym.train.augment`); 0 = off
    augment_novel: float = NOVEL  # share of invented words in the copies' values (`toolgym.train.augment.NOVEL`)
    call_reward: str = "call_match"  # the calls' reward term (`CALL_REWARDS`): exact, or partial credit
    strict_calls: bool = False  # eval phase: also strict tool calls (`toolgym.policies.strict`), into eval/LABEL-strict
    quote_steps: str = "off"  # synth phase: the teacher writes a call's piece of the request before it (QUOTE_STEPS)


EVAL_SAMPLING: dict[str, Any] = {"temperature": 0.0, "max_tokens": 160}
"""How the `eval` phase samples every model (greedy, 160 tokens a turn); written into `env.json`'s `[env.sampling]`."""
QUOTE_MAX_TOKENS = 256
"""A turn's token limit (eval, GRPO, `env.json`) when the teacher quotes each step (`RecipeOptions.quote_steps`):
the quoted piece of the request comes before the call (up to 159 tokens a turn in the filesystem server's teacher
rows, against 160 for the plain limit)."""


QUOTE_STEPS = ("off", "later", "all")
"""Which calls' turns the teacher starts with their piece of the request (`teacher_policy`): none, every call after
the first, every call."""


def eval_sampling(quote_steps: str = "off") -> dict[str, Any]:
    """`EVAL_SAMPLING`, with `QUOTE_MAX_TOKENS` a turn when the teacher quotes steps."""
    return dict(EVAL_SAMPLING) if quote_steps == "off" else {**EVAL_SAMPLING, "max_tokens": QUOTE_MAX_TOKENS}


def derive_config(src: Path, dest: Path, tasks: Path, rewards: list[dict[str, Any]] | None = None,
                  sampling: dict[str, Any] | None = None) -> Path:
    """Write `dest` (JSON): the env config `src` with `[tasks] path` set to `tasks`, its rewards replaced by
    `rewards` (when given), `[env.sampling]` set to `sampling` (when given and `src` sets none), and every path that
    was relative to `src`'s folder made absolute (a server command given as a path, `cwd`, fixtures), so the copy
    works from anywhere."""
    raw = tomllib.loads(src.read_text()) if src.suffix == ".toml" else json.loads(src.read_text())
    base = src.resolve().parent

    def fix(server: dict[str, Any]) -> None:
        cmd = server.get("command")
        if cmd and os.sep in cmd[0] and not Path(cmd[0]).is_absolute() and (base / cmd[0]).exists():
            server["command"] = [os.path.normpath(base / cmd[0]), *cmd[1:]]
        if server.get("command"):
            server["cwd"] = str(base / server["cwd"]) if server.get("cwd") else str(base)
        fixtures = []
        for fx in server.get("fixtures") or []:
            item = dict(fx) if isinstance(fx, dict) else {"src": fx}
            if not Path(item["src"]).is_absolute():
                item["src"] = str(base / item["src"])
            fixtures.append(item if isinstance(fx, dict) else item["src"])
        if fixtures:
            server["fixtures"] = fixtures

    for s in [raw.get("server")] + list(raw.get("servers") or []):
        if isinstance(s, dict):
            fix(s)
    raw["tasks"] = {"path": str(tasks.resolve())}
    if rewards is not None:
        raw["rewards"] = rewards
    if sampling is not None:
        raw.setdefault("env", {}).setdefault("sampling", dict(sampling))
    for r in raw.get("rewards") or []:  # a python reward module beside the original config keeps being found
        if r.get("type") == "python" and r.get("function", "").split(":")[0] and (base / (r["function"].split(":")[0] + ".py")).exists():
            raise ValueError(f"{src}: reward {r.get('name') or r['function']} lives beside the config; "
                             "derive_config cannot move it (pass rewards=)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(raw, indent=2))
    return dest


def teacher_policy(name: str = "scripted:generated-teacher", quote_steps: str = "off") -> Any:
    """The answer key of generated tasks: replays the expected calls (one per turn), then answers with what the last
    result says (`pick_answer` with the task's `answer_field`: the `correct` reward's rule), or with the task's
    answer when no call is expected. With `quote_steps` "all", each call's turn first thinks the piece of the request
    that asks for it (`toolgym.tasks.templates.request_steps`; the whole request for a one-call task) in a `<think>`
    block (the turn's `reasoning`), then makes the call; with "later", only the calls after the first do; a task whose
    request cannot be cut that way gets plain calls."""
    if quote_steps not in QUOTE_STEPS:
        raise ValueError(f"quote_steps must be one of {', '.join(QUOTE_STEPS)}, not {quote_steps!r}")
    from toolgym.config_env import next_expected_call
    from toolgym.policies.scripted import ScriptedPolicy
    from toolgym.tasks.generate import ANSWER_MAX_CHARS, pick_answer
    from toolgym.tasks.templates import request_steps
    from toolgym.types import AssistantTurn

    def act(messages: list[dict[str, Any]], memory: dict[str, Any]) -> AssistantTurn:
        task = memory["task"]
        turn = next_expected_call(task, memory)
        if turn is not None:
            i = memory["next"] - 1
            if quote_steps == "all" or (quote_steps == "later" and i > 0):
                steps = memory.setdefault("steps", request_steps(task.get("prompt") or "",
                                                                 task.get("expected_calls") or []))
                if steps:
                    turn.reasoning = steps[i]
            return turn
        expected = task.get("expected_calls") or []
        answer = task.get("answer")
        if expected:
            last = next((m["content"] for m in reversed(messages) if m.get("role") == "tool"), "")
            live, _ = pick_answer(last, tuple(task.get("answer_field") or ()) or None, ANSWER_MAX_CHARS)
            answer = live if live is not None else answer
        return AssistantTurn(content=f"<answer>{'' if answer is None else answer}</answer>")

    return ScriptedPolicy(act, name)


def string_values(tasks: list[dict[str, Any]]) -> set[str]:
    """Every string argument value of the tasks' expected calls."""
    return {v[0] for t in tasks for c in t["expected_calls"] for v in c["arguments"].values() if isinstance(v[0], str)}


def augmented_teacher(teacher: Path, heldout: Path, k: int, seed: int, novel: float = NOVEL) -> Path:
    """`teacher.aug.jsonl` beside `teacher`: each row and `k` fresh-value copies (`toolgym.train.augment`, `novel`
    its share of invented words), no value drawn equal to a held-out task's; its counts in `teacher.aug.summary.json`.
    Rewritten when k, seed or novel differ."""
    from toolgym.train.augment import augment_rows
    from toolgym.train.data import read_rows, write_rows

    dest = teacher.with_name("teacher.aug.jsonl")
    summary = teacher.with_name("teacher.aug.summary.json")
    if dest.exists() and summary.exists():
        done = json.loads(summary.read_text())
        if (done.get("k"), done.get("seed"), done.get("novel")) == (k, seed, novel):
            return dest
    held = [json.loads(x) for x in heldout.read_text(encoding="utf-8").splitlines() if x.strip()]  # tasks, not rows
    out, counts = augment_rows(read_rows([teacher]), k, seed=seed, exclude=string_values(held), novel=novel)
    write_rows(out, dest)
    summary.write_text(json.dumps({"k": k, "seed": seed, "novel": novel, **counts}, indent=2))
    return dest


_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?|true|false')


def copy_player(task: dict[str, Any], tools: list[dict[str, Any]], fallback: str | None) -> list[dict[str, Any]]:
    """A rule-based player that reads the template, not the request: the tool named in the prompt (else the one whose
    description's first sentence it contains, else `fallback`), its parameters filled with the prompt's JSON literals
    in schema order; one call, or none when the prompt names no tool and there is no fallback."""
    from toolgym.tasks.templates import tool_sentence

    prompt = task["prompt"]
    by_name = [t for t in tools if t["function"]["name"] in prompt]
    by_desc = [t for t in tools if tool_sentence(t).lower() in prompt.lower()]
    pick = (by_name or by_desc or [t for t in tools if t["function"]["name"] == fallback] or [None])[0]
    if pick is None:
        return []
    literals = [json.loads(x) for x in _LITERAL.findall(prompt)]
    props = list((pick["function"].get("parameters") or {}).get("properties") or {})
    return [{"name": pick["function"]["name"], "arguments": dict(zip(props, literals, strict=False))}]


def trivial_baselines(train: list[dict[str, Any]], heldout: list[dict[str, Any]],
                      tools: list[dict[str, Any]] | None = None) -> dict[str, dict[str, float]]:
    """What players that do not learn score on the held-out tasks (no rollouts needed): `abstain` (never calls),
    `majority call` (always the training split's most frequent exact call sequence), `copy` (`copy_player`, with
    `tools`) and `answer key`; call_match over the tool tasks, abstain_ok over the no-tool ones."""
    from collections import Counter

    from toolgym.accuracy import call_matches

    def key(t: dict[str, Any]) -> str:
        return json.dumps(t["expected_calls"], sort_keys=True)

    tool_tasks = [t for t in heldout if t["expected_calls"]]
    none_tasks = [t for t in heldout if not t["expected_calls"]]
    common = Counter(key(t) for t in train if t["expected_calls"]).most_common(1)
    majority = sum(key(t) == common[0][0] for t in tool_tasks) / max(1, len(tool_tasks)) if common else 0.0
    out: dict[str, dict[str, float]] = {
        "abstain": {"call_match": 0.0, "abstain_ok": 1.0},
        "majority call": {"call_match": majority, "abstain_ok": 0.0},
        "answer key": {"call_match": 1.0, "abstain_ok": 1.0},
        "_n": {"tool_tasks": len(tool_tasks), "none_tasks": len(none_tasks)},
    }
    if tools:
        top = Counter(c["name"] for t in train for c in t["expected_calls"]).most_common(1)
        fallback = top[0][0] if top else None

        def ok(t: dict[str, Any]) -> bool:
            got = copy_player(t, tools, fallback)
            return len(got) == len(t["expected_calls"]) and all(
                call_matches(g["name"], g["arguments"], e) for g, e in zip(got, t["expected_calls"], strict=True))

        out["copy"] = {"call_match": sum(map(ok, tool_tasks)) / max(1, len(tool_tasks)),
                       "abstain_ok": sum(not copy_player(t, tools, None) for t in none_tasks) / max(1, len(none_tasks))}
    return out


def rates(trajs: list[Any], seen: set[str] | None = None) -> dict[str, dict[str, float | None]]:
    """Held-out rates with 95 % Wilson intervals: `call_match` over tool tasks, `unseen_string_call_match` over the
    tool tasks with a string argument value not in `seen` (the training tasks' string values), `one_call` /
    `two_calls` over tool tasks by their number of calls, `ref_calls` over the tool tasks whose value is an entry of
    an earlier result (`(ref)` in their kind), `abstain_ok` over no-tool tasks, `correct` over all;
    `errors` the share of errored rollouts. Every rollout counts: an errored one is a failure in each rate it falls
    under. A rate over no task is `None` (JSON null)."""
    from toolgym.stats import wilson

    def rate(xs: list[bool]) -> dict[str, float | None]:
        if not xs:
            return {"rate": None, "n": 0, "lo": None, "hi": None}
        lo, hi = wilson(sum(xs), len(xs))
        return {"rate": sum(xs) / len(xs), "n": len(xs), "lo": lo, "hi": hi}

    def matched(t: Any) -> bool:
        return t.error is None and t.metrics.get("call_match", 0.0) == 1.0

    tool = [t for t in trajs if t.task.get("expected_calls")]
    unseen = [t for t in tool if any(isinstance(v[0], str) and v[0] not in (seen or set())
                                     for c in t.task["expected_calls"] for v in c["arguments"].values())]
    return {
        "call_match": rate([matched(t) for t in tool]),
        "unseen_string_call_match": rate([matched(t) for t in unseen]),
        "one_call": rate([matched(t) for t in tool if len(t.task["expected_calls"]) == 1]),
        "two_calls": rate([matched(t) for t in tool if len(t.task["expected_calls"]) > 1]),
        "ref_calls": rate([matched(t) for t in tool if "(ref)" in str(t.task.get("kind", ""))]),
        "abstain_ok": rate([t.error is None and t.metrics.get("abstain_ok", 0.0) == 1.0
                            for t in trajs if not t.task.get("expected_calls")]),
        "correct": rate([t.error is None and t.rewards.get("correct", 0.0) == 1.0 for t in trajs]),
        "errors": rate([t.error is not None for t in trajs]),
    }


def _fmt(r: dict[str, float]) -> str:
    if r["n"] == 0:
        return "-"
    return f"{100 * r['rate']:.1f} % [{100 * r['lo']:.1f}-{100 * r['hi']:.1f}] (n={r['n']})"


def write_report(out: Path, results: dict[str, dict[str, Any]], baselines: dict[str, dict[str, float]],
                 timings: dict[str, float]) -> str:
    """`report.md` + `report.json` + `heldout.png` from the per-model held-out rates."""
    (out / "report.json").write_text(json.dumps({"heldout": results, "trivial": baselines, "wall_s": timings},
                                                indent=2))
    trivial = " / ".join(k for k in ("abstain", "majority call", "copy") if k in baselines)
    lines = ["| held-out | " + " | ".join(results) + f" | {trivial} (trivial) |",
             "| --- |" + " ---: |" * (len(results) + 1)]
    names = [k for k in ("abstain", "majority call", "copy") if k in baselines]
    for metric in ("call_match", "unseen_string_call_match", "one_call", "two_calls", "ref_calls", "correct",
                   "abstain_ok"):
        triv = " / ".join(f"{100 * baselines[k].get(metric, 0):.0f}" for k in names) + " %" \
            if metric in ("call_match", "abstain_ok") else ""
        lines.append(f"| {metric} | " + " | ".join(_fmt(r[metric]) if metric in r else "-" for r in results.values())
                     + f" | {triv} |")
    lines += ["", "| phase | wall |", "| --- | ---: |"] + [f"| {k} | {v / 60:.1f} min |" for k, v in timings.items()]
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text)
    _plot(out / "heldout.png", results)
    return text


def _plot(path: Path, results: dict[str, dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = ("call_match", "unseen_string_call_match", "correct", "abstain_ok")
    fig, ax = plt.subplots(figsize=(9, 3.6))
    width = 0.8 / max(1, len(results))
    for i, (label, r) in enumerate(results.items()):
        vals = [100 * r[m]["rate"] if r[m]["n"] else 0.0 for m in metrics]
        err = [[max(0.0, 100 * (r[m]["rate"] - r[m]["lo"])) if r[m]["n"] else 0 for m in metrics],
               [max(0.0, 100 * (r[m]["hi"] - r[m]["rate"])) if r[m]["n"] else 0 for m in metrics]]
        ax.bar([k + i * width for k in range(len(metrics))], vals, width, yerr=err, capsize=3, label=label)
    ax.set_xticks([k + width * (len(results) - 1) / 2 for k in range(len(metrics))], metrics)
    ax.set_ylabel("held-out %")
    ax.set_ylim(0, 105)
    ax.axhline(90, color="grey", linestyle=":", linewidth=1)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_recipe(opts: RecipeOptions, log: Callable[[str], None] = print,
               progress: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run the phases (see the module docstring); returns the report dict."""
    import asyncio

    from toolgym.registry import load_env
    from toolgym.tasks.generate import GenOptions, generate

    out = Path(opts.out).resolve()  # env configs resolve relative paths from their own folder
    out.mkdir(parents=True, exist_ok=True)
    tasks, heldout = out / "tasks.jsonl", out / "tasks.heldout.jsonl"
    env_cfg, teacher = out / "env.json", out / "teacher.jsonl"
    base = opts.base or str(default_base())
    timings_path = out / "timings.json"
    timings: dict[str, float] = json.loads(timings_path.read_text()) if timings_path.exists() else {}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        t0 = time.time()
        res = fn()
        timings[name] = round(time.time() - t0, 1)
        timings_path.write_text(json.dumps(timings, indent=2))
        return res

    def tick(phase: str) -> Callable[[dict[str, Any]], None]:
        return (lambda r: progress(phase, r)) if progress else (lambda r: None)

    if "generate" in opts.phases and not heldout.exists():
        env = load_env(str(opts.env))
        gopts = GenOptions(n_train=opts.n_train, n_heldout=opts.n_heldout, seed=opts.seed,
                           concurrency=opts.concurrency, **opts.gen)

        async def gen() -> dict[str, Any]:
            try:
                return await generate(env, gopts, tick("generate"))
            finally:
                await env.aclose()

        res = timed("generate", lambda: asyncio.run(gen()))
        for path, rows in ((tasks, res["train"]), (heldout, res["heldout"])):
            path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        (out / "tasks.summary.json").write_text(json.dumps(res["summary"], indent=2, ensure_ascii=False))
        log(f"generate: {len(res['train'])} training + {len(res['heldout'])} held-out tasks "
            f"({res['summary']['attempts']} attempts) -> {tasks}")
    if "env" in opts.phases or not env_cfg.exists():
        derive_config(opts.env, env_cfg, tasks, generated_rewards(opts.call_reward),
                      sampling=eval_sampling(opts.quote_steps))
    if "synth" in opts.phases and not teacher.exists():
        from toolgym.train.synth import synth

        env = load_env(str(env_cfg))
        rows = env.build_dataset()

        async def play() -> dict[str, Any]:
            try:
                return await synth(env, teacher_policy(quote_steps=opts.quote_steps), rows, teacher, min_reward=1.5,
                                   concurrency=opts.concurrency,
                                   on_done=lambda t: tick("synth")({"done": 1, "total": len(rows)}),
                                   run_info={"env": str(env_cfg), "teacher": "generated-teacher",
                                             "quote_steps": opts.quote_steps})
            finally:
                await env.aclose()

        res = timed("synth", lambda: asyncio.run(play()))
        log(f"synth: kept {res['kept']} of {res['played']} teacher rollouts -> {teacher}")
    sft_final = out / "sft" / "final"
    if "sft" in opts.phases and not sft_final.exists():
        from toolgym.train.config import SFTConfig
        from toolgym.train.sft import run_sft

        data = teacher
        if opts.augment:
            data = augmented_teacher(teacher, heldout, opts.augment, opts.seed, opts.augment_novel)
            log(f"augment: {opts.augment} fresh-value copies per teacher row -> {data}")
        cfg = SFTConfig.model_validate({
            "model": base, "output_dir": out / "sft", "data": [data], "epochs": 2.0, "batch_size": 16,
            "micro_batch_size": 8, "learning_rate": 1e-3, "lr_schedule": "cosine", "warmup_steps": 10,
            "save_every": 100, "keep_checkpoints": 2, "seed": opts.seed, "num_threads": opts.num_threads, **opts.sft})
        res = timed("sft", lambda: run_sft(cfg, resume=(out / "sft" / "checkpoints").exists(), on_step=tick("sft")))
        log(f"sft: {res['total_steps']} steps on {res['rows']} rows, loss {res.get('loss', float('nan')):.4f} -> {sft_final}")
    grpo_final = out / "grpo" / "final"
    if "grpo" in opts.phases and not grpo_final.exists():
        from toolgym.train.config import GRPOConfig
        from toolgym.train.grpo import run_grpo

        n_tasks = sum(1 for line in tasks.open() if line.strip())
        cfg = GRPOConfig.model_validate({
            "model": str(sft_final), "output_dir": out / "grpo", "env": str(env_cfg), "num_examples": n_tasks,
            "max_steps": 40, "batch_size": 8, "rollouts_per_example": 8, "loss_type": "cispo", "kl_coef": 0.05,
            "learning_rate": 1e-4, "warmup_steps": min(5, int(opts.grpo.get("max_steps", 40))), "temperature": 1.0,
            "max_tokens": eval_sampling(opts.quote_steps)["max_tokens"], "micro_batch_size": 16,
            "concurrency": 64, "skip_constant_groups": True, "eval_every": 20, "eval_examples": min(120, opts.n_heldout),
            "eval_env_args": {"tasks": str(heldout)}, "save_every": 20, "keep_checkpoints": 2, "seed": opts.seed,
            "num_threads": opts.num_threads, **opts.grpo})
        timed("grpo", lambda: run_grpo(cfg, resume=(out / "grpo" / "checkpoints").exists(), on_step=tick("grpo")))
        from toolgym.train.plot import plot_runs

        plot_runs([out / "grpo"], out / "grpo_curves.png")
        log(f"grpo: -> {grpo_final}")
    report: dict[str, Any] = {}
    if "eval" in opts.phases:
        from toolgym.eval import evaluate
        from toolgym.policies import load_policy

        models = {"base": base, "sft": str(sft_final), "grpo": str(grpo_final)}
        results: dict[str, dict[str, Any]] = {}
        train_rows = [json.loads(x) for x in tasks.open() if x.strip()]
        held_rows = [json.loads(x) for x in heldout.open() if x.strip()]
        tools: list[dict[str, Any]] = []
        runs = [(label, strict) for label in opts.eval_models for strict in (False, True)
                if not strict or opts.strict_calls]
        for model_label, strict in runs:
            path = models[model_label]
            if not Path(path).is_dir():
                continue
            env = load_env(str(env_cfg), tasks=str(heldout))
            rows = env.build_dataset()
            policy = load_policy(f"hf:{path}", env, **eval_sampling(opts.quote_steps), seed=opts.seed,
                                 **({"strict_calls": True} if strict else {}))
            label = f"{model_label}-strict" if strict else model_label
            dest = out / "eval" / label

            async def ev() -> Any:
                try:
                    return await evaluate(env, policy, rows, concurrency=opts.concurrency, out_dir=dest,
                                          resume=(dest / "results.jsonl").exists(),
                                          run_info={"env": str(env_cfg), "model": path})
                finally:
                    await env.aclose()
                    await policy.aclose()

            trajs, _ = timed(f"eval {label}", lambda: asyncio.run(ev()))
            results[label] = rates(trajs, string_values(train_rows))
            tools = env.model_tools()
        baselines = trivial_baselines(train_rows, held_rows, tools)
        text = write_report(out, results, baselines, timings)
        log(text)
        report = {"heldout": results, "trivial": baselines, "wall_s": timings}
    return report


__all__ = ["CALL_REWARDS", "copy_player", "default_base", "derive_config", "eval_sampling", "generated_rewards",
           "PHASES", "QUOTE_MAX_TOKENS", "QUOTE_STEPS", "rates",
           "RecipeOptions", "run_recipe", "string_values", "teacher_policy", "trivial_baselines", "write_report"]
