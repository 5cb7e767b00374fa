"""convmem against SQLite FTS5 on the same corpus and query set.

For each corpus size this prints, for both engines and as the ratio convmem / FTS5:
- build: import time of the JSONL corpus (reading and JSON parsing included for both),
- disk: bytes on disk after the build,
- RSS after the build and its peak (VmRSS / VmHWM from /proc/self/status), each engine built in its
  own fresh subprocess so that neither inherits the other's heap,
- open + first query, in another fresh subprocess per engine (page cache warm: the store was just
  built),
- query latency p50 / p95 / p99 (limit 20), both engines open in this process, queries interleaved
  one by one so that both see the same machine noise, after an untimed warm-up pass.

Fairness: FTS5 indexes the text pre-tokenized by convmem's own tokenizer (`tokenize(text)` joined
by spaces, FTS5 `ascii` tokenizer with the identifier joiners `_-./:` as token characters, so that
it splits only on those spaces: `v2.3.1` stays one token), so CJK bigrams, NFKC and
case folding match identically. The FTS5 table is contentless and scores with
bm25(fts, 1.0, 1.5, 2.0), the same field weights as convmem (content, summary, tags); the messages
themselves live in a plain table joined by rowid, so both engines return whole messages. A query is
the OR of its distinct tokens. Filters use indexed columns (kind, tier, importance, session) and a
tag table. Both engines commit every 1000 messages with a durable sync (FTS5: WAL,
synchronous=FULL), and the FTS5 build ends with 'optimize' and a WAL checkpoint.

With `--engines convmem,fts5,tantivy` (after `pip install tantivy`), tantivy is measured in the
same run under the same rules (see TantivyEngine); for convmem and tantivy the search core alone
(top k with scores, no stored message read) is timed too, right after each full search.

    python benchmarks/compare_fts5.py --sizes 10000,100000 --queries 1000 [--save | --json PATH]
    python benchmarks/compare_fts5.py --replot     # redraw the README plot from the committed results
With --save, results are merged by size into benchmarks/results/compare_fts5.json and plotted to
compare_fts5.png when matplotlib is installed; without --save or --json nothing is written.
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import orjson

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402,F401  (corpus.py and convmem on the path)

import _results  # noqa: E402
import corpus  # noqa: E402  (benchmarks/corpus.py)
from open_latency import evict  # noqa: E402  (the page cache of a store's files dropped)

RESULTS_DIR = _results.RESULTS_DIR
K = 20
WEIGHTS = (1.0, 1.5, 2.0)  # content, summary, tags: convmem's field weights
BATCH = 1000


# --- measurement helpers (also used by the other benchmark scripts) --------------------------

def proc_status_kb(field: str) -> int:
    """A `kB` field of /proc/self/status (VmRSS, VmHWM), or -1 where /proc is not available."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def percentiles_ms(samples_s: list[float]) -> dict[str, float]:
    a = np.asarray(samples_s) * 1e3
    return {"p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95)),
            "p99": float(np.percentile(a, 99)), "mean": float(a.mean())}


def load_tokenizer() -> tuple[Callable[[str], list[str]], str]:
    """convmem's `tokenize` and which implementation it is. The compiled module is the one to
    benchmark; while the compiled core does not build, fall back to the bit-identical twin."""
    try:
        from convmem._core import CORE_KIND, tokenizer
        return tokenizer.tokenize, CORE_KIND
    except ImportError as exc:
        path = ROOT / "convmem" / "_core" / "pytokenizer.py"
        spec = importlib.util.spec_from_file_location("_bench_pytokenizer", path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        print(f"compare_fts5: compiled core unavailable ({exc}); using pytokenizer", file=sys.stderr)
        return mod.tokenize, "pure-python (fallback)"


def machine_info() -> dict[str, Any]:
    """The machine, commit, core and build of this run (_results.machine_info)."""
    return _results.machine_info()


# --- engines ---------------------------------------------------------------------------------

class Engine(Protocol):
    name: str

    def build(self, corpus_file: Path, store_dir: Path) -> None: ...
    def open(self, store_dir: Path) -> None: ...
    def search(self, args: dict[str, Any]) -> list[str]: ...  # message ids, best first
    def close(self) -> None: ...


class ConvmemEngine:
    """The in-process MemoryStore (convmem.api)."""

    name = "convmem"

    def __init__(self) -> None:
        from convmem import MemoryStore
        self._cls = MemoryStore
        self.store: Any = None

    def build(self, corpus_file: Path, store_dir: Path) -> None:
        self.store = self._cls.open(store_dir)
        self.store.import_messages(corpus.read_corpus(corpus_file), batch_size=BATCH)

    def open(self, store_dir: Path) -> None:
        self.store = self._cls.open(store_dir)

    def search(self, args: dict[str, Any]) -> list[str]:
        res = self.store.search_messages(**args)
        return [r["message_id"] for r in res["results"]]

    def search_core(self, args: dict[str, Any], exhaustive: bool = False) -> int:
        """The search core alone: tokenize the query, resolve the filters and the session, and
        run the index's top k (doc numbers, scores, breakdowns), without reading any message;
        what a search library's own search call does (tantivy's returns scores and addresses).
        The keys are those search_messages looks up (`query_keys`; a checkout older than
        analyzer v2 has only `token_keys`, the same thing there). Reaches into MemoryStore's
        internals on purpose: this is a benchmark. `exhaustive`: the unpruned scorer forced."""
        import numpy as np
        from convmem import validation as v
        from convmem._core import tokenizer as tok
        st = self.store
        flt = v.filters(args.get("filters_json"))
        keys = getattr(tok, "query_keys", tok.token_keys)(args["query"])
        tags = np.array([tok.hash_utf8(t.encode("utf-8")) for t in flt.tags], dtype=np.uint64)
        session, docs = -1, None
        if args.get("session_id") is not None:
            s = st._catalog.sessions.get(args["session_id"])
            if s is None or s.n == 0:
                return 0
            session = s.num
            docs = st._catalog.session_docs(s)
        found, _, _ = st._catalog.index.search(keys, args.get("limit", K), session=session,
                                       kind_mask=flt.kind_mask, tier_mask=flt.tier_mask,
                                       min_importance=args.get("min_importance") or 0,
                                       tag_hashes=tags, session_docs=docs, exhaustive=exhaustive)
        return len(found)

    def memory_estimate(self) -> dict[str, int]:
        """get_system_health's memory_estimate (every structure but message bodies)."""
        return self.store.get_system_health()["memory_estimate"]

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None


class Fts5Engine:
    """SQLite FTS5 fed with convmem's tokens; see the module docstring for the fairness rules."""

    name = "fts5"
    SCHEMA = """
    PRAGMA journal_mode = WAL;
    PRAGMA synchronous = FULL;
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY, message_id TEXT NOT NULL UNIQUE, session_id TEXT NOT NULL,
        role TEXT NOT NULL, content TEXT NOT NULL, metadata TEXT NOT NULL,
        timestamp INTEGER NOT NULL, kind TEXT NOT NULL, tier TEXT NOT NULL,
        importance INTEGER NOT NULL);
    CREATE INDEX messages_session ON messages (session_id, timestamp);
    CREATE TABLE tags (tag TEXT NOT NULL, id INTEGER NOT NULL, PRIMARY KEY (tag, id)) WITHOUT ROWID;
    CREATE VIRTUAL TABLE fts USING fts5(content, summary, tags, content='',
        tokenize='ascii tokenchars ''_-./:''');
    """

    def __init__(self) -> None:
        self.tokenize, self.tokenizer_kind = load_tokenizer()
        self.db: sqlite3.Connection | None = None
        self.tokenize_s = 0.0  # time spent in convmem's tokenizer during the build

    def _tok(self, text: str) -> str:
        if not text:
            return ""
        t0 = time.perf_counter()
        out = " ".join(self.tokenize(text))
        self.tokenize_s += time.perf_counter() - t0
        return out

    def build(self, corpus_file: Path, store_dir: Path) -> None:
        store_dir.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(store_dir / "fts.db", isolation_level=None)
        db.executescript(self.SCHEMA)
        rows: list[tuple[Any, ...]] = []
        texts: list[tuple[int, str, str, str]] = []
        tags: list[tuple[str, int]] = []

        def flush() -> None:
            db.execute("BEGIN")
            db.executemany("INSERT INTO messages VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
            db.executemany("INSERT INTO fts (rowid, content, summary, tags) VALUES (?,?,?,?)", texts)
            db.executemany("INSERT OR IGNORE INTO tags VALUES (?,?)", tags)
            db.execute("COMMIT")
            rows.clear(), texts.clear(), tags.clear()

        for rowid, msg in enumerate(corpus.read_corpus(corpus_file), start=1):
            meta = msg.get("metadata") or {}
            msg_tags = meta.get("tags") or []
            rows.append((rowid, msg["message_id"], msg["session_id"], msg["role"], msg["content"],
                         json.dumps(meta, ensure_ascii=False), msg["timestamp"],
                         meta.get("memory_kind", "conversation"), meta.get("memory_tier", "short"),
                         meta.get("importance", 50)))
            texts.append((rowid, self._tok(msg["content"]), self._tok(meta.get("summary") or ""),
                          self._tok(" ".join(msg_tags))))
            tags.extend((t, rowid) for t in msg_tags)
            if len(rows) >= BATCH:
                flush()
        if rows:
            flush()
        db.execute("INSERT INTO fts (fts) VALUES ('optimize')")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.db = db

    def open(self, store_dir: Path) -> None:
        self.db = sqlite3.connect(store_dir / "fts.db", isolation_level=None)

    def match_expr(self, query: str) -> str:
        toks = dict.fromkeys(self.tokenize(query))
        return " OR ".join('"' + t.replace('"', '""') + '"' for t in toks)

    def search(self, args: dict[str, Any]) -> list[str]:
        assert self.db is not None
        expr = self.match_expr(args["query"])
        if not expr:
            return []
        sql = [f"SELECT m.message_id, m.session_id, m.role, m.content, m.metadata, m.timestamp, "
               f"bm25(fts, {WEIGHTS[0]}, {WEIGHTS[1]}, {WEIGHTS[2]}) AS score "
               "FROM fts JOIN messages m ON m.id = fts.rowid WHERE fts MATCH ?"]
        params: list[Any] = [expr]
        if args.get("session_id"):
            sql.append("AND m.session_id = ?")
            params.append(args["session_id"])
        if args.get("min_importance"):
            sql.append("AND m.importance >= ?")
            params.append(args["min_importance"])
        filters = json.loads(args.get("filters_json") or "{}")
        for col, key in (("kind", "kinds"), ("tier", "tiers")):
            values = filters.get(key) or []
            if values:
                sql.append(f"AND m.{col} IN ({','.join('?' * len(values))})")
                params.extend(values)
        for tag in filters.get("tags") or []:
            sql.append("AND m.id IN (SELECT id FROM tags WHERE tag = ?)")
            params.append(tag)
        sql.append("ORDER BY score LIMIT ?")
        params.append(args.get("limit") or K)
        rows = self.db.execute(" ".join(sql), params).fetchall()
        # Materialise messages like convmem's results (metadata parsed back into a dict).
        results = [{"message_id": r[0], "session_id": r[1], "role": r[2], "content": r[3],
                    "metadata": json.loads(r[4]), "timestamp": r[5], "score": -r[6]} for r in rows]
        return [r["message_id"] for r in results]

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None


class TantivyEngine:
    """tantivy through its official Python binding (`pip install tantivy`; optional), fed with
    convmem's tokens like FTS5: whitespace-tokenized fields with term frequencies, a query is the
    OR of its distinct tokens over the three fields boosted by convmem's field weights (BM25 per
    field, not BM25F), filters as required clauses, top k without counting all hits (so tantivy's
    block-max WAND applies). Whole messages are stored as JSON and read back for each hit."""

    name = "tantivy"
    FIELDS = ("content", "summary", "tags")

    def __init__(self) -> None:
        import tantivy
        self.t = tantivy
        self.tokenize, self.tokenizer_kind = load_tokenizer()
        sb = tantivy.SchemaBuilder()
        for f in self.FIELDS:
            sb.add_text_field(f, tokenizer_name="whitespace", index_option="freq")
        for f in ("session_id", "kind", "tier", "tag"):
            sb.add_text_field(f, tokenizer_name="raw", index_option="basic")
        sb.add_integer_field("importance", indexed=True, fast=True)
        sb.add_bytes_field("doc", stored=True)
        self.schema = sb.build()
        self.index: Any = None
        self.searcher: Any = None

    def build(self, corpus_file: Path, store_dir: Path) -> None:
        store_dir.mkdir(parents=True, exist_ok=True)
        t = self.t
        index = t.Index(self.schema, path=str(store_dir))
        writer = index.writer(heap_size=256_000_000, num_threads=1)
        for n, msg in enumerate(corpus.read_corpus(corpus_file), start=1):
            meta = msg.get("metadata") or {}
            tags = meta.get("tags") or []
            doc = t.Document()
            doc.add_text("content", " ".join(self.tokenize(msg["content"])))
            doc.add_text("summary", " ".join(self.tokenize(meta.get("summary") or "")))
            doc.add_text("tags", " ".join(self.tokenize(" ".join(tags))))
            doc.add_text("session_id", msg["session_id"])
            doc.add_text("kind", meta.get("memory_kind", "conversation"))
            doc.add_text("tier", meta.get("memory_tier", "short"))
            for tag in tags:
                doc.add_text("tag", tag)
            doc.add_integer("importance", int(meta.get("importance", 50)))
            doc.add_bytes("doc", orjson.dumps(msg))
            writer.add_document(doc)
            if n % BATCH == 0:  # durable in groups, like the other engines
                writer.commit()
        writer.commit()
        writer.wait_merging_threads()
        self.index = index

    def open(self, store_dir: Path) -> None:
        self.index = self.t.Index.open(str(store_dir))
        self.index.reload()
        self.searcher = self.index.searcher()

    def _query(self, args: dict[str, Any]) -> Any:
        t, schema = self.t, self.schema
        toks = dict.fromkeys(self.tokenize(args["query"]))
        should = []
        for tok in toks:
            for f, w in zip(self.FIELDS, WEIGHTS):
                q = t.Query.term_query(schema, f, tok, index_option="freq")
                should.append((t.Occur.Should, q if w == 1.0 else t.Query.boost_query(q, w)))
        if not should:
            return None
        must = [(t.Occur.Must, t.Query.boolean_query(should))]
        if args.get("session_id"):
            must.append((t.Occur.Must, t.Query.term_query(schema, "session_id", args["session_id"])))
        if args.get("min_importance"):
            must.append((t.Occur.Must, t.Query.range_query(
                schema, "importance", t.FieldType.Integer, int(args["min_importance"]), 100)))
        filters = json.loads(args.get("filters_json") or "{}")
        for field, key in (("kind", "kinds"), ("tier", "tiers")):
            values = filters.get(key) or []
            if values:
                must.append((t.Occur.Must, t.Query.boolean_query(
                    [(t.Occur.Should, t.Query.term_query(schema, field, v)) for v in values])))
        for tag in filters.get("tags") or []:
            must.append((t.Occur.Must, t.Query.term_query(schema, "tag", tag)))
        return must[0][1] if len(must) == 1 else t.Query.boolean_query(must)

    def search(self, args: dict[str, Any]) -> list[str]:
        q = self._query(args)
        if q is None:
            return []
        hits = self.searcher.search(q, args.get("limit") or K, count=False).hits
        docs = [orjson.loads(self.searcher.doc(addr)["doc"][0]) for _, addr in hits]
        return [d["message_id"] for d in docs]

    def search_core(self, args: dict[str, Any]) -> int:
        """The top k (scores and addresses) without reading the stored messages."""
        q = self._query(args)
        if q is None:
            return 0
        return len(self.searcher.search(q, args.get("limit") or K, count=False).hits)

    def close(self) -> None:
        self.searcher = None
        self.index = None


ENGINES: dict[str, Callable[[], Any]] = {"convmem": ConvmemEngine, "fts5": Fts5Engine,
                                         "tantivy": TantivyEngine}


# --- subprocess workers ----------------------------------------------------------------------

def worker_build(engine_name: str, corpus_file: Path, store_dir: Path) -> dict[str, Any]:
    """Run in a fresh interpreter: build one engine's store, report time, RSS, disk."""
    engine = ENGINES[engine_name]()
    gc.collect()
    rss0 = proc_status_kb("VmRSS")
    t0 = time.perf_counter()
    engine.build(corpus_file, store_dir)
    build_s = time.perf_counter() - t0
    gc.collect()
    out = {"build_s": build_s, "rss_before_kb": rss0, "rss_after_build_kb": proc_status_kb("VmRSS"),
           "rss_peak_kb": proc_status_kb("VmHWM")}
    t0 = time.perf_counter()
    engine.close()  # convmem writes its snapshot here if records arrived since the last one
    out["close_s"] = time.perf_counter() - t0
    out["disk_bytes"] = dir_bytes(store_dir)
    if engine_name == "fts5":
        out["tokenizer"] = engine.tokenizer_kind
        out["tokenize_s"] = engine.tokenize_s
    return out


def worker_open(engine_name: str, store_dir: Path, query: dict[str, Any]) -> dict[str, Any]:
    """Run in a fresh interpreter: time open + first query, and RSS once open."""
    t0 = time.perf_counter()
    engine = ENGINES[engine_name]()
    import_s = time.perf_counter() - t0
    rss0 = proc_status_kb("VmRSS")
    t0 = time.perf_counter()
    engine.open(store_dir)
    engine.search(query)
    open_s = time.perf_counter() - t0
    out = {"import_s": import_s, "open_first_query_s": open_s, "rss_before_open_kb": rss0,
           "rss_after_open_kb": proc_status_kb("VmRSS")}
    engine.close()
    return out


def worker_rebuild(store_dir: Path) -> dict[str, Any]:
    """Run in a fresh interpreter: time convmem's rebuild_index on the built store (the state
    derived again from the log, then its snapshot written), and RSS at its peak."""
    from convmem import MemoryStore
    store = MemoryStore.open(store_dir)
    rss0 = proc_status_kb("VmHWM")
    t0 = time.perf_counter()
    store.rebuild_index()
    out = {"rebuild_index_s": time.perf_counter() - t0, "rebuild_rss_peak_kb": proc_status_kb("VmHWM"),
           "rebuild_rss_peak_before_kb": rss0}
    store.close()
    return out


def run_worker(*args: str) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args[:2]} failed:\n{proc.stderr[-4000:]}")
    if proc.stderr.strip():
        print(proc.stderr.rstrip(), file=sys.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- the comparison --------------------------------------------------------------------------

def parse_time(corpus_file: Path) -> float:
    t0 = time.perf_counter()
    n = sum(1 for _ in corpus.read_corpus(corpus_file))
    assert n > 0
    return time.perf_counter() - t0


def time_queries(engines: list[Any], queries: list[dict[str, Any]],
                 warmup: int) -> tuple[dict[str, list[float]], list[float]]:
    """Interleave engines query by query; also return the top-k overlap per query (2 engines)."""
    for q in queries[:warmup]:
        for e in engines:
            e.search(q)
    samples: dict[str, list[float]] = {e.name: [] for e in engines}
    samples.update({f"{e.name}_core": [] for e in engines if hasattr(e, "search_core")})
    overlap: list[float] = []
    clock = time.perf_counter
    for q in queries:
        ids: list[list[str]] = []
        for e in engines:
            t0 = clock()
            got = e.search(q)
            samples[e.name].append(clock() - t0)
            ids.append(got)
            if hasattr(e, "search_core"):
                t0 = clock()
                e.search_core(q)
                samples[f"{e.name}_core"].append(clock() - t0)
        if len(ids) >= 2 and (ids[0] or ids[1]):  # the first two engines (convmem, fts5)
            overlap.append(len(set(ids[0]) & set(ids[1])) / max(len(ids[0]), len(ids[1])))
    return samples, overlap


def ratios(a: dict[str, Any], b: dict[str, Any], keys: tuple[str, ...],
           timings: tuple[str, ...]) -> dict[str, float]:
    """Engine a's figures over engine b's: each of `keys` that b measured (> 0), then each
    percentile of each of `timings` (`query_ms` gives query_p50, query_p95, ...)."""
    out = {key: a[key] / b[key] for key in keys if b.get(key, 0) > 0}
    for p in ("p50", "p95", "p99", "mean"):
        for t in timings:
            out[f"{t.removesuffix('_ms')}_{p}"] = a[t][p] / b[t][p]
    return out


def run_size(size: int, args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    corpus_file = corpus.ensure_corpus(size, args.seed)
    gen_s = time.perf_counter() - t0
    queries = corpus.make_queries(args.queries, args.seed, size)
    result: dict[str, Any] = {"size": size, "queries": len(queries), "k": K, "seed": args.seed,
                              "machine": machine_info(),
                              "corpus_bytes": corpus_file.stat().st_size,
                              "corpus_generate_or_load_s": gen_s,
                              "parse_only_s": parse_time(corpus_file), "engines": {}}
    work = Path(args.workdir) / f"{size}-s{args.seed}"
    for name in args.engines:
        store_dir = work / name
        if store_dir.exists():
            shutil.rmtree(store_dir)
        print(f"[{size}] building {name} ...", file=sys.stderr, flush=True)
        built = run_worker("_build", name, str(corpus_file), str(store_dir))
        first = json.dumps(queries[0], ensure_ascii=False)
        opened = run_worker("_open", name, str(store_dir), first)
        result["engines"][name] = {**built, **opened}
    engines = [ENGINES[n]() for n in args.engines]
    for e in engines:
        e.open(work / e.name)
    print(f"[{size}] timing {len(queries)} queries ...", file=sys.stderr, flush=True)
    samples, overlap = time_queries(engines, queries, warmup=min(100, len(queries)))
    for e in engines:
        result["engines"][e.name]["query_ms"] = percentiles_ms(samples[e.name])
        if f"{e.name}_core" in samples:
            result["engines"][e.name]["core_query_ms"] = percentiles_ms(samples[f"{e.name}_core"])
        if hasattr(e, "memory_estimate"):  # after the queries: search scratch included
            result["engines"][e.name]["memory_estimate"] = e.memory_estimate()
        e.close()
    # After the queries: a cold open drops the store's page cache and rebuild_index's peak
    # (14 GB at 10M) pushes it out, either of which would make the queries read from disk.
    first = json.dumps(queries[0], ensure_ascii=False)
    for name in args.engines:
        store_dir = work / name
        if args.cold:
            # The same open after the store's page cache was dropped (median of three).
            cold = []
            for _ in range(3):
                evict(store_dir)
                cold.append(run_worker("_open", name, str(store_dir), first)["open_first_query_s"])
            result["engines"][name]["open_first_query_cold_s"] = float(np.median(cold))
        if args.rebuild and name == "convmem":
            print(f"[{size}] rebuild_index ...", file=sys.stderr, flush=True)
            result["engines"][name].update(run_worker("_rebuild", str(store_dir)))
    if overlap:
        result["topk_overlap_mean"] = float(np.mean(overlap))
    engines_run = result["engines"]
    if {"convmem", "fts5"} <= set(args.engines):
        result["ratio_convmem_over_fts5"] = ratios(
            engines_run["convmem"], engines_run["fts5"],
            ("build_s", "close_s", "disk_bytes", "rss_after_build_kb", "rss_peak_kb",
             "open_first_query_s", "rss_after_open_kb"), ("query_ms",))
    if {"convmem", "tantivy"} <= set(args.engines):
        result["ratio_convmem_over_tantivy"] = ratios(
            engines_run["convmem"], engines_run["tantivy"],
            ("build_s", "disk_bytes", "open_first_query_s"), ("query_ms", "core_query_ms"))
    if not args.keep_stores:
        shutil.rmtree(work, ignore_errors=True)
    return result


def print_table(r: dict[str, Any]) -> None:
    names = list(r["engines"])
    ratio = r.get("ratio_convmem_over_fts5", {})
    print(f"\n== {r['size']:,} messages ({r['corpus_bytes'] / 1e6:.1f} MB JSONL; JSON parsing alone "
          f"{r['parse_only_s']:.2f} s), {r['queries']} queries, k={r['k']} ==")
    print(f"{'metric':<26}" + "".join(f"{n:>14}" for n in names) + f"{'convmem/fts5':>14}")

    def row(label: str, key: str, fmt: Callable[[Any], str], sub: str | None = None) -> None:
        vals = [r["engines"][n][key][sub] if sub else r["engines"][n].get(key) for n in names]
        rk = f"query_{sub}" if sub else key
        tail = f"{ratio[rk]:>14.2f}" if rk in ratio else f"{'':>14}"
        print(f"{label:<26}" + "".join(f"{fmt(v):>14}" for v in vals) + tail)

    row("build (s)", "build_s", lambda v: f"{v:.2f}")
    if all("close_s" in r["engines"][n] for n in names):
        row("close after build (s)", "close_s", lambda v: f"{v:.2f}")
    row("disk (MB)", "disk_bytes", lambda v: f"{v / 1e6:.1f}")
    row("RSS after build (MB)", "rss_after_build_kb", lambda v: f"{v / 1024:.1f}")
    row("RSS peak in build (MB)", "rss_peak_kb", lambda v: f"{v / 1024:.1f}")
    row("open + first query (ms)", "open_first_query_s", lambda v: f"{v * 1e3:.1f}")
    if all("open_first_query_cold_s" in r["engines"][n] for n in names):
        row("open + first q. cold (ms)", "open_first_query_cold_s", lambda v: f"{v * 1e3:.1f}")
    row("RSS after open (MB)", "rss_after_open_kb", lambda v: f"{v / 1024:.1f}")
    for p in ("p50", "p95", "p99"):
        row(f"query {p} (ms)", "query_ms", lambda v: f"{v:.3f}", p)
    cm = r["engines"].get("convmem", {})
    if "rebuild_index_s" in cm:
        print(f"convmem rebuild_index: {cm['rebuild_index_s']:.1f} s, RSS peak "
              f"{cm['rebuild_rss_peak_kb'] / 1024:.0f} MB")
    mem = cm.get("memory_estimate")
    if mem:
        print("convmem memory_estimate after the queries: %.0f bytes/message (all but bodies)"
              % (mem["total_bytes"] / r["size"]))
    for n in names:
        core = r["engines"][n].get("core_query_ms")
        if core:
            print(f"{n} search core alone (no message read): p50 %.3f  p95 %.3f  p99 %.3f ms"
                  % (core["p50"], core["p95"], core["p99"]))
    rt = r.get("ratio_convmem_over_tantivy")
    if rt:
        print("convmem / tantivy: full p50 %.2f p99 %.2f; core p50 %.2f p99 %.2f; build %.2f"
              % (rt["query_p50"], rt["query_p99"], rt["core_query_p50"], rt["core_query_p99"],
                 rt.get("build_s", float("nan"))))
    fts = r["engines"].get("fts5", {})
    if "tokenize_s" in fts:
        print(f"FTS5 build: {fts['tokenize_s']:.2f} s of it in convmem's tokenizer ({fts['tokenizer']})")
    if "topk_overlap_mean" in r:
        print(f"top-{r['k']} overlap between engines (mean): {r['topk_overlap_mean']:.2f}")


def plot(all_results: dict[str, Any], path: Path, required: bool = False) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if required:
            raise SystemExit("compare_fts5: --replot needs matplotlib (pip install matplotlib)") from None
        print("compare_fts5: matplotlib is not installed; skipping the plot "
              "(pip install matplotlib to get it)", file=sys.stderr)
        return
    sizes = sorted(int(s) for s in all_results)
    fig, (ax, mx) = plt.subplots(1, 2, figsize=(12, 4.5))
    styles = {"p50": "-", "p95": "--", "p99": ":"}
    colors = {"convmem": "tab:blue", "fts5": "tab:orange", "tantivy": "tab:green"}
    for name in ("convmem", "fts5", "tantivy"):
        xs = [s for s in sizes if name in all_results[str(s)]["engines"]]
        if not xs:
            continue
        for p, style in styles.items():
            ys = [all_results[str(s)]["engines"][name]["query_ms"][p] for s in xs]
            ax.plot(xs, ys, style, marker="o", color=colors[name], label=f"{name} {p}")
        for key, style, what in (("rss_after_open_kb", "-", "RSS once open"),
                                 ("rss_peak_kb", "--", "RSS peak in build")):
            ys = [all_results[str(s)]["engines"][name][key] / 1024 for s in xs]
            mx.plot(xs, ys, style, marker="o", color=colors[name], label=f"{name} {what}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("messages in store")
    ax.set_ylabel(f"search latency, ms (k={K})")
    ax.set_title("search latency (same tokens, same field weights)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    mx.set_xscale("log")
    mx.set_yscale("log")
    mx.set_xlabel("messages in store")
    mx.set_ylabel("resident memory, MB")
    mx.set_title("memory (VmRSS, VmHWM of the process)")
    mx.grid(True, which="both", alpha=0.3)
    mx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})  # the same results give the same bytes
    print(f"plot written to {path}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_build"]:
        print(json.dumps(worker_build(argv[1], Path(argv[2]), Path(argv[3]))))
        return 0
    if argv[:1] == ["_open"]:
        print(json.dumps(worker_open(argv[1], Path(argv[2]), json.loads(argv[3]))))
        return 0
    if argv[:1] == ["_rebuild"]:
        print(json.dumps(worker_rebuild(Path(argv[1]))))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10000,100000", help="comma-separated corpus sizes")
    p.add_argument("--queries", type=int, default=1000, help="queries per size")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--engines", default="convmem,fts5", help=f"comma-separated, of {', '.join(ENGINES)}")
    p.add_argument("--workdir", default=str(corpus.DATA_DIR / "stores"))
    p.add_argument("--keep-stores", action="store_true", help="keep the built stores in --workdir")
    p.add_argument("--cold", action="store_true",
                   help="also time open + first query after dropping the store's page cache")
    p.add_argument("--rebuild", action="store_true", help="also time convmem's rebuild_index")
    p.add_argument("--replot", action="store_true",
                   help="only redraw results/compare_fts5.png from the committed results/compare_fts5.json")
    _results.add_output_args(p, "compare_fts5.json")
    args = p.parse_args(argv)
    committed = RESULTS_DIR / "compare_fts5.json"
    if args.replot:
        plot(json.loads(committed.read_text())["sizes"], committed.with_suffix(".png"), required=True)
        return 0
    # Everything checked before minutes of building.
    sizes = _results.parse_sizes(args.sizes)
    args.engines = [e for e in args.engines.split(",") if e]
    unknown = [e for e in args.engines if e not in ENGINES]
    if unknown or not args.engines:
        p.error(f"--engines: unknown {unknown}; choose from {', '.join(ENGINES)}")
    if "tantivy" in args.engines and importlib.util.find_spec("tantivy") is None:
        p.error("--engines names tantivy, but its Python binding is not installed (pip install tantivy)")
    if args.queries <= 0:
        p.error("--queries must be positive")
    _results.refuse_debug_build("compare_fts5.py")
    results_path = _results.output_path(args, "compare_fts5.json")
    merged: dict[str, Any] = {}
    if results_path is not None and results_path.exists():
        merged = json.loads(results_path.read_text()).get("sizes", {})
    for size in sizes:
        r = run_size(size, args)
        print_table(r)
        merged[str(size)] = r
        _results.write_json(results_path, {"sizes": merged})
    if results_path is not None:
        plot(merged, results_path.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
