"""Are two GRPO runs the same run? Compares their logged metrics step by step (every key but the clock's: `*_s`,
`*_per_s`, the engine's batch sizes), their saved rollouts (`save_rollouts`: every game's messages, the server's
random game and tool-call ids masked) and the weights
of their last model, to the last bit. Prints the first difference; exit 0 when the runs are identical, 1 when they
differ, 2 on bad input.

    python examples/tictactoe/same_run.py RUN_A RUN_B
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import typer

from toolgym.train.runstate import read_metrics, read_rollouts

CALL_ID = re.compile(r"call_[0-9a-f]{12}")  # tool-call ids are random (the chat template does not show them)
CLOCK_KEYS = ("gen_mean_batch",)  # how the engine batched: timing, unless the run was deterministic


def _timed(key: str) -> bool:
    return key.endswith("_s") or key in CLOCK_KEYS


def weights_digest(model_dir: Path) -> str:
    """sha256 over the model folder's safetensors files (names and bytes)."""
    h = hashlib.sha256()
    for f in sorted(model_dir.glob("*.safetensors")):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _unclocked(x: object) -> object:
    if isinstance(x, dict):
        return {k: _unclocked(v) for k, v in x.items() if not (k == "timings" or _timed(k))}
    if isinstance(x, list):
        return [_unclocked(v) for v in x]
    return x


def _game(g: dict) -> str:
    """A saved game as text, without its clock (`timings`, `*_s` keys) and with the random ids masked."""
    text = CALL_ID.sub("call_<id>", json.dumps(_unclocked(g), sort_keys=True))
    gid = (g.get("info") or {}).get("game_id")
    return text.replace(gid, "<game id>") if isinstance(gid, str) and gid else text


def compare(a: Path, b: Path) -> list[str]:
    """The differences between runs `a` and `b`, first ones first (empty: the same run)."""
    out: list[str] = []
    ma, mb = read_metrics(a), read_metrics(b)
    if len(ma) != len(mb):
        out.append(f"metrics: {len(ma)} records against {len(mb)}")
    for ra, rb in zip(ma, mb):
        keys = sorted((set(ra) | set(rb)) - {k for k in set(ra) | set(rb) if _timed(k)})
        diff = [k for k in keys if ra.get(k) != rb.get(k)]
        if diff:
            k = diff[0]
            out.append(f"metrics: step {ra.get('step')}: {len(diff)} keys differ, first {k}: {ra.get(k)!r} against "
                       f"{rb.get(k)!r}")
            break
    fa, fb = a / "rollouts.jsonl.gz", b / "rollouts.jsonl.gz"
    if fa.is_file() and fb.is_file():
        wa, wb = read_rollouts(fa), read_rollouts(fb)
        if len(wa) != len(wb):
            out.append(f"rollouts: {len(wa)} games against {len(wb)}")
        for i, (ga, gb) in enumerate(zip(wa, wb)):
            if _game(ga) != _game(gb):
                out.append(f"rollouts: game {i} (step {ga.get('step')}) differs")
                break
    elif fa.is_file() != fb.is_file():
        out.append("rollouts: saved by one run only")
    for name in ("final", "final_live"):
        da, db = a / name, b / name
        if da.is_dir() or db.is_dir():
            if not (da.is_dir() and db.is_dir()):
                out.append(f"{name}/: in one run only")
            elif weights_digest(da) != weights_digest(db):
                out.append(f"{name}/: the weights differ")
    return out


def main(run_a: Path, run_b: Path) -> None:
    for r in (run_a, run_b):
        if not (r / "metrics.jsonl").is_file():
            typer.echo(f"{r}: no metrics.jsonl (not a GRPO run folder)", err=True)
            raise typer.Exit(2)
    diffs = compare(run_a, run_b)
    n = len(read_metrics(run_a))
    if diffs:
        typer.echo("\n".join(diffs))
        raise typer.Exit(1)
    has_final = (run_a / "final").is_dir()
    typer.echo(f"the same run: {n} steps of metrics, every saved game"
               + (f", and final/ weights {weights_digest(run_a / 'final')[:16]}" if has_final else "") + " identical")


if __name__ == "__main__":
    if len(sys.argv) == 1:
        sys.argv.append("--help")
    typer.run(main)
