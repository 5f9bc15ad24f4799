"""Fair scheduling of the SQL server's calls onto worker threads.

Every database call blocks a thread (a SQLite statement, or a PostgreSQL round trip). Left to anyio's shared pool of
40 threads, 80 sessions each running a slow statement made another session's 58 ms query wait 7.6 s (issue 33). The
scheduler bounds what one session can take and keeps a lane for cheap calls:

* **one call per session at a time**: a session's further calls wait without a thread (so one session never holds
  more than one worker, whatever it sends);
* **`workers` threads** of the scheduler's own (default 16), `reserved` of them (default 4) a *reserved lane*;
* **light sessions use the reserved lane** when the general workers are all busy. A session is light once one of
  its calls finished within `lane_s` (default 1 s) and until a call runs longer (or times out): then it is heavy
  for `penalty_s` (default 30 s). A new session is not light yet;
* **a call in the reserved lane gets `lane_s`**: past it the call is stopped and rolled back (`LaneExceeded`), its
  session becomes heavy and the call runs again in the general lane with its full time limit.

The bound this gives: a light session's call waits for a worker at most about `lane_s` x the light calls queued
ahead of it / `reserved`, however many heavy calls are running or queued (each waits its turn, first come first
served, in the general lane). Tested in tests/sql/test_hardening.py (`test_slow_sessions_cannot_starve_a_cheap_call`).
"""

from __future__ import annotations

import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from mcp_server_sql.db import LaneExceeded, SessionDB

T = TypeVar("T")


@dataclass
class _State:
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    proven: bool = False  # a call finished within lane_s
    heavy_until: float = 0.0


@dataclass
class _Waiter:
    light: bool
    event: anyio.Event = field(default_factory=anyio.Event)
    lane: str | None = None


class Scheduler:
    """See the module docstring. `run(db, fn)` runs `fn()` (blocking work on `db`) on a worker thread."""

    def __init__(self, workers: int = 16, reserved: int = 4, lane_s: float = 1.0, penalty_s: float = 30.0) -> None:
        if workers < 1 or not 0 <= reserved < workers:
            raise ValueError(f"need workers >= 1 and 0 <= reserved < workers (got {workers}, {reserved})")
        self.workers, self.reserved, self.lane_s, self.penalty_s = workers, reserved, lane_s, penalty_s
        self._free = {"general": workers - reserved, "reserved": reserved}
        self._waiters: deque[_Waiter] = deque()
        self._states: weakref.WeakKeyDictionary[SessionDB, _State] = weakref.WeakKeyDictionary()
        self._threads: anyio.CapacityLimiter | None = None
        self.stats = {"calls": 0, "reserved_lane": 0, "stopped_in_lane": 0}

    def _state(self, db: SessionDB) -> _State:
        st = self._states.get(db)
        if st is None:
            st = self._states[db] = _State()
        return st

    def light(self, db: SessionDB) -> bool:
        """Whether the session's calls may use the reserved lane now."""
        st = self._state(db)
        return st.proven and time.monotonic() >= st.heavy_until

    async def _take(self, light: bool) -> str:
        if not self._waiters and self._free["general"]:
            self._free["general"] -= 1
            return "general"
        if light and self._free["reserved"] and not any(w.light for w in self._waiters):
            self._free["reserved"] -= 1
            return "reserved"
        w = _Waiter(light)
        self._waiters.append(w)
        try:
            await w.event.wait()
        except BaseException:
            if w.lane is not None:
                self._release(w.lane)
            else:
                self._waiters.remove(w)
            raise
        assert w.lane is not None
        return w.lane

    def _release(self, lane: str) -> None:
        self._free[lane] += 1
        for w in list(self._waiters):
            if self._free["general"]:
                w.lane = "general"
            elif w.light and self._free["reserved"]:
                w.lane = "reserved"
            else:
                continue
            self._free[w.lane] -= 1
            self._waiters.remove(w)
            w.event.set()
            if not (self._free["general"] or self._free["reserved"]):
                break

    async def run(self, db: SessionDB, fn: Callable[[], T]) -> T:
        if self._threads is None:
            self._threads = anyio.CapacityLimiter(self.workers)
        st = self._state(db)
        async with st.lock:  # one call per session
            while True:
                lane = await self._take(self.light(db))
                self.stats["calls"] += 1
                self.stats["reserved_lane"] += lane == "reserved"
                lane_s = self.lane_s if lane == "reserved" else None
                t0 = time.monotonic()
                slow = True
                try:
                    out = await anyio.to_thread.run_sync(_with_lane, db, lane_s, fn, limiter=self._threads)
                    slow = time.monotonic() - t0 > self.lane_s
                    return out
                except LaneExceeded:
                    self.stats["stopped_in_lane"] += 1
                    continue  # heavy now: again, in the general lane, with the full time limit
                except BaseException:
                    slow = time.monotonic() - t0 > self.lane_s
                    raise
                finally:
                    if slow:
                        st.heavy_until = time.monotonic() + self.penalty_s
                    else:
                        st.proven = True
                    self._release(lane)

    def snapshot(self) -> dict[str, Any]:
        """Free workers per lane, calls waiting, counters (for tests and benchmarks)."""
        return {"free": dict(self._free), "waiting": len(self._waiters), **self.stats}


def _with_lane(db: SessionDB, lane_s: float | None, fn: Callable[[], T]) -> T:
    db.lane_s = lane_s
    try:
        return fn()
    finally:
        db.lane_s = None
