"""A store opened read-only (read-only media, a directory this user may not write, a backup):
every read works, nothing in the directory changes, every write is IO_ERROR, a torn tail is
left in the file and not served."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from convmem import ConvMemError, MemoryStore


def files(path: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(path.iterdir())}


def test_read_only_store_reads_everything_and_writes_nothing(tmp_path):
    with MemoryStore.open(tmp_path) as s:
        ids = [s.write_message(session_id="s", role="user", content=f"message {i}")["message"]["message_id"]
               for i in range(5)]
        s.write_message(session_id="t", role="user", content="after the snapshot")
    (tmp_path / "cursor.key").unlink()  # (as in a copy without it)
    with open(tmp_path / "messages.log", "ab") as f:
        f.write(b"\x13" * 30)  # a torn tail
    before = files(tmp_path)
    with MemoryStore.open(tmp_path, read_only=True) as s:
        assert [m["content"] for m in s.read_messages(session_id="s")["history"]] == [
            f"message {i}" for i in range(5)]
        assert len(s.search_messages(query="message")["results"]) == 5
        assert len(s.search_messages(query="snapshot")["results"]) == 1
        page = s.read_messages(session_id="s", limit=2)
        assert len(s.read_messages(session_id="s", limit=2, cursor=page["nextCursor"])["history"]) == 2
        h = s.get_system_health()
        assert h["active_messages"] == 6 and h["recovered_tail"] is True
        for call in (lambda: s.write_message(session_id="s", role="user", content="no"),
                     lambda: s.update_message(message_id=ids[0], content="no"),
                     lambda: s.delete_message(message_id=ids[0]),
                     lambda: s.rebuild_index(),
                     lambda: s.import_message_batch([{"session_id": "s", "role": "user", "content": "no"}])):
            with pytest.raises(ConvMemError) as err:
                call()
            assert err.value.code == "IO_ERROR" and "read-only" in err.value.message
        assert s.verify()["log_damage"]  # the tail is reported by verify
    assert files(tmp_path) == before  # nothing created, written, truncated or removed


def test_read_only_open_of_a_directory_without_a_store_creates_nothing(tmp_path):
    with pytest.raises(ConvMemError) as err:
        MemoryStore.open(tmp_path, read_only=True)
    assert err.value.code == "IO_ERROR" and "holds no store" in err.value.message
    assert list(tmp_path.iterdir()) == []


def test_read_only_open_beside_an_owner_is_busy(tmp_path):
    with MemoryStore.open(tmp_path):
        with pytest.raises(ConvMemError) as err:
            MemoryStore.open(tmp_path, read_only=True)
        assert err.value.code == "BUSY"


def test_backup_opens_by_itself_and_read_only(tmp_path):
    with MemoryStore.open(tmp_path / "live") as s:
        for i in range(20):
            s.write_message(session_id="s", role="user", content=f"message {i}")
        result = s.backup(tmp_path / "copy")
        s.write_message(session_id="s", role="user", content="after the backup")
        assert result["status"] == "OK" and s.verify()["ok"]
    os.chmod(tmp_path / "copy", 0o700)
    with MemoryStore.open(tmp_path / "copy", read_only=True) as b:
        assert b.get_system_health()["active_messages"] == 20
        assert b.verify() == {**b.verify(), "ok": True, "log_damage": [], "snapshot": "ok"}
    with pytest.raises(ConvMemError):
        with MemoryStore.open(tmp_path / "live") as s:
            s.backup(tmp_path / "copy")  # not empty: refused
