"""Open + first query, one-character CJK queries, writes during a snapshot (issue 14).

    python benchmarks/open_latency.py open --store DIR [--rounds 7] [--cold] [--query TEXT]
        [--checkout ROOT] [--base-store DIR --base-checkout ROOT]
    python benchmarks/open_latency.py spawn --store DIR [--rounds 7] [--cold] [--query TEXT]
        [--checkout ROOT] [--base-store DIR --base-checkout ROOT] [--env K=V] [--base-env K=V]
    python benchmarks/open_latency.py cjk --store DIR [--repeat 300]
    python benchmarks/open_latency.py writes --store DIR [--count 400] [--background-nice N]
    python benchmarks/open_latency.py rss --store DIR [--seconds 30]
    python benchmarks/open_latency.py first-write --store DIR [--rounds 3]

`open`: each round is a fresh interpreter that imports convmem (timed apart), then times
MemoryStore.open(DIR) + one search_messages (limit 20). With --cold the page cache of every
file in DIR is evicted before each round (posix_fadvise DONTNEED after fsync; the interpreter,
numpy and convmem's own files stay cached, as they would for a host that starts servers often);
--drop-caches evicts the whole page cache instead (`sync; echo 3 > /proc/sys/vm/drop_caches`,
root only). Reports every round and the median.

Before/after in one run (`open` and `spawn`): --checkout ROOT runs the children with ROOT (a
source checkout built in place) first on PYTHONPATH instead of the installed convmem; with
--base-store and --base-checkout, each round runs the base first and then the measured one (the
same machine noise for both), and the report adds the base's medians and the ratio new / base.
Each checkout needs a store of its own format (a store of another format is re-indexed at its
first open: open each store once with its checkout before measuring). --env K=V and --base-env
K=V (repeatable) add environment variables to the measured side's and the base's children: e.g.
the same checkout against itself with `--base-env CONVMEM_STDIO_SDK=1` (spawn: the MCP SDK's stdio
server from the first message, against the SDK-free start, server/fast.py).

`spawn`: spawn to first answer over stdio, as a host starts a server for a session: starts
`python -m convmem serve --data-dir DIR` (no owner process may be running for DIR: the round
refuses a store whose owner socket answers), sends initialize, notifications/initialized and one
tools/call search_messages (limit 20) at once, and times from the spawn to the initialize answer
and to the search answer (the one a host waits for). Then closes stdin and waits for the exit.
`--store` may name a directory that does not exist: an empty store (created by the first round,
removed at the end). With --owner-running, a `convmem serve` of the side's checkout owns each
side's store (a store per side) throughout, and the rounds measure the spawn of a relay to it
(convmem/owner/relay.py) to its first answer.

`cjk`: one process; after an untimed warm-up, the queries 東, 会 and 東 京 (plus a two-character
control 東京) interleaved, `repeat` times each, timed around search_messages (limit 20): p50,
p99, max. Also the index core alone (index.search on the query's keys) for the same queries.

`writes`: a COPY of DIR (the store is written to) in a temporary directory: write_message
(1 KiB) latency with no snapshot running, and from a write that makes a periodic snapshot due
(the store's record count since the last one is set to the interval first) until that snapshot is
on disk (a store that writes it in the background: every write meanwhile, snapshots again
until at least `count` writes are measured: each snapshot is measured whole); beside each, the
durability floor (a 1 KiB append + fdatasync in the same directory). trigger_write_ms: the
triggering writes alone. `--background-nice 0` runs the snapshot's thread at the writers'
priority (before 2026-12-05; convmem/store/background.py).

`rss`: a fresh process opens DIR, answers the query set's first query, then one query every
20 ms for `seconds` (30; the verification a large store runs in the background from a second
after the open included): its RSS (anonymous and file-backed, /proc/self/status) after the
open, after the first query and at the end, its peak (VmHWM), and when the verification ended.

`first-write`: a COPY of DIR; each round a fresh interpreter opens the copy, answers one
search_messages, then times its first three write_message calls (1 KiB each) and counts the
first write's minor page faults (getrusage: the memory it touches for the first time, a page a
fault). The first write after an open copies what it changes out of the snapshot's map; a host
that spawns a server for a session and then writes waits for it. Reports every round and the
medians.

Nothing here is a test; results print as JSON lines (and a table); save them with --out.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402,F401  (convmem on the path)
import _results  # noqa: E402

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from convmem import MemoryStore
from convmem._core import CORE_KIND
t1 = time.perf_counter()
s = MemoryStore.open(sys.argv[1])
t2 = time.perf_counter()
r = s.search_messages(query=sys.argv[2], limit=20)
t3 = time.perf_counter()
est = s.get_system_health()["memory_estimate"]["total_bytes"]
import convmem
print(json.dumps({"core": CORE_KIND, "file": convmem.__file__, "import_s": t1 - t0, "open_s": t2 - t1,
                  "first_query_s": t3 - t2, "open_first_query_s": t3 - t1,
                  "hits": len(r["results"]), "estimate": est}))
s.close()
"""

FIRST_WRITE_CHILD = r"""
import json, resource, sys, time
from convmem import MemoryStore
s = MemoryStore.open(sys.argv[1])
s.search_messages(query=sys.argv[2], limit=20)
text = ("lorem ipsum dolor sit amet " * 40)[:1024]
writes, faults = [], 0
for i in range(3):
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t0 = time.perf_counter()
    s.write_message(session_id="first-write", role="user", content=f"{i} {text}")
    writes.append(time.perf_counter() - t0)
    if i == 0:
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
print(json.dumps({"first_write_ms": writes[0] * 1e3, "second_write_ms": writes[1] * 1e3,
                  "third_write_ms": writes[2] * 1e3, "first_write_minor_faults": faults}))
s.close()
"""


RSS_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[3])
import corpus
from compare_fts5 import proc_status_kb
from convmem import MemoryStore

def status():
    return {k: proc_status_kb(k) / 1024 for k in ("VmRSS", "VmHWM", "RssAnon", "RssFile")}

seconds = float(sys.argv[2])
t0 = time.perf_counter()
s = MemoryStore.open(sys.argv[1])
after_open = status()
n = int(s.get_system_health()["active_messages"])
queries = corpus.make_queries(200, 1, max(n, 1))
s.search_messages(**queries[0])
after_first = status()
verified_s, i = None, 0
while True:  # (at least one query after the first, however long the open took)
    s.search_messages(**queries[i % len(queries)])
    i += 1
    v = s._verifier
    if verified_s is None and (v is None or not v.thread.is_alive()):
        verified_s = time.perf_counter() - t0
    if time.perf_counter() - t0 >= seconds:
        break
    time.sleep(0.02)
end = status()
print(json.dumps({"messages": n, "queries": i + 1, "after_open": after_open,
                  "after_first_query": after_first, "end": end,
                  "peak_mb": end["VmHWM"], "verified_s": verified_s}))
s.close()
"""


def cmd_rss(args: argparse.Namespace) -> dict[str, Any]:
    """A fresh process on the store: its RSS after the open, after the first query, and after
    `seconds` of queries (the background verification after the open included), with its peak."""
    out = subprocess.run([sys.executable, "-c", RSS_CHILD, str(args.store), str(args.seconds),
                          str(HERE)], env=child_env(None), capture_output=True, text=True,
                         check=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    res.update({"what": "rss", "store": str(args.store), "seconds": args.seconds})
    return res


def evict(store: Path) -> None:
    for p in store.iterdir():
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q / 100 * (len(v) - 1))))]


def child_cwd(checkout: Path | None) -> str | None:
    """A measured child's working directory: the checkout's root (`-c` and `-m` put the working
    directory first on sys.path, before PYTHONPATH: another checkout there would be measured)."""
    return None if checkout is None else str(checkout.resolve())


def child_env(checkout: Path | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a measured child: `checkout` (a source root) first on PYTHONPATH, and
    `extra` (that side's --env or --base-env)."""
    env = dict(os.environ)
    env.pop("CONVMEM_STDIO_SDK", None)  # (only as a side asks for it)
    env.update(extra or {})
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(checkout.resolve()), *filter(None, [env.get("PYTHONPATH")])])
    return env


def prepare_round(args: argparse.Namespace, store: Path) -> None:
    if args.drop_caches:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    elif args.cold and store.is_dir():
        evict(store)


def open_round(args: argparse.Namespace, store: Path, checkout: Path | None, env: dict[str, str]) -> dict[str, Any]:
    prepare_round(args, store)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(store.resolve()), args.query], env=child_env(checkout, env),
                          cwd=child_cwd(checkout), capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def side_env(pairs: list[str]) -> dict[str, str]:
    """--env / --base-env K=V arguments as a dict."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--env and --base-env take KEY=VALUE, not {pair!r}")
        env[key] = value
    return env


def paired(args: argparse.Namespace, what: str, one_round: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """`rounds` rounds of `one_round(args, store, checkout, env)`, the base first in each round
    when one is given; medians per side and the ratio new / base."""
    if (args.base_store is None) != (args.base_checkout is None):
        raise SystemExit("--base-store and --base-checkout go together")
    rows: list[dict[str, Any]] = []
    base_rows: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        if args.base_store is not None:
            base_rows.append(one_round(args, args.base_store, args.base_checkout, side_env(args.base_env)))
        rows.append(one_round(args, args.store, args.checkout, side_env(args.env)))

    def medians(rs: list[dict[str, Any]]) -> dict[str, float]:
        return {k: statistics.median(r[k] for r in rs) for k in keys}

    mode = "drop_caches" if args.drop_caches else "cold" if args.cold else "warm"
    out: dict[str, Any] = {"what": what, "mode": mode, "store": str(args.store),
                           "checkout": str(args.checkout or ""), "env": side_env(args.env),
                           "base_env": side_env(args.base_env), "core": rows[0].get("core"),
                           "rounds": rows, "median": medians(rows)}
    files = {r.get("file") for r in rows} & {r.get("file") for r in base_rows} - {None}
    if files:  # (the base ran the measured code: nothing was compared)
        raise SystemExit(f"both sides imported {files}")
    if base_rows:
        base = medians(base_rows)
        out.update({"base_store": str(args.base_store), "base_checkout": str(args.base_checkout),
                    "base_rounds": base_rows, "base_median": base,
                    "ratio": {k: out["median"][k] / base[k] if base[k] else None for k in keys}})
    return out


def cmd_open(args: argparse.Namespace) -> dict[str, Any]:
    return paired(args, "open", open_round, ("import_s", "open_s", "first_query_s", "open_first_query_s"))


def owner_answers(store: Path) -> bool:
    """Whether a process serves `store` over its owner socket (convmem/owner)."""
    from convmem.owner.relay import connect_stream
    sock = connect_stream(store, ())
    if sock is None:
        return False
    sock.close()
    return True


def spawn_round(args: argparse.Namespace, store: Path, checkout: Path | None, env: dict[str, str]) -> dict[str, Any]:
    """One host-like spawn (the module docstring): seconds from the spawn to each answer."""
    if args.owner_running:
        if not owner_answers(store):
            raise SystemExit(f"the owner of {store} is gone")
    elif store.is_dir() and owner_answers(store):
        raise SystemExit(f"a process already serves {store}: stop it first (spawn measures the owner's start)")
    prepare_round(args, store)
    msgs = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "open-latency", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "search_messages", "arguments": {"query": args.query, "limit": 20}}},
    ]
    payload = b"".join(json.dumps(m).encode() + b"\n" for m in msgs)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "convmem", "serve", "--data-dir", str(store.resolve())],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=child_env(checkout, env), cwd=child_cwd(checkout))
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(payload)
        proc.stdin.flush()
        seen: dict[int, float] = {}
        answer: dict[str, Any] = {}
        while 2 not in seen:
            line = proc.stdout.readline()
            if not line:
                raise SystemExit(f"the server ended before answering (exit {proc.wait()})")
            msg = json.loads(line)
            if "id" in msg:
                seen[msg["id"]] = time.perf_counter() - t0
                if msg["id"] == 2:
                    answer = msg
        if "error" in answer or answer["result"].get("isError"):
            raise SystemExit(f"the search failed: {answer}")
        hits = len(json.loads(answer["result"]["content"][0]["text"])["results"])
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return {"initialize_s": seen[1], "first_answer_s": seen[2], "hits": hits, "exit": proc.returncode}


def start_owner(store: Path, checkout: Path | None, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A `convmem serve` that owns `store` (its session open, one search answered), for
    --owner-running: the rounds then measure relays to it."""
    proc = subprocess.Popen([sys.executable, "-m", "convmem", "serve", "--data-dir", str(store.resolve())],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=child_env(checkout, env), cwd=child_cwd(checkout))
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
                     b'"capabilities":{},"clientInfo":{"name":"open-latency-owner","version":"1"}}}\n'
                     b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search_messages",'
                     b'"arguments":{"query":"owner"}}}\n')
    proc.stdin.flush()
    while True:
        answer = proc.stdout.readline()
        if not answer:
            raise SystemExit(f"the owner of {store} ended (exit {proc.wait()})")
        if b'"id":2' in answer:
            return proc


def cmd_spawn(args: argparse.Namespace) -> dict[str, Any]:
    created = [s for s in (args.store, args.base_store) if s is not None and not s.exists()]
    owners: list[subprocess.Popen[bytes]] = []
    try:
        if args.owner_running:
            if args.base_store is not None and args.base_store.resolve() == args.store.resolve():
                raise SystemExit("--owner-running needs a store per side (one owner each)")
            owners.append(start_owner(args.store, args.checkout, side_env(args.env)))
            if args.base_store is not None:
                owners.append(start_owner(args.base_store, args.base_checkout, side_env(args.base_env)))
        return paired(args, "spawn-relay" if args.owner_running else "spawn", spawn_round,
                      ("initialize_s", "first_answer_s"))
    finally:
        for owner in owners:
            assert owner.stdin is not None
            owner.stdin.close()
            owner.wait(timeout=60)
        for s in created:
            shutil.rmtree(s, ignore_errors=True)


def cmd_cjk(args: argparse.Namespace) -> dict[str, Any]:
    from convmem import MemoryStore
    from convmem._core import tokenizer as tok
    st = MemoryStore.open(args.store)
    queries = ["東", "会", "東 京", "東京"]
    for q in queries:  # warm-up
        for _ in range(5):
            st.search_messages(query=q, limit=20)
    full: dict[str, list[float]] = {q: [] for q in queries}
    core: dict[str, list[float]] = {q: [] for q in queries}
    ix = st._catalog.index
    for _ in range(args.repeat):
        for q in queries:
            t0 = time.perf_counter()
            st.search_messages(query=q, limit=20)
            t1 = time.perf_counter()
            keys = tok.token_keys(q)
            ix.search(keys, 20)
            t2 = time.perf_counter()
            full[q].append(t1 - t0)
            core[q].append(t2 - t1)
    st.close()
    out = {}
    for q in queries:
        out[q] = {"full_p50_ms": pct(full[q], 50) * 1e3, "full_p99_ms": pct(full[q], 99) * 1e3,
                  "full_max_ms": max(full[q]) * 1e3, "core_p50_ms": pct(core[q], 50) * 1e3,
                  "core_p99_ms": pct(core[q], 99) * 1e3}
    return {"what": "cjk", "store": str(args.store), "repeat": args.repeat, "queries": out}


def cmd_writes(args: argparse.Namespace) -> dict[str, Any]:
    from convmem import MemoryStore
    from convmem.store import background
    if args.background_nice is not None:
        background.BACKGROUND_NICE = args.background_nice
    work = Path(tempfile.mkdtemp(prefix="cm-writes-", dir=args.tmp))
    store_dir = work / "store"
    try:
        shutil.copytree(args.store, store_dir)
        (store_dir / "LOCK").unlink(missing_ok=True)
        os.sync()  # (the copy's writeback would otherwise land in the quiet writes' floor)
        st = MemoryStore.open(store_dir)
        floor_fd = os.open(work / "floor.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        blob = b"x" * 1024
        text = ("lorem ipsum dolor sit amet " * 40)[:1024]

        def one_write(i: int) -> tuple[float, float]:
            t0 = time.perf_counter()
            st.write_message(session_id=f"bench-{i % 50}", role="user", content=f"{i} {text}")
            t1 = time.perf_counter()
            os.write(floor_fd, blob)
            os.fdatasync(floor_fd)
            t2 = time.perf_counter()
            return t1 - t0, t2 - t1

        for i in range(50):  # warm-up
            one_write(i)
        quiet_w, quiet_f = [], []
        for i in range(args.count):
            w, f = one_write(i)
            quiet_w.append(w)
            quiet_f.append(f)
        # A periodic snapshot, as a write triggers it (store._after_write): the write that makes
        # it due, then writes until it is on disk, snapshots again until `count` writes are
        # measured. Measured: every write from the trigger on.
        from convmem.api import snapshots as snapshot_cadence
        during_w, during_f = [], []
        trigger_w: list[float] = []
        snaps = 0
        snap_s: list[float] = []
        while len(during_w) < args.count:
            if hasattr(st, "_wait_snapshot"):
                with st._mutex:
                    st._wait_snapshot()  # (the last one's outcome taken before the count is set)
            cat = st._catalog
            cat.unsaved_records = max(snapshot_cadence.SNAPSHOT_EVERY_RECORDS, cat.index.n_docs // 4)
            t0 = time.perf_counter()
            w, f = one_write(10_000 + len(during_w))
            trigger_w.append(w)
            during_w.append(w)
            during_f.append(f)
            job = getattr(st, "_snapshot_job", None)
            while job is not None and not job.finished():  # (until it is on disk)
                w, f = one_write(10_000 + len(during_w))
                during_w.append(w)
                during_f.append(f)
            if job is not None:
                job.join()
            snap_s.append(time.perf_counter() - t0)
            snaps += 1
        st.close()
        os.close(floor_fd)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def summ(v: list[float]) -> dict[str, float]:
        return {"n": len(v), "p50_ms": pct(v, 50) * 1e3, "p99_ms": pct(v, 99) * 1e3,
                "max_ms": max(v) * 1e3 if v else 0.0}

    return {"what": "writes", "store": str(args.store), "snapshots": snaps,
            "background_nice": background.BACKGROUND_NICE,
            "snapshot_s": snap_s, "trigger_write_ms": [x * 1e3 for x in trigger_w], "quiet": {"write": summ(quiet_w), "floor": summ(quiet_f)},
            "during_snapshot": {"write": summ(during_w), "floor": summ(during_f)}}


def cmd_first_write(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="cm-first-write-", dir=args.tmp))
    store_dir = work / "store"
    keys = ("first_write_ms", "second_write_ms", "third_write_ms", "first_write_minor_faults")
    try:
        shutil.copytree(args.store, store_dir)
        (store_dir / "LOCK").unlink(missing_ok=True)
        os.sync()  # (the copy's writeback would otherwise land in the first write's fdatasync)
        rows = []
        for _ in range(args.rounds):
            proc = subprocess.run([sys.executable, "-c", FIRST_WRITE_CHILD, str(store_dir),
                                   args.query], env=child_env(None), capture_output=True,
                                  text=True, check=True)
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"what": "first-write", "store": str(args.store), "rounds": rows,
            "median": {k: statistics.median(r[k] for r in rows) for k in keys}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for mode in ("open", "spawn"):
        p = sub.add_parser(mode)
        p.add_argument("--store", type=Path, required=True)
        p.add_argument("--rounds", type=int, default=7)
        p.add_argument("--cold", action="store_true")
        p.add_argument("--drop-caches", action="store_true")
        p.add_argument("--query", default="database migration")
        p.add_argument("--checkout", type=Path, default=None, help="source root to measure (built in place)")
        p.add_argument("--base-store", type=Path, default=None)
        p.add_argument("--base-checkout", type=Path, default=None)
        p.add_argument("--env", action="append", default=[], metavar="K=V", help="for the measured side's children")
        p.add_argument("--base-env", action="append", default=[], metavar="K=V", help="for the base's children")
    sub.choices["spawn"].add_argument(
        "--owner-running", action="store_true",
        help="measure relays: a convmem serve owns each side's store during its rounds")
    p = sub.add_parser("cjk")
    p.add_argument("--store", type=Path, required=True)
    p.add_argument("--repeat", type=int, default=300)
    p = sub.add_parser("writes")
    p.add_argument("--store", type=Path, required=True)
    p.add_argument("--count", type=int, default=400)
    p.add_argument("--tmp", default=None)
    p.add_argument("--background-nice", type=int, default=None,
                   help="the snapshot thread's added nice value (0: as the writers' threads)")
    p = sub.add_parser("rss")
    p.add_argument("--store", type=Path, required=True)
    p.add_argument("--seconds", type=float, default=30.0)
    p = sub.add_parser("first-write")
    p.add_argument("--store", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--query", default="database migration")
    p.add_argument("--tmp", default=None)
    for p in sub.choices.values():
        p.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    _results.refuse_debug_build("open_latency.py")
    if args.cmd != "spawn":  # (spawn takes a missing directory for the empty store)
        _results.existing_store(args.store)  # a missing directory is an error, not an empty store
    res = {"open": cmd_open, "spawn": cmd_spawn, "cjk": cmd_cjk, "writes": cmd_writes,
           "first-write": cmd_first_write, "rss": cmd_rss}[args.cmd](args)
    res["machine"] = _results.machine_info()
    line = json.dumps(res, ensure_ascii=False)
    print(line)
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
