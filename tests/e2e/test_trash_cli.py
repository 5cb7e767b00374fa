"""`convmem trash` and `convmem restore ID`: text and --json output, exit codes, the session
filter, through a running owner too, and nothing restorable after `convmem rebuild`."""
from __future__ import annotations

import json
from pathlib import Path

from e2e_helpers import RawStdioServer, run_cli


def populate(data: Path, tmp: Path) -> list[str]:
    rows = [
        {"session_id": "alpha", "role": "user", "content": "the quick brown fox jumps"},
        {"session_id": "alpha", "role": "assistant", "content": "a fox is a small canid",
         "metadata": {"summary": "about foxes"}},
        {"session_id": "beta", "role": "user", "content": "a slow green turtle"},
    ]
    source = tmp / "rows.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run_cli("--data-dir", str(data), "import", str(source)).returncode == 0
    done = run_cli("export", "--data-dir", str(data))
    return [json.loads(line)["message_id"] for line in done.stdout.splitlines()]


def test_trash_and_restore(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ids = populate(data, tmp_path)
    done = run_cli("trash", "--data-dir", str(data))
    assert (done.returncode, done.stdout) == (0, b"no deleted messages\n")
    for mid in (ids[0], ids[1], ids[2]):
        assert run_cli("delete", mid, "--data-dir", str(data)).returncode == 0

    done = run_cli("trash", "--json", "--data-dir", str(data))
    listing = json.loads(done.stdout)
    assert done.returncode == 0 and listing["total_deleted"] == 3
    assert [e["message_id"] for e in listing["deleted"]] == [ids[2], ids[1], ids[0]]
    done = run_cli("trash", "--session", "alpha", "--json", "--data-dir", str(data))
    assert [e["message_id"] for e in json.loads(done.stdout)["deleted"]] == [ids[1], ids[0]]

    lines = run_cli("trash", "--data-dir", str(data), "--limit", "2").stdout.decode().splitlines()
    assert len(lines) == 5 and lines[-1] == "(1 more)"
    assert "  beta  user  " + ids[2] in lines[0] and "deleted #" in lines[0]
    assert lines[1].strip() == "a slow green turtle"
    assert lines[3].strip() == "about foxes"  # the summary when there is one

    done = run_cli("restore", ids[1], "--data-dir", str(data))
    assert (done.returncode, done.stdout) == (0, f"restored {ids[1]} (revision 2)\n".encode())
    done = run_cli("show", "alpha", "--json", "--data-dir", str(data))
    assert [m["content"] for m in json.loads(done.stdout)["history"]] == ["a fox is a small canid"]
    for bad, code in ((ids[1], b"VALIDATION_ERROR"), ("01ARZ3NDEKTSV4RRFFQ69G5FAV", b"NOT_FOUND"),
                      ("nonsense", b"VALIDATION_ERROR")):
        done = run_cli("restore", bad, "--data-dir", str(data))
        assert done.returncode == 1 and done.stderr.startswith(b"convmem: " + code), (bad, done.stderr)
        assert done.stdout == b""
    done = run_cli("restore", ids[2], "--json", "--data-dir", str(data))
    assert done.returncode == 0 and json.loads(done.stdout)["message"]["content"] == "a slow green turtle"

    assert run_cli("rebuild", "--data-dir", str(data)).returncode == 0
    done = run_cli("trash", "--json", "--data-dir", str(data))
    assert json.loads(done.stdout) == {"deleted": [], "total_deleted": 0}
    done = run_cli("restore", ids[0], "--data-dir", str(data))
    assert done.returncode == 1 and b"NOT_FOUND" in done.stderr


def test_trash_and_restore_through_a_running_owner(tmp_path: Path) -> None:
    data = tmp_path / "data"
    host = RawStdioServer(data)  # the contract's seven tools; the CLI still reaches the trash
    host.initialize()
    try:
        payload, _ = host.call("write_message", {"session_id": "g", "role": "user", "content": "live fox"})
        mid = payload["message"]["message_id"]
        host.call("delete_message", {"message_id": mid})
        done = run_cli("trash", "--json", "--data-dir", str(data))
        assert [e["message_id"] for e in json.loads(done.stdout)["deleted"]] == [mid]
        assert run_cli("restore", mid, "--data-dir", str(data)).returncode == 0
        payload, _ = host.call("search_messages", {"query": "fox"})
        assert [r["message_id"] for r in payload["results"]] == [mid]
    finally:
        assert host.close() == 0


def test_trash_on_a_path_without_a_store(tmp_path: Path) -> None:
    for argv in (["trash"], ["restore", "01ARZ3NDEKTSV4RRFFQ69G5FAV"]):
        done = run_cli("--data-dir", str(tmp_path / "typo"), *argv)
        assert done.returncode == 1 and b"no convmem store" in done.stderr, argv
    assert not (tmp_path / "typo").exists()
