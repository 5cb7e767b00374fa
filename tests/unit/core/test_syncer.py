"""The flusher (convmem._core.syncer and its twin): a log append's fdatasync on its own thread,
its errors, one flush at a time, its thread's lifetime, and fork."""
from __future__ import annotations

import errno
import gc
import os
import signal
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from convmem._core import pysyncer
from convmem._core import syncer as core_syncer

FLUSHERS = [core_syncer.Syncer, pysyncer.Syncer]  # compiled (or the twin under CONVMEM_PURE), twin


@pytest.fixture
def fd(tmp_path) -> Iterator[int]:
    """A descriptor of an empty file, open for reading and writing."""
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        yield fd
    finally:
        os.close(fd)


@pytest.mark.parametrize("make", FLUSHERS)
def test_flusher_flushes_and_can_be_reused(make, fd):
    s = make()
    for i in range(50):
        os.pwrite(fd, b"x" * 100, 100 * i)
        s.start(fd, 100 * i, 100)
        assert s.pending
        s.wait()
        assert not s.pending
    assert os.fstat(fd).st_size == 5000


@pytest.mark.parametrize("make", FLUSHERS)
def test_flusher_reports_the_flush_errno(make, tmp_path):
    s = make()
    r, w = os.pipe()
    try:
        s.start(r)
        with pytest.raises(OSError) as info:
            s.wait()
        assert info.value.errno == errno.EINVAL  # fdatasync of a pipe
    finally:
        os.close(r)
        os.close(w)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    os.close(fd)
    s.start(fd)  # closed since
    with pytest.raises(OSError) as info:
        s.wait()
    assert info.value.errno == errno.EBADF
    assert not s.pending
    fd = os.open(tmp_path / "g", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        s.start(fd)  # a failure leaves it usable
        s.wait()
    finally:
        os.close(fd)


@pytest.mark.parametrize("make", FLUSHERS)
def test_flusher_runs_one_flush_at_a_time(make, fd):
    s = make()
    with pytest.raises(RuntimeError):
        s.wait()
    with pytest.raises(ValueError):
        s.start(-1)
    s.start(fd)
    with pytest.raises(RuntimeError):
        s.start(fd)
    s.wait()
    with pytest.raises(RuntimeError):
        s.wait()


def _quiet_process() -> None:
    """No other thread comes or goes while a test counts the process's threads: earlier tests'
    stores are collected (their index workers end) and their Python threads (background
    snapshots, verifiers) have finished."""
    gc.collect()
    for thread in threading.enumerate():
        if thread.name.startswith("convmem-"):
            thread.join(timeout=30)


def _threads_down_to(n: int) -> int:
    """The process's thread count once it is at most n, or what it still is after 5 s: a thread
    of an earlier test (not one of convmem's) was once seen ending during this test (CI, pure
    twins: 2 threads where 1 was left). A thread that is never joined keeps the count up, so a
    flusher that leaks its thread still fails."""
    tasks = Path("/proc/self/task")
    deadline = time.monotonic() + 5.0
    while (count := len(list(tasks.iterdir()))) > n and time.monotonic() < deadline:
        time.sleep(0.01)
    return count


def test_flusher_thread_starts_on_first_use_and_is_joined_when_dropped(fd):
    threads = 0 if core_syncer is pysyncer else 1  # the twin (CONVMEM_PURE) flushes in wait()
    _quiet_process()
    tasks = Path("/proc/self/task")
    n0 = len(list(tasks.iterdir()))
    s = core_syncer.Syncer()
    assert _threads_down_to(n0) <= n0  # (no thread before the first flush)
    s.start(fd)
    s.wait()
    n1 = len(list(tasks.iterdir()))
    assert n0 + threads <= n1 <= n0 + threads + 1  # (its thread, and at most one stranger)
    del s
    assert _threads_down_to(n1 - threads) <= n1 - threads  # (its thread joined)


def test_flusher_works_in_a_fork_child(fd):
    """A child has no copy of the worker thread: the flusher starts a new one there."""
    s = core_syncer.Syncer()
    s.start(fd)
    s.wait()
    pid = os.fork()
    if pid == 0:  # child: flush twice, then report success by exit status
        code = 1
        try:
            for _ in range(2):
                s.start(fd)
                s.wait()
            code = 7
        finally:
            os._exit(code)
    deadline = time.monotonic() + 20
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if done[0] == 0:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert done[0] == pid and os.waitstatus_to_exitcode(done[1]) == 7
    s.start(fd)  # the parent's worker is untouched
    s.wait()
