"""Threads for work no answer to a client waits for (a periodic snapshot, the log's check after
an open), run at a lower scheduling priority than the threads that answer clients.

On two cores a snapshot's merge and a write's own threads (the caller, the log's flusher)
contend for the CPU: with equal priorities a woken flusher can wait milliseconds behind the
merge, and the write that waits for its flush waits with it (slow writes measured 2-5 ms of
wall on 0.2-0.3 ms of CPU). At 1M messages, `benchmarks/open_latency.py writes --count 3000`,
six runs a side alternating on 2026-12-05: the write p99 during a snapshot was 0.21-0.51 ms at
nice 10 (0.34-1.27x the quiet fdatasync floor's p99) against 0.34-3.47 ms at equal priority
(1.41-8.64x). At nice 10 the thread still gets about a tenth of a core against a busy one, so a
loaded machine delays a snapshot (the log holds everything meanwhile) but does not stall it.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable

log = logging.getLogger("convmem")

BACKGROUND_NICE = 10  # added to the thread's nice value (Linux: nice is per thread)


def lower_this_thread() -> bool:
    """Raise the calling thread's nice value by BACKGROUND_NICE (capped at 19); True when done.
    Only on Linux, where a thread id names one thread for setpriority; elsewhere the same call
    would name the process or nothing, so it is not made."""
    if not sys.platform.startswith("linux") or BACKGROUND_NICE <= 0:
        return False
    tid = threading.get_native_id()
    try:
        now = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(19, now + BACKGROUND_NICE))
    except OSError as exc:  # (a sandbox that forbids it: the work runs at normal priority)
        log.debug("could not lower a background thread's priority: %s", exc)
        return False
    return True


def background_thread(target: Callable[[], None], name: str) -> threading.Thread:
    """A daemon thread (not started yet) that runs `target` at background priority."""

    def run() -> None:
        lower_this_thread()
        target()

    return threading.Thread(target=run, name=name, daemon=True)
