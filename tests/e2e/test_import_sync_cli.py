"""`convmem import` on folders and exports (reports, exit status), kill -9 in a large import and a
rerun (every message exactly once), and `convmem sync` following growing transcripts across a
restart (nothing missed, nothing twice)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from convmem import ConvMemError, MemoryStore
from convmem.importers.sync import STATE_NAME, Syncer
from e2e_helpers import PACKAGE_ROOT, child_env, convmem_cmd, run_cli

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "import"
SID = "5d000000-0000-4000-8000-00000000beef"


def cc_line(i: int, sid: str = SID) -> bytes:
    role = "user" if i % 2 == 0 else "assistant"
    msg: dict = {"role": role, "content": f"message {i}: the checkout total is computed in cart.py line {i % 97}"}
    if role == "assistant":
        msg = {"id": f"msg_{i:08d}", "role": "assistant", "content": [{"type": "text", "text": msg["content"]}]}
    row = {"type": role, "uuid": f"00000000-0000-4000-8000-{i:012d}", "parentUuid": None, "sessionId": sid,
           "timestamp": f"2026-03-02T{8 + i // 3_600_000:02d}:{i // 60000 % 60:02d}:{i // 1000 % 60:02d}.{i % 1000:03d}Z",
           "cwd": "/home/ana", "message": msg}
    return orjson.dumps(row) + b"\n"


def exported_ids(data_dir: Path) -> list[str]:
    with MemoryStore.open(data_dir) as s:
        return [m["message_id"] for m in s.export_messages()]


def test_import_cli_reports_each_file_and_exit_status(tmp_path: Path) -> None:
    done = run_cli("import", str(FIX / "chatgpt"), str(FIX / "claude-ai" / "conversations.json"),
                   "--data-dir", str(tmp_path / "d"))
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode().splitlines()
    assert any(line.startswith(str(FIX / "chatgpt" / "conversations.json") + " [chatgpt]: 3 records, 11 imported")
               for line in out), out
    assert any("[claude-ai]: 3 records, 11 imported" in line for line in out)
    err = done.stderr.decode()
    assert "convmem import: 26 imported, 0 already present" in err and "messages/s" in err
    # a file that cannot be read makes the exit status 1; the others are still imported
    bad = tmp_path / "broken.json"
    bad.write_bytes(b'[{"mapping": {"a": ')
    again = run_cli("import", str(bad), str(FIX / "gemini"), "--data-dir", str(tmp_path / "d2"))
    assert again.returncode == 1
    assert "cannot read" in again.stdout.decode()
    assert exported_ids(tmp_path / "d2")  # the Gemini sessions went in


def test_import_cli_forced_format_and_unknown_file(tmp_path: Path) -> None:
    odd = tmp_path / "notes.txt"
    odd.write_text("hello\n")
    done = run_cli("import", str(odd), "--data-dir", str(tmp_path / "d"))
    assert done.returncode == 1 and b"not a format convmem imports" in done.stderr
    forced = run_cli("import", "--format", "gemini", str(FIX / "claude-ai" / "conversations.json"),
                     "--data-dir", str(tmp_path / "d"))
    assert forced.returncode == 1  # read as Gemini it has no sessionId: reported, not guessed


def test_kill_9_during_a_large_import_then_rerun_leaves_each_message_once(tmp_path: Path) -> None:
    # (the pure-Python twins import ~10x slower: a smaller import shows the same)
    n = 6_000 if os.environ.get("CONVMEM_PURE", "") not in ("", "0") else 40_000
    src = tmp_path / f"{SID}.jsonl"
    src.write_bytes(b"".join(cc_line(i) for i in range(n)))
    data = tmp_path / "data"
    proc = subprocess.Popen(convmem_cmd("import", str(src), "--data-dir", str(data)), env=child_env(),
                            cwd=PACKAGE_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = data / "messages.log"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and log.stat().st_size > 10 * n:  # some batches are durable
            break
        time.sleep(0.005)
    assert proc.poll() is None, "the import ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = len(exported_ids(data))
    assert 0 < partial < n
    rerun = run_cli("import", str(src), "--data-dir", str(data))
    assert rerun.returncode == 0, rerun.stderr
    ids = exported_ids(data)
    assert len(ids) == n and len(set(ids)) == n
    fresh = tmp_path / "fresh"
    assert run_cli("import", str(src), "--data-dir", str(fresh)).returncode == 0
    assert sorted(exported_ids(fresh)) == sorted(ids)


def test_sync_follows_growing_files_across_a_restart(tmp_path: Path) -> None:
    root = tmp_path / "claude" / "projects" / "-home-ana"
    root.mkdir(parents=True)
    codex = tmp_path / "codex"
    shutil.copytree(FIX / "codex" / "sessions", codex)
    data = tmp_path / "data"
    transcript = root / f"{SID}.jsonl"
    transcript.write_bytes(b"".join(cc_line(i) for i in range(10)) + cc_line(10)[:25])  # a torn line
    roots = {"claude-code": [tmp_path / "claude" / "projects"], "codex": [codex]}
    with MemoryStore.open(data) as store:
        reports = Syncer(store, data, roots).round()
    counts = {Path(r.path).name: r.imported for r in reports}
    assert counts[transcript.name] == 10  # the unfinished line waits
    assert sum(counts.values()) == 10 + 15
    state = json.loads((data / STATE_NAME).read_text())
    assert state["files"][str(transcript)]["offset"] == len(b"".join(cc_line(i) for i in range(10)))
    # the host finishes the line and writes more; sync was restarted meanwhile
    with transcript.open("ab") as f:
        f.write(cc_line(10)[25:] + b"".join(cc_line(i) for i in range(11, 20)))
    with MemoryStore.open(data) as store:
        syncer = Syncer(store, data, roots)
        reports = syncer.round()
        assert [(Path(r.path).name, r.imported, r.present) for r in reports] == [(transcript.name, 10, 0)]
        assert syncer.round() == []  # nothing changed: nothing read
        with pytest.raises(ConvMemError) as err:  # one sync per data directory
            Syncer(store, data, roots)
        assert err.value.code == "BUSY"
        syncer.close()
    # a crash after the store write but before the marks: the lines come back present
    (data / STATE_NAME).write_text(orjson.dumps({"version": 1, "files": {}}).decode())
    with MemoryStore.open(data) as store:
        reports = Syncer(store, data, roots).round()
        assert sum(r.imported for r in reports) == 0
    ids = exported_ids(data)
    assert len(ids) == len(set(ids)) == 20 + 15


def test_sync_command_shares_the_store_and_stops_on_sigterm(tmp_path: Path) -> None:
    root = tmp_path / "projects" / "-home-ana"
    root.mkdir(parents=True)
    (root / f"{SID}.jsonl").write_bytes(b"".join(cc_line(i) for i in range(4)))
    data = tmp_path / "data"
    cmd = convmem_cmd("sync", "--data-dir", str(data), "--hosts", "claude-code",
                      "--claude-dir", str(tmp_path / "projects"), "--interval", "0.2")
    proc = subprocess.Popen(cmd, env=child_env(), cwd=PACKAGE_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (data / STATE_NAME).exists():
            time.sleep(0.05)
        # The store is shared while sync runs: the CLI works beside it.
        health = run_cli("health", "--json", "--data-dir", str(data))
        assert health.returncode == 0 and json.loads(health.stdout)["active_messages"] == 4
        with (root / f"{SID}.jsonl").open("ab") as f:
            f.write(cc_line(4) + cc_line(5))
        time.sleep(1.0)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert b"stopped; 6 imported" in err
    assert len(exported_ids(data)) == 6
