"""`toolgym synth | sft | train | plot | pretrain` -- a typer sub-app; the main CLI registers these commands at top
level, and `tasks_train_cmd` as `toolgym tasks train`."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from toolgym.train.pretrain import BATCH_SIZE, COPY_SHARE  # light: no torch at import

app = typer.Typer(help="Teacher data, SFT, GRPO training and training curves.", no_args_is_help=True,
                  pretty_exceptions_show_locals=False)
console = Console()


@app.callback()
def _group() -> None:
    """Training commands (registered at top level as toolgym synth|sft|train|plot)."""


def _fail(msg: str, code: int = 2) -> None:
    from rich.markup import escape

    console.print(f"[bold red]error:[/] {escape(msg)}", soft_wrap=True)
    raise typer.Exit(code)


def _kv(pairs: list[str] | None) -> dict[str, Any]:
    from toolgym.train.config import ConfigError, parse_overrides

    try:
        return parse_overrides(pairs)
    except ConfigError as exc:
        _fail(str(exc))
    return {}


@contextlib.contextmanager
def _progress() -> Iterator[Progress]:
    """The commands' progress display. A command that fails inside it (an error, ^C) takes its bars down with it,
    so the error is the last thing printed rather than a stray bar after it."""
    prog = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn(), console=console)
    with prog:
        try:
            yield prog
        except BaseException:
            for task in list(prog.task_ids):
                prog.remove_task(task)
            raise


@app.command("synth")
def synth_cmd(
    env_name: str = typer.Argument(..., help="Environment name or env config path."),
    teacher: str = typer.Option(..., "--teacher", "-m", help="Teacher policy URI: scripted:NAME, openai:MODEL, hf:PATH, vllm:PATH."),
    out: Path = typer.Option(..., "--out", "-o", help="Output JSONL file (chat-with-tools rows)."),
    hf_out: Path | None = typer.Option(None, "--hf-out", help="Also save an HF datasets folder here."),
    num_examples: int = typer.Option(200, "-n", "--num-examples",
                                     help="Games / tasks to play; 0: the env's whole task set (e.g. every training "
                                          "position with -a task=move -a split=train)."),
    seed: int = typer.Option(0, "--seed", help="Dataset seed."),
    min_reward: float | None = typer.Option(None, "--min-reward", help="Keep rollouts with reward >= this."),
    drop_if: list[str] = typer.Option([], "--drop-if", help="Drop rollouts where this reward/metric > 0 (repeatable), e.g. loss."),
    require_valid: bool = typer.Option(False, "--require-valid", help="Keep only rollouts whose every turn parsed and every call succeeded."),
    failed_turns: str = typer.Option("train", "--failed-turns",
                                     help="train: rows as played; context: a turn that failed (unparsable, or a "
                                          "call that errored) is kept as context with weight 0, out of the SFT loss, "
                                          "so the data teaches the recovery after an error, not the error."),
    concurrency: int = typer.Option(16, "-c", "--concurrency"),
    env_arg: list[str] = typer.Option([], "-a", "--env-arg", help="Env argument key=value (repeatable)."),
    teacher_arg: list[str] = typer.Option([], "--teacher-arg", help="Teacher policy option key=value (repeatable), e.g. mistake_prob=0.3."),
    base_url: str | None = typer.Option(None, "--base-url", help="OpenAI-compatible base URL for openai: teachers."),
    resume: bool = typer.Option(False, "--resume", help="Continue an unfinished run from its journal "
                                "(OUT's .games.jsonl): keep its finished games, play the rest."),
    skip_invalid_tasks: bool = typer.Option(False, "--skip-invalid-tasks",
                                            help="Leave out tasks that fail `toolgym check` (counted and reported) "
                                                 "instead of refusing to start."),
) -> None:
    """Play a teacher through an env, filter by reward, export a chat-with-tools dataset. Each finished game is
    journaled next to OUT (OUT's stem + .games.jsonl) until OUT is written, so a killed run can --resume."""
    from rich.markup import escape

    from toolgym.check import InvalidTasksError, checked_tasks
    from toolgym.config_env import TaskFileError, start_error_message
    from toolgym.mcp_bridge import ServerStartError
    from toolgym.policies import PolicyUnavailable, load_policy
    from toolgym.registry import load_env, parse_env_args
    from toolgym.train.synth import journal_path, synth

    if num_examples < 0 or concurrency < 1:
        _fail("-n must be >= 0 (0: the whole task set) and -c >= 1")
    from toolgym.train.synth import FAILED_TURNS

    if failed_turns not in FAILED_TURNS:
        _fail(f"--failed-turns must be one of {', '.join(FAILED_TURNS)}, not {failed_turns!r}")
    try:
        env_args = parse_env_args(env_name, env_arg)
        env = load_env(env_name, **env_args)
        opts = {"seed": seed, **_kv(teacher_arg)}
        if base_url:
            opts["base_url"] = base_url
        policy = load_policy(teacher, env, **opts)
    except (ValueError, TypeError, ImportError, OSError) as exc:
        _fail(str(exc))
    try:
        tasks = env.build_dataset(num_examples or None, seed=seed)
    except TaskFileError as exc:
        _fail(str(exc))
    run_info = {"env": env_name, "teacher": teacher, "seed": seed, "env_args": env_args,
                "teacher_args": _kv(teacher_arg)}
    journal = journal_path(out)
    with _progress() as prog:
        bar = prog.add_task("teacher games", total=len(tasks), info="")

        async def go() -> dict[str, Any]:
            try:
                await policy.preflight()  # an endpoint that refuses connections: one error, no data file
                run_tasks, report = await checked_tasks(env, tasks, skip_invalid_tasks)  # as `toolgym check`
                if report.problems:
                    console.print(f"[yellow]skipped {len(report.invalid)} invalid task(s)[/] (--skip-invalid-tasks): "
                                  f"{escape(str(report.problems[0]))}", soft_wrap=True, highlight=False)
                    prog.update(bar, total=len(run_tasks))
                if note := report.repeat_note("the teacher plays them again and their rows weigh more in SFT"):
                    console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True, highlight=False)
                return await synth(env, policy, run_tasks, out, hf_out, min_reward, drop_if, require_valid,
                                   concurrency, on_done=lambda t: prog.advance(bar), resume=resume,
                                   run_info=run_info, failed_turns=failed_turns)
            finally:
                await env.aclose()
                await policy.aclose()

        kept = f"; the finished games are kept in {journal}: re-run with --resume to play the rest"
        from toolgym.journal import run_interruptible, sigterm_as_sigint

        sigterm_as_sigint()  # kill / systemd / a batch scheduler: the same clean stop as Ctrl-C
        try:
            res = run_interruptible(go(), "synth")  # Ctrl-C / SIGTERM: a clean stop; SIGUSR1: the tasks' stacks
        except KeyError as exc:  # a --drop-if name the env does not have: every game is in the journal
            _fail(f"{exc.args[0]}{kept if journal.exists() else ''}")
        except InvalidTasksError as exc:
            _fail(str(exc))
        except ServerStartError as exc:
            _fail(start_error_message(env, exc))
        except (FileExistsError, ValueError) as exc:
            _fail(str(exc))
        except PolicyUnavailable as exc:
            _fail(f"{exc}{kept if journal.exists() else f' (nothing was written to {out})'}")
        except KeyboardInterrupt:
            _fail(f"interrupted{kept if journal.exists() else ''}")
    console.print(f"kept [bold]{res['kept']}[/] of {res['played']} games (errors {res['errors']}; mean reward "
                  f"all {res['mean_reward_all']:.3f}, kept {res['mean_reward_kept']:.3f}) -> {out}")
    (out.with_suffix(".summary.json")).write_text(json.dumps(res, indent=2, default=str))


@app.command("sft")
def sft_cmd(
    config: Path | None = typer.Argument(None, help="SFT config file (.toml/.json); fields can also come from --set."),
    data: list[Path] = typer.Option([], "--data", "-d", help="JSONL file(s) or HF dataset folder(s) (overrides the config)."),
    model: str | None = typer.Option(None, "--model", "-m", help="Starting weights (overrides the config)."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Output folder (overrides output_dir)."),
    override: list[str] = typer.Option([], "--set", "-s", help="Config override key=value (repeatable; dotted keys for nested)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in output_dir from its last checkpoint."),
) -> None:
    """Supervised fine-tuning with assistant-only loss masks (full or LoRA); writes OUTPUT/final in HF format."""
    from toolgym.train.config import ConfigError, SFTConfig, load_config

    ov = _kv(override)
    if data:
        ov["data"] = [str(d) for d in data]
    if model:
        ov["model"] = model
    if out:
        ov["output_dir"] = str(out)
    try:
        cfg = load_config(SFTConfig, config, ov)
    except ConfigError as exc:
        _fail(str(exc))
    from toolgym.train.sft import run_sft

    with _progress() as prog:
        bar = prog.add_task("sft steps", total=None, info="")

        def tick(r: dict[str, Any]) -> None:
            prog.update(bar, total=r["total"], completed=r["step"], info=f"loss {r['loss']:.4f} lr {r['lr']:.2e}")

        from toolgym.journal import sigterm_as_sigint

        sigterm_as_sigint()  # kill / a batch scheduler: stops as Ctrl-C does, with the note below
        try:
            res = run_sft(cfg, resume, tick)
        except (FileExistsError, FileNotFoundError, ValueError) as exc:
            _fail(str(exc))
        except KeyboardInterrupt:
            _fail(f"interrupted; {_checkpoint_note(cfg.output_dir)}")
    console.print(f"SFT done: {res['total_steps']} steps on {res['rows']} rows, final loss {res.get('loss', float('nan')):.4f} "
                  f"-> {res['final']} (use it as hf:{res['final']})")


def _checkpoint_note(out: Path) -> str:
    """Where an interrupted run can go on from: its last checkpoint, or that it has none yet."""
    from toolgym.train.runstate import latest_checkpoint

    last = latest_checkpoint(Path(out))
    if last is None:
        return f"no checkpoint was written yet in {out} (the run starts again from its first step)"
    return f"the last checkpoint is {last}: add --resume to go on from it"


@app.command("train")
def train_cmd(
    config: Path = typer.Argument(..., help="GRPO config file (.toml/.json); see `toolgym train --show-config x`."),
    override: list[str] = typer.Option([], "--set", "-s", help="Config override key=value (repeatable; dotted keys for nested)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in output_dir from its last checkpoint."),
    show_config: bool = typer.Option(False, "--show-config", help="Print every config field with its default and exit."),
) -> None:
    """GRPO: rollouts through the env, group-relative advantages, policy-gradient step; metrics + checkpoints."""
    from toolgym.train.config import ConfigError, GRPOConfig, describe, load_config

    if show_config:
        console.print(describe(GRPOConfig), markup=False)
        return
    try:
        cfg = load_config(GRPOConfig, config, _kv(override))
    except ConfigError as exc:
        _fail(str(exc))
    from toolgym.mcp_bridge import ServerStartError
    from toolgym.train.grpo import run_grpo

    console.print(f"[bold]toolgym train[/] {cfg.env} model={cfg.model} loss={cfg.loss_type} "
                  f"{cfg.batch_size}x{cfg.rollouts_per_example} rollouts/step -> {cfg.output_dir}")
    t0 = time.time()
    with _progress() as prog:
        bar = prog.add_task("grpo steps", total=cfg.max_steps, info="")

        def tick(r: dict[str, Any]) -> None:
            info = (f"reward {r.get('reward', float('nan')):.3f}  win {r.get('metrics/win', float('nan')):.2f}  "
                    f"loss {r.get('metrics/loss', float('nan')):.2f}  valid {r.get('tool_call_valid', float('nan')):.3f}  "
                    f"{r['step_s']:.1f}s/step")
            prog.update(bar, completed=r["step"], info=info)

        from toolgym.journal import sigterm_as_sigint

        sigterm_as_sigint()  # kill / a batch scheduler: the same clean stop as Ctrl-C, also while the model loads
        try:
            last = run_grpo(cfg, resume, tick)
        except (FileExistsError, FileNotFoundError, ValueError, TypeError) as exc:
            _fail(str(exc))
        except ServerStartError as exc:
            _fail(str(exc))
        except KeyboardInterrupt:
            _fail(f"interrupted; {_checkpoint_note(cfg.output_dir)}")
    console.print(f"done in {time.time() - t0:.0f}s; last step reward {last.get('reward', float('nan')):.3f} -> "
                  f"{cfg.output_dir}/final (use it as hf:{cfg.output_dir}/final)")


@app.command("plot")
def plot_cmd(
    runs: list[Path] = typer.Argument(..., help="Run folder(s) or metrics.jsonl file(s); several are drawn in sequence."),
    out: Path | None = typer.Option(None, "--out", "-o", help="PNG path (default RUN/curves.png)."),
    keys: list[str] = typer.Option([], "--key", "-k", help="Metrics to draw (repeatable; default: a standard set)."),
    smooth: int = typer.Option(1, "--smooth", help="Moving-average window."),
    overlay: bool = typer.Option(False, "--overlay", help="Start every run at step 0 (compare runs, e.g. losses)."),
) -> None:
    """Draw training curves from metrics.jsonl to a PNG."""
    from toolgym.train.plot import plot_runs

    for r in runs:
        if not (r / "metrics.jsonl" if r.is_dir() else r).exists():
            _fail(f"{r}: no metrics.jsonl")
    dest = out or ((runs[-1] if runs[-1].is_dir() else runs[-1].parent) / "curves.png")
    console.print(f"wrote {plot_runs(runs, dest, keys or None, smooth, overlay)}")


@app.command("pretrain")
def pretrain_cmd(
    out: Path = typer.Option(..., "--out", "-o", help="Folder to write the model + tokenizer to."),
    size: str = typer.Option("small", "--size", help="tiny | small | medium | base (see `toolgym model init-tiny`)."),
    minutes: float | None = typer.Option(None, "--minutes", help="Pre-train for this wall time (default 30)."),
    steps: int | None = typer.Option(None, "--steps", help="Pre-train for this many steps instead (reproducible)."),
    batch_size: int = typer.Option(BATCH_SIZE, "--batch-size",
                                   help="Conversations per optimizer step (16 per micro-batch)."),
    learning_rate: float = typer.Option(2e-3, "--lr", help="Peak learning rate of the tool-use stage."),
    copy_share: float = typer.Option(COPY_SHARE, "--copy-share",
                                     help="Share of the budget spent on copy drills first."),
    copy_lr: float = typer.Option(3e-3, "--copy-lr", help="Peak learning rate of the copy-drill stage."),
    call_share: float = typer.Option(0.0, "--call-share", help="Share of the tool-use stage's scenes that are "
                                     "call drills (values stated in the request copied into tool-call JSON)."),
    unquoted_share: float = typer.Option(0.0, "--unquoted-share", min=0.0, max=1.0, help="Share of copy drills whose "
                                         "value is written bare after a space, from the copy stage's second half "
                                         "(a name as a listing shows it, answered as a call writes it)."),
    ref_share: float = typer.Option(0.0, "--ref-share", min=0.0, max=1.0, help="Share of copy-drill requests that "
                                    "ask for the n-th entry of a listing instead, from the copy stage's second half "
                                    "(reading which entry a request names, as a generated task's (ref) call must)."),
    ref_call_share: float = typer.Option(0.0, "--ref-call-share", min=0.0, max=1.0, help="Share of the tool-use "
                                         "stage's scenes that are reference call drills (two calls, the second's "
                                         "value 'the n-th entry of that result')."),
    tokenizer_from: Path | None = typer.Option(None, "--tokenizer", help="Reuse this model folder's tokenizer "
                                               "(e.g. toolgym/models/toolcall_base) instead of training one."),
    seed: int = typer.Option(0, "--seed"),
    num_threads: int | None = typer.Option(None, "--num-threads", help="torch CPU threads (default: torch's, all cores)."),
    eval_n: int = typer.Option(200, "--eval-n", help="Fresh random conversations to evaluate it on at the end (0: none)."),
) -> None:
    """Build the tool-calling base offline: its tokenizer, a random tiny model, then pre-training on an endless stream
    of random tool use (copy values into calls, pick tools, copy answers, abstain); see docs/models.md."""
    from toolgym.train.pretrain import build_toolcall_base

    if minutes is not None and steps is not None:
        _fail("give --minutes or --steps, not both")
    if tokenizer_from is not None and not (tokenizer_from / "tokenizer.json").is_file():
        _fail(f"--tokenizer {tokenizer_from}: no tokenizer.json there")
    with _progress() as prog:
        bar = prog.add_task("pre-training", total=1.0, info="")

        def tick(r: dict[str, Any]) -> None:
            done = r["step"] / steps if steps else r["frac"]
            prog.update(bar, completed=done, info=f"{r.get('stage', '')} step {r['step']} loss {r['loss']:.3f}")

        info = build_toolcall_base(out, size=size, steps=steps, minutes=30.0 if minutes is None else minutes,
                                   batch_size=batch_size, learning_rate=learning_rate, seed=seed,
                                   num_threads=num_threads, eval_n=eval_n, copy_share=copy_share,
                                   copy_learning_rate=copy_lr, call_share=call_share, unquoted_share=unquoted_share,
                                   ref_share=ref_share, ref_call_share=ref_call_share,
                                   tokenizer_from=tokenizer_from, on_step=tick)
    ev = info.get("eval", {})
    rates = ", ".join(f"{k} {100 * v['rate']:.0f} %" for k, v in ev.items() if isinstance(v, dict) and v.get("rate") is not None)
    console.print(f"wrote {out} ({info['params']:,} params, {info['steps']} steps, {info['build_s'] / 60:.1f} min); "
                  f"on fresh random tools: {rates or 'not evaluated'}; use it as hf:{out}")


def tasks_train_cmd(
    env_config: Path = typer.Argument(..., help="Env config (.toml/.json) of your server: [server] or [[servers]], sandboxes, setup."),
    out: Path = typer.Option(..., "-o", "--out", help="Run folder (each phase's output; a phase whose output exists is skipped)."),
    num: int = typer.Option(2000, "-n", "--num", help="Training tasks to generate."),
    heldout: int = typer.Option(200, "--heldout", help="Held-out tasks to generate."),
    base: str | None = typer.Option(None, "--base", help="Starting model (default: the tool-calling base shipped with toolgym)."),
    phase: list[str] = typer.Option([], "--phase", help="Run only these phases (repeatable): generate, env, synth, sft, "
                                    "grpo, eval."),
    sft_set: list[str] = typer.Option([], "--sft", help="SFT config override key=value (repeatable), e.g. epochs=3."),
    grpo_set: list[str] = typer.Option([], "--grpo", help="GRPO config override key=value (repeatable), e.g. max_steps=60."),
    gen_set: list[str] = typer.Option([], "--gen", help="Generation option key=value (repeatable), e.g. chain_share=0.3."),
    seed: int = typer.Option(0, "--seed"),
    concurrency: int = typer.Option(8, "-c", "--concurrency", min=1),
    num_threads: int | None = typer.Option(None, "--num-threads", help="torch CPU threads for SFT and GRPO."),
    augment: int = typer.Option(0, "--augment", min=0, help="SFT on each teacher row plus this many copies with fresh "
                                "values for the strings the request states (copying, not memorising); 0: off."),
    augment_novel: float = typer.Option(0.3, "--augment-novel", min=0.0, max=1.0, help="Share of invented words in "
                                        "those values (the rest from the built-in word list, as generated tasks)."),
    call_reward: str = typer.Option("call_match", "--call-reward", help="The calls' reward term: call_match "
                                    "(exact calls) or call_similarity (partial credit for near-copies)."),
    strict_calls: bool = typer.Option(False, "--strict-calls", help="Evaluate with strict tool calls (each call "
                                      "decoded under its tool's schema) into eval/LABEL-strict, beside the plain evals."),
    quote_steps: str = typer.Option("off", "--quote-steps", help="Teacher data in which a call's turn first writes "
                                    "the piece of the request that asks for it, then the call: off, later (every "
                                    "call after the first) or all (synth phase; delete teacher.jsonl to rebuild it)."),
) -> None:
    """From your server to a trained tool caller: generate verified tasks -> teacher data -> SFT from the
    tool-calling base -> GRPO -> held-out evaluation, with tables and plots in OUT (report.md, heldout.png).
    (Registered as `toolgym tasks train` by the main CLI.)"""
    from toolgym.tasks.generate import GenerationError
    from toolgym.train.recipe import CALL_REWARDS, PHASES, QUOTE_STEPS, RecipeOptions, run_recipe

    bad = sorted(set(phase) - set(PHASES))
    if bad:
        _fail(f"--phase {', '.join(bad)}: phases are {', '.join(PHASES)}")
    if not env_config.is_file():
        _fail(f"env config {env_config} not found")
    if call_reward not in CALL_REWARDS:
        _fail(f"--call-reward {call_reward}: one of {', '.join(CALL_REWARDS)}")
    if quote_steps not in QUOTE_STEPS:
        _fail(f"--quote-steps {quote_steps}: one of {', '.join(QUOTE_STEPS)}")
    opts = RecipeOptions(env=env_config, out=out, base=base or "", n_train=num, n_heldout=heldout, seed=seed,
                         gen=_kv(gen_set), sft=_kv(sft_set), grpo=_kv(grpo_set), phases=tuple(phase) or PHASES,
                         concurrency=concurrency, num_threads=num_threads, augment=augment,
                         augment_novel=augment_novel, call_reward=call_reward, strict_calls=strict_calls,
                         quote_steps=quote_steps)
    bars: dict[str, Any] = {}
    with _progress() as prog:
        def progress(name: str, r: dict[str, Any]) -> None:
            if name not in bars:
                bars[name] = prog.add_task(name, total=None, info="")
            bar = bars[name]
            if name == "generate":
                prog.update(bar, completed=r["kept"], total=r["target"], info=f"tried {r['tried']}")
            elif name == "synth":
                prog.update(bar, advance=1, total=r["total"])
            elif name == "sft":
                prog.update(bar, completed=r["step"], total=r["total"], info=f"loss {r['loss']:.4f}")
            else:
                prog.update(bar, completed=r["step"], info=f"reward {r.get('reward', float('nan')):.3f}")

        try:
            report = run_recipe(opts, log=lambda m: console.print(m, markup=False), progress=progress)
        except (ValueError, FileNotFoundError, FileExistsError, GenerationError) as exc:
            _fail(str(exc))
    console.print(f"report: {out / 'report.md'} (plots: {out / 'heldout.png'}, {out / 'grpo_curves.png'})")
    failed = [name for name, r in (report or {}).get("heldout", {}).items() if r["errors"]["rate"] == 1.0]
    if failed:  # exit 3, as `toolgym eval` when its rollouts errored (toolgym.cli.EXIT_ERRORS)
        _fail(f"every held-out rollout of {', '.join(failed)} errored (see {out}/eval/*/results.jsonl)", 3)


if __name__ == "__main__":
    app()
