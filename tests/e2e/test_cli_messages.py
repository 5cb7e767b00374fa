"""The command line's own messages: a data directory that is a file, a store held by another
process (its pid said once), and what --log-level info and debug tell."""
from __future__ import annotations

import os
import re

import pytest

from convmem import MemoryStore
from convmem.errors import ConvMemError
from convmem.owner import SharedStore
from convmem.store.lock import SHARED_NOTE, DirLock
from e2e_helpers import run_cli


@pytest.mark.parametrize("command", [["serve"], ["health"], ["import", "-"], ["search", "x"], ["export"]])
def test_a_data_dir_that_is_a_file_is_not_a_directory(tmp_path, command):
    file = tmp_path / "notes.txt"
    file.write_text("mine\n")
    done = run_cli(*command, "--data-dir", str(file), input=b"")
    assert done.returncode == 2
    assert done.stderr.decode().splitlines()[-1].startswith(f"convmem: {file} is not a directory")
    assert file.read_text() == "mine\n"  # untouched


def test_busy_names_the_holder_pid_once(tmp_path):
    data = tmp_path / "data"
    with MemoryStore.open(data):  # held directly (not shared) by this process
        done = run_cli("health", "--data-dir", str(data))
        err = done.stderr.decode()
        assert done.returncode == 1 and "BUSY" in err
        assert err.count(str(os.getpid())) == 1, err
        with pytest.raises(ConvMemError) as info:
            MemoryStore.open(data)
        assert info.value.code == "BUSY" and info.value.message.count(str(os.getpid())) == 1


def test_busy_from_a_sharing_holder_that_never_serves_names_the_pid_once(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    lock = DirLock(data, SHARED_NOTE)  # says it shares the store, never opens a socket
    try:
        with pytest.raises(ConvMemError) as info:
            SharedStore.open(data, attach_seconds=0.2)
    finally:
        lock.release()
    assert info.value.code == "BUSY"
    assert info.value.message.count(str(os.getpid())) == 1, info.value.message
    assert "within 0.2 s" in info.value.message


def test_log_level_info_and_debug_say_where_how_long_and_how_much(tmp_path):
    data = tmp_path / "data"
    lines = b"".join(b'{"session_id":"s%d","role":"user","content":"m%d"}\n' % (i % 2, i) for i in range(3))
    assert run_cli("import", "-", "--data-dir", str(data), input=lines).returncode == 0
    quiet = run_cli("health", "--data-dir", str(data))
    assert quiet.returncode == 0 and quiet.stderr == b""  # the default level says nothing
    info = run_cli("--log-level", "info", "health", "--data-dir", str(data)).stderr.decode()
    assert f"data directory: {data}" in info
    assert re.search(rf"opened {re.escape(str(data))} in \d+ ms: 3 messages in 2 sessions, log \d+ bytes", info), info
    debug = run_cli("health", "--data-dir", str(data), "--log-level", "debug").stderr.decode()
    assert "snapshot loaded" in debug and "log records replayed" in debug
    assert quiet.stdout.startswith(b"status OK: 3 messages in 2 sessions")
