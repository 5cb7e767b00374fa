"""One memory for every host: several `convmem serve` processes and the CLI on one data directory
at once, the owner killed with SIGKILL while others are attached, and nothing left behind."""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from e2e_helpers import RawStdioServer, run_cli

from convmem.owner import protocol
from convmem.store.lock import holder


def start(data: Path) -> RawStdioServer:
    server = RawStdioServer(data)
    server.initialize()
    return server


def history(server: RawStdioServer) -> list[str]:
    payload, is_error = server.call("read_messages", {"session_id": "s", "limit": 1000})
    assert not is_error, payload
    return [m["content"] for m in payload["history"]]


def write(server: RawStdioServer, text: str) -> None:
    payload, is_error = server.call("write_message", {"session_id": "s", "role": "user", "content": text})
    assert not is_error and payload["status"] == "OK", payload


def test_hosts_and_the_cli_share_one_memory_and_survive_the_owner(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = start(data)
    write(first, "from the first host")  # the first server owns the store
    second, third = start(data), start(data)
    try:
        write(second, "from the second host")
        write(third, "from the third host")
        assert history(first) == history(second) == history(third) == [
            "from the first host", "from the second host", "from the third host"]
        # The CLI works while they run: no BUSY.
        done = run_cli("health", "--json", "--data-dir", str(data))
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["active_messages"] == 3
        done = run_cli("search", "second", "--data-dir", str(data))
        assert done.returncode == 0 and b"from the second host" in done.stdout
        done = run_cli("export", "--data-dir", str(data))
        assert done.returncode == 0 and len(done.stdout.splitlines()) == 3
        exported = tmp_path / "export.jsonl"
        exported.write_bytes(done.stdout)
        done = run_cli("import", str(exported), "--data-dir", str(data))  # relayed, compared
        assert done.returncode == 0, done.stderr
        source = tmp_path / "more.jsonl"
        source.write_text("".join(json.dumps({"session_id": "other", "role": "user",
                                              "content": f"imported {i}"}) + "\n" for i in range(5)))
        done = run_cli("import", str(source), "--data-dir", str(data))
        assert done.returncode == 0, done.stderr
        payload, _ = second.call("search_messages", {"query": "imported", "limit": 20})
        assert len(payload["results"]) == 5
        # The owner is killed: the others take over, with every acknowledged write.
        owner_pid, note = holder(data)
        assert owner_pid == first.proc.pid and note == "shared"
        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait()
        write(second, "after the owner died")
        assert history(third) == ["from the first host", "from the second host",
                                  "from the third host", "after the owner died"]
        assert holder(data)[0] in (second.proc.pid, third.proc.pid)
    finally:
        for server in (second, third):
            assert server.close() == 0
        first._stderr.close()
    # Every process is gone: nothing holds the store, and it opens directly.
    assert not (data / protocol.SOCKET_NAME).exists()
    done = run_cli("health", "--json", "--data-dir", str(data))
    assert done.returncode == 0 and json.loads(done.stdout)["active_messages"] == 4 + 5
