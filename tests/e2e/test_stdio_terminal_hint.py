"""A person who types at `convmem serve` started from a terminal gets one hint on stderr saying
what the server expects, however many lines they type; a host (pipes) never gets it."""
from __future__ import annotations

import os
import pty
import subprocess
import time

from e2e_helpers import ANSWER_TIMEOUT, PACKAGE_ROOT, RawStdioServer, child_env, convmem_cmd

HINT_START = b"convmem: that line is not JSON-RPC."


def test_typing_at_a_terminal_gets_one_hint(tmp_path):
    master, slave = pty.openpty()
    err_path = tmp_path / "stderr"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(convmem_cmd("serve", "--data-dir", str(tmp_path / "data")),
                                stdin=slave, stdout=subprocess.PIPE, stderr=err,
                                env=child_env(), cwd=PACKAGE_ROOT)
    os.close(slave)
    try:
        deadline = time.monotonic() + ANSWER_TIMEOUT
        while b"Press Ctrl-C or Ctrl-D" not in err_path.read_bytes():  # the banner: serving
            assert time.monotonic() < deadline and proc.poll() is None, err_path.read_bytes()
            time.sleep(0.05)
        for line in (b"hello\n", b"what is this?\n", b"help\n"):
            os.write(master, line)
        # Each typed line is still answered as JSON-RPC requires (a parse error on stdout).
        assert proc.stdout is not None
        answers = [proc.stdout.readline() for _ in range(3)]
        assert all(b'"code":-32700' in a for a in answers), answers
        os.write(master, b"\x04")  # Ctrl-D: end of input
        assert proc.wait(timeout=ANSWER_TIMEOUT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    stderr = err_path.read_bytes()
    assert stderr.count(HINT_START) == 1, stderr.decode(errors="replace")
    assert b"not valid JSON" not in stderr  # (the per-line warning is not repeated either)


def test_a_host_on_pipes_gets_no_hint(tmp_path):
    server = RawStdioServer(tmp_path / "data")
    server.initialize()
    server.send_line(b"hello")
    server.send_line(b"again")
    assert server.request("tools/list", {})["result"]["tools"]
    assert server.close() == 0
    assert HINT_START.decode() not in server.stderr_text()
