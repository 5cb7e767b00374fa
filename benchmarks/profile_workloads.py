"""Profile a search-heavy and a write-heavy convmem workload with cProfile; print the top costs.

    python benchmarks/profile_workloads.py [--messages 20000] [--workload search|write|both]
        [--ops 3000] [--top 25] [--save DIR] [--no-cprofile]

- search: a store built from the seeded corpus (the import is not profiled), then `--ops` calls of
  search_messages over the seeded query set (limit 20), with one context read
  (read_messages view=context) every 10 searches, as an agent would follow up a hit.
- write: `--ops` write_message calls (1 KiB mixed English/Japanese content with metadata) into a
  store of `--messages` messages, with an update_message every 10 writes.

Each workload prints the top functions by own time and by cumulative time. `--save DIR` also
writes the raw .prof files (view them with `python -m pstats FILE` or snakeviz); keep them out of
git.

Compiled code is invisible to cProfile in a release build: a Cython function's time is charged to
its Python caller. To see inside the compiled core, build it with line tracing:

    CONVMEM_DEBUG=1 pip install -e .                      # or, in a checkout:
    CONVMEM_DEBUG=1 python setup.py build_ext --inplace

CONVMEM_DEBUG=1 (see setup.py) compiles with -O0 -g, the Cython directive linetrace=True (which
also turns on profiling hooks, so `def` and `cpdef` functions appear in this profile) and
CYTHON_TRACE_NOGIL=1, and writes annotation files convmem/_core/<module>.html (lines shaded by how
much Python C-API they call). line_profiler (`kernprof -l`) can then time individual lines of the
.pyx. Absolute times of a debug build are not representative (no -O3, tracing hooks); use it to
see where time goes, and a release build (`python setup.py build_ext --inplace`) to measure.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402,F401  (corpus.py and convmem on the path)

import corpus  # noqa: E402


def search_workload(store: Any, queries: list[dict[str, Any]], ops: int) -> int:
    hits = 0
    for i in range(ops):
        res = store.search_messages(**queries[i % len(queries)])["results"]
        hits += len(res)
        if i % 10 == 0 and res:
            store.read_messages(view="context", message_id=res[0]["message_id"], before=2, after=2)
    return hits


def write_workload(store: Any, texts: list[str], ops: int) -> int:
    last = ""
    for i in range(ops):
        meta = '{"tags":["project"],"memory_kind":"episode","importance":60}' if i % 3 == 0 else None
        out = store.write_message(session_id=f"profile-{i // 50}", role="user" if i % 2 == 0 else "assistant",
                                  content=texts[i % len(texts)], metadata_json=meta)
        if i % 10 == 9:
            store.update_message(message_id=last, metadata_json='{"memory_tier":"mid"}')
        last = out["message"]["message_id"]
    return ops


def mixed_texts(n: int, seed: int) -> list[str]:
    """~1 KiB texts, alternating English and Japanese with English words inside (UTF-8 bytes)."""
    voc = corpus.vocab()
    rng = np.random.default_rng(seed)
    en = voc.english_texts(rng, [160] * n)
    ja = voc.japanese_texts(rng, [54] * n, [0.08] * n)
    return [en[i] if i % 2 else ja[i] for i in range(n)]


def report(prof: cProfile.Profile, title: str, top: int, elapsed: float, ops: int) -> None:
    print(f"\n######## {title}: {ops} operations in {elapsed:.2f} s under cProfile "
          f"({elapsed / ops * 1e6:.0f} us per op, profiler overhead included)")
    for key, label in (("tottime", "own time"), ("cumulative", "cumulative time")):
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(key)
        stats.print_stats(top)
        text = buf.getvalue()
        start = text.find("   ncalls")
        print(f"--- top {top} by {label} ---")
        print(text[start:].rstrip())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="cProfile convmem search- and write-heavy workloads")
    p.add_argument("--messages", type=int, default=20_000, help="store size before the workload")
    p.add_argument("--workload", choices=("search", "write", "both"), default="both")
    p.add_argument("--ops", type=int, default=3000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--save", default=None, help="directory for the raw .prof files")
    p.add_argument("--no-cprofile", action="store_true",
                   help="run the workloads unprofiled, for an outside profiler (py-spy, perf)")
    args = p.parse_args(argv)

    from convmem import MemoryStore
    from convmem._core import BUILD_TYPE, CORE_KIND, CORE_PATH

    if args.messages <= 0 or args.ops <= 0:
        p.error("--messages and --ops must be positive")
    # A debug build is what this script is for when looking inside the core (line tracing), so
    # it is named, not refused: its times are not the release build's.
    print(f"core: {CORE_KIND}, build: {BUILD_TYPE} ({CORE_PATH})")
    corpus_file = corpus.ensure_corpus(args.messages, args.seed)
    corpus.DATA_DIR.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="convmem-profile-", dir=corpus.DATA_DIR))
    try:
        t0 = time.perf_counter()
        with MemoryStore.open(work / "store") as store:
            store.import_messages(corpus.read_corpus(corpus_file))
        print(f"store of {args.messages} messages built in {time.perf_counter() - t0:.1f} s (not profiled)")
        runs: list[tuple[str, Any]] = []
        if args.workload in ("search", "both"):
            queries = corpus.make_queries(1000, args.seed, args.messages)
            runs.append(("search", lambda s: search_workload(s, queries, args.ops)))
        if args.workload in ("write", "both"):
            texts = mixed_texts(500, args.seed)
            runs.append(("write", lambda s: write_workload(s, texts, args.ops)))
        for name, fn in runs:
            if args.no_cprofile:
                with MemoryStore.open(work / "store") as store:
                    t0 = time.perf_counter()
                    fn(store)
                    elapsed = time.perf_counter() - t0
                print(f"{name}-heavy workload on {args.messages} messages: {args.ops} operations in "
                      f"{elapsed:.2f} s ({elapsed / args.ops * 1e6:.0f} us per op, no cProfile)")
                continue
            with MemoryStore.open(work / "store") as store:
                prof = cProfile.Profile()
                t0 = time.perf_counter()
                prof.enable()
                fn(store)
                prof.disable()
                elapsed = time.perf_counter() - t0
            report(prof, f"{name}-heavy workload on {args.messages} messages", args.top, elapsed, args.ops)
            if args.save:
                Path(args.save).mkdir(parents=True, exist_ok=True)
                prof.dump_stats(str(Path(args.save) / f"{name}.prof"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
