"""A server stopped by Ctrl-C or SIGTERM leaves within a bounded time even if its store does not
close (cli_serve._close_store): the exit status is the signal's, the store's close is tried."""
from __future__ import annotations

import os
import signal
import threading

from convmem import cli_serve


class _StuckStore:
    def __init__(self) -> None:
        self.closing = threading.Event()
        self.release = threading.Event()

    def close(self) -> None:
        self.closing.set()
        assert self.release.wait(10)


def test_a_store_that_does_not_close_does_not_keep_a_stopped_server(monkeypatch):
    exits: list[int] = []
    store = _StuckStore()

    def fake_exit(status: int) -> None:
        exits.append(status)
        store.release.set()  # (the real one never returns)

    monkeypatch.setattr(cli_serve, "SHUTDOWN_GRACE_SECONDS", 0.2)
    monkeypatch.setattr(os, "_exit", fake_exit)
    cli_serve._close_store(store, signal.SIGINT)
    assert store.closing.is_set() and exits == [130]
    exits.clear()
    store.release.clear()
    cli_serve._close_store(store, signal.SIGTERM)
    assert exits == [0]


def test_a_store_that_closes_in_time_or_without_a_signal_is_just_closed(monkeypatch):
    exits: list[int] = []
    closed: list[bool] = []

    class Quick:
        def close(self) -> None:
            closed.append(True)

    monkeypatch.setattr(cli_serve, "SHUTDOWN_GRACE_SECONDS", 0.2)
    monkeypatch.setattr(os, "_exit", exits.append)
    cli_serve._close_store(Quick(), signal.SIGINT)
    cli_serve._close_store(Quick(), 0)
    threading.Event().wait(0.4)  # past the grace: the timer of the first must not fire
    assert closed == [True, True] and exits == []
