"""Which scorer pays, per query of the corpus's query set, on a real store: the search core
(compare_fts5.py's `search_core`) with the scorer as shipped, the pruned scorer forced, the
exhaustive one forced, any other choice rule given with `--rule DENSITY,MIN_POSTINGS`, any
other least number of postings for two scoring threads given with `--par-min N` (`off`: one
thread always), and any other values of the index's scoring settings given with `--set
NAME=VALUE[,NAME=VALUE...]` (`prime_max_postings=0,sparse_block_span=0`: the scorer without
priming and sparse-block bounds, docs/SCORING.md "Pruning"; `filter_maxima=0`: filtered queries
bounded by the block maxima alone, "Filter maxima").

Per query, every mode runs `--rounds` times in a random order each round (so no mode always
follows the same other one: a run after the exhaustive scorer finds colder caches) and keeps
its best time. Reported: p50/p95/p99 of each mode, the per-query best of the two forced
scorers (what a perfect rule would reach), and pruned / exhaustive by postings per window of
4096 doc ids (`SearchIndex.last_postings`), the figure the rule is chosen from
(benchmarks/README.md "Choosing the scorer").

    python benchmarks/scorer_choice.py --store DIR [--queries 1000] [--rule 128,0]
        [--par-min 100000] [--par-min off] [--set prime_max_postings=0] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402,F401
import compare_fts5  # noqa: E402
import corpus  # noqa: E402


PAR_OFF = 2 ** 62  # (--par-min off: no query has this many postings)
SETTINGS = ("prime_max_postings", "sparse_block_span", "impact_prime_blocks", "prime_docs_per_k",
            "filter_maxima")  # what --set may change


def run(store_dir: Path, queries: int, rounds: int, rules: list[tuple[int, int]],
        seed: int, par_mins: list[int] = (),
        settings: list[dict[str, int]] = ()) -> dict[str, Any]:
    eng = compare_fts5.ConvmemEngine()
    eng.open(store_dir)
    try:
        ix = eng.store._catalog.index
        n = int(eng.store.get_system_health()["active_messages"])
        qs = corpus.make_queries(queries, seed, max(n, 1))
        shipped = (ix.prune_density, ix.prune_min_postings)
        if par_mins and not hasattr(ix, "parallel_min_postings"):
            raise SystemExit("--par-min: this checkout's index has no parallel_min_postings")
        for names in settings:
            missing = [name for name in names if not hasattr(ix, name)]
            if missing:
                raise SystemExit(f"--set: this checkout's index has no {', '.join(missing)}")
        par = getattr(ix, "parallel_min_postings", None)
        shipped_settings = {name: getattr(ix, name) for one in settings for name in one}
        # mode name -> (prune_density, min_postings, exhaustive, parallel_min_postings, settings)
        modes: dict[str, tuple[int, int, bool, int | None, dict[str, int]]] = {
            "shipped": (*shipped, False, par, {}), "pruned": (0, 0, False, par, {}),
            "exhaustive": (*shipped, True, par, {})}
        for d, m in rules:
            modes[f"rule {d},{m}"] = (d, m, False, par, {})
        for pm in par_mins:
            modes["one thread" if pm == PAR_OFF else f"par-min {pm}"] = (*shipped, False, pm, {})
        for one in settings:
            modes[",".join(f"{k}={v}" for k, v in one.items())] = (*shipped, False, par, one)
        for q in qs[: min(100, len(qs))]:
            eng.search_core(q)
        rng = np.random.default_rng(seed)
        names = list(modes)
        best = {name: [] for name in names}
        postings: list[int] = []                      # per query, as the shipped run saw them
        clock = time.perf_counter
        for q in qs:
            t = dict.fromkeys(names, math.inf)
            for r in range(rounds):
                for i in rng.permutation(len(names)):
                    name = names[i]
                    density, least, exhaustive, par_min, values = modes[name]
                    ix._set_prune_density(density, least)
                    if par_mins:
                        ix.parallel_min_postings = par_min
                    for k, v in {**shipped_settings, **values}.items():
                        setattr(ix, k, v)
                    t0 = clock()
                    eng.search_core(q, exhaustive=exhaustive)
                    t[name] = min(t[name], clock() - t0)
                    if name == "shipped" and r == 0:
                        postings.append(int(ix.last_postings))
            for name in names:
                best[name].append(t[name])
        out: dict[str, Any] = {
            "messages": n, "queries": len(qs), "rounds": rounds,
            "shipped_rule": {"prune_density": shipped[0], "min_postings": shipped[1]},
            "modes_ms": {name: compare_fts5.percentiles_ms(best[name]) for name in names}}
        out["modes_ms"]["best of the two forced"] = compare_fts5.percentiles_ms(
            [min(a, b) for a, b in zip(best["pruned"], best["exhaustive"])])
        bins: dict[int, list[float]] = {}
        docs = max(ix.n_docs, 1)
        for i, p in enumerate(postings):
            if p == 0:
                continue
            b = int(math.log2(max(p * 4096 / docs, 0.5)))
            bins.setdefault(b, [0.0, 0.0, 0])
            bins[b][0] += best["pruned"][i]
            bins[b][1] += best["exhaustive"][i]
            bins[b][2] += 1
        for name in names[3 + len(rules):]:              # the --par-min and --set modes
            by: dict[int, list[float]] = {}
            for i, p in enumerate(postings):
                if p > 0:
                    c = by.setdefault(int(math.log2(p)), [0.0, 0.0, 0])
                    c[0] += best[name][i]
                    c[1] += best["shipped"][i]
                    c[2] += 1
            out.setdefault("over_shipped_by_postings", {})[name] = [
                {"postings": f"{2 ** b}-{2 ** (b + 1)}", "queries": int(c), "ratio": round(m / s, 3)}
                for b, (m, s, c) in sorted(by.items())]
        out["pruned_over_exhaustive_by_density"] = [
            {"postings_per_window": f"{2 ** b:g}-{2 ** (b + 1):g}", "queries": int(c),
             "ratio": round(p / e, 3)} for b, (p, e, c) in sorted(bins.items())]
        return out
    finally:
        eng.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, help="a store directory (opened, not changed)")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rule", action="append", default=[],
                    help="another choice rule to time beside the shipped one: DENSITY,MIN_POSTINGS")
    ap.add_argument("--par-min", action="append", default=[],
                    help="another least number of postings for two threads (or off): N")
    ap.add_argument("--set", action="append", default=[], dest="settings",
                    help="other values of index settings, a mode: NAME=VALUE[,NAME=VALUE...] "
                         f"(names: {', '.join(SETTINGS)})")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    store = Path(args.store)
    if not (store / "messages.log").is_file():
        ap.error(f"no such store directory: {store}")
    if args.queries <= 0 or args.rounds <= 0:
        ap.error("--queries and --rounds must be positive")
    rules = []
    for r in args.rule:
        try:
            d, m = (int(x) for x in r.split(","))
        except ValueError:
            ap.error(f"--rule {r!r}: expected DENSITY,MIN_POSTINGS")
        if d < 0 or m < 0:
            ap.error(f"--rule {r!r}: both must be >= 0")
        rules.append((d, m))
    par_mins = []
    for v in args.par_min:
        if v == "off":
            par_mins.append(PAR_OFF)
        elif v.isdigit():
            par_mins.append(int(v))
        else:
            ap.error(f"--par-min {v!r}: expected a number of postings or off")
    settings = []
    for v in args.settings:
        one: dict[str, int] = {}
        for item in v.split(","):
            name, _, value = item.partition("=")
            if name not in SETTINGS or not value.isdigit():
                ap.error(f"--set {v!r}: expected NAME=VALUE[,NAME=VALUE...] with NAME one of "
                         f"{', '.join(SETTINGS)} and VALUE a number >= 0")
            one[name] = int(value)
        settings.append(one)
    res = run(store, args.queries, args.rounds, rules, args.seed, par_mins, settings)
    res["machine"] = compare_fts5.machine_info()
    text = json.dumps(res, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
