"""Trajectory journals: JSONL files with one trajectory per line, appended and flushed as each rollout finishes, so a
killed run loses only the rollouts in flight. `toolgym eval` keeps its `results.jsonl` this way and `toolgym synth`
its `<out>.games.jsonl`; both resume from them (`first_finished` + `drop_torn_lines`, then `read_results`)."""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from toolgym.types import Trajectory

T = TypeVar("T")


def record_line(traj: Trajectory) -> tuple[str, Trajectory]:
    """The JSONL line that records `traj`, and the trajectory it records. A trajectory that cannot be serialized
    (values nested too deeply for the JSON encoder, ...) is recorded -- and returned -- as an error record of the same
    (example, rollout), so that one rollout never ends a run and `--resume` runs it again."""
    try:
        return json.dumps(traj.to_dict(), default=str) + "\n", traj
    except (RecursionError, ValueError, TypeError, OverflowError) as exc:
        failed = Trajectory(example_id=traj.example_id, rollout_index=traj.rollout_index, task=traj.task,
                            error=f"the trajectory could not be written ({type(exc).__name__}: {str(exc)[:200]}); "
                                  "tool-call arguments nested too deeply?",
                            stop_reason="error", timings=dict(traj.timings))
        try:
            return json.dumps(failed.to_dict(), default=str) + "\n", failed
        except (RecursionError, ValueError, TypeError, OverflowError):  # the task itself: keep only the ids
            failed.task = {}
            return json.dumps(failed.to_dict(), default=str) + "\n", failed


def read_results(path: Path) -> dict[tuple[int, int], Trajectory]:
    """Finished trajectories in a results.jsonl, last record per (example, rollout) wins; torn lines skipped."""
    done: dict[tuple[int, int], Trajectory] = {}
    if not path.exists():
        return done
    with path.open() as f:
        for line in f:
            try:
                t = Trajectory.from_dict(json.loads(line))
            except (json.JSONDecodeError, TypeError, KeyError):
                continue
            done[(t.example_id, t.rollout_index)] = t
    return done


def drop_torn_lines(path: Path, keep: Callable[[dict[str, Any]], bool] | None = None) -> int:
    """Rewrite a JSONL file without the lines that are not a JSON object (the torn last line of a killed writer) and,
    given `keep`, without the objects `keep` rejects (called on each object in file order), atomically (temp file +
    rename), so the file stays strict JSONL for pandas / datasets. Returns lines dropped."""
    if not path.exists():
        return 0
    good, dropped = [], 0
    for line in path.read_text().splitlines():
        try:
            obj = json.loads(line)
            ok = isinstance(obj, dict) and (keep is None or keep(obj))
        except json.JSONDecodeError:
            ok = False
        if ok:
            good.append(line)
        else:
            dropped += 1
    if dropped:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(line + "\n" for line in good))
        os.replace(tmp, path)
    return dropped


def first_finished() -> Callable[[dict[str, Any]], bool]:
    """A `drop_torn_lines` filter for a resumed run: keeps the first error-free, readable record of each (example,
    rollout) and drops error records (their rollouts run again and append the record that supersedes them)."""
    seen: set[tuple[int, int]] = set()

    def keep(rec: dict[str, Any]) -> bool:
        try:
            t = Trajectory.from_dict(rec)
        except (TypeError, KeyError):
            return False
        key = (t.example_id, t.rollout_index)
        if t.error is not None or key in seen:
            return False
        seen.add(key)
        return True

    return keep


def run_differences(old: dict[str, Any], new: dict[str, Any], keys: tuple[str, ...] | None = None
                    ) -> dict[str, tuple[Any, Any]]:
    """What a resumed run would change: `{key: (old, new)}` for the `keys` of `new` (all of them by default) whose
    value differs from the recorded run's, compared as JSON would store them."""
    new = json.loads(json.dumps(new, default=str))
    return {k: (old.get(k), v) for k, v in new.items() if (keys is None or k in keys) and old.get(k) != v}


def dump_tasks_on_sigusr1() -> None:
    """On SIGUSR1, print the stack of every asyncio task of the running loop to stderr (for a run that hangs: `kill
    -USR1 PID`; thread stacks alone show only the idle event loop). Call from inside the loop; a no-op where the
    signal does not exist or the loop cannot take signal handlers."""
    import asyncio
    import sys

    def dump() -> None:
        for task in asyncio.all_tasks():
            print(f"--- {task!r}", file=sys.stderr)
            task.print_stack(file=sys.stderr)
        sys.stderr.flush()

    if hasattr(signal, "SIGUSR1"):
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, dump)
        except (NotImplementedError, RuntimeError, ValueError):
            pass


def sigterm_as_sigint() -> None:
    """Handle SIGTERM as Ctrl-C (SIGINT) outside an event loop (loading a model, checking a folder): a KeyboardInterrupt
    in the main thread. Inside the loop `run_interruptible` takes both signals over. SIGTERM's default action ended the
    process at once, leaving servers' state behind (a SQL server's session databases, for one). Main thread only
    (elsewhere a no-op)."""
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGTERM"):
        signal.signal(signal.SIGTERM, lambda signum, frame: signal.raise_signal(signal.SIGINT))


def run_interruptible(main: Coroutine[Any, Any, T], what: str = "the run") -> T:
    """`asyncio.run(main)` for a command whose stop must be clean: the first SIGINT (Ctrl-C) or SIGTERM cancels `main`,
    so every `finally` runs (servers stopped, sandboxes removed, sessions released, journals closed) and it ends in
    KeyboardInterrupt, as `asyncio.run` would; a second one raises KeyboardInterrupt at once (a forced stop). SIGUSR1
    prints every task's stack (`dump_tasks_on_sigusr1`).

    The signals are taken by the event loop (`loop.add_signal_handler`, woken through its self-pipe), not by a
    Python-level handler as `asyncio.run`'s own Ctrl-C handling is: that one ran only when the main thread happened to
    execute bytecode after the signal, and under a loaded machine an eval with a pool of stdio servers (whose
    child-watcher threads wait in `waitpid`) once went on for over 60 s after Ctrl-C without ever cancelling. Where the
    loop cannot take signals (not the main thread, Windows) this is plain `asyncio.run`."""
    import asyncio
    import sys

    async def guarded() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        hits = 0

        def on_signal(signum: int) -> None:
            nonlocal hits
            hits += 1
            if hits > 1:
                raise KeyboardInterrupt  # out of the loop at once: the second Ctrl-C forces the stop
            print(f"\n{signal.Signals(signum).name}: stopping {what} (servers closing; again to force)",
                  file=sys.stderr, flush=True)
            assert task is not None
            task.cancel()

        taken: dict[int, Any] = {}
        for sig in (signal.SIGINT, getattr(signal, "SIGTERM", None)):
            if sig is None:
                continue
            previous = signal.getsignal(sig)
            try:
                loop.add_signal_handler(sig, on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                continue
            taken[sig] = previous
        dump_tasks_on_sigusr1()
        try:
            return await main
        except asyncio.CancelledError:
            if hits:
                raise KeyboardInterrupt from None
            raise
        finally:
            for sig, previous in taken.items():
                loop.remove_signal_handler(sig)
                signal.signal(sig, previous)  # asyncio would leave SIG_DFL: SIGTERM stays a clean stop after the loop

    return asyncio.run(guarded())
