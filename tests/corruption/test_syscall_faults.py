"""Faults injected at exact system calls of a real process, from outside the code: strace's
fault injection (EIO, ENOSPC at the n-th call) and a full tmpfs. Opt-in, because they need strace
and (for the tmpfs) root:

    pytest --run-syscall-faults tests/corruption/test_syscall_faults.py

A child process opens a store, makes writes and reports which were acknowledged; then the store
is reopened without faults: every acknowledged write is there, every rejected one is not, and the
health report is truthful.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from convmem import MemoryStore

pytestmark = pytest.mark.syscall_faults

CHILD = textwrap.dedent("""
    import json, sys
    from convmem import ConvMemError, MemoryStore
    path, action, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    out = {"acked": [], "rejected": [], "open_error": None, "rebuild": None}
    try:
        s = MemoryStore.open(path)
    except ConvMemError as exc:
        out["open_error"] = exc.code + ": " + exc.message
        print(json.dumps(out)); sys.exit(0)
    for i in range(n):
        text = f"{action} message {i}" + (" padding" * 2000 if action == "big" else "")
        try:
            s.write_message(session_id="s", role="user", content=text)
            out["acked"].append(text)
        except ConvMemError as exc:
            out["rejected"].append([text, exc.code])
        if action == "rebuild" and i == n // 2:
            try:
                out["rebuild"] = s.rebuild_index()["status"]
            except ConvMemError as exc:
                out["rebuild"] = exc.code
    out["health"] = s.get_system_health()["status"]
    s.close()
    print(json.dumps(out))
""")


def strace_run(path: Path, action: str, n: int, *injects: str) -> dict:
    """Run the child under strace, each of `injects` (strace's inject= syntax) in force; only
    the injected system calls are traced (strace injects only into traced calls)."""
    env = dict(os.environ, PYTHONSAFEPATH="1")
    calls = ",".join(sorted({spec.split(":")[0] for spec in injects}))
    cmd = ["strace", "-f", "-qq", "-o", "/dev/null", "-e", f"trace={calls}"]
    for spec in injects:
        cmd += ["-e", f"inject={spec}"]
    r = subprocess.run(cmd + [sys.executable, "-c", CHILD, str(path), action, str(n)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def stored(path: Path) -> list[str]:
    with MemoryStore.open(path) as s:
        return [m["content"] for m in s.read_messages(session_id="s", limit=1000)["history"]]


def seed(path: Path) -> None:
    with MemoryStore.open(path) as s:
        for i in range(3):
            s.write_message(session_id="s", role="user", content=f"seed {i}")


@pytest.fixture(autouse=True)
def need_strace():
    if shutil.which("strace") is None:
        pytest.fail("these opt-in tests need strace (apt-get install strace)")


@pytest.mark.parametrize("inject", [
    "fdatasync:error=EIO:when=3",       # the flusher's fdatasync fails once
    "fdatasync:error=EIO:when=3+",      # ...and keeps failing
    "pwrite64:error=ENOSPC:when=2",     # the disk is full for one append
    "pwrite64:error=ENOSPC:when=2+",    # ...and stays full
    "ftruncate:error=EIO",              # with every cut-back failing too (a double fault)
])
def test_acknowledged_writes_survive_and_rejected_ones_do_not(tmp_path, inject):
    path = tmp_path / "store"
    seed(path)
    if inject.startswith("ftruncate"):  # a failed flush first, whose cut-back fails too
        out = strace_run(path, "write", 8, "fdatasync:error=EIO:when=2",
                         "ftruncate:error=EIO:when=2")  # (the 1st ftruncate is LOCK's pid)
    else:
        out = strace_run(path, "write", 8, inject)
    assert out["open_error"] is None and out["rejected"], out  # the fault did hit a write
    assert all(code == "IO_ERROR" for _, code in out["rejected"])
    assert out["health"] == "DEGRADED"
    after = stored(path)
    assert after == [f"seed {i}" for i in range(3)] + out["acked"]
    assert not set(after) & {text for text, _ in out["rejected"]}


@pytest.mark.parametrize("inject", ["rename:error=EIO:when=2", "rename:error=ENOSPC:when=3",
                                    "fsync:error=EIO:when=4"])
def test_rebuild_switch_faults_lose_no_later_write(tmp_path, inject):
    path = tmp_path / "store"
    seed(path)
    out = strace_run(path, "rebuild", 10, inject)
    assert out["open_error"] is None
    after = stored(path)
    assert after == [f"seed {i}" for i in range(3)] + out["acked"]
    assert len(out["acked"]) + len(out["rejected"]) == 10


@pytest.fixture
def tiny_tmpfs(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("the full-disk test mounts a tmpfs and needs root")
    mnt = tmp_path / "tmpfs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_writes_fail_cleanly_and_the_store_reopens(tiny_tmpfs):
    path = tiny_tmpfs / "store"
    with MemoryStore.open(path) as s:
        s.write_message(session_id="s", role="user", content="before")
    filler = tiny_tmpfs / "filler"
    with open(filler, "wb") as f:  # fill the disk to the last block
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    out = json.loads(subprocess.run(
        [sys.executable, "-c", CHILD, str(path), "big", "20"], capture_output=True, text=True,
        timeout=60, env=dict(os.environ, PYTHONSAFEPATH="1")).stdout.strip().splitlines()[-1])
    assert out["open_error"] is None  # a full disk does not stop open
    assert out["rejected"] and all(code == "IO_ERROR" for _, code in out["rejected"])
    filler.unlink()
    after = stored(path)
    assert after == ["before"] + out["acked"]


def test_read_commands_work_on_a_read_only_mount_and_write_nothing(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("the read-only mount test needs root")
    data = tmp_path / "data"
    seed(data)
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "--bind", "-o", "ro", str(data), str(ro)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=True)
        env = dict(os.environ, PYTHONSAFEPATH="1")
        for argv in (["health", "--json"], ["search", "seed", "--json"], ["sessions", "--json"],
                     ["verify"], ["export"]):
            r = subprocess.run([sys.executable, "-m", "convmem", *argv, "--data-dir", str(ro)],
                               capture_output=True, text=True, timeout=60, env=env)
            assert r.returncode == 0, (argv, r.stderr)
            assert "Traceback" not in r.stderr
        r = subprocess.run([sys.executable, "-m", "convmem", "delete", "0" * 26, "--data-dir", str(ro)],
                           capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode != 0 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1
    finally:
        subprocess.run(["umount", "-l", str(ro)], check=False)
