"""A signal ends `convmem serve` with the same exit status whatever the transport: 0 for SIGTERM
(a host or a service manager stopping it), 130 for SIGINT (Ctrl-C). Both by subprocess."""
from __future__ import annotations

import signal

import pytest

from e2e_helpers import ANSWER_TIMEOUT, HttpServer, RawStdioServer

EXPECTED = {signal.SIGTERM: 0, signal.SIGINT: 130}


def _stdio_status(data_dir, sig) -> int:
    server = RawStdioServer(data_dir)
    try:
        server.initialize()  # serving (its stdin stays open: the signal alone ends it)
        server.proc.send_signal(sig)
        return server.proc.wait(timeout=ANSWER_TIMEOUT)
    finally:
        server.close()


def _http_status(data_dir, sig) -> int:
    server = HttpServer(data_dir)  # (returns once the URL is announced)
    try:
        server.proc.send_signal(sig)
        return server.proc.wait(timeout=ANSWER_TIMEOUT)
    finally:
        server.close()


@pytest.mark.parametrize("sig", list(EXPECTED), ids=lambda s: s.name)
def test_both_transports_exit_alike_on_a_signal(tmp_path, sig):
    statuses = {"stdio": _stdio_status(tmp_path / "a", sig), "http": _http_status(tmp_path / "b", sig)}
    assert statuses == {"stdio": EXPECTED[sig], "http": EXPECTED[sig]}
