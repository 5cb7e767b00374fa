"""Filtered search (filters_json after / before / roles) against unfiltered search, same queries.

    python benchmarks/filtered_search.py [--messages 1000000] [--queries 500] [--rounds 3]
        [--store /tmp/convmem-filtered-1m] [--results FILE.json]

Builds (once; reused when `--store` already holds a store of that size) a store of the seeded
corpus (`corpus.py`: timestamps strictly increasing over the corpus, roles user/assistant/system),
then runs every query of the seeded query set unfiltered and with each filter below, interleaved
query by query (the same query, one filter after the other, the order rotated each query), after
an untimed warm-up round. Two levels are timed:

- `api`: the whole `search_messages` call (validation, the index, reading and shaping 20 results);
- `core`: the index's top 20 alone (`SearchIndex.search` with the same arguments), where the
  filters are applied: the part a filter can make slower.

Filters: the newest 30 % / 5 % of the store's time span (`after`), a window in the middle
(`after` + `before`, 10 %), `roles: ["user"]`, and `roles: ["user"]` with the 30 % window. The
queries keep their own kinds / tiers / tags / session filters (about a quarter have some), so
"unfiltered" means without time and role filters. Reports p50 / p95 per variant and the ratio of
each filtered p50 to the unfiltered p50 (target: within 1.5x), and how many results each returned
(a filter must not shorten pages: the count is min(20, matches)), and what a search cursor costs
(`cursor`: the plain call, a paged search's first page and its third page, for the queries that
have one). Prints JSON; writes it to `--results` only when given.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import _paths  # noqa: F401  (puts corpus.py and convmem on the path)
import corpus
import numpy as np

import convmem
from convmem import validation as v
from convmem._core import tokenizer
from convmem.catalog.docs import tag_hashes


def build_store(path: Path, messages: int, seed: int) -> convmem.MemoryStore:
    if path.exists():
        store = convmem.MemoryStore.open(path)
        n = len(store._catalog.ids)
        if n == messages:
            print(f"reusing {path} ({n} messages)", file=sys.stderr)
            return store
        store.close()
        raise SystemExit(f"{path} holds {n} messages, not {messages}: remove it or pick another --store")
    t = time.perf_counter()
    store = convmem.MemoryStore.open(path)
    n = store.import_messages(corpus.iter_messages(messages, seed), batch_size=2000)
    store.checkpoint()
    print(f"built {path}: {n} messages in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    return store


def time_filters(store: convmem.MemoryStore) -> dict[str, dict[str, Any]]:
    ts = store._catalog.slot_ts.view()
    lo, hi = int(ts.min()), int(ts.max()) + 1
    span = hi - lo
    return {
        "unfiltered": {},
        "after_30pct": {"after": hi - span * 30 // 100},
        "after_5pct": {"after": hi - span * 5 // 100},
        "window_10pct": {"after": lo + span * 45 // 100, "before": lo + span * 55 // 100},
        "roles_user": {"roles": ["user"]},
        "roles_user_after_30pct": {"roles": ["user"], "after": hi - span * 30 // 100},
    }


def with_filters(args: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(args)
    if extra:
        flt = json.loads(args.get("filters_json", "{}"))
        flt.update(extra)
        out["filters_json"] = json.dumps(flt, ensure_ascii=False)
    return out


def core_call(store: convmem.MemoryStore, args: dict[str, Any]):
    """The index search that search_messages makes for these arguments (no message read)."""
    flt = v.filters(args.get("filters_json"))
    cat = store._catalog
    session, docs = -1, None
    if "session_id" in args:
        s = cat.sessions.get(args["session_id"])
        if s is not None:
            session, docs = s.num, cat.session_docs(s)
    keys = tokenizer.query_keys(args["query"])
    kw = dict(session=session, kind_mask=flt.kind_mask, tier_mask=flt.tier_mask,
              min_importance=args.get("min_importance", 0), tag_hashes=tag_hashes(flt.tags),
              session_docs=docs, ts_lo=flt.after, ts_hi=flt.before, role_mask=flt.role_mask)
    return lambda: cat.index.search(keys, args.get("limit", 20), **kw)


def run(store: convmem.MemoryStore, queries: list[dict[str, Any]], rounds: int) -> dict[str, Any]:
    variants = time_filters(store)
    names = list(variants)
    calls = [{name: with_filters(q, variants[name]) for name in names} for q in queries]
    cores = [{name: core_call(store, c[name]) for name in names} for c in calls]
    api_t: dict[str, list[float]] = {n: [] for n in names}
    core_t: dict[str, list[float]] = {n: [] for n in names}
    counts: dict[str, list[int]] = {n: [] for n in names}
    for r in range(rounds + 1):  # round 0: warm-up, not counted
        for i, (c, k) in enumerate(zip(calls, cores)):
            order = names[i % len(names):] + names[:i % len(names)]
            for name in order:
                t0 = time.perf_counter()
                k[name]()
                t1 = time.perf_counter()
                res = store.search_messages(**c[name])
                t2 = time.perf_counter()
                if r:
                    core_t[name].append((t1 - t0) * 1e3)
                    api_t[name].append((t2 - t1) * 1e3)
                    if r == 1:
                        counts[name].append(len(res["results"]))
    out: dict[str, Any] = {"variants": {}}
    for level, times in (("core", core_t), ("api", api_t)):
        base = statistics.median(times["unfiltered"])
        for name in names:
            p50 = statistics.median(times[name])
            entry = out["variants"].setdefault(name, {"filter": variants[name]})
            entry[level] = {"p50_ms": round(p50, 4),
                            "p95_ms": round(float(np.percentile(times[name], 95)), 4),
                            "ratio_p50": round(p50 / base, 3)}
    for name in names:
        out["variants"][name]["results_mean"] = round(statistics.mean(counts[name]), 2)
    out["cursor"] = cursor_pages(store, queries, rounds)
    return out


def cursor_pages(store: convmem.MemoryStore, queries: list[dict[str, Any]],
                 rounds: int) -> dict[str, Any]:
    """Paged search: the plain call, the first page of a paged one (cursor "") and page 3 (its
    cursor made beforehand), interleaved per query, whole calls: what a cursor costs."""
    third: list[tuple[dict[str, Any], str]] = []
    for q in queries:
        c = store.search_messages(**q, cursor="").get("nextCursor")
        c = c and store.search_messages(**q, cursor=c).get("nextCursor")
        if c:
            third.append((q, c))
    times: dict[str, list[float]] = {"plain": [], "page_1": [], "page_3": []}
    for r in range(rounds + 1):
        for i, (q, c) in enumerate(third):
            calls = [("plain", {}), ("page_1", {"cursor": ""}), ("page_3", {"cursor": c})]
            for name, kw in calls[i % 3:] + calls[:i % 3]:  # the first call of a query is colder
                t0 = time.perf_counter()
                store.search_messages(**q, **kw)
                if r:
                    times[name].append((time.perf_counter() - t0) * 1e3)
    base = statistics.median(times["plain"])
    return {"queries_with_a_third_page": len(third),
            **{name: {"p50_ms": round(statistics.median(t), 4),
                      "p95_ms": round(float(np.percentile(t, 95)), 4),
                      "ratio_p50": round(statistics.median(t) / base, 3)}
               for name, t in times.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--store", type=Path, default=None,
                    help="store directory (default /tmp/convmem-filtered-<messages>)")
    ap.add_argument("--results", type=Path, default=None, help="also write the JSON here")
    a = ap.parse_args(argv)
    path = a.store or Path(f"/tmp/convmem-filtered-{a.messages}")
    store = build_store(path, a.messages, a.seed)
    try:
        queries = corpus.make_queries(a.queries, a.seed, a.messages)
        result = {"messages": a.messages, "queries": a.queries, "rounds": a.rounds,
                  "core": "pure-python" if "py" in type(store._catalog.index).__module__.split(".")[-1]
                  else "compiled", **run(store, queries, a.rounds)}
    finally:
        store.close()
    text = json.dumps(result, indent=2, ensure_ascii=False)
    print(text)
    if a.results is not None:
        a.results.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
