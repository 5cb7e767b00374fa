"""What analyzer v2 itself costs: this code with its analyzer against this same code with the
analyzer of an older revision (issue 9's budget: search, writes and memory within 10%).

Comparing the product against the revision before analyzer v2 (07aaeb1, `23fca71^`) measures
everything that landed since as well: character lists, stored block maxima and length codes,
recall keys, the bigger history index. This script holds all of that fixed and swaps only the
analyzer: two copies of the working tree are made under the data directory, and in one of them
`convmem/_core/tokenizer.pyx`, `tokenizer.pxd` and `pytokenizer.py` are replaced by those of
`--base-rev` (default `23fca71^`, TOKENIZER_VERSION 1: letter and digit runs split, no stems,
no joined identifiers), with `query_keys` = `token_keys` where that revision has no
`query_keys`. Both copies are compiled in place (Cython and numpy must be importable here;
under CONVMEM_PURE=1 nothing is compiled and the pure twins are compared).

Each copy builds its own store from the same seeded corpus (`import_messages`, batches of 1000),
then `--rounds` rounds alternate fresh child processes, the order swapped every round. A child
opens its store and answers the first query, times every query's search core (the keys that
`search_messages` looks up, the index's top k, no message read; compare_fts5.py's definition)
as the best of `--repeat` passes in a shuffled order, times the full `search_messages` once per
query, reads `memory_estimate`, and times `--writes` `write_message` calls of corpus messages
into a scratch store, each beside a bare 1 KiB append + fdatasync (the floor) in the same
directory. Reported per analyzer: the median over rounds of each figure, and v2 / v1; the
search core is also split into the queries where stemming changes a word (`deploying` is
looked up as `deploy`) and the others.

    python benchmarks/analyzer_ab.py --messages 1000000 --queries 1000 --rounds 2 [--json PATH]
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
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402  (convmem on the path, the data directory)
import _results  # noqa: E402
import corpus  # noqa: E402
from ab_checkouts import pct  # noqa: E402  (the same percentile as the other A/B)

COMMITTED = "analyzer_ab.json"  # --save writes benchmarks/results/analyzer_ab.json
BASE_REV = "23fca71^"  # the revision before analyzer v2 (TOKENIZER_VERSION 1)
ANALYZER_FILES = ("convmem/_core/tokenizer.pyx", "convmem/_core/tokenizer.pxd",
                  "convmem/_core/pytokenizer.py")
SHIMS = {
    # An analyzer without stems looks a query up by its token keys: what search_messages did.
    "convmem/_core/tokenizer.pyx": ("def query_keys", "\n\ndef query_keys(str text not None):\n"
                                    "    return token_keys(text)\n"),
    "convmem/_core/pytokenizer.py": ("def query_keys", "\n\ndef query_keys(text: str):\n"
                                     "    return token_keys(text)\n"),
}
BUILD_SHIM = ("\n\nfrom convmem._core._common cimport CM_BUILD_DEBUG\n"
              "BUILD = \"debug\" if CM_BUILD_DEBUG else \"release\"\n")

CHILD = textwrap.dedent(r"""
    import json, os, random, shutil, sys, tempfile, time
    bench, mode, store = sys.argv[1], sys.argv[2], sys.argv[3]
    sys.path.insert(0, bench)
    import corpus
    from convmem import MemoryStore
    if mode == "build":
        t = time.perf_counter()
        s = MemoryStore.open(store)
        s.import_messages(corpus.read_corpus(sys.argv[4]), batch_size=1000)
        s.close()
        print(json.dumps({"build_s": time.perf_counter() - t}))
        sys.exit(0)
    from compare_fts5 import ConvmemEngine
    from convmem._core import BUILD_TYPE, CORE_KIND
    queries = corpus.read_queries(sys.argv[4])
    repeat, n_writes, corpus_path = int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
    t = time.perf_counter()
    s = MemoryStore.open(store)
    s.search_messages(**queries[0])
    open_first_ms = (time.perf_counter() - t) * 1e3
    engine = ConvmemEngine()
    engine.store = s
    for q in queries:                       # warm-up: every list once
        engine.search_core(q)
    core = [float("inf")] * len(queries)
    order = list(range(len(queries)))
    rng = random.Random(1)
    for _ in range(repeat):                 # each query's best, in a new order every pass
        rng.shuffle(order)
        for i in order:
            t = time.perf_counter_ns()
            engine.search_core(queries[i])
            core[i] = min(core[i], (time.perf_counter_ns() - t) / 1e3)
    full = []
    for q in queries:
        t = time.perf_counter_ns()
        s.search_messages(**q)
        full.append((time.perf_counter_ns() - t) / 1e3)
    health = s.get_system_health()
    per_message = health["memory_estimate"]["total_bytes"] / max(1, health["active_messages"])
    s.close()
    scratch = tempfile.mkdtemp(prefix="analyzer-ab-", dir=os.path.dirname(store))
    w = MemoryStore.open(os.path.join(scratch, "store"))
    floor_fd = os.open(os.path.join(scratch, "floor"), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                       0o600)
    block = b"x" * 1024
    writes, floor = [], []
    for i, m in enumerate(corpus.read_corpus(corpus_path)):
        if i >= n_writes:
            break
        t = time.perf_counter_ns()
        os.write(floor_fd, block)
        os.fdatasync(floor_fd)
        floor.append((time.perf_counter_ns() - t) / 1e3)
        t = time.perf_counter_ns()
        w.write_message(session_id=m["session_id"], role=m["role"], content=m["content"][:4096])
        writes.append((time.perf_counter_ns() - t) / 1e3)
    os.close(floor_fd)
    w.close()
    shutil.rmtree(scratch)
    print(json.dumps({"core": CORE_KIND, "build": BUILD_TYPE, "open_first_ms": open_first_ms,
                      "core_us": core, "full_us": full, "memory_per_message": per_message,
                      "write_us": writes, "floor_us": floor}))
""")


def git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"analyzer_ab.py: git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def make_copy(dest: Path, base_rev: str | None, compile_core: bool) -> Path:
    """A copy of the working tree's tracked package files at dest; with base_rev, its analyzer
    files taken from that revision. Compiled in place unless the twins are compared."""
    if dest.exists():
        shutil.rmtree(dest)
    for rel in git("ls-files", "convmem", "setup.py", "pyproject.toml", "README.md").split("\n"):
        if rel:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    if base_rev is not None:
        for rel in ANALYZER_FILES:
            text = git("show", f"{base_rev}:{rel}")
            marker, shim = SHIMS.get(rel, ("", ""))
            if marker and marker not in text:
                text += shim
            if rel.endswith(".pyx") and "\nBUILD = " not in text:
                text += BUILD_SHIM
            (dest / rel).write_text(text, encoding="utf-8")
    if compile_core:
        done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=dest,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"analyzer_ab.py: compiling {dest} failed (Cython and numpy must be "
                             f"importable here: pip install cython numpy):\n{done.stderr[-2000:]}")
    return dest


def child(copy: Path, *args: str) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(copy), PYTHONSAFEPATH="1")
    done = subprocess.run([sys.executable, "-c", CHILD, str(HERE), *args], env=env,
                          capture_output=True, text=True, cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise SystemExit(f"analyzer_ab.py: a child of {copy} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def stemmed_queries(queries: list[dict[str, Any]]) -> list[bool]:
    """Per query: whether stemming changes one of its words (the v2 analyzer's rule: a word of
    3 to 64 ASCII letters whose Snowball English stem differs)."""
    import Stemmer
    from convmem._core import tokenizer
    stem = Stemmer.Stemmer("english").stemWord
    out = []
    for q in queries:
        words = tokenizer.normalize(q["query"]).replace("'", " ").split()
        out.append(any(w.isascii() and w.isalpha() and 3 <= len(w) <= 64 and stem(w) != w
                       for w in words))
    return out


def figures(runs: list[dict[str, Any]], stemmed: list[bool]) -> dict[str, float]:
    med = statistics.median
    f = {"open_first_ms": med(r["open_first_ms"] for r in runs),
         "memory_B_per_message": med(r["memory_per_message"] for r in runs)}
    for key in ("core", "full", "write", "floor"):
        f[f"{key}_p50_us"] = med(pct(r[f"{key}_us"], 0.5) for r in runs)
        f[f"{key}_p99_us"] = med(pct(r[f"{key}_us"], 0.99) for r in runs)
    for name, want in (("stemmed", True), ("unstemmed", False)):
        f[f"core_{name}_sum_ms"] = med(sum(t for t, s in zip(r["core_us"], stemmed) if s == want)
                                       for r in runs) / 1e3
    return f


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--writes", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--repeat", type=int, default=5, help="passes over the queries (best of)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--base-rev", default=BASE_REV, help="the revision whose analyzer is 'v1'")
    p.add_argument("--workdir", default=None, help="default: the data directory's analyzer-ab")
    _results.add_output_args(p, COMMITTED)
    args = p.parse_args(argv)
    out = _results.output_path(args, COMMITTED)
    if min(args.messages, args.queries, args.writes, args.rounds, args.repeat) <= 0:
        p.error("--messages, --queries, --writes, --rounds and --repeat must be positive")
    git("rev-parse", "--verify", f"{args.base_rev}^{{commit}}")  # before any work
    pure = bool(os.environ.get("CONVMEM_PURE"))
    work = Path(args.workdir) if args.workdir else corpus.DATA_DIR / "analyzer-ab"
    work.mkdir(parents=True, exist_ok=True)
    corpus_path = corpus.ensure_corpus(args.messages, args.seed)
    queries_path = corpus.write_queries(work / f"queries-{args.queries}-s{args.seed}.jsonl",
                                        args.queries, args.seed, args.messages)
    copies = {"v1": make_copy(work / "code-v1", args.base_rev, not pure),
              "v2": make_copy(work / "code-v2", None, not pure)}
    built: dict[str, dict[str, Any]] = {}
    for name, copy in copies.items():
        store = work / f"store-{name}"
        if store.exists():
            shutil.rmtree(store)
        built[name] = child(copy, "build", str(store), str(corpus_path))
        built[name]["disk_MB"] = sum(f.stat().st_size for f in store.iterdir()) / 1e6
    runs: dict[str, list[dict[str, Any]]] = {"v1": [], "v2": []}
    for r in range(args.rounds):
        for name in ("v1", "v2") if r % 2 == 0 else ("v2", "v1"):
            runs[name].append(child(copies[name], "measure", str(work / f"store-{name}"),
                                    str(queries_path), str(args.repeat), str(args.writes),
                                    str(corpus_path)))
    kinds = {run["core"] for rs in runs.values() for run in rs}
    if kinds != {"pure-python" if pure else "compiled"}:
        raise SystemExit(f"analyzer_ab.py: the copies loaded {sorted(kinds)} cores")
    if not pure and {run["build"] for rs in runs.values() for run in rs} != {"release"}:
        raise SystemExit("analyzer_ab.py: a copy was compiled as a debug build (CONVMEM_DEBUG "
                         "is set?): timings of it would not be convmem's")
    stemmed = stemmed_queries(corpus.read_queries(queries_path))
    table = {name: {"build_s": built[name]["build_s"], "disk_MB": built[name]["disk_MB"],
                    **figures(rs, stemmed)} for name, rs in runs.items()}
    print(f"== analyzer v1 ({args.base_rev}) against v2, the rest of the code the same: "
          f"{args.messages:,} messages, {args.queries} queries ({sum(stemmed)} with a stemmed "
          f"word), {args.rounds} rounds ==")
    print(f"{'figure':<26}{'v1':>12}{'v2':>12}{'v2/v1':>8}")
    for key in table["v1"]:
        a, b = table["v1"][key], table["v2"][key]
        print(f"{key:<26}{a:>12.3f}{b:>12.3f}{(b / a if a else float('nan')):>8.3f}")
    _results.write_json(out, {
        "machine": _results.machine_info(), "messages": args.messages, "queries": args.queries,
        "stemmed_queries": sum(stemmed), "rounds": args.rounds, "repeat": args.repeat,
        "base_rev": args.base_rev, "base_commit": git("rev-parse", args.base_rev).strip(),
        **table})
    return 0


if __name__ == "__main__":
    sys.exit(main())
