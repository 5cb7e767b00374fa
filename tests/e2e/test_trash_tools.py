"""The admin toolset over a real server: list_deleted and restore_message are listed only with
`--toolsets admin`, and an acknowledged restore survives kill -9 right after its answer."""
from __future__ import annotations

import os
import signal
from pathlib import Path

from e2e_helpers import RawStdioServer, assert_error

from convmem import MemoryStore


def start(data: Path, *args: str) -> RawStdioServer:
    server = RawStdioServer(data, *args)
    server.initialize()
    return server


def ok(server: RawStdioServer, name: str, arguments: dict) -> dict:
    payload, is_error = server.call(name, arguments)
    assert not is_error, (name, payload)
    return payload


def kill9(server: RawStdioServer) -> None:
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait()
    server._stderr.close()  # noqa: SLF001


def test_a_restore_acknowledged_then_killed_is_there_after_reopen(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = start(data, "--toolsets", "admin")
    try:
        names = [t["name"] for t in server.request("tools/list", {})["result"]["tools"]]
        assert names[-2:] == ["list_deleted", "restore_message"]
        kept = ok(server, "write_message", {"session_id": "s", "role": "user", "content": "kept"})["message"]
        ids = [ok(server, "write_message", {"session_id": "s", "role": "user",
                                             "content": f"to restore {i}"})["message"]["message_id"]
               for i in range(3)]
        for mid in ids:
            assert ok(server, "delete_message", {"message_id": mid}) == {"status": "OK"}
        listed = ok(server, "list_deleted", {"limit": 2})
        assert [e["message_id"] for e in listed["deleted"]] == ids[:0:-1] and "nextCursor" in listed
        assert_error(*server.call("restore_message", {"message_id": kept["message_id"]}), "VALIDATION_ERROR")
        assert_error(*server.call("restore_message", {"message_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}), "NOT_FOUND")
        ok(server, "restore_message", {"message_id": ids[0]})
        restored = ok(server, "restore_message", {"message_id": ids[2]})
        # Killed the moment the last answer is in: nothing else ran after it (no close, no snapshot).
        kill9(server)
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()
    assert restored["message"]["revision"] == 2
    with MemoryStore.open(data) as store:
        history = store.read_messages(view="history", session_id="s")["history"]
        assert [m["message_id"] for m in history] == [kept["message_id"], ids[0], ids[2]]
        assert history[2] == restored["message"]
        assert [e["message_id"] for e in store.list_deleted()["deleted"]] == [ids[1]]
        assert store.verify()["ok"] is True


def test_an_attached_process_restores_through_the_owner(tmp_path: Path) -> None:
    data = tmp_path / "data"
    owner = start(data)  # the contract: no trash tools of its own
    attached = start(data, "--toolsets", "admin")  # relayed to the owner, with its own toolsets
    try:
        mid = ok(owner, "write_message", {"session_id": "s", "role": "user", "content": "relayed fox"})["message"]["message_id"]
        ok(owner, "delete_message", {"message_id": mid})
        assert [e["message_id"] for e in ok(attached, "list_deleted", {})["deleted"]] == [mid]
        assert ok(attached, "restore_message", {"message_id": mid})["message"]["revision"] == 2
        assert [r["message_id"] for r in ok(owner, "search_messages", {"query": "fox"})["results"]] == [mid]
        assert_error(*owner.call("restore_message", {"message_id": mid}), "VALIDATION_ERROR")  # unknown tool here
    finally:
        assert attached.close() == 0
        assert owner.close() == 0


def test_the_contract_has_no_trash_tools(tmp_path: Path) -> None:
    server = start(tmp_path / "data")
    try:
        names = {t["name"] for t in server.request("tools/list", {})["result"]["tools"]}
        assert "list_deleted" not in names and "restore_message" not in names
        payload, is_error = server.call("list_deleted", {})
        assert_error(payload, is_error, "VALIDATION_ERROR")
        assert payload["error"]["message"] == "unknown tool"
    finally:
        assert server.close() == 0
