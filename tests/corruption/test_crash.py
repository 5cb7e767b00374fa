"""kill -9 at random moments: every write acknowledged before the kill is there after reopen.

A child process writes, updates and deletes in a loop and reports each acknowledgement on stdout
(after the call returned, i.e. after fdatasync). The parent kills it with SIGKILL at a random
moment, reopens the store, and checks every acknowledged effect. The one operation in flight at
the kill may or may not have happened; only a delete in flight changes what can be checked.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from convmem import MemoryStore

CHILD = textwrap.dedent("""
    import random, sys
    from convmem import MemoryStore
    store = MemoryStore.open(sys.argv[1])
    rng = random.Random(int(sys.argv[2]))
    mine = []
    i = 0
    while True:
        i += 1
        op = rng.random()
        if op < 0.7 or not mine:
            m = store.write_message(session_id=f"s{i % 5}", role="user",
                                    content=f"crash test {sys.argv[2]} {i} " + "x" * rng.randint(0, 3000))
            mine.append(m["message"]["message_id"])
            print("W", m["message"]["message_id"], flush=True)
        elif op < 0.9:
            mid = rng.choice(mine)
            m = store.update_message(message_id=mid, content=f"updated {i}")
            print("U", mid, m["message"]["revision"], flush=True)
        else:
            mid = mine.pop(rng.randrange(len(mine)))
            # Announced first: a delete in flight at the kill may or may not have happened.
            print("d", mid, flush=True)
            store.delete_message(message_id=mid)
            print("D", mid, flush=True)
""")


def run_and_kill(data_dir: str, seed: int, rng: random.Random) -> list[list[str]]:
    # Unbuffered bytes: a buffered readline() would swallow lines that communicate() then
    # never sees, and acknowledged operations would go unrecorded.
    proc = subprocess.Popen([sys.executable, "-c", CHILD, data_dir, str(seed)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    # Let it start writing, then kill it somewhere in the middle of its work.
    deadline = time.monotonic() + 30
    first = proc.stdout.readline().decode()
    assert first, proc.stderr.read()
    time.sleep(rng.uniform(0.0, 0.25))
    assert time.monotonic() < deadline
    os.kill(proc.pid, signal.SIGKILL)
    rest, _ = proc.communicate()
    text = first + rest.decode()
    # Everything after the last newline was cut short by the kill: not an acknowledgement.
    complete = text.split("\n")[:-1]
    return [ln.split() for ln in complete]


def check(data_dir: str, acked: dict[str, int | None]) -> None:
    with MemoryStore.open(data_dir) as s:
        for mid, rev in acked.items():
            r = None
            try:
                r = s.read_messages(view="content", message_id=mid, content_limit=16)
            except Exception as exc:  # NOT_FOUND for deleted messages
                assert rev is None, (mid, exc)
                continue
            assert rev is not None, f"deleted message {mid} came back"
            assert r["content_range"]["revision"] >= rev
        h = s.get_system_health()
        assert h["last_error"] == "", h["last_error"]


@pytest.mark.parametrize("rounds", [
    12,
    pytest.param(150, marks=pytest.mark.slow),  # the soak run: pytest --run-slow
])
def test_acknowledged_writes_survive_sigkill(tmp_path, rounds):
    data_dir = str(tmp_path / "data")
    rng = random.Random(1234)
    acked: dict[str, int | None] = {}
    for r in range(rounds):
        for parts in run_and_kill(data_dir, r, rng):
            if len(parts) < 2:
                continue
            if parts[0] == "W" and len(parts) == 2:
                acked[parts[1]] = 1
            elif parts[0] == "U" and len(parts) == 3:
                acked[parts[1]] = int(parts[2])
            elif parts[0] == "D" and len(parts) == 2:
                acked[parts[1]] = None
            elif parts[0] == "d" and len(parts) == 2:
                # Until its acknowledgement arrives, either outcome is right: stop checking it.
                acked.pop(parts[1], None)
        check(data_dir, acked)
    assert sum(1 for v in acked.values() if v is not None) > 20
