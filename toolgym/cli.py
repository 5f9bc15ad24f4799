"""The `toolgym` command line (typer + rich).

Exit codes (every command): 0 done; 2 the command could not run -- a bad option, env config, task file or task
(`toolgym check`), a server that does not start, an unreachable model endpoint -- with a one-line reason per problem
(`FILE:LINE: what, and how to fix`; `--debug` adds the traceback); 3 (`toolgym eval`) the run finished but too many
rollouts errored (`--fail-on-error RATE`; by default when every rollout errored), or (`--exact`) the exact walk was
not exact (errored games, or a policy that is not deterministic), results written; 1 an unexpected
error (a bug: the traceback is printed).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

app = typer.Typer(help="Train and evaluate tool-using models on MCP-server environments.", no_args_is_help=True,
                  pretty_exceptions_show_locals=False)
console = Console()


def parse_kv(pairs: list[str] | None) -> dict[str, Any]:
    """`key=value` pairs; values parsed as JSON when they can be (numbers, booleans, lists), else strings."""
    out: dict[str, Any] = {}
    for p in pairs or []:
        if "=" not in p:
            raise typer.BadParameter(f"expected key=value, got {p!r}")
        k, v = p.split("=", 1)
        try:
            out[k.strip()] = json.loads(v)
        except json.JSONDecodeError:
            out[k.strip()] = v
    return out


EXIT_USAGE = 2
"""Exit code of a command that could not run (bad option, config, task file or task, server or endpoint down)."""
EXIT_ERRORS = 3
"""Exit code of an eval that finished with too many errored rollouts (`--fail-on-error`), or of an exact one
(`--exact`) whose walk was not exact."""
DEBUG_OPTION = typer.Option(False, "--debug", help="Print the full traceback of an error (also TOOLGYM_DEBUG=1)")


def _debug() -> bool:
    return os.environ.get("TOOLGYM_DEBUG", "") not in ("", "0")


@app.callback()
def _main(debug: bool = DEBUG_OPTION) -> None:
    """Train and evaluate tool-using models on MCP-server environments."""
    if debug:
        os.environ["TOOLGYM_DEBUG"] = "1"


def _fail(msg: str, code: int = EXIT_USAGE) -> None:
    """Print `error: msg` (one line per problem, however long) and exit with `code`; with --debug, first the traceback
    of the exception being handled."""
    if _debug() and sys.exc_info()[1] is not None:
        console.print_exception()
    console.print(f"[bold red]error:[/] {escape(msg)}", soft_wrap=True)
    raise typer.Exit(code)


def env_from_cli(env_name: str, pairs: list[str] | None) -> tuple[dict[str, Any], Any]:
    """The env named on a command line, built with its `-a key=value` options typed by the env's declaration;
    an unknown env or option, or a bad value, exits with the error (naming the closest valid option)."""
    from toolgym.registry import load_env, parse_env_args

    try:
        args = parse_env_args(env_name, pairs)
        return args, load_env(env_name, **args)
    except (ValueError, TypeError, OSError) as exc:
        _fail(str(exc))
        raise


def policy_choice(env: Any, model: str | None, flags: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The policy URI and its options: `--model` or else the env's embedded default, with the env's
    `default_policy_options` -- all of them for its default, the sampling ones (temperature, top_p, max_tokens, seed)
    for a `--model` -- then every flag that was given (not None) on top."""
    from toolgym.policies import SAMPLING_OPTIONS

    defaults = dict(getattr(env, "default_policy_options", None) or {})
    if model is None:
        model = getattr(env, "default_policy", None) or "scripted:reference"
    else:
        defaults = {k: v for k, v in defaults.items() if k in SAMPLING_OPTIONS}
    return model, {**defaults, **{k: v for k, v in flags.items() if v is not None}}


def sampling_of(options: dict[str, Any]) -> dict[str, Any]:
    """The sampling options among a policy's (temperature, top_p, max_tokens, seed), for the record."""
    from toolgym.policies import SAMPLING_OPTIONS

    return {k: options[k] for k in SAMPLING_OPTIONS if k in options}


def sampling_text(uri: str, options: dict[str, Any]) -> str:
    """`temperature=0.0 max_tokens=200 seed=0`, or what a policy that samples nothing means by them."""
    if uri.startswith("scripted:"):
        return "none (a scripted player)"
    s = sampling_of(options)
    text = " ".join(f"{k}={v}" for k, v in s.items())
    if "temperature" not in s:
        text = ("temperature=the backend's default " + text).strip()
    return text


_GENERIC_DIRS = {"final", "checkpoint", "checkpoints", "model", "adapter", "merged", "latest", "best"}


def model_short_name(uri: str) -> str:
    """A short, readable name for a policy URI, for folder names: the last component of the target, with the
    folders above it while it is a generic checkpoint name (`hf:runs/tictactoe/sft/final` -> `sft-final`,
    `hf:Qwen/Qwen3-0.6B` -> `Qwen3-0.6B`, `scripted:minimax` -> `minimax`, `hf:runs/g/checkpoints/step_25/model`
    -> `g-step_25-model`)."""
    target = uri.partition(":")[2] if ":" in uri and not uri.startswith(("/", ".", "~")) else uri
    parts = [p for p in target.replace("\\", "/").split("/") if p not in ("", ".", "..", "~")] or ["model"]
    tail = [parts.pop()]
    while parts and (tail[0].lower() in _GENERIC_DIRS or tail[0].lower().startswith("step_")):
        tail.insert(0, parts.pop())
    if len(tail) > 1:
        tail = [p for p in tail if p.lower() != "checkpoints"] or tail
    return _safe_name("-".join(tail)) or "model"


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:60]


def default_out(env: Any, env_name: str, model: str, kind: str = "") -> Path:
    """`runs/eval/<env>-<model>[-<kind>]-<time>`: the env's name and the model's short name (`kind`: e.g. `exact`);
    an env's embedded default model (a checkpoint shipped inside its package) is `default`."""
    env_part = getattr(env, "name", None) or Path(env_name).stem
    scheme, _, target = model.partition(":")
    embedded = model == getattr(env, "default_policy", None) and scheme in ("hf", "vllm") and Path(target).is_dir()
    name = "default" if embedded else model_short_name(model)
    tag = f"-{_safe_name(kind)}" if kind else ""
    return Path("runs") / "eval" / f"{_safe_name(env_part)}-{name}{tag}-{time.strftime('%Y%m%d-%H%M%S')}"


EXACT_REFUSED = ("num_examples", "rollouts", "concurrency", "resume", "success_threshold", "skip_invalid_tasks",
                 "fail_on_error", "error_reward")
"""The `toolgym eval` options of a sampled run (by parameter name), which `--exact` refuses when given: its walk plays
every episode once -- no task sample, no repeats, its own concurrency, no rollout-error policy."""


@app.command("eval")
def eval_cmd(
    ctx: typer.Context,
    env_name: str = typer.Argument(..., help="Environment name (see `toolgym envs`) or path to an env config .toml"),
    num_examples: int = typer.Option(20, "-n", "--num-examples",
                                     help="Examples (tasks) to evaluate; 0: the env's whole task set (e.g. every "
                                          "tic-tac-toe position with -a task=move)"),
    rollouts: int = typer.Option(1, "-r", "--rollouts", help="Rollouts per example (for pass@k)"),
    concurrency: int = typer.Option(8, "-c", "--concurrency", help="Rollouts in flight at once"),
    model: str | None = typer.Option(None, "-m", "--model",
                                     help="Policy URI: scripted:NAME, openai:MODEL, hf:PATH, vllm:PATH, vllm-server:NAME "
                                          "(default: the env's embedded default)"),
    base_url: str | None = typer.Option(None, "--base-url", help="OpenAI-compatible base URL(s), comma-separated"),
    api_key: str | None = typer.Option(None, "--api-key", help="API key for --base-url (default: $OPENAI_API_KEY, "
                                                                 "read by the openai: and vllm-server: policies)"),
    temperature: float | None = typer.Option(None, "-t", "--temperature"),
    top_p: float | None = typer.Option(None, "--top-p"),
    max_tokens: int | None = typer.Option(None, "--max-tokens"),
    seed: int = typer.Option(0, "--seed", help="Dataset seed (and sampling seed where supported)"),
    env_arg: list[str] = typer.Option(None, "-a", "--env-arg", help="Env argument key=value (repeatable)"),
    model_arg: list[str] = typer.Option(None, "--model-arg", help="Extra policy option key=value (repeatable)"),
    out: Path | None = typer.Option(None, "-o", "--out", help="Results folder (default runs/eval/ENV-MODEL-TIME; "
                                                                  "with --exact ENV-MODEL-exact-TIME)"),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out, keeping finished rollouts"),
    success_threshold: float = typer.Option(1.0, help="A rollout passes (for pass@k) when reward >= this"),
    skip_invalid_tasks: bool = typer.Option(False, "--skip-invalid-tasks",
                                            help="Leave out tasks that fail `toolgym check` (counted and reported) "
                                                 "instead of refusing to start"),
    fail_on_error: float | None = typer.Option(None, "--fail-on-error", metavar="RATE", min=0.0, max=1.0,
                                               help="Exit with code 3 when the share of errored rollouts is above "
                                                    "RATE (default: only when every rollout errored)"),
    error_reward: float | None = typer.Option(None, "--error-reward",
                                              help="The reward an errored rollout counts with in the statistics "
                                                   "(default: the env's floor, 0)"),
    exact: bool = typer.Option(False, "--exact",
                               help="Instead of sampling episodes, the env's exact evaluation of the policy played "
                                    "greedily (temperature 0): every episode it can meet, weighted by its chance "
                                    "(envs that implement exact_eval, e.g. tictactoe). Refuses a nonzero "
                                    "temperature and the options of a sampled run (-n, -r, -c, --resume, "
                                    "--success-threshold, --skip-invalid-tasks, --fail-on-error, --error-reward); "
                                    "writes run.json and exact.json to --out; exit 3 when the walk was not exact"),
    debug: bool = DEBUG_OPTION,
) -> None:
    """Evaluate a policy on an environment: progress bar, summary table, results folder. The tasks are checked
    against the servers' tool schemas first (`toolgym check`). With --exact: the env's exact evaluation of the
    greedy policy instead, as a table of its metrics. Exit codes: 0 done, 2 could not start, 3 too many errored
    rollouts (`--fail-on-error`) or, with --exact, a walk that was not exact (errored games, or a policy that is not
    deterministic)."""
    from toolgym.check import InvalidTasksError, checked_tasks
    from toolgym.eval import RESUME_KEYS, check_run_folder, evaluate, report_names
    from toolgym.mcp_bridge import ServerStartError, server_logs
    from toolgym.policies import PolicyUnavailable, load_policy

    if debug:
        os.environ["TOOLGYM_DEBUG"] = "1"
    if exact:
        eval_exact(ctx, env_name, model, env_arg, out, {
            "base_url": base_url, "api_key": api_key, "temperature": temperature, "top_p": top_p,
            "max_tokens": max_tokens, "seed": seed, **parse_kv(model_arg)})
        return
    if num_examples < 0 or rollouts < 1 or concurrency < 1:
        _fail("-n must be >= 0 (0: the whole task set), -r and -c >= 1")
    env_args, env = env_from_cli(env_name, env_arg)
    default = model is None
    model, options = policy_choice(env, model, {
        "base_url": base_url, "api_key": api_key, "temperature": temperature, "top_p": top_p,
        "max_tokens": max_tokens, "seed": seed, **parse_kv(model_arg)})
    tasks = dataset_from_cli(env, num_examples or None, seed)
    if out is None:
        out = default_out(env, env_name, model)
    info = {"env": env_name, "env_args": env_args, "model": model, "seed": seed,
            "sampling": {k: v for k, v in options.items() if k != "api_key"}}
    total = len(tasks) * rollouts
    try:  # before a model loads: a folder that holds another run, or results without --resume, fail at once
        keys = None if not skip_invalid_tasks else tuple(k for k in RESUME_KEYS if k != "n")  # n: tasks kept
        done, _ = check_run_folder(out, {**info, "n": len(tasks), "rollouts_per_example": rollouts}, resume, keys)
    except (FileExistsError, ValueError) as exc:
        _fail(str(exc))
    if resume:
        console.print(f"--resume: {done} of {total} rollouts already done in {out}; running the other {total - done}",
                      soft_wrap=True)
    try:
        policy = load_policy(model, env, **options)
    except (ValueError, ImportError, OSError) as exc:
        _fail(str(exc))
    floor = env.error_reward if error_reward is None else error_reward
    console.print(f"[bold]toolgym eval[/] {env_name}  policy={model}{' (the env default)' if default else ''}  "
                  f"{len(tasks)} examples x {rollouts} rollouts, concurrency {concurrency} -> {out}", soft_wrap=True)
    console.print(f"sampling: {sampling_text(model, options)}" + ("" if not policy.answer_key else
                  f"   [bold yellow]{model} is the answer key[/]: it reads each task's expected answer"),
                  soft_wrap=True)
    prog = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("reward {task.fields[reward]:.3f}  errors {task.fields[errors]}"),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False)
    if True:  # the bar shows once the servers are up and the tasks checked
        seen: dict[str, float] = {"n": 0, "sum": 0.0, "err": 0}

        def tick(t: Any) -> None:  # the running mean over every rollout, an errored one at the floor
            seen["n"] += 1
            seen["err"] += bool(t.error)
            seen["sum"] += floor if t.error else t.reward
            prog.update(bar, advance=1, reward=seen["sum"] / seen["n"], errors=int(seen["err"]))

        async def go() -> Any:
            nonlocal bar
            try:
                await policy.preflight()  # an endpoint that refuses connections: one error, no results folder
                run_tasks, report = await checked_tasks(env, tasks, skip_invalid_tasks)
                skipped = [str(p) for p in report.problems]
                if skipped:
                    console.print(f"[yellow]skipped {len(report.invalid)} invalid task(s)[/] (--skip-invalid-"
                                       f"tasks): {escape(skipped[0])}" + (f" (+{len(skipped) - 1} more problems, "
                                                                          "listed in summary.json)"
                                                                          if len(skipped) > 1 else ""), soft_wrap=True)
                if note := report.repeat_note("their outcomes count twice"):  # valid, but one outcome twice
                    console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
                prog.start()
                bar = prog.add_task("rollouts", total=len(run_tasks) * rollouts, reward=0.0, errors=0)
                return await evaluate(env, policy, run_tasks, rollouts, concurrency, out, resume, info,
                                      success_threshold, tick, floor, skipped, seed=options.get("seed"))
            finally:
                if prog.live.is_started:
                    prog.stop()
                await env.aclose()
                await policy.aclose()

        from toolgym.journal import run_interruptible, sigterm_as_sigint

        sigterm_as_sigint()  # kill / systemd / a batch scheduler: the same clean stop as Ctrl-C
        bar: Any = None
        try:
            with server_logs(out / "servers"):  # the servers' stderr: never on the terminal
                _, summary = run_interruptible(go(), "the eval")  # Ctrl-C / SIGTERM: a clean stop; SIGUSR1: stacks
        except InvalidTasksError as exc:
            _fail(str(exc))
        except ServerStartError as exc:
            _fail(server_error(env, exc))
        except (FileExistsError, ValueError) as exc:
            _fail(str(exc))
        except PolicyUnavailable as exc:
            kept = f" The rollouts that finished are kept in {out}; re-run with --resume once it is up." \
                if (out / "results.jsonl").exists() else ""
            _fail(f"{exc}{kept}")
    print_summary(summary, report_names(env))
    console.print(policy_line(summary), soft_wrap=True)
    plots = "rewards.png" + (", breakdown.png" if summary.get("by") else "")
    console.print(f"results: {out}/results.jsonl  summary: {out}/summary.json  plots: {out}/{{{plots}}}")
    too_many = error_verdict(summary, fail_on_error)
    if too_many:
        _fail(f"{too_many}; results in {out} (servers' logs: {out}/servers/)", EXIT_ERRORS)


def eval_exact(ctx: typer.Context, env_name: str, model: str | None, env_arg: list[str] | None, out: Path | None,
               flags: dict[str, Any]) -> None:
    """`toolgym eval --exact`: the env's exact evaluation (`toolgym.eval.evaluate_exact`) of the policy played
    greedily, printed as a table and written to `out` (run.json, exact.json, servers/). Exits 2 for an env without
    the hook, a refused option, a nonzero temperature or a run that cannot start, 3 when the walk was not exact."""
    from toolgym.eval import evaluate_exact, has_exact_eval
    from toolgym.mcp_bridge import ServerStartError, server_logs
    from toolgym.policies import PolicyUnavailable, load_policy

    params = {p.name: p for p in ctx.command.params}
    sources = {name: ctx.get_parameter_source(name) for name in EXACT_REFUSED}  # typer's vendored click: by name
    given = ["/".join(params[name].opts) for name, src in sources.items()
             if src is not None and src.name not in ("DEFAULT", "DEFAULT_MAP")]
    if given:
        _fail(f"--exact plays every episode a greedy policy can meet, once each: {', '.join(given)} "
              f"{'does' if len(given) == 1 else 'do'} not apply to it; leave {'it' if len(given) == 1 else 'them'} out")
    temp = flags.get("temperature")  # --temperature or --model-arg temperature=
    if temp is not None and not (isinstance(temp, int | float) and temp == 0):
        _fail(f"--exact runs the policy greedily (temperature 0): the exact walk is defined only for a deterministic "
              f"policy; drop the temperature {temp} (--temperature / --model-arg temperature=)")
    env_args, env = env_from_cli(env_name, env_arg)
    if not has_exact_eval(env):
        _fail(f"the env {env_name!r} has no exact evaluation (it does not implement exact_eval); evaluate it "
              "without --exact")
    try:
        env.check_exact_eval()  # a config the walk cannot take is refused before the model loads
    except ValueError as exc:
        _fail(f"{env_name} --exact: {exc}")
    default = model is None
    model, options = policy_choice(env, model, {**flags, "temperature": 0.0})
    if model.startswith("hf:"):  # every greedy answer computed in the same company whatever the timing: a re-run
        options.setdefault("lockstep", True)  # gives the same walk to the last bit (`ModelPolicy` lockstep)
    if out is None:
        out = default_out(env, env_name, model, "exact")
    if (out / "run.json").exists():
        _fail(f"{out} holds a run already ({out}/run.json): choose another --out")
    info = {"env": env_name, "env_args": env_args, "model": model, "seed": options.get("seed"),
            "sampling": {k: v for k, v in options.items() if k != "api_key"}}
    try:
        policy = load_policy(model, env, **options)
    except (ValueError, ImportError, OSError) as exc:
        _fail(str(exc))
    console.print(f"[bold]toolgym eval --exact[/] {env_name}  policy={model}{' (the env default)' if default else ''}"
                  f"  -> {out}", soft_wrap=True)
    console.print(f"sampling: {sampling_text(model, options)}", soft_wrap=True)

    async def go() -> Any:
        try:
            await policy.preflight()
            with console.status("exact evaluation: playing every episode the policy can meet"):
                return await evaluate_exact(env, policy, out, info)
        finally:
            await env.aclose()
            await policy.aclose()

    from toolgym.journal import run_interruptible, sigterm_as_sigint

    sigterm_as_sigint()
    try:
        with server_logs(out / "servers"):
            summary = run_interruptible(go(), "the exact evaluation")
    except ServerStartError as exc:
        _fail(server_error(env, exc))
    except (ValueError, NotImplementedError, PolicyUnavailable) as exc:  # e.g. an env config the walk cannot take
        _fail(f"{env_name} --exact: {exc}")
    metrics = summary["exact"]
    t = Table(title=f"exact evaluation ({env_name})")
    t.add_column("metric")
    t.add_column("value", justify="right")
    for k, v in metrics.items():
        t.add_row(k, f"{v:.6g}")
    console.print(t)
    if {"win", "draw", "loss"} <= set(metrics):
        console.print(f"win/draw/loss: [bold]{100 * metrics['win']:.2f} / {100 * metrics['draw']:.2f} / "
                      f"{100 * metrics['loss']:.2f} %[/] (exact)")
    console.print(policy_line(summary), soft_wrap=True)
    console.print(f"results: {out}/exact.json", soft_wrap=True)
    if summary["not_exact"]:
        _fail(f"not exact: {summary['not_exact']}; results in {out} (servers' logs: {out}/servers/)", EXIT_ERRORS)


def error_verdict(summary: dict[str, Any], fail_on_error: float | None) -> str | None:
    """Why an eval should exit non-zero for its errored rollouts (None: it should not): their share is above
    `fail_on_error`, or -- with None -- every rollout errored."""
    n, errors = summary["rollouts"], summary["errors"]
    if not errors:
        return None
    rate = errors / n
    if (fail_on_error is None and errors < n) or (fail_on_error is not None and rate <= fail_on_error):
        return None
    kinds = ", ".join(f"{k} x{v}" for k, v in list(summary.get("error_kinds", {}).items())[:2])
    what = f"all {n} rollouts errored" if errors == n else \
        f"{errors} of {n} rollouts errored ({100 * rate:.1f} % > --fail-on-error {100 * fail_on_error:.1f} %)"
    return f"{what}: {kinds}"


def dataset_from_cli(env: Any, n: int | None, seed: int) -> list[dict[str, Any]]:
    """`env.build_dataset(n, seed)`, a missing or bad task file exiting with its one-line error."""
    from toolgym.config_env import TaskFileError

    try:
        return list(env.build_dataset(n, seed=seed))
    except (TaskFileError, FileNotFoundError) as exc:
        _fail(str(exc))
        raise


def server_error(env: Any, exc: Exception) -> str:
    """A server that did not start, as `FILE:LINE: ...` of its config entry (a config env)."""
    from toolgym.config_env import start_error_message

    return start_error_message(env, exc)


def policy_line(summary: dict[str, Any]) -> str:
    """Who played, how it sampled, and -- for a reference player -- that the score is the env's answer key."""
    line = f"policy: [bold]{summary.get('policy', '?')}[/]"
    sampling = summary.get("sampling")
    if sampling is not None:
        line += f"   sampling: {sampling_text(str(summary.get('policy', '')), sampling)}"
    if summary.get("answer_key"):
        line += ("\n[bold yellow]answer key:[/] this policy reads each task's expected answer, so these scores are "
                 "the environment's ceiling, not a model's (evaluate a model with -m)")
    return line


def print_summary(summary: dict[str, Any], names: list[str] | None = None) -> None:
    """The summary tables; `names` (the rubric's functions) are the columns of the per-field breakdown tables."""
    n, errors = summary["rollouts"], summary["errors"]
    rate = summary.get("error_rate", errors / n if n else 0.0)
    t = Table(title=f"summary ({n} rollouts, {errors} errored = {100 * rate:.1f} %)", show_lines=False)
    t.add_column("name")
    t.add_column("n", justify="right")
    t.add_column("mean", justify="right")
    t.add_column("± 95% CI", justify="right")
    r = summary["reward"]
    floor = summary.get("error_reward", 0.0)
    t.add_row("[bold]reward[/]" + (f" [dim](errored = {floor:g})[/]" if errors else ""), str(r["n"]),
              f"{r['mean']:.4f}", f"{r['ci95']:.4f}")
    ci = summary.get("error_rate_ci")
    t.add_row("errored rollouts", str(n), f"{rate:.4f}", f"{ci['lo']:.3f}-{ci['hi']:.3f}" if ci and n else "-")
    for k, v in summary["rewards"].items():
        t.add_row(f"reward/{k}", str(v["n"]), f"{v['mean']:.4f}", f"{v['ci95']:.4f}")
    for k, v in summary["metrics"].items():
        t.add_row(k, str(v["n"]), f"{v['mean']:.4f}", f"{v['ci95']:.4f}")
    console.print(t)
    if "outcomes" in summary:
        o = summary["outcomes"]
        console.print(f"win/draw/loss: [bold]{100 * o['win']:.1f} / {100 * o['draw']:.1f} / {100 * o['loss']:.1f} %[/]")
    if "pass_at_k" in summary:
        ks = ", ".join(f"pass@{k}={v:.3f}" for k, v in summary["pass_at_k"].items())
        hs = ", ".join(f"pass^{k}={v:.3f}" for k, v in summary["pass_hat_k"].items())
        console.print(f"{ks}   {hs}   (success: reward >= {summary['success_threshold']})")
    acc = summary.get("tool_accuracy") or {}
    if acc:
        ta = Table(title="tool-call accuracy")
        cols = ["calls", "parse_ok", "name_ok", "args_ok", "exec_ok", "call_match"]
        ta.add_column("tool")
        for c in cols:
            ta.add_column(c, justify="right")
        for tool, row in sorted(acc.items(), key=lambda kv: (kv[0] != "*", kv[0])):
            ta.add_row("all" if tool == "*" else tool,
                       *[(f"{int(row[c])}" if c == "calls" else f"{row[c]:.3f}") if c in row else "-" for c in cols])
        for server, row in sorted((summary.get("tool_accuracy_by_server") or {}).items()):
            if server != "*":
                ta.add_row(f"[dim]server {server}[/]", *[(f"{int(row[c])}" if c == "calls" else f"{row[c]:.3f}")
                                                        if c in row else "-" for c in cols])
        console.print(ta)
    for field, rows in (summary.get("by") or {}).items():  # rates in %, +- half the 95 % (Wilson) interval
        cols = [n for n in (names or []) if any(n in r and 0 <= r[n]["lo"] and r[n]["hi"] <= 1 for r in rows.values())]
        tb = Table(title=f"by {field}: % with 95% CI (summary.json has the intervals)")
        tb.add_column(field)
        tb.add_column("n", justify="right")
        tb.add_column("errored", justify="right")
        for c in cols:
            tb.add_column(c, justify="right")
        for value, r in rows.items():
            tb.add_row(value, str(r["n"]), str(r.get("errors", 0)),
                       *[f"{100 * r[c]['mean']:.1f} ±{50 * (r[c]['hi'] - r[c]['lo']):.1f}"
                         if c in r else "-" for c in cols])
        console.print(tb)
    if summary["errors"]:
        console.print(f"[yellow]errors by kind:[/] {summary['error_kinds']}")


@app.command("envs")
def envs_cmd(
    names: list[str] = typer.Argument(None, help="Env names or env config paths (default: every installed env)"),
) -> None:
    """List environments (entry-point group `toolgym.envs`) with the options each declares: type, default, range
    and description -- what `-a key=value` and a training config's `env_args` accept."""
    from rich.markup import escape

    from toolgym.registry import available_envs, env_options

    for name in names or available_envs():
        try:
            opts = env_options(name)
        except (ValueError, FileNotFoundError) as exc:
            _fail(str(exc))
            return
        if opts is None:
            console.print(f"[bold]{name}[/]: options not declared (its load_environment takes **kwargs with no "
                          f"return type naming the env class); values are passed unchecked\n")
            continue
        t = Table(title=f"{name} options", title_justify="left", show_lines=False)
        for col in ("option", "type", "default", "description"):
            t.add_column(col, overflow="fold")
        for o in opts.values():
            desc = o.description + (f" [{o.range}]" if o.range else "")
            t.add_row(o.name, escape(o.type_name), escape(o.default_text()), escape(desc),
                      style="dim" if o.name in ("server", "servers") else None)
        console.print(t)


@app.command("check")
def check_cmd(
    env_name: str = typer.Argument(..., help="Environment name or path to an env config .toml"),
    env_arg: list[str] = typer.Option(None, "-a", "--env-arg", help="Env argument key=value (repeatable)"),
    num_examples: int = typer.Option(0, "-n", "--num-examples", help="Tasks to check (0: all)"),
    seed: int = typer.Option(0, "--seed", help="Dataset seed"),
    debug: bool = DEBUG_OPTION,
) -> None:
    """Check an environment before running it: connect to its servers, list their tools and validate every task's
    `expected_calls` against the live schemas (the tool exists and the model sees it, the arguments exist, the values
    are valid, the required ones are given). Prints each bad task as FILE:LINE: reason; exits 2 if there is one.
    A task that repeats an earlier one (every field but id, split and template_prompt) is valid but named as a note.
    `toolgym eval`, `synth` and `train` run the same check first."""
    from toolgym.check import check_tasks
    from toolgym.mcp_bridge import ServerStartError

    if debug:
        os.environ["TOOLGYM_DEBUG"] = "1"
    t0 = time.perf_counter()
    _, env = env_from_cli(env_name, env_arg)
    tasks = dataset_from_cli(env, num_examples or None, seed)

    async def go() -> Any:
        try:
            await env.start()
            return check_tasks(env, tasks)
        finally:
            await env.aclose()

    try:
        report = asyncio.run(go())
    except ServerStartError as exc:
        _fail(server_error(env, exc))
    except ValueError as exc:
        _fail(str(exc))
    for problem in report.problems:
        console.print(escape(str(problem)), soft_wrap=True, highlight=False)
    for repeat in report.repeats:
        console.print(escape(f"{repeat} (note)"), soft_wrap=True, highlight=False)
    bad = len(report.invalid)
    verdict = "[green]all valid[/]" if not bad else f"[bold red]{bad} invalid[/] ({len(report.problems)} problems)"
    repeats = f", [yellow]{len(report.repeats)} repeated[/]" if report.repeats else ""
    console.print(f"{env_name}: {report.tasks} tasks, {verdict}{repeats}; {report.tools} tools seen by the model; "
                  f"{time.perf_counter() - t0:.1f} s", soft_wrap=True)
    if bad:
        raise typer.Exit(EXIT_USAGE)


@app.command("tools")
def tools_cmd(
    env_name: str = typer.Argument(..., help="Environment name or config path"),
    env_arg: list[str] = typer.Option(None, "-a", "--env-arg", help="Env argument key=value (repeatable)"),
) -> None:
    """Show the tool schemas the model sees in an environment (hidden tools and arguments removed)."""
    from toolgym.mcp_bridge import ServerStartError

    _, env = env_from_cli(env_name, env_arg)

    async def go() -> list[dict[str, Any]]:
        async with env:
            return env.model_tools()

    try:
        tools = asyncio.run(go())
    except ServerStartError as exc:
        _fail(server_error(env, exc))
    console.print_json(json.dumps(tools))


@app.command("serve")
def serve_cmd(
    env_name: str = typer.Argument(..., help="Environment name or config path"),
    model: str | None = typer.Option(None, "-m", "--model", help="Policy URI (default: the env's embedded default)"),
    transport: str = typer.Option("stdio", "--transport", help="stdio or streamable-http"),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8770, "--port"),
    base_url: str | None = typer.Option(None, "--base-url", help="OpenAI-compatible base URL(s), comma-separated"),
    temperature: float | None = typer.Option(None, "-t", "--temperature",
                                             help="Sampling temperature (default: the env's, e.g. 0 for tic-tac-toe)"),
    top_p: float | None = typer.Option(None, "--top-p"),
    max_tokens: int | None = typer.Option(None, "--max-tokens"),
    seed: int | None = typer.Option(None, "--seed", help="Mixed into every request's sampling seed (each request is "
                                                         "seeded by its own arguments: asking again gives the same "
                                                         "answer)"),
    env_arg: list[str] = typer.Option(None, "-a", "--env-arg", help="Env argument key=value (repeatable; default: "
                                                                   "the env's serve defaults, e.g. transport=inprocess)"),
    model_arg: list[str] = typer.Option(None, "--model-arg", help="Extra policy option key=value (repeatable)"),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds one agent run may take, the wait for a free "
                                                           "slot included"),
    max_concurrency: int = typer.Option(16, "--max-concurrency", help="Agent runs in flight at once"),
) -> None:
    """Serve an agent (model + its environment's tools) as an MCP server over stdio or streamable HTTP. Prints
    `ready: stdio` or `ready: URL` on stderr once clients can connect; a model loads in the background meanwhile."""
    import logging
    import sys
    from concurrent.futures import ThreadPoolExecutor

    from toolgym.policies import PolicyUnavailable, policy_loader
    from toolgym.serve import ServeOptionError, build_agent_server, check_serve_options, log, port_problem, serve_http

    t0 = time.perf_counter()
    if transport not in ("stdio", "streamable-http"):
        _fail(f"--transport must be stdio or streamable-http, got {transport!r}")
    try:
        check_serve_options(timeout, max_concurrency)
    except ServeOptionError as exc:
        _fail(str(exc))
    if transport == "streamable-http":
        if not 1 <= port <= 65535:
            _fail(f"--port must be from 1 to 65535, got {port}")
        problem = port_problem(host, port)
        if problem:
            _fail(problem)
    _, env = serve_env(env_name, env_arg)
    model, options = policy_choice(env, model, {"base_url": base_url, "temperature": temperature, "top_p": top_p,
                                                "max_tokens": max_tokens, "seed": seed, **parse_kv(model_arg)})
    try:
        load, heavy = policy_loader(model, env, **options)
    except (ValueError, ImportError, OSError) as exc:
        _fail(str(exc))
    if heavy:  # weights load in a background thread; `initialize` and `tools/list` answer meanwhile
        policy: Any = ThreadPoolExecutor(1, thread_name_prefix="toolgym-model-load").submit(load)

        def loaded(future: Any) -> None:
            exc = future.exception()
            log(f"error: the model failed to load (every call will say so): {type(exc).__name__}: {exc}" if exc
                else f"model loaded ({time.perf_counter() - t0:.1f}s after start)")

        policy.add_done_callback(loaded)
    else:
        policy = load()
        try:
            asyncio.run(policy.preflight())  # an endpoint that refuses connections: fail now, not on every request
        except PolicyUnavailable as exc:
            _fail(str(exc))
    srv = build_agent_server(env, policy, timeout_s=timeout, max_concurrency=max_concurrency, policy_name=model,
                             seed=options.get("seed"))
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    server_kind = env.server.describe() if env.server is not None else "env tools only"
    about = (f"toolgym serve {env_name}: policy {model} (sampling: {sampling_text(model, options)}), env server "
             f"{server_kind}, {env.session_scope} sessions; timeout {timeout:g}s, {max_concurrency} runs at once")
    if heavy:
        about += "; the model loads in the background"

    def ready(where: str) -> None:
        log(about)
        log(f"ready: {where} ({time.perf_counter() - t0:.1f}s after start)")

    if transport == "stdio":
        ready("stdio")
        srv.run("stdio")
    else:
        serve_http(srv, host, port, ready)


def serve_env(env_name: str, pairs: list[str] | None) -> tuple[dict[str, Any], Any]:
    """The env `toolgym serve` binds: built with the `-a` options, and the env's `serve_defaults` for those not
    given (tic-tac-toe: its server in this process)."""
    args, env = env_from_cli(env_name, pairs)
    extra = {k: v for k, v in (getattr(env, "serve_defaults", None) or {}).items() if k not in args}
    if extra:
        args, env = env_from_cli(env_name, [*(pairs or []), *(f"{k}={v if isinstance(v, str) else json.dumps(v)}"
                                                        for k, v in extra.items())])
    return args, env


def _mount_optional() -> None:
    """Sub-commands: `toolgym tasks ...`, and from optional packages `toolgym model ...`, `toolgym export ...`, and the training commands
    (`synth`, `sft`, `train`, `plot`) at the top level. Each is skipped if its package cannot be imported."""
    try:
        from toolgym.models.cli import app as model_app

        app.add_typer(model_app, name="model", help="Local models: build the tiny offline model, inspect templates.")
    except ImportError:
        pass
    from toolgym.tasks.cli import app as tasks_app  # no optional dependency: always there

    app.add_typer(tasks_app, name="tasks", help="Tasks from the server itself: generate verified tasks and a "
                  "held-out split.")
    try:
        from toolgym.export.cli import app as export_app

        app.add_typer(export_app, name="export", help="Export an environment to another framework (verifiers).")
    except ImportError:
        pass
    try:
        from toolgym.train.cli import app as train_app
        from toolgym.train.cli import tasks_train_cmd

        app.registered_commands.extend(train_app.registered_commands)
        tasks_app.command("train")(tasks_train_cmd)
    except ImportError:
        pass


_mount_optional()

if __name__ == "__main__":
    app()
