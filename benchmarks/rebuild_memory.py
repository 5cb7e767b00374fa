"""What rebuild_index holds in memory: a store of the seeded corpus opened in a fresh process,
one search, then rebuild_index, while a thread samples the process's resident memory every
5 ms, split as /proc says: anonymous (the heap, the state built in memory) and file-backed (the
mapped snapshot's pages: page cache, which the kernel can take back).

Reported, in MB: after open (and one search), the peaks during the rebuild, after it; and the
rebuild's wall time. `--store DIR` starts from a copy of an existing store (the original is not
touched); otherwise the corpus of `--messages` is imported into a scratch store first, in a
process of its own.

    python benchmarks/rebuild_memory.py --messages 1000000 [--rounds 2] [--store DIR]
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
import _paths  # noqa: E402

IMPORT = textwrap.dedent("""
    import sys
    import corpus
    from convmem import MemoryStore
    with MemoryStore.open(sys.argv[2]) as s:
        s.import_messages(corpus.read_corpus(sys.argv[1]))
""")

CHILD = textwrap.dedent("""
    import json, sys, threading, time
    from compare_fts5 import proc_status_kb
    from convmem import MemoryStore

    def rss():
        return {"anon": proc_status_kb("RssAnon") / 1024, "file": proc_status_kb("RssFile") / 1024}

    s = MemoryStore.open(sys.argv[1])
    s.search_messages(query="hello", limit=10)
    opened = rss()
    peak = dict(opened)
    running = True

    def sample():
        while running:
            r = rss()
            for k in peak:
                peak[k] = max(peak[k], r[k])
            time.sleep(0.005)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    t0 = time.perf_counter()
    s.rebuild_index()
    took = time.perf_counter() - t0
    running = False
    t.join()
    after = rss()
    s.close()
    print(json.dumps({"rebuild_s": took, "open_anon_mb": opened["anon"],
                      "open_file_mb": opened["file"], "peak_anon_mb": peak["anon"],
                      "peak_file_mb": peak["file"], "after_anon_mb": after["anon"],
                      "after_file_mb": after["file"]}))
""")

KEYS = ("rebuild_s", "open_anon_mb", "open_file_mb", "peak_anon_mb", "peak_file_mb",
        "after_anon_mb", "after_file_mb")


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), _paths.convmem_pythonpath()]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    import corpus
    corpus.add_run_options(ap, "where the scratch stores go (default: the data directory)")
    ap.add_argument("--store", type=Path, default=None, help="copy this store instead of importing")
    args = ap.parse_args()
    tmp = args.tmp or _paths.data_dir()
    tmp.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="cm-rebuild-", dir=tmp))
    try:
        source = work / "source"
        if args.store is not None:
            shutil.copytree(args.store, source)
        else:
            src = corpus.ensure_corpus(args.messages, args.seed)
            subprocess.run([sys.executable, "-c", IMPORT, str(src), str(source)], env=_env(),
                           check=True)
        runs = []
        for r in range(args.rounds):
            store = work / f"round{r}"
            shutil.copytree(source, store)
            os.chmod(store, 0o700)
            out = subprocess.run([sys.executable, "-c", CHILD, str(store)], env=_env(),
                                 capture_output=True, text=True, check=True).stdout
            res = json.loads(out.strip().splitlines()[-1])
            runs.append(res)
            shutil.rmtree(store)
            print(f"round {r + 1}: rebuild {res['rebuild_s']:.1f} s; anonymous MB open "
                  f"{res['open_anon_mb']:.0f}, peak {res['peak_anon_mb']:.0f}, after "
                  f"{res['after_anon_mb']:.0f}; file-backed open {res['open_file_mb']:.0f}, peak "
                  f"{res['peak_file_mb']:.0f}, after {res['after_file_mb']:.0f}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = {"messages": args.messages if args.store is None else None,
               "store": str(args.store) if args.store else None, "rounds": args.rounds,
               "commit": _paths.commit(),
               "median": {k: statistics.median(r[k] for r in runs) for k in KEYS}, "runs": runs}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
