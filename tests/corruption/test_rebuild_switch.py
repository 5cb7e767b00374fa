"""rebuild_index's switch under faults: after any failure the store is in one state it can name
(the old files in use, or the new ones) and every write acknowledged afterwards survives a
restart. Faults are injected at the exact step (the rename of the log, the directory fsync,
the rename of the snapshot)."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from convmem import ConvMemError, MemoryStore
from convmem.store import compaction, logfile

LOG = "messages.log"


def fill(s: MemoryStore) -> list[str]:
    """Three live messages and one deleted: a rebuild has something to remove."""
    ids = [s.write_message(session_id="s", role="user", content=f"kept {i}")["message"]["message_id"]
           for i in range(3)]
    gone = s.write_message(session_id="s", role="user", content="removed")["message"]["message_id"]
    s.delete_message(message_id=gone)
    return ids


def contents(s: MemoryStore) -> list[str]:
    return [m["content"] for m in s.read_messages(session_id="s", limit=1000)["history"]]


def after_writes(s: MemoryStore) -> None:
    """Writes, an update and a delete acknowledged after the failed switch."""
    first = s.read_messages(session_id="s")["history"][0]["message_id"]
    s.update_message(message_id=first, content="kept 0, updated")
    second = s.read_messages(session_id="s")["history"][1]["message_id"]
    s.delete_message(message_id=second)
    for i in range(5):
        s.write_message(session_id="s", role="user", content=f"after {i}")


AFTER = ["kept 0, updated", "kept 2"] + [f"after {i}" for i in range(5)]


def eio(*_args, **_kwargs):
    raise OSError(errno.EIO, "Input/output error")


def failing_replace_onto(name: str, monkeypatch, *, after_renaming: bool = False) -> None:
    """os.replace fails (EIO) when its destination is `name`; other renames (the snapshot's
    own temporary file) go through. With after_renaming, it renames, then reports the error."""
    real = os.replace

    def replace(src, dst):
        if Path(dst).name != name:
            return real(src, dst)
        if after_renaming:
            real(src, dst)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "replace", replace)


def test_failed_log_rename_leaves_the_old_store_in_use(store_dir: Path, monkeypatch):
    with MemoryStore.open(store_dir) as s:
        fill(s)
        size = (store_dir / LOG).stat().st_size
        failing_replace_onto(LOG, monkeypatch)
        with pytest.raises(ConvMemError) as err:
            s.rebuild_index()
        monkeypatch.undo()
        assert err.value.code == "IO_ERROR" and "unchanged" in err.value.message
        assert not (store_dir / compaction.COMPACT_NAME).exists()
        assert not (store_dir / compaction.NEXT_SNAPSHOT_NAME).exists()
        assert (store_dir / LOG).stat().st_size == size  # the old log is the one in use
        after_writes(s)
        assert contents(s) == AFTER
    with MemoryStore.open(store_dir) as s:
        assert contents(s) == AFTER
        assert s.get_system_health()["deleted_messages"] == 2  # nothing was compacted


def test_rename_that_reports_failure_after_happening_is_taken_as_done(store_dir: Path, monkeypatch):
    with MemoryStore.open(store_dir) as s:
        fill(s)
        failing_replace_onto(LOG, monkeypatch, after_renaming=True)
        s.rebuild_index()  # the log is in place, so the switch goes on and completes
        monkeypatch.undo()
        assert s.get_system_health()["deleted_messages"] == 0
        after_writes(s)
    with MemoryStore.open(store_dir) as s:
        assert contents(s) == AFTER


@pytest.mark.parametrize("fault", ["directory_fsync", "snapshot_rename"])
def test_failure_after_the_log_rename_switches_to_the_new_log(store_dir: Path, monkeypatch, fault):
    with MemoryStore.open(store_dir) as s:
        fill(s)
        if fault == "directory_fsync":
            monkeypatch.setattr(compaction, "fsync_dir", eio)
        else:
            failing_replace_onto("snapshot.bin", monkeypatch)
        with pytest.raises(ConvMemError) as err:
            s.rebuild_index()
        monkeypatch.undo()
        assert err.value.code == "IO_ERROR" and "compacted" in err.value.message
        h = s.get_system_health()
        assert h["status"] == "DEGRADED" and h["deleted_messages"] == 0  # the new files
        # The name a restart opens holds the log the store now writes to.
        assert os.stat(store_dir / LOG).st_ino == os.fstat(s._log.fd).st_ino  # noqa: SLF001
        assert not (store_dir / compaction.NEXT_SNAPSHOT_NAME).exists()
        after_writes(s)
        assert contents(s) == AFTER
    with MemoryStore.open(store_dir) as s:
        assert contents(s) == AFTER
        assert s.search_messages(query="after")["results"]


def test_no_write_is_acknowledged_while_the_switch_is_not_durable(store_dir: Path, monkeypatch):
    with MemoryStore.open(store_dir) as s:
        fill(s)
        monkeypatch.setattr(compaction, "fsync_dir", eio)
        monkeypatch.setattr(logfile, "fsync_dir", eio)
        with pytest.raises(ConvMemError):
            s.rebuild_index()
        size = s._log.size  # noqa: SLF001
        with pytest.raises(ConvMemError) as err:  # the directory fsync still fails
            s.write_message(session_id="s", role="user", content="not acknowledged")
        assert err.value.code == "IO_ERROR"
        assert s._log.size == size and os.path.getsize(store_dir / LOG) == size  # noqa: SLF001
        monkeypatch.undo()  # the fault clears: the next write makes the rename durable first
        flushes = s.get_system_health()["io"]["flush_calls"]
        s.write_message(session_id="s", role="user", content="acknowledged")
        assert s.get_system_health()["io"]["flush_calls"] == flushes + 2  # directory, then log
        assert "not acknowledged" not in contents(s)
    with MemoryStore.open(store_dir) as s:
        assert contents(s) == ["kept 0", "kept 1", "kept 2", "acknowledged"]
