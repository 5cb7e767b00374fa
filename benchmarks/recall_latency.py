"""recall, start_session, list_tags and remember latency on a big store (issue 12's target: recall
and start_session p50 under 5 ms at 1M messages).

    python benchmarks/corpus.py --messages 1000000 --seed 1 --out /tmp/c1m.jsonl
    convmem import --data-dir /tmp/store1m /tmp/c1m.jsonl
    python benchmarks/recall_latency.py --store /tmp/store1m --messages 1000000 [--queries 300]
        [--budget 2000] [--results out.json]

One process. The store is opened (timed), then each call is timed around the MemoryStore method
(no transport), after an untimed warm-up of each kind:
- recall: the seeded query set of corpus.py (the search benchmarks' queries, their filters
  included), with --budget tokens and the default neighbours and relation depth; beside it,
  search_messages for the same queries (limit 10, the hits recall starts from), for the ratio;
- start_session: --budget tokens, without since, then with the cursor of a call made before
  --writes remembered messages (the changes listed);
- start_session right after a write (the first call after each of --writes writes: nothing
  cached);
- list_tags (first page); remember of new text and of a duplicate.
The store is written to (the --writes remembered messages): use a copy you can lose. Results
print as JSON (median, p99, max in ms); --results also writes them to that path.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402,F401  (convmem on the path)
import corpus  # noqa: E402

from convmem import MemoryStore  # noqa: E402
from convmem._core import CORE_KIND  # noqa: E402


def pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q / 100 * (len(v) - 1))))]


def summary(ms: list[float]) -> dict[str, float]:
    return {"n": len(ms), "p50_ms": round(statistics.median(ms), 3), "p99_ms": round(pct(ms, 99), 3),
            "max_ms": round(max(ms), 3)}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1000, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", required=True, type=Path)
    ap.add_argument("--messages", type=int, required=True, help="corpus size (for the query set)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--budget", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=300, help="start_session and list_tags calls")
    ap.add_argument("--writes", type=int, default=50)
    ap.add_argument("--results", type=Path, default=None)
    args = ap.parse_args()
    # Checked before any work: opening a missing directory would create an empty store and the
    # figures would be labelled with a size it does not have.
    if not (args.store / "messages.log").is_file():
        raise SystemExit(f"{args.store} is not a convmem store (no messages.log)")

    open_ms, store = timed(lambda: MemoryStore.open(args.store))
    out: dict[str, Any] = {"core": CORE_KIND, "store": str(args.store), "budget_tokens": args.budget,
                           "open_ms": round(open_ms, 1)}
    try:
        health = store.get_system_health()
        out["active_messages"] = health["active_messages"]
        if not 0.9 * args.messages <= health["active_messages"] <= args.messages:
            raise SystemExit(f"{args.store} holds {health['active_messages']} messages, not about "
                             f"{args.messages}: give the store's size as --messages")
        queries = corpus.make_queries(args.queries, args.seed, args.messages)
        keep = ("query", "session_id", "filters_json", "min_importance")
        recall_args = [{k: q[k] for k in keep if k in q} for q in queries]
        for a in recall_args[:20]:  # warm-up
            store.recall(budget_tokens=args.budget, **a)
        rec_ms, search_ms, used = [], [], []
        for a in recall_args:
            ms, r = timed(lambda: store.recall(budget_tokens=args.budget, **a))
            rec_ms.append(ms)
            used.append(r["used_tokens"])
            assert r["used_tokens"] <= args.budget
            ms, _ = timed(lambda: store.search_messages(limit=10, **a))
            search_ms.append(ms)
        out["recall"] = {**summary(rec_ms), "used_tokens_median": statistics.median(used)}
        out["search_limit10_same_queries"] = summary(search_ms)
        out["recall_over_search_p50"] = round(statistics.median(rec_ms) / statistics.median(search_ms), 2)

        for _ in range(10):
            store.start_session(budget_tokens=args.budget)
        ss = [timed(lambda: store.start_session(budget_tokens=args.budget))[0] for _ in range(args.repeat)]
        out["start_session"] = summary(ss)
        tags = [timed(lambda: store.list_tags())[0] for _ in range(args.repeat)]
        out["list_tags"] = summary(tags)

        cursor = store.start_session(budget_tokens=args.budget)["cursor"]
        after_write, remember_new = [], []
        stamp = time.time_ns()
        for i in range(args.writes):
            ms, r = timed(lambda: store.remember(session_id="bench-recall",
                                                 content=f"benchmark memory {stamp} number {i}"))
            assert r["duplicate"] is False
            remember_new.append(ms)
            after_write.append(timed(lambda: store.start_session(budget_tokens=args.budget))[0])
        out["start_session_after_a_write"] = summary(after_write)
        out["remember_new"] = summary(remember_new)
        dup = [timed(lambda: store.remember(session_id="bench-recall",
                                            content=f"Benchmark memory {stamp} number 0"))[0]
               for _ in range(args.writes)]
        out["remember_duplicate"] = summary(dup)
        since = []
        for _ in range(args.repeat // 3):
            ms, r = timed(lambda: store.start_session(budget_tokens=args.budget, since=cursor))
            since.append(ms)
        out["start_session_since"] = {**summary(since), "changes": r["changes"]["counts"]}
    finally:
        store.close()
    text = json.dumps(out, indent=1)
    print(text)
    if args.results is not None:
        args.results.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
