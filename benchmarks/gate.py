"""Performance gates a CI can hold on a noisy shared machine: ratios measured in one run.

Absolute times on a shared 2-core machine move by 10-60% between runs of the same commit; a
ratio of two things measured in the same process, interleaved one by one, sees the same noise
on both sides and holds. Each check below is such a ratio with a threshold; the gate fails
(exit status 1) when one is past its threshold, and prints every figure either way.

- search: convmem's search_messages against SQLite FTS5 fed with convmem's tokens (and tantivy
  when its Python binding is installed) on the same corpus and query set, engines interleaved
  query by query after a warm-up (compare_fts5.py's engines and fairness rules): p50 and p99.
- write: write_message (1 KiB, each one durable) against a bare 1 KiB append + fdatasync in the
  same directory, interleaved (write_floor.py): the median of what a write waits for (its wall
  time less its thread's CPU time) over the floor's median.
- scorer: on the synthetic index of bench_index.py (100k docs), per query class, the scorer as
  shipped against the pruned and the exhaustive scorer forced, interleaved with the order
  rotated: pruning must pay where it should (common terms) and no class may pay for the choice.
- memory: memory_estimate against tracemalloc (+ the mapped snapshot) per category, after an
  import and after a reopen (memory_accuracy.py): each within 10%.

    python benchmarks/gate.py                        # every check, CI's sizes
    python benchmarks/gate.py --checks search,scorer --json /tmp/gate.json
    python benchmarks/gate.py --memory-sizes 10000,100000

The thresholds are calibrated at the default sizes (--messages 20000, --queries 1000, 100k index
docs); other sizes print a warning, since the ratios against FTS5 depend on the size. The five
runs the thresholds were chosen from are in benchmarks/README.md ("The gate").

Planted regressions, for the test that shows the gate catches them (benchmarks/test_gate.py):
CONVMEM_GATE_PLANT=scorer-sleep wraps the store's search index so that every search sleeps
1 ms first; CONVMEM_GATE_PLANT=no-pruning sets every index's prune_density so high that nothing
is pruned; CONVMEM_GATE_PLANT=second-flush follows every timed write_message with one more
durable 1 KiB append (no test runs it: on a loaded disk, where the floor's fdatasync takes
milliseconds, the write ratio is noisy; 0.37 against 1.28 with it on 2026-12-05,
benchmarks/README.md "The gate").
Only this script reads the variable: convmem itself has no hook and pays nothing.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402,F401  (convmem on the path)
import _results  # noqa: E402
import corpus  # noqa: E402

CHECKS = ("search", "write", "scorer", "memory")
DEFAULT_MESSAGES = 20_000
DEFAULT_QUERIES = 1000
INDEX_DOCS = 100_000
PLANT_ENV = "CONVMEM_GATE_PLANT"
PLANTS = ("scorer-sleep", "no-pruning", "second-flush")
PLANT_SLEEP_S = 0.001
NO_PRUNING = 1 << 40

# ratio name -> largest value that passes. From five runs on unchanged code (README "The gate"):
# each threshold sits well past the worst of the five and well short of what the planted
# regressions give.
MIN_FLUSH_US = 50.0  # an fdatasync below this reached no disk: the write ratio is not judged
THRESHOLDS: dict[str, float] = {
    "search_p50_convmem_over_fts5": 0.12,
    "search_p99_convmem_over_fts5": 0.5,
    "search_p50_convmem_over_tantivy": 0.8,
    "search_core_p50_convmem_over_tantivy": 0.8,
    "write_wait_median_over_fdatasync_floor": 0.85,
    "scorer_common_p50_shipped_over_exhaustive": 0.8,
    "scorer_rare_p50_shipped_over_best_forced": 1.25,
    "scorer_mid_p50_shipped_over_best_forced": 1.25,
    # 1.35, not 1.25: on the machine of 2026-12-05 it measured 1.166 before that day's priming
    # and 1.18-1.24 after (benchmarks/README.md "The gate"); a choice that never prunes is ~2.9
    "scorer_common_p50_shipped_over_best_forced": 1.35,
}


@dataclass
class Config:
    messages: int = DEFAULT_MESSAGES
    queries: int = DEFAULT_QUERIES
    writes: int = 1000
    index_docs: int = INDEX_DOCS
    memory_sizes: tuple[int, ...] = (10_000,)
    checks: tuple[str, ...] = CHECKS
    seed: int = 1
    workdir: Path = field(default_factory=lambda: corpus.DATA_DIR / "gate")
    peers: tuple[str, ...] | None = None  # search peers; None: fts5, and tantivy if installed


@dataclass
class Report:
    ratios: dict[str, float] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def judge(self) -> None:
        for name, value in self.ratios.items():
            limit = THRESHOLDS.get(name)
            if limit is not None and not value <= limit:
                self.failures.append(f"{name} = {value:.3f} > {limit}")


def plant() -> str:
    value = os.environ.get(PLANT_ENV, "")
    if value and value not in PLANTS:
        raise SystemExit(f"{PLANT_ENV} must be one of {PLANTS}, not {value!r}")
    return value


class _SleepingIndex:
    """The planted regression "a sleep in the scorer": the store's index, every search first
    sleeping PLANT_SLEEP_S."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def search(self, *args: Any, **kw: Any) -> Any:
        time.sleep(PLANT_SLEEP_S)
        return self._inner.search(*args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _TwiceFlushingStore:
    """The planted regression "a second flush": the store, every write_message followed by one
    more durable 1 KiB append (to a file beside it), as if the write path flushed twice."""

    def __init__(self, inner: Any, directory: Path) -> None:
        self._inner = inner
        self._fd = os.open(directory / "second-flush.bin", os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                           0o600)
        self._block = os.urandom(1024)

    def write_message(self, **kw: Any) -> Any:
        answer = self._inner.write_message(**kw)
        os.write(self._fd, self._block)
        os.fdatasync(self._fd)
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _plant_write_store(store: Any, directory: Path) -> Any:
    return _TwiceFlushingStore(store, directory) if plant() == "second-flush" else store


def _plant_store(store: Any) -> None:
    kind = plant()
    if kind == "scorer-sleep":
        store._catalog.index = _SleepingIndex(store._catalog.index)
    elif kind == "no-pruning":
        store._catalog.index._set_prune_density(NO_PRUNING)


# ---- the checks ---------------------------------------------------------------------------------

def check_search(cfg: Config, report: Report) -> None:
    import compare_fts5 as cf

    peers = cfg.peers if cfg.peers is not None else (
        ("fts5", "tantivy") if importlib.util.find_spec("tantivy") else ("fts5",))
    names = ["convmem", *peers]
    corpus_file = corpus.ensure_corpus(cfg.messages, cfg.seed)
    queries = corpus.make_queries(cfg.queries, cfg.seed, cfg.messages)
    work = cfg.workdir / f"search-{cfg.messages}-s{cfg.seed}"
    shutil.rmtree(work, ignore_errors=True)
    engines = []
    try:
        for name in names:
            e = cf.ENGINES[name]()
            e.build(corpus_file, work / name)
            e.close()
            e.open(work / name)
            engines.append(e)
        _plant_store(engines[0].store)
        samples, overlap = cf.time_queries(engines, queries, warmup=min(100, len(queries)))
    finally:
        for e in engines:
            e.close()
        shutil.rmtree(work, ignore_errors=True)
    ms = {k: cf.percentiles_ms(v) for k, v in samples.items()}
    report.figures["search_ms"] = ms
    report.figures["search_engines"] = names
    report.figures["search_top20_overlap_with_fts5"] = float(np.mean(overlap)) if overlap else None
    r = report.ratios
    if "fts5" in ms:
        r["search_p50_convmem_over_fts5"] = ms["convmem"]["p50"] / ms["fts5"]["p50"]
        r["search_p99_convmem_over_fts5"] = ms["convmem"]["p99"] / ms["fts5"]["p99"]
    if "tantivy" in ms:
        r["search_p50_convmem_over_tantivy"] = ms["convmem"]["p50"] / ms["tantivy"]["p50"]
        r["search_core_p50_convmem_over_tantivy"] = ms["convmem_core"]["p50"] / ms["tantivy_core"]["p50"]


def check_write(cfg: Config, report: Report) -> None:
    import write_floor

    directory = cfg.workdir / "write"
    res = write_floor.run(cfg.writes, 50, directory, cfg.seed, wrap=_plant_write_store)
    report.figures["write_us"] = {"write_message": res["write_message_us"],
                                  "fdatasync_floor": res["fdatasync_floor_us"]}
    floor = res["fdatasync_floor_us"]["median"]
    if floor < MIN_FLUSH_US:
        # fdatasync that cheap reaches no disk (tmpfs, a cache that ignores flushes): the ratio
        # would set convmem's CPU against nothing. Reported, not judged.
        report.figures["write_not_judged"] = (f"the directory's fdatasync takes {floor:.1f} us "
                                              f"(< {MIN_FLUSH_US}): no disk flush to compare with")
        print(f"gate.py: {report.figures['write_not_judged']}", file=sys.stderr)
        return
    # Judged: what a write waits for, its wall time less its thread's CPU time, against the
    # floor. Its one flush runs on the flusher thread while the write indexes, so it waits for
    # less than a floor (0.37 here on 2026-12-05); a second flush adds a whole one (1.28 with
    # the planted second-flush), whatever the write's CPU. Its wall time over the floor is
    # reported only: on a disk whose fdatasync is as fast as a write's CPU (60-110 us here),
    # that ratio was 2.4-3.0 with an unchanged write path, and 4.3 with the plant.
    report.figures["write_median_over_fdatasync_floor"] = res["write_message_us"]["median"] / floor
    report.figures["write_us"]["write_message_wait"] = res["write_message_wait_us"]
    report.ratios["write_wait_median_over_fdatasync_floor"] = (
        res["write_message_wait_us"]["median"] / floor)


def time_scorers(ix: Any, queries: list[np.ndarray], k: int = 20) -> dict[str, np.ndarray]:
    """Per query, seconds of the shipped choice, the pruned scorer forced and the exhaustive one
    forced; interleaved, the order rotated (the first run of a query warms its lists), the best
    of two passes."""
    shipped = ix.prune_density
    modes: list[tuple[str, int, bool]] = [("shipped", shipped, False), ("pruned", 0, False),
                                          ("exhaustive", shipped, True)]
    times = {name: np.full(len(queries), np.inf) for name, _, _ in modes}
    clock = time.perf_counter
    try:
        for rep in range(2):
            for i, q in enumerate(queries):
                for j in range(3):
                    name, density, exhaustive = modes[(i + rep + j) % 3]
                    ix._set_prune_density(density)
                    t0 = clock()
                    ix.search(q, k, exhaustive=exhaustive)
                    t = clock() - t0
                    if t < times[name][i]:
                        times[name][i] = t
    finally:
        ix._set_prune_density(shipped)
    return times


def check_scorer(cfg: Config, report: Report) -> None:
    import bench_index

    c = bench_index.Corpus(cfg.index_docs)
    ix = c.build()
    if plant() == "no-pruning":
        ix._set_prune_density(NO_PRUNING)
    figures: dict[str, Any] = {}
    for cls in ("rare", "mid", "common"):
        t = time_scorers(ix, c.queries(cls, 1000))
        p50 = {name: float(np.median(v)) * 1e3 for name, v in t.items()}
        figures[cls] = p50
        best = min(p50["pruned"], p50["exhaustive"])
        report.ratios[f"scorer_{cls}_p50_shipped_over_best_forced"] = p50["shipped"] / best
        if cls == "common":
            report.ratios["scorer_common_p50_shipped_over_exhaustive"] = p50["shipped"] / p50["exhaustive"]
    report.figures["scorer_p50_ms"] = figures


def check_memory(cfg: Config, report: Report) -> None:
    import memory_accuracy

    sizes = memory_accuracy.run_sizes(list(cfg.memory_sizes), cfg.seed, cfg.workdir / "memory")
    for size, per in sizes.items():
        for phase, r in per.items():
            report.figures.setdefault("memory_ratios", {})[f"{size} {phase}"] = {
                k: (round(v, 4) if v is not None else None)
                for k, v in memory_accuracy.ratios_checked(r).items()}
    report.failures.extend(memory_accuracy.check(sizes))


RUNNERS: dict[str, Callable[[Config, Report], None]] = {
    "search": check_search, "write": check_write, "scorer": check_scorer, "memory": check_memory}


def run(cfg: Config) -> Report:
    """Every check of cfg.checks, then the thresholds; the report holds ratios and failures."""
    report = Report()
    cfg.workdir.mkdir(parents=True, exist_ok=True)
    for name in cfg.checks:
        t0 = time.perf_counter()
        RUNNERS[name](cfg, report)
        report.figures.setdefault("seconds", {})[name] = round(time.perf_counter() - t0, 1)
    report.judge()
    return report


def print_report(report: Report) -> None:
    print(f"{'ratio':<46}{'measured':>10}{'threshold':>11}")
    for name, value in report.ratios.items():
        limit = THRESHOLDS.get(name)
        mark = "ok" if limit is None or value <= limit else "FAIL"
        print(f"{name:<46}{value:>10.3f}{limit if limit is not None else '-':>11}  {mark}")
    for key, ratios in report.figures.get("memory_ratios", {}).items():
        shown = ", ".join(f"{k} {v:.3f}" if v is not None else f"{k} -" for k, v in ratios.items())
        print(f"memory {key}: estimate / measured: {shown} (1 +- 0.10)")
    for f in report.failures:
        print(f"FAIL {f}")
    print("gate:", "FAIL" if report.failures else "pass")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checks", default=",".join(CHECKS), help=f"comma-separated, of {CHECKS}")
    p.add_argument("--messages", type=int, default=DEFAULT_MESSAGES, help="corpus of the search check")
    p.add_argument("--queries", type=int, default=DEFAULT_QUERIES)
    p.add_argument("--writes", type=int, default=1000)
    p.add_argument("--index-docs", type=int, default=INDEX_DOCS, help="synthetic index of the scorer check")
    p.add_argument("--memory-sizes", default="10000", help="corpus sizes of the memory check")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", default=None, help="scratch directory (default: a new temporary one)")
    p.add_argument("--json", default=None, metavar="PATH", help="write ratios, figures and failures here")
    args = p.parse_args(argv)
    checks = tuple(c for c in args.checks.split(",") if c)
    unknown = [c for c in checks if c not in CHECKS]
    if unknown or not checks:
        p.error(f"--checks: unknown {unknown}; choose from {CHECKS}")
    for name in ("messages", "queries", "writes", "index_docs"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    kind = plant()
    _results.refuse_debug_build("gate.py")
    from convmem._core import CORE_KIND
    if CORE_KIND != "compiled":
        raise SystemExit("gate.py: the gate judges the compiled core; unset CONVMEM_PURE")
    if (args.messages, args.queries, args.index_docs) != (DEFAULT_MESSAGES, DEFAULT_QUERIES, INDEX_DOCS):
        print("gate.py: warning: the thresholds are calibrated at --messages "
              f"{DEFAULT_MESSAGES} --queries {DEFAULT_QUERIES} --index-docs {INDEX_DOCS}", file=sys.stderr)
    scratch = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="convmem-gate-"))
    cfg = Config(messages=args.messages, queries=args.queries, writes=args.writes,
                 index_docs=args.index_docs, seed=args.seed, checks=checks, workdir=scratch,
                 memory_sizes=tuple(_results.parse_sizes(args.memory_sizes, "--memory-sizes")))
    try:
        report = run(cfg)
    finally:
        if not args.workdir:
            shutil.rmtree(scratch, ignore_errors=True)
    print_report(report)
    if args.json:
        _results.write_json(Path(args.json), {
            "machine": _results.machine_info(), "plant": kind or None,
            "sizes": {"messages": cfg.messages, "queries": cfg.queries, "writes": cfg.writes,
                      "index_docs": cfg.index_docs, "memory_sizes": list(cfg.memory_sizes)},
            "thresholds": THRESHOLDS, "ratios": report.ratios, "figures": report.figures,
            "failures": report.failures})
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
