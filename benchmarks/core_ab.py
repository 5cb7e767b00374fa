"""The search core of two checkouts on one existing store, query by query: did a change to the
scorer move the tail?

scorer_choice.py compares settings of one checkout in one process; a change to the compiled
scorer itself needs two builds. Each checkout must be built in place (`python setup.py build_ext
--inplace`) and read the store's format. For `--rounds` rounds, a fresh child process per
checkout, alternating A, B, A, B... (both see the same machine noise), opens the store, waits
`--settle` seconds (the background check of a large store's sections runs after the open),
warms up on the first 100 queries, then times each query of the seeded set (corpus.py) as
compare_fts5.py's `search_core` (the top k without reading messages), best of 3. The child
imports compare_fts5 from its own checkout's benchmarks/.

Reported per checkout: each round's p50 / p95 / p99, and p50 / p95 / p99 of each query's best over
the rounds; and the median of the per-query ratios B / A (best over rounds), over all queries, the
queries A took more than 5 ms on (the tail) and those under 1 ms.

    python benchmarks/core_ab.py --store S --a /path/to/base --b . [--queries 300] [--rounds 5]
        [--settle 15] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _results  # noqa: E402  (benchmarks/_results.py: the results file)

CHILD = r"""
import json, math, sys, time
from pathlib import Path
checkout, store = sys.argv[1], sys.argv[2]
n_queries, seed, settle = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
sys.path[:0] = [checkout, checkout + "/benchmarks"]
import compare_fts5, corpus, _results
_results.refuse_debug_build("core_ab.py")
eng = compare_fts5.ConvmemEngine()
eng.open(Path(store))
n = int(eng.store.get_system_health()["active_messages"])
qs = corpus.make_queries(n_queries, seed, max(n, 1))
time.sleep(settle)
for q in qs[:100]:
    eng.search_core(q)
out = []
for q in qs:
    best = math.inf
    for _ in range(3):
        t = time.perf_counter()
        eng.search_core(q)
        best = min(best, time.perf_counter() - t)
    out.append(best * 1e3)
eng.close()
print(json.dumps({"ms": out, "machine": compare_fts5.machine_info()}))
"""


def child(checkout: Path, store: Path, queries: int, seed: int, settle: float) -> dict:
    """One child's per-query times (ms) and what it measured (commit, core, build)."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(checkout), str(store), str(queries),
                           str(seed), str(settle)], capture_output=True, text=True,
                          cwd=str(store.parent))
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: the child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def pcts(ms: np.ndarray) -> dict[str, float]:
    p50, p95, p99 = np.percentile(ms, [50, 95, 99])
    return {"p50": round(float(p50), 3), "p95": round(float(p95), 3), "p99": round(float(p99), 3)}


def compare(runs: dict[str, list[list[float]]]) -> dict:
    """Per checkout: each round's percentiles and those of the per-query best over the rounds;
    the median per-query ratio B / A overall, on A's tail (> 5 ms) and on its fast queries."""
    best = {name: np.min(np.array(rs), axis=0) for name, rs in runs.items()}
    a, b = best["a"], best["b"]
    ratio = b / a
    out: dict = {name: {"rounds": [pcts(np.array(r)) for r in rs], "best_of_rounds": pcts(best[name])}
                 for name, rs in runs.items()}
    out["b_over_a_median"] = {
        "all": round(float(np.median(ratio)), 3),
        "a_over_5ms": round(float(np.median(ratio[a > 5])), 3) if (a > 5).any() else None,
        "a_under_1ms": round(float(np.median(ratio[a < 1])), 3) if (a < 1).any() else None,
        "queries_a_over_5ms": int((a > 5).sum())}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, help="a store directory (opened, not changed)")
    ap.add_argument("--a", required=True, help="the base checkout (built in place)")
    ap.add_argument("--b", required=True, help="the changed checkout (built in place)")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--settle", type=float, default=15.0,
                    help="seconds a child waits after the open before timing")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    store = Path(args.store).resolve()
    if not (store / "messages.log").is_file():
        ap.error(f"no such store directory: {store}")
    if args.queries <= 0 or args.rounds <= 0 or args.settle < 0:
        ap.error("--queries and --rounds must be positive, --settle at least 0")
    checkouts = {"a": Path(args.a).resolve(), "b": Path(args.b).resolve()}
    for name, path in checkouts.items():
        if not list((path / "convmem" / "_core").glob("index*.so")):
            ap.error(f"--{name} {path}: not built in place (python setup.py build_ext --inplace)")
    runs: dict[str, list[list[float]]] = {"a": [], "b": []}
    machine: dict[str, dict] = {}
    for _ in range(args.rounds):
        for name, path in checkouts.items():
            got = child(path, store, args.queries, args.seed, args.settle)
            runs[name].append(got["ms"])
            machine[name] = got["machine"]
    res = compare(runs)
    res.update(store=str(store), queries=args.queries, rounds=args.rounds,
               checkout_a=str(checkouts["a"]), checkout_b=str(checkouts["b"]),
               machine_a=machine["a"], machine_b=machine["b"])
    print(json.dumps(res, indent=1, ensure_ascii=False))
    _results.write_json(Path(args.json) if args.json else None, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
