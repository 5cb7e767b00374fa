"""SharedStore: the first opener owns the store and serves it on the directory's socket; the
others relay to it and take over when it ends. Owners in other processes are killed for real."""
from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from convmem import ConvMemError
from convmem.owner import SharedStore, listener as listener_module, protocol


def contents(s: SharedStore, session: str = "s") -> list[str]:
    return [m["content"] for m in s.read_messages(session_id=session, limit=1000)["history"]]


def closed_without_answer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_second_opener_relays_every_kind_of_call(tmp_path):
    with SharedStore.open(tmp_path) as owner, SharedStore.open(tmp_path) as relay:
        assert owner.is_owner and not relay.is_owner
        m = relay.write_message(session_id="s", role="user", content="from the relay")["message"]
        owner.write_message(session_id="s", role="assistant", content="from the owner")
        assert contents(relay) == contents(owner) == ["from the relay", "from the owner"]
        relay.update_message(message_id=m["message_id"], content="updated by the relay")
        assert relay.search_messages(query="relay")["results"][0]["content"] == "updated by the relay"
        with pytest.raises(ConvMemError) as err:  # errors come back as they are
            relay.read_messages(view="content", message_id="0" * 26)
        assert err.value.code == "NOT_FOUND"
        errors = relay.import_message_batch([{"session_id": "t", "role": "user", "content": "ok"},
                                             {"session_id": "t", "role": "nobody", "content": "x"}])
        assert errors[0] is None and errors[1].code == "VALIDATION_ERROR"
        assert [x["content"] for x in relay.export_messages("t")] == ["ok"]
        assert relay.get_system_health()["active_messages"] == 3
        relay.checkpoint()
        assert relay.rebuild_index()["messages_indexed"] == 3


HOSTILE_CALLS = [
    ("write_message", {"session_id": "s", "role": "user", "content": "a\ud800"}),
    ("remember", {"session_id": "\udc00", "content": "x"}),
    ("search_messages", {"query": "x", "limit": 2**70}),
    ("search_messages", {"query": "x", "limit": -(2**64)}),
    ("search_messages", {"query": "x", "limit": float("nan")}),
    ("list_tags", {"limit": float("inf")}),
    ("read_messages", {"view": "history", "session_id": "s", "limit": float("-inf")}),
    ("list_deleted", {"session_id": "ok", "limit": [float("nan")]}),
    ("search_messages", {"query": "x", "filters_json": '{"after": 1}', "min_importance": 10**400}),
]


@pytest.mark.parametrize("tool, args", HOSTILE_CALLS, ids=[f"{t}-{i}" for i, (t, _) in enumerate(HOSTILE_CALLS)])
def test_arguments_json_cannot_carry_reach_the_owner_unchanged(tmp_path, tool, args):
    """A lone surrogate, an integer beyond 64 bits, NaN or an infinity: the relay's answer is the
    owner's (a VALIDATION_ERROR naming the field), not an INTERNAL_ERROR nor NaN read as "not
    given"; nothing is written."""
    with SharedStore.open(tmp_path) as owner, SharedStore.open(tmp_path) as relay:
        size = owner.get_system_health()["log_size"]
        answers = []
        for s in (owner, relay):
            with pytest.raises(ConvMemError) as err:
                getattr(s, tool)(**args)
            answers.append((err.value.code, err.value.message))
        assert answers[0] == answers[1] and answers[0][0] == "VALIDATION_ERROR"
        assert owner.get_system_health()["log_size"] == size


def test_arguments_over_the_frame_limit_are_refused_before_sending(tmp_path, monkeypatch):
    monkeypatch.setattr(protocol, "MAX_FRAME", 4096)
    with SharedStore.open(tmp_path) as owner, SharedStore.open(tmp_path) as relay:
        with pytest.raises(ConvMemError) as err:
            relay.write_message(session_id="s", role="user", content="x" * 10_000)
        assert err.value.code == "VALIDATION_ERROR" and "write_message" in err.value.message
        assert relay.get_system_health()["active_messages"] == 0  # and the relay still works
        assert owner.get_system_health()["active_messages"] == 0


def test_export_through_the_relay_pages_through_everything(tmp_path, monkeypatch):
    monkeypatch.setattr(listener_module, "EXPORT_PAGE", 7)
    monkeypatch.setattr("convmem.owner.shared.EXPORT_PAGE", 7)
    with SharedStore.open(tmp_path) as owner, SharedStore.open(tmp_path) as relay:
        owner.import_messages([{"session_id": f"s{i % 3}", "role": "user", "content": f"m{i}"}
                               for i in range(30)])
        assert sorted(x["content"] for x in relay.export_messages()) == sorted(f"m{i}" for i in range(30))


def test_when_the_owner_closes_a_relay_takes_over_with_everything(tmp_path):
    owner = SharedStore.open(tmp_path)
    relay = SharedStore.open(tmp_path)
    third = SharedStore.open(tmp_path)
    for i in range(5):
        relay.write_message(session_id="s", role="user", content=f"m{i}")
    owner.close()
    assert contents(relay) == [f"m{i}" for i in range(5)]  # relay or third is the owner now
    assert relay.is_owner != third.is_owner or not (relay.is_owner or third.is_owner)
    third.write_message(session_id="s", role="user", content="after")
    assert contents(relay)[-1] == "after"
    relay.close()
    third.close()
    assert not (tmp_path / protocol.SOCKET_NAME).exists()  # the last one out leaves nothing


def test_socket_is_private_and_other_users_are_refused(tmp_path, monkeypatch):
    with SharedStore.open(tmp_path) as owner:
        mode = stat.S_IMODE(os.stat(tmp_path / protocol.SOCKET_NAME).st_mode)
        assert mode == 0o600 and owner.is_owner
        # The owner sees this peer as another uid: the connection is closed without an answer.
        monkeypatch.setattr(listener_module.os, "geteuid", lambda: os.getuid() + 1)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(tmp_path / protocol.SOCKET_NAME))
        try:
            protocol.send(sock, {"id": 1, "op": "hello", "args": {}})
        except (BrokenPipeError, ConnectionResetError):
            pass  # (closed already)
        sock.settimeout(10)
        assert closed_without_answer(sock)
        sock.close()


def test_attached_processes_are_bounded_and_frames_too(tmp_path, monkeypatch):
    monkeypatch.setattr(listener_module, "MAX_PEERS", 1)
    with SharedStore.open(tmp_path) as owner, SharedStore.open(tmp_path) as relay:
        assert not relay.is_owner
        extra = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        extra.connect(str(tmp_path / protocol.SOCKET_NAME))
        extra.settimeout(10)
        assert closed_without_answer(extra)  # refused: one process is attached already
        extra.close()
        big = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        relay.close()  # (room for one more)
        time.sleep(0.2)
        big.connect(str(tmp_path / protocol.SOCKET_NAME))
        big.sendall((protocol.MAX_FRAME + 1).to_bytes(4, "big"))  # announces too much
        big.settimeout(10)
        assert closed_without_answer(big)  # dropped, nothing buffered
        big.close()
        assert owner.get_system_health()["status"] == "OK"


def test_a_long_data_directory_path_still_has_a_socket(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    assert len(str(deep / protocol.SOCKET_NAME)) > 108
    with SharedStore.open(deep) as owner, SharedStore.open(deep) as relay:
        assert owner.is_owner and not relay.is_owner
        relay.write_message(session_id="s", role="user", content="deep")
        assert contents(owner) == ["deep"]


OWNER = textwrap.dedent("""
    import sys, time
    from convmem.owner import SharedStore
    import convmem.api.store as store_module
    real_search, real_write = store_module.MemoryStore.search_messages, store_module.MemoryStore.write_message
    def slow(real):
        def run(self, **kw):
            if kw.get("query") == "slow query" or kw.get("content") == "slow write":
                time.sleep(30)
            return real(self, **kw)
        return run
    store_module.MemoryStore.search_messages = slow(real_search)
    store_module.MemoryStore.write_message = slow(real_write)
    s = SharedStore.open(sys.argv[1])
    assert s.is_owner
    print("ready", flush=True)
    time.sleep(600)
""")


def start_owner(path: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", OWNER, str(path)], stdout=subprocess.PIPE,
                            text=True, env=dict(os.environ, PYTHONSAFEPATH="1"))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def kill_later(proc: subprocess.Popen, seconds: float) -> None:
    import threading
    threading.Timer(seconds, lambda: os.kill(proc.pid, signal.SIGKILL)).start()


def test_owner_killed_during_a_read_the_read_is_answered_by_the_next_owner(tmp_path):
    proc = start_owner(tmp_path)
    try:
        with SharedStore.open(tmp_path) as relay:
            assert not relay.is_owner
            relay.write_message(session_id="s", role="user", content="slow query target")
            kill_later(proc, 0.5)
            hits = relay.search_messages(query="slow query")["results"]  # in flight at the kill
            assert [h["content"] for h in hits] == ["slow query target"]
            assert relay.is_owner  # it took the store over, with the acknowledged write
    finally:
        proc.kill()
        proc.wait()


def test_owner_killed_during_a_write_the_write_is_not_sent_twice(tmp_path):
    proc = start_owner(tmp_path)
    try:
        with SharedStore.open(tmp_path) as relay:
            relay.write_message(session_id="s", role="user", content="acknowledged")
            kill_later(proc, 0.5)
            with pytest.raises(ConvMemError) as err:
                relay.write_message(session_id="s", role="user", content="slow write")
            assert err.value.code == "BUSY" and "may or may not" in err.value.message
            assert contents(relay) == ["acknowledged"]  # (the owner died before writing it)
            relay.write_message(session_id="s", role="user", content="after")
            assert contents(relay) == ["acknowledged", "after"]
    finally:
        proc.kill()
        proc.wait()
