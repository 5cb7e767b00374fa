"""Faults around the store's files: an interrupted import, an export racing a rebuild, a full disk
at open and for snapshots, files that cannot be used, other versions, file modes, planted links.

Each test injects the fault the way it happens (a signal to a real import, ENOSPC or EACCES from
the system call's wrapper, a directory where a file should be) and checks what the store then
says and serves.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import stat
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from convmem import ConvMemError, MemoryStore
from convmem._core import codec
from convmem.api import snapshots as snapshots_module
from convmem.api import store as store_module
from convmem.store import io as store_io

LOG, SNAP = "messages.log", "snapshot.bin"


def write_n(s: MemoryStore, n: int, session: str = "s") -> list[str]:
    return [s.write_message(session_id=session, role="user", content=f"message {i}")["message"]["message_id"]
            for i in range(n)]


def log_records(path: Path) -> int:
    data = (path / LOG).read_bytes()
    return len(codec.scan_log(data, codec.LOG_HEADER_SIZE, len(data)).offsets)


def enospc(*_args, **_kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


# -- an interrupted import ---------------------------------------------------------------------
def test_interrupt_while_a_batch_is_applied_leaves_no_invisible_record(store_dir, monkeypatch):
    real = store_module.Catalog.apply_new_batch

    def interrupted(self, recs, offsets, lengths, **kwargs):
        real(self, recs[:3], offsets[:3], lengths[:3])  # part of the batch applied...
        raise KeyboardInterrupt  # ...then Ctrl-C

    items = [{"session_id": "s", "role": "user", "content": f"imported {i}"} for i in range(10)]
    with MemoryStore.open(store_dir) as s:
        monkeypatch.setattr(store_module.Catalog, "apply_new_batch", interrupted)
        with pytest.raises(KeyboardInterrupt):
            s.import_message_batch(items)
        monkeypatch.undo()
        h = s.get_system_health()
        assert h["active_messages"] == 10 == log_records(store_dir)  # every record is visible
        assert len(s.search_messages(query="imported", limit=100)["results"]) == 10
        s.rebuild_index()  # and a rebuild keeps them
        assert s.get_system_health()["active_messages"] == 10
    with MemoryStore.open(store_dir) as s:
        assert s.get_system_health()["active_messages"] == 10


def _sigint_as_on_a_terminal() -> None:
    """(preexec_fn) SIGINT at its default, as a command started from a terminal has it: one
    started as a background job of a shell without job control inherits it ignored, and by the
    POSIX convention an import then runs on through it (SIGTERM still stops it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signalled_cli_import_keeps_every_logged_record_visible(tmp_path, sig):
    lines = tmp_path / "in.jsonl"
    with open(lines, "w", encoding="utf-8") as f:
        for i in range(60_000):
            f.write(json.dumps({"session_id": f"s{i // 500}", "role": "user",
                                "content": f"line {i} " + "word " * 20}) + "\n")
    data = tmp_path / "data"
    proc = subprocess.Popen([sys.executable, "-m", "convmem", "import", "--data-dir", str(data),
                             str(lines)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=_sigint_as_on_a_terminal)
    deadline = time.monotonic() + 60
    while (not (data / LOG).exists() or (data / LOG).stat().st_size < 2_000_000) and \
            proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(sig)
    proc.wait(timeout=120)
    with MemoryStore.open(data) as s:
        h = s.get_system_health()
        logged = log_records(data)
        assert 0 < logged and h["active_messages"] == logged
        assert h["status"] == "OK"


# -- an export racing a rebuild ----------------------------------------------------------------
def test_export_fails_clearly_when_a_rebuild_renumbers_the_store(store):
    ids = write_n(store, 5, "a") + write_n(store, 5, "b")
    store.delete_message(message_id=ids[0])
    export = store.export_messages()
    first = [next(export) for _ in range(3)]
    store.rebuild_index()
    with pytest.raises(ConvMemError) as err:
        next(export)
    assert err.value.code == "CONFLICT" and "rebuilt" in err.value.message
    assert [m["message_id"] for m in first] == ids[1:4]
    assert [m["message_id"] for m in store.export_messages()] == ids[1:]  # a new one is right


# -- a full disk ---------------------------------------------------------------------------------
def test_store_opens_read_write_when_its_snapshot_cannot_be_written(store_dir, monkeypatch):
    with MemoryStore.open(store_dir) as s:
        write_n(s, 5)
    (store_dir / SNAP).unlink()  # as after a crash: only the log
    monkeypatch.setattr(snapshots_module, "write_snapshot", enospc)
    with MemoryStore.open(store_dir) as s:  # (refused to open before)
        h = s.get_system_health()
        assert h["active_messages"] == 5 and h["status"] == "DEGRADED"
        assert "snapshot write failed" in h["last_error"]
        assert len(s.read_messages(session_id="s")["history"]) == 5
        monkeypatch.undo()  # room again: the next write works, a snapshot clears the report
        s.write_message(session_id="s", role="user", content="after")
        s.checkpoint()
        assert s.get_system_health()["status"] == "OK"
    with MemoryStore.open(store_dir) as s:
        assert len(s.read_messages(session_id="s")["history"]) == 6


def settle(s: MemoryStore) -> None:
    """Wait for a periodic snapshot being written in the background (and take its outcome)."""
    with s._mutex:
        s._wait_snapshot()


def test_failed_periodic_snapshot_is_not_retried_on_every_write(store_dir, monkeypatch):
    monkeypatch.setattr(snapshots_module, "SNAPSHOT_EVERY_RECORDS", 10)
    attempts = []

    def failing(*args, **kwargs):
        attempts.append(1)
        enospc()

    with MemoryStore.open(store_dir) as s:
        monkeypatch.setattr(snapshots_module, "write_snapshot", failing)
        write_n(s, 50)
        settle(s)
        assert len(attempts) == 1  # the first due one failed; 40 more writes did not retry
        assert "snapshot write failed" in s.get_system_health()["last_error"]
        monkeypatch.setattr(snapshots_module, "SNAPSHOT_RETRY_SECONDS", 0.0)
        write_n(s, 10)
        settle(s)
        assert len(attempts) == 2  # as many records again (and the pause) later: one retry
        monkeypatch.undo()


# -- files that cannot be used -------------------------------------------------------------------
def test_snapshot_replaced_by_a_directory_is_rebuilt_from_the_log(store_dir):
    with MemoryStore.open(store_dir) as s:
        write_n(s, 3)
    (store_dir / SNAP).unlink()
    (store_dir / SNAP).mkdir()
    with MemoryStore.open(store_dir) as s:
        h = s.get_system_health()
        assert h["active_messages"] == 3 and h["snapshot_valid"] is False
        assert "snapshot" in h["last_error"]


def test_unreadable_snapshot_is_rebuilt_from_the_log(store_dir, monkeypatch):
    with MemoryStore.open(store_dir) as s:
        write_n(s, 3)
    real = store_io.open_file

    def refuse_snapshot(path, flags, mode=0o600):
        if Path(path).name == SNAP:
            raise PermissionError(errno.EACCES, "Permission denied")
        return real(path, flags, mode)

    monkeypatch.setattr("convmem.store.snapshot.open_file", refuse_snapshot)
    with MemoryStore.open(store_dir) as s:
        h = s.get_system_health()
        assert h["active_messages"] == 3 and h["snapshot_valid"] is False


@pytest.mark.parametrize("name, errno_", [(LOG, errno.EROFS), ("LOCK", errno.EROFS),
                                          (LOG, errno.EACCES)])
def test_unusable_log_or_lock_is_one_io_error_naming_the_path(store_dir, monkeypatch, name, errno_):
    with MemoryStore.open(store_dir) as s:
        write_n(s, 1)
    real = store_io.open_file

    def refuse(path, flags, mode=0o600):
        if Path(path).name == name:
            raise OSError(errno_, os.strerror(errno_))
        return real(path, flags, mode)

    monkeypatch.setattr("convmem.store.logfile.open_file", refuse)
    monkeypatch.setattr("convmem.store.lock.open_file", refuse)
    with pytest.raises(ConvMemError) as err:
        MemoryStore.open(store_dir)
    assert err.value.code == "IO_ERROR" and str(store_dir / name) in err.value.message
    assert os.strerror(errno_) in err.value.message


def test_log_replaced_by_a_directory_is_an_io_error(store_dir):
    store_dir.mkdir(parents=True)
    (store_dir / LOG).mkdir()
    with pytest.raises(ConvMemError) as err:
        MemoryStore.open(store_dir)
    assert err.value.code == "IO_ERROR" and LOG in err.value.message


def test_cli_reports_an_unusable_store_in_one_line(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / LOG).mkdir()
    r = subprocess.run([sys.executable, "-m", "convmem", "health", "--data-dir", str(data)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().count("\n") == 0 and "IO_ERROR" in r.stderr and LOG in r.stderr


def test_snapshot_of_another_format_version_is_rebuilt_without_degrading(store_dir):
    with MemoryStore.open(store_dir) as s:
        write_n(s, 3)
    data = bytearray((store_dir / SNAP).read_bytes())
    struct.pack_into("<I", data, 8, 7)  # format_version 7, header checksum made valid again
    struct.pack_into("<I", data, 20, zlib.crc32(bytes(data[:20])))
    (store_dir / SNAP).write_bytes(bytes(data))
    with MemoryStore.open(store_dir) as s:
        h = s.get_system_health()
        assert h["active_messages"] == 3 and h["status"] == "OK" and h["last_error"] == ""


def test_log_of_another_format_version_says_so(store_dir):
    with MemoryStore.open(store_dir) as s:
        write_n(s, 1)
    with open(store_dir / LOG, "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<I", 7))
    with pytest.raises(ConvMemError) as err:
        MemoryStore.open(store_dir)
    assert err.value.code == "CORRUPT_STORE" and "format_version 7" in err.value.message


# -- file modes and planted links ----------------------------------------------------------------
def test_directory_and_files_are_private_to_their_owner(store_dir):
    with MemoryStore.open(store_dir) as s:
        write_n(s, 2)
        s.rebuild_index()
        s.write_message(session_id="s", role="user", content="after")
    assert stat.S_IMODE(store_dir.stat().st_mode) == 0o700
    files = {p.name: stat.S_IMODE(p.stat().st_mode) for p in store_dir.iterdir()}
    assert set(files) == {LOG, SNAP, "LOCK", "cursor.key"}
    assert set(files.values()) == {0o600}, files


def test_files_readable_by_others_are_made_private(store_dir):
    with MemoryStore.open(store_dir) as s:
        write_n(s, 1)
    for p in store_dir.iterdir():
        p.chmod(0o644)
    store_dir.chmod(0o700)
    with MemoryStore.open(store_dir):
        pass
    assert {stat.S_IMODE(p.stat().st_mode) for p in store_dir.iterdir()} == {0o600}


def test_directory_writable_by_others_or_owned_by_another_user_is_refused(store_dir, monkeypatch):
    store_dir.mkdir(mode=0o700)
    store_dir.chmod(0o777)
    with pytest.raises(ConvMemError) as err:
        MemoryStore.open(store_dir)
    assert err.value.code == "IO_ERROR" and "writable by other users" in err.value.message
    store_dir.chmod(0o700)
    monkeypatch.setattr(store_io.os, "geteuid", lambda: os.stat(store_dir).st_uid + 1)
    with pytest.raises(ConvMemError) as err:
        MemoryStore.open(store_dir)
    assert "belongs to another user" in err.value.message
    monkeypatch.undo()
    with MemoryStore.open(store_dir) as s:  # its owner, mode 700: fine
        write_n(s, 1)


def test_planted_links_are_never_followed(store_dir, tmp_path):
    with MemoryStore.open(store_dir) as s:
        write_n(s, 3)
    target = tmp_path / "victim"
    target.write_bytes(b"precious")
    (store_dir / "LOCK").unlink()
    (store_dir / "LOCK").symlink_to(target)
    with pytest.raises(ConvMemError):  # the lock is not taken through a link
        MemoryStore.open(store_dir)
    (store_dir / "LOCK").unlink()
    with MemoryStore.open(store_dir) as s:
        # Links planted under the temporary names while the store runs (after open removed
        # the leftovers): the snapshot, the compacted log and the key are not written there.
        for name in ("snapshot.bin.tmp", "messages.log.compact", "snapshot.bin.next.tmp"):
            (store_dir / name).symlink_to(target)
        s.write_message(session_id="s", role="user", content="more")
        s.checkpoint()
        s.rebuild_index()
        assert s.get_system_health()["active_messages"] == 4
    (store_dir / "cursor.key").unlink()
    (store_dir / "cursor.key.tmp").symlink_to(target)
    with MemoryStore.open(store_dir):
        pass
    assert target.read_bytes() == b"precious"
    assert not any(p.is_symlink() for p in store_dir.iterdir())
