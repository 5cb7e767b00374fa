"""Two checkouts of convmem side by side on one store: did a change cost anything?

Each checkout must be built in place (`python setup.py build_ext --inplace`). The store is built
once (by the first checkout; both must read the same format) from the seeded corpus. Then, for
`--rounds` rounds, a fresh child process per checkout, alternating A, B, A, B... so that both
see the same machine noise, measures in-process:
- open + first search (after the process imported convmem),
- `search_messages` over the seeded query set (full answer: records read and shaped), after an
  untimed warm-up pass,
- `write_message` of ~1 KiB into a scratch store (each fdatasync'ed), and
- `read_messages` history pages and context views.
Reported per checkout: the median over rounds of each figure's per-round median (and p99), and
the ratio B / A.

    python benchmarks/ab_checkouts.py --a /path/to/base --b . --messages 100000 --rounds 5
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
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import corpus  # noqa: E402  (benchmarks/corpus.py)
import _results  # noqa: E402

CHILD = textwrap.dedent(r"""
    import json, os, shutil, sys, tempfile, time
    t_import = time.perf_counter()
    from convmem import MemoryStore
    from convmem._core import CORE_KIND
    store_dir, queries_path, n_writes = sys.argv[1], sys.argv[2], int(sys.argv[3])
    queries = [json.loads(line) for line in open(queries_path, encoding="utf-8")]
    t0 = time.perf_counter()
    s = MemoryStore.open(store_dir)
    s.search_messages(**queries[0])
    open_first = time.perf_counter() - t0
    for q in queries:
        s.search_messages(**q)
    search = []
    for q in queries:
        t = time.perf_counter_ns()
        s.search_messages(**q)
        search.append(time.perf_counter_ns() - t)
    sessions = [x["session_id"] for x in s.read_messages(view="sessions", limit=200)["sessions"]]
    ids = []
    history = []
    for name in sessions:
        t = time.perf_counter_ns()
        page = s.read_messages(session_id=name, limit=50)["history"]
        history.append(time.perf_counter_ns() - t)
        ids += [m["message_id"] for m in page[:3]]
    context = []
    for mid in ids:
        t = time.perf_counter_ns()
        s.read_messages(view="context", message_id=mid, before=3, after=3)
        context.append(time.perf_counter_ns() - t)
    s.close()
    scratch = tempfile.mkdtemp(prefix="convmem-ab-", dir=os.path.dirname(store_dir))
    w = MemoryStore.open(scratch)
    body = ("word " * 205)[:1024]
    writes = []
    for i in range(n_writes):
        t = time.perf_counter_ns()
        w.write_message(session_id=f"s{i % 7}", role="user", content=body,
                        metadata_json='{"tags": ["bench"], "importance": 60}')
        writes.append(time.perf_counter_ns() - t)
    w.close()
    shutil.rmtree(scratch)
    print(json.dumps({"core": CORE_KIND, "open_first_ms": open_first * 1e3, "search_ns": search,
                      "history_ns": history, "context_ns": context, "write_ns": writes}))
""")


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run_child(checkout: Path, store: Path, queries: Path, writes: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(checkout), PYTHONSAFEPATH="1")
    env.pop("CONVMEM_PURE", None)
    out = subprocess.run([sys.executable, "-c", CHILD, str(store), str(queries), str(writes)],
                         env=env, capture_output=True, text=True, check=True, cwd=tempfile.gettempdir())
    return json.loads(out.stdout)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", required=True, help="the base checkout (built in place)")
    p.add_argument("--b", required=True, help="the changed checkout (built in place)")
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--writes", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", default=str(corpus.DATA_DIR / "ab"))
    p.add_argument("--results", default="", help="write the figures as JSON here")
    args = p.parse_args()
    a, b = Path(args.a).resolve(), Path(args.b).resolve()
    for checkout in (a, b):  # before building any store
        if not list((checkout / "convmem" / "_core").glob("index*.so")):
            p.error(f"{checkout} is not a convmem checkout built in place "
                    "(python setup.py build_ext --inplace there first)")
    if min(args.messages, args.queries, args.writes, args.rounds) <= 0:
        p.error("--messages, --queries, --writes and --rounds must be positive")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    corpus_path = work / f"corpus-{args.messages}-s{args.seed}.jsonl"
    queries_path = work / f"queries-{args.queries}-s{args.seed}.jsonl"
    if not corpus_path.exists():
        subprocess.run([sys.executable, str(HERE / "corpus.py"), "--messages", str(args.messages),
                        "--seed", str(args.seed), "--out", str(corpus_path)], check=True)
    if not queries_path.exists():
        subprocess.run([sys.executable, str(HERE / "corpus.py"), "queries", "--count",
                        str(args.queries), "--seed", str(args.seed), "--messages",
                        str(args.messages), "--out", str(queries_path)], check=True)
    store = work / f"store-{args.messages}"
    if store.exists():
        shutil.rmtree(store)
    env = dict(os.environ, PYTHONPATH=str(a), PYTHONSAFEPATH="1")
    subprocess.run([sys.executable, "-m", "convmem", "import", "--data-dir", str(store),
                    str(corpus_path)], env=env, check=True, stdout=subprocess.DEVNULL,
                   cwd=tempfile.gettempdir())
    rounds: dict[str, list[dict]] = {"a": [], "b": []}
    for r in range(args.rounds):
        for name, checkout in (("a", a), ("b", b)) if r % 2 == 0 else (("b", b), ("a", a)):
            rounds[name].append(run_child(checkout, store, queries_path, args.writes))
    figures: dict[str, dict[str, float]] = {}
    for name, runs in rounds.items():
        assert all(run["core"] == "compiled" for run in runs), "both checkouts must be built"
        f: dict[str, float] = {"open_first_ms": statistics.median(r["open_first_ms"] for r in runs)}
        for key in ("search", "history", "context", "write"):
            f[f"{key}_p50_us"] = statistics.median(pct(r[f"{key}_ns"], 0.5) / 1e3 for r in runs)
            f[f"{key}_p99_us"] = statistics.median(pct(r[f"{key}_ns"], 0.99) / 1e3 for r in runs)
        figures[name] = f
    print(f"{'figure':<18}{'A':>12}{'B':>12}{'B/A':>8}   A={a}  B={b}")
    for key in figures["a"]:
        va, vb = figures["a"][key], figures["b"][key]
        print(f"{key:<18}{va:>12.1f}{vb:>12.1f}{vb / va:>8.2f}")
    if args.results:
        Path(args.results).write_text(json.dumps({"machine": _results.machine_info(),
                                                  "messages": args.messages, "rounds": args.rounds,
                                                  "a": str(a), "b": str(b), **figures}, indent=1))


if __name__ == "__main__":
    main()
