"""What the query set's own filters cost the search core: every query of the corpus's query set
that carries filters (kinds, tiers, tags, min_importance, session_id) run with them and without
them, the same text, on a real store.

    python benchmarks/filter_cost.py --store DIR [--queries 300] [--rounds 5] [--json PATH]

Per query, both variants run `--rounds` times, their order alternating, and keep their best time
(compare_fts5.py's `search_core`: the index's top k, no message read) and the index's count of
windows of 4096 doc ids whose bound let the scorer skip them (`SearchIndex.last_windows_skipped`).
Reported: p50 of each variant over the filtered queries, their ratio per query (median), and the
same grouped by which filters a query carries and by one word or more (a single word's pruning
is what a filter takes away); the windows skipped with and without the filter;
and over the whole set, how many queries take `--under` ms or less (the share a p50 target
needs). The block maxima bound every message of a block whatever its kind, tier, tags or
importance; the filter maxima bound the messages of the kinds, tiers and importance asked
(docs/SCORING.md, "Pruning" and "Filter maxima"). Each filtered query also runs a third time
with the filter maxima switched off (`SearchIndex.filter_maxima = False`, as a snapshot
written before them is served): the `no_maxima` figures, and the set's p50 and count under
`--under` that way, are the before of the same run.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402,F401
import _results  # noqa: E402
import compare_fts5  # noqa: E402
import corpus  # noqa: E402

FILTER_ARGS = ("filters_json", "min_importance", "session_id")


def filter_names(q: dict[str, Any]) -> str:
    """Which filters a query carries, e.g. "kinds+min_importance" ("" for none)."""
    names = sorted(json.loads(q["filters_json"])) if q.get("filters_json") else []
    names += [name for name in ("min_importance", "session_id") if q.get(name) is not None]
    return "+".join(names)


def timed(eng: Any, q: dict[str, Any], rounds: int, maxima: bool = True) -> tuple[float, int]:
    """Best time in ms over `rounds` and the windows skipped (of the last run); `maxima` False
    bounds blocks without the filter maxima."""
    ix = eng.store._catalog.index
    best = math.inf
    ix.filter_maxima = maxima
    try:
        for _ in range(rounds):
            t0 = time.perf_counter()
            eng.search_core(q)
            best = min(best, time.perf_counter() - t0)
    finally:
        ix.filter_maxima = True
    return best * 1e3, int(ix.last_windows_skipped)


def run(store_dir: Path, queries: int, rounds: int, seed: int, under_ms: float) -> dict[str, Any]:
    eng = compare_fts5.ConvmemEngine()
    eng.open(store_dir)
    try:
        n = int(eng.store.get_system_health()["active_messages"])
        qs = corpus.make_queries(queries, seed, max(n, 1))
        for q in qs[: min(100, len(qs))]:  # (warm-up)
            eng.search_core(q)
        every: list[float] = []
        every_before: list[float] = []      # the same, filtered queries without filter maxima
        rows: list[dict[str, Any]] = []
        for i, q in enumerate(qs):
            names = filter_names(q)
            if not names:
                every.append(timed(eng, q, rounds)[0])
                every_before.append(every[-1])
                continue
            bare = {k: v for k, v in q.items() if k not in FILTER_ARGS}
            runs = [(q, "filtered", True), (bare, "bare", True), (q, "no_maxima", False)]
            runs = runs[i % 3:] + runs[:i % 3]
            got: dict[str, tuple[float, int]] = {}
            for one, name, maxima in runs:
                got[name] = timed(eng, one, rounds, maxima)
            every.append(got["filtered"][0])
            every_before.append(got["no_maxima"][0])
            rows.append({"query": q["query"], "filters": names, "words": len(q["query"].split()),
                         "filtered_ms": round(got["filtered"][0], 4),
                         "bare_ms": round(got["bare"][0], 4),
                         "no_maxima_ms": round(got["no_maxima"][0], 4),
                         "filtered_windows_skipped": got["filtered"][1],
                         "bare_windows_skipped": got["bare"][1],
                         "no_maxima_windows_skipped": got["no_maxima"][1]})
    finally:
        eng.close()
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["filters"], []).append(r)

    def summary(rs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"queries": len(rs),
                "filtered_p50_ms": round(statistics.median(r["filtered_ms"] for r in rs), 4),
                "bare_p50_ms": round(statistics.median(r["bare_ms"] for r in rs), 4),
                "no_maxima_p50_ms": round(statistics.median(r["no_maxima_ms"] for r in rs), 4),
                "ratio_median": round(statistics.median(
                    r["filtered_ms"] / max(r["bare_ms"], 1e-6) for r in rs), 3),
                "maxima_ratio_median": round(statistics.median(
                    r["filtered_ms"] / max(r["no_maxima_ms"], 1e-6) for r in rs), 3),
                "windows_skipped_median": {
                    "filtered": statistics.median(r["filtered_windows_skipped"] for r in rs),
                    "bare": statistics.median(r["bare_windows_skipped"] for r in rs),
                    "no_maxima": statistics.median(r["no_maxima_windows_skipped"] for r in rs)}}

    return {"messages": n, "queries": len(qs), "rounds": rounds,
            "set_p50_ms": round(statistics.median(every), 4),
            "set_p50_ms_no_maxima": round(statistics.median(every_before), 4),
            "under_ms": under_ms, "queries_under": sum(t <= under_ms for t in every),
            "queries_under_no_maxima": sum(t <= under_ms for t in every_before),
            "filtered": summary(rows) if rows else None,
            "filtered_over": sum(r["filtered_ms"] > under_ms for r in rows),
            "by_filters": {name: summary(rs) for name, rs in sorted(groups.items())},
            "by_words": {label: summary(rs) for label, rs in (
                ("one word", [r for r in rows if r["words"] == 1]),
                ("more words", [r for r in rows if r["words"] > 1])) if rs},
            "rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, type=Path,
                    help="a store directory (opened, not changed)")
    for name, kind, default in (("--queries", int, 300), ("--rounds", int, 5),
                                ("--seed", int, 1), ("--under", float, 1.5)):
        ap.add_argument(name, type=kind, default=default)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    store = args.store
    if not (store / "messages.log").is_file():
        ap.error(f"no such store directory: {store}")
    if min(args.queries, args.rounds, args.under) <= 0:
        ap.error("--queries, --rounds and --under must be positive")
    res = {**run(store, args.queries, args.rounds, args.seed, args.under),
           "machine": _results.machine_info()}
    print(json.dumps(res, indent=1, ensure_ascii=False))
    _results.write_json(Path(args.json) if args.json else None, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
