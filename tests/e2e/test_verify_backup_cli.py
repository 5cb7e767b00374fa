"""`convmem verify` (every record, the snapshot, every posting list; exit 1 on damage) and
`convmem backup DEST` (a consistent copy of a live store, while a host owns it)."""
from __future__ import annotations

import json
from pathlib import Path

from e2e_helpers import RawStdioServer, run_cli

from convmem import MemoryStore


def make(data: Path, n: int = 30) -> None:
    with MemoryStore.open(data) as s:
        for i in range(n):
            s.write_message(session_id=f"s{i % 3}", role="user", content=f"message number {i}")


def test_verify_passes_a_sound_store_and_fails_a_damaged_one(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make(data)
    done = run_cli("verify", "--data-dir", str(data))
    assert done.returncode == 0 and done.stdout.endswith(b"ok\n"), done.stdout
    log = data / "messages.log"
    raw = bytearray(log.read_bytes())
    raw[len(raw) // 2] ^= 0x40  # a flipped bit in the middle of the log
    log.write_bytes(bytes(raw))
    done = run_cli("verify", "--json", "--data-dir", str(data))
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["ok"] is False
    assert len(report["log_damage"]) == 1 and report["log_damage"][0]["offset"] < len(raw) // 2


def test_backup_of_a_live_store_opens_by_itself(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make(data)
    host = RawStdioServer(data)  # a host owns the store: the backup goes through it
    host.initialize()
    try:
        payload, _ = host.call("write_message", {"session_id": "s0", "role": "user", "content": "live one"})
        assert payload["status"] == "OK"
        done = run_cli("backup", str(tmp_path / "copy"), "--data-dir", str(data))
        assert done.returncode == 0, done.stderr
        payload, _ = host.call("write_message", {"session_id": "s0", "role": "user", "content": "after it"})
    finally:
        assert host.close() == 0
    done = run_cli("health", "--json", "--data-dir", str(tmp_path / "copy"))
    health = json.loads(done.stdout)
    assert health["active_messages"] == 31 and health["status"] == "OK"
    assert run_cli("verify", "--data-dir", str(tmp_path / "copy")).returncode == 0
    done = run_cli("search", "live", "--json", "--data-dir", str(tmp_path / "copy"))
    assert [r["content"] for r in json.loads(done.stdout)["results"]] == ["live one"]
