"""Issue 10's end-to-end check: three stdio hosts, the CLI and an HTTP client on one data directory
at once, writing and reading, the owner killed with kill -9 in the middle; afterwards every
acknowledged write is there exactly once, and every client still works."""
from __future__ import annotations

import json
import os
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
from e2e_helpers import HttpServer, RawStdioServer, payload_of, run_cli

from convmem.store.lock import holder

WAIT = 120.0


class Tally:
    def __init__(self) -> None:
        self.acked: list[str] = []
        self.maybe: list[str] = []  # BUSY: may or may not have been applied
        self.acked_after_kill = 0
        self.reads_after_kill = 0
        self.errors: list[Any] = []
        self.lock = threading.Lock()

    def record(self, text: str, payload: dict[str, Any], is_error: bool, killed: bool) -> None:
        with self.lock:
            if not is_error and payload.get("status") == "OK":
                self.acked.append(text)
                self.acked_after_kill += killed
            elif is_error and payload["error"]["code"] == "BUSY":
                self.maybe.append(text)
            else:
                self.errors.append(payload)


def stdio_writer(server: RawStdioServer, name: str, tally: Tally, killed: threading.Event,
                 stop: threading.Event) -> None:
    n = 0
    try:
        while not stop.is_set():
            n += 1
            text = f"{name} note {n}"
            was_killed = killed.is_set()
            payload, is_error = server.call("write_message", {"session_id": name, "role": "user", "content": text})
            tally.record(text, payload, is_error, was_killed)
            payload, is_error = server.call("search_messages", {"query": f"{name} note", "limit": 5})
            if is_error:
                tally.errors.append(payload)
            elif was_killed:
                with tally.lock:
                    tally.reads_after_kill += 1
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        tally.errors.append(repr(exc))


def http_writer(server: HttpServer, tally: Tally, killed: threading.Event, stop: threading.Event) -> None:
    async def run() -> None:
        async with server.client(mode="legacy") as client:
            n = 0
            while not stop.is_set():
                n += 1
                text = f"http note {n}"
                was_killed = killed.is_set()
                payload, is_error = payload_of(await client.call_tool(
                    "write_message", {"session_id": "http", "role": "user", "content": text}))
                tally.record(text, payload, is_error, was_killed)
                payload, is_error = payload_of(await client.call_tool("read_messages", {"session_id": "http"}))
                if is_error:
                    tally.errors.append(payload)
                elif was_killed:
                    with tally.lock:
                        tally.reads_after_kill += 1

    try:
        anyio.run(run)
    except BaseException as exc:  # noqa: BLE001
        tally.errors.append(repr(exc))


def cli_user(data: Path, tmp: Path, tally: Tally, killed: threading.Event, stop: threading.Event) -> None:
    n = 0
    try:
        while not stop.is_set():
            n += 1
            text = f"cli note {n}"
            source = tmp / f"cli-{n}.jsonl"
            source.write_text(json.dumps({"session_id": "cli", "role": "user", "content": text}) + "\n")
            was_killed = killed.is_set()
            done = run_cli("import", str(source), "--data-dir", str(data))
            with tally.lock:
                if done.returncode == 0:
                    tally.acked.append(text)
                    tally.acked_after_kill += was_killed
                elif b"BUSY" in done.stderr or b"BUSY" in done.stdout:
                    tally.maybe.append(text)
                else:
                    tally.errors.append(done.stderr.decode(errors="replace"))
            done = run_cli("health", "--data-dir", str(data), "--json")
            if done.returncode != 0:
                tally.errors.append(done.stderr.decode(errors="replace"))
            elif was_killed:
                with tally.lock:
                    tally.reads_after_kill += 1
    except BaseException as exc:  # noqa: BLE001
        tally.errors.append(repr(exc))


def wait_for(condition: Any, what: str) -> None:
    event = threading.Event()
    for _ in range(int(WAIT * 20)):
        if condition():
            return
        event.wait(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_three_hosts_cli_and_http_survive_kill_9_of_the_owner(tmp_path: Path) -> None:
    data = tmp_path / "data"
    owner = RawStdioServer(data)
    owner.initialize()
    payload, _ = owner.call("write_message", {"session_id": "owner", "role": "user", "content": "owner note 1"})
    assert payload["status"] == "OK"
    assert holder(data)[0] == owner.proc.pid
    hosts = [RawStdioServer(data), RawStdioServer(data)]
    for host in hosts:
        host.initialize()
    http = HttpServer(data)
    tallies = {name: Tally() for name in ("host2", "host3", "http", "cli")}
    killed, stop = threading.Event(), threading.Event()
    threads = [threading.Thread(target=stdio_writer, args=(hosts[0], "host2", tallies["host2"], killed, stop)),
               threading.Thread(target=stdio_writer, args=(hosts[1], "host3", tallies["host3"], killed, stop)),
               threading.Thread(target=http_writer, args=(http, tallies["http"], killed, stop)),
               threading.Thread(target=cli_user, args=(data, tmp_path, tallies["cli"], killed, stop))]
    owner_acked = ["owner note 1"]
    try:
        for t in threads:
            t.start()
        for n in range(2, 12):  # the owner's own host writes while the others do
            text = f"owner note {n}"
            payload, is_error = owner.call("write_message", {"session_id": "owner", "role": "user", "content": text})
            assert not is_error, payload
            owner_acked.append(text)
        wait_for(lambda: all(len(t.acked) >= 3 for t in tallies.values()), "writes from every client")
        os.kill(owner.proc.pid, signal.SIGKILL)
        owner.proc.wait()
        killed.set()
        wait_for(lambda: all(t.acked_after_kill >= 3 and t.reads_after_kill >= 1 for t in tallies.values())
                 or any(t.errors for t in tallies.values()), "every client to go on after the kill")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=WAIT)
        codes = [host.close() for host in hosts]
        http.close()
        owner._stderr.close()
    for name, tally in tallies.items():
        assert not tally.errors, (name, tally.errors[:3])
        assert tally.acked_after_kill >= 3, name
    assert codes == [0, 0]
    done = run_cli("export", "--data-dir", str(data))
    assert done.returncode == 0, done.stderr
    stored = Counter(json.loads(line)["content"] for line in done.stdout.splitlines())
    acked = owner_acked + [text for t in tallies.values() for text in t.acked]
    maybe = [text for t in tallies.values() for text in t.maybe]
    assert {text: stored[text] for text in acked} == {text: 1 for text in acked}  # exactly once
    assert all(stored[text] <= 1 for text in maybe)
    assert set(stored) <= set(acked) | set(maybe)  # nothing that no client wrote
