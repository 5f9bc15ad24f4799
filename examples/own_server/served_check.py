"""Held-out tasks sent to a trained agent through `toolgym serve`, as an MCP client would send them: each task's
prompt goes to the `run_agent` tool as its `request`, and the calls in the returned trace are scored against the
task's `expected_calls` by the rule the env's `call_match` reward uses (the same calls, in order, each matching).

    python examples/own_server/served_check.py ENV_CONFIG -m MODEL_URI --tasks HELDOUT.jsonl [-o OUT.json] \
        [-- SERVE_OPTIONS]

It measures the model where a user meets it (the served agent's own sampling defaults, one MCP session to a
`toolgym serve` process over stdio) rather than through the recipe's eval. Rates with 95 % Wilson intervals:
`call_match` over tool tasks, `abstain_ok` over no-tool tasks; a request the server answered with an error counts
as a failure in its rate and in `errors`. Exits 1 when every request errored, 2 when the server did not start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from rich.progress import Progress

from toolgym.accuracy import calls_match
from toolgym.stats import wilson


def trace_matches(trace: list[dict[str, Any]], expected: list[dict[str, Any]], default: Any = "exact") -> bool:
    """Whether a served run's trace made exactly the expected calls (`toolgym.accuracy.calls_match`, the `call_match`
    reward's rule; a call whose arguments did not parse, `arguments: null`, matches nothing)."""
    return calls_match([(c["tool"], c["arguments"]) for c in trace], expected, default)


def score(tasks: list[dict[str, Any]], results: list[dict[str, Any] | None], default: Any = "exact") -> dict[str, Any]:
    """Rates over `tasks` from their `run_agent` results (None: the request errored, a failure)."""
    def rate(hits: int, n: int) -> dict[str, Any]:
        lo, hi = wilson(hits, n) if n else (None, None)
        return {"rate": hits / n if n else None, "ci95": [lo, hi], "n": n}

    tool = [(t, r) for t, r in zip(tasks, results, strict=True) if t["expected_calls"]]
    none = [(t, r) for t, r in zip(tasks, results, strict=True) if not t["expected_calls"]]
    return {
        "call_match": rate(sum(r is not None and trace_matches(r["trace"], t["expected_calls"], default)
                               for t, r in tool), len(tool)),
        "abstain_ok": rate(sum(r is not None and not r["trace"] for _, r in none), len(none)),
        "errors": sum(r is None for r in results),
    }


async def ask_all(env: str, model: str, tasks: list[dict[str, Any]], concurrency: int,
                  extra: list[str]) -> tuple[list[dict[str, Any] | None], list[str]]:
    """Send every task's prompt to one `toolgym serve ENV -m MODEL` process; the results in task order, and the
    errors' messages."""
    params = StdioServerParameters(command=str(Path(sys.executable).parent / "toolgym"),
                                   args=["serve", env, "-m", model, "--max-concurrency", str(concurrency), *extra],
                                   env=dict(os.environ))
    results: list[dict[str, Any] | None] = [None] * len(tasks)
    errors: list[str] = []
    sem = asyncio.Semaphore(concurrency)
    async with Client(stdio_client(params)) as client:
        with Progress() as bar:
            job = bar.add_task("served requests", total=len(tasks))

            async def one(i: int, task: dict[str, Any]) -> None:
                async with sem:
                    try:
                        res = await client.call_tool("run_agent", {"request": task["prompt"],
                                                                   "seed": int(task.get("seed", i))})
                        if res.is_error:
                            errors.append(f"{task.get('id', i)}: {res.content[0].text if res.content else '?'}")
                        else:
                            results[i] = res.structured_content
                    except Exception as e:  # a transport failure is this request's failure; the rest go on
                        errors.append(f"{task.get('id', i)}: {type(e).__name__}: {e}")
                    bar.advance(job)

            await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks)))
    return results, errors


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("env", help="the env config (the recipe's RUN/env.json, or a config file)")
    p.add_argument("-m", "--model", required=True, help="policy URI, e.g. hf:RUN/sft/final")
    p.add_argument("--tasks", required=True, type=Path, help="held-out tasks (JSONL with expected_calls)")
    p.add_argument("--limit", type=int, default=0, help="only the first N tasks (0: all)")
    p.add_argument("--concurrency", type=int, default=8, help="requests in flight at once")
    p.add_argument("--match", default=None,
                   help="default argument match mode (default: the env config's [tasks] match)")
    p.add_argument("-o", "--out", type=Path, help="write the rates, errors and each task's calls as JSON here")
    argv = sys.argv[1:] if argv is None else argv
    cut = argv.index("--") if "--" in argv else len(argv)
    a = p.parse_args(argv[:cut])
    a.serve_args = argv[cut + 1:]  # more `toolgym serve` options, after `--` (e.g. -t 0 --max-tokens 160)
    if a.match is None:
        from toolgym.registry import load_env

        a.match = load_env(a.env).call_match_mode
    tasks = [json.loads(line) for line in a.tasks.read_text().splitlines() if line.strip()]
    tasks = tasks[:a.limit] if a.limit else tasks
    try:
        results, errors = asyncio.run(ask_all(a.env, a.model, tasks, a.concurrency, a.serve_args))
    except Exception as e:  # the server did not start or went away: every request failed, say why
        print(f"error: toolgym serve {a.env} -m {a.model} did not answer: {type(e).__name__}: {e} (its own error "
              "is on stderr above)", file=sys.stderr)
        return 2
    out = score(tasks, results, a.match) | {"error_messages": errors[:20], "tasks": [
        {"id": t.get("id", i), "ok": None if r is None else trace_matches(r["trace"], t["expected_calls"], a.match),
         "calls": None if r is None else [[c["tool"], c["arguments"]] for c in r["trace"]]}
        for i, (t, r) in enumerate(zip(tasks, results, strict=True))]}
    for k in ("call_match", "abstain_ok"):
        r = out[k]
        if r["n"]:
            print(f"{k}: {100 * r['rate']:.1f} % [{100 * r['ci95'][0]:.1f}-{100 * r['ci95'][1]:.1f}] (n={r['n']})")
    print(f"errors: {out['errors']} of {len(tasks)}" + (f" (first: {errors[0]})" if errors else ""))
    if a.out:
        a.out.write_text(json.dumps(out, indent=1))
    return 1 if tasks and out["errors"] == len(tasks) else 0


if __name__ == "__main__":
    raise SystemExit(main())
