"""Known-item ranking quality on real text nobody here wrote: Debian's manuals, English and
Japanese, against SQLite FTS5 (unicode61 and porter tokenizers, trigram for reference).

The data set is built from a manual's installed HTML (`--set`: the Debian Reference by default,
`apt-get install debian-reference-en debian-reference-ja`, /usr/share/debian-reference/*.{en,ja}
.html; the Developer's Reference, the New Maintainers' Guide, the Debian Administrator's Handbook;
`pooled`: all four, one corpus per language; see MANUALS): every section (h2-h5) is one
message whose content is the section's text up to the next heading, without the heading. Each
heading whose text is unique in its language and whose section has at least MIN_BODY characters
is a query (its number, e.g. "1.1.3.", removed); the right answer is its own section. Reported:
MRR@10 (1/rank of the right section, 0 past rank 10) and recall@10, and for Japanese how many
queries' sections are untranslated (less than 30% CJK letters: English text under a Japanese
heading). `--translated` keeps only the queries of the sections that are queries in both
languages and translated in the Japanese edition (matched by their heading's anchor), over the
same documents: the same known items in both languages.

Engines, each on the same messages and queries:
- convmem: MemoryStore.search_messages(query, limit=10), as a client calls it;
- fts5-unicode61, fts5-porter, fts5-trigram: a contentless-free FTS5 table ranked by bm25(); the
  query is the OR of its whitespace-separated chunks, each a quoted FTS5 string (so the table's own
  tokenizer splits it, as it split the text).

Analyzer ablations of convmem (each a wrapper of the tokenizer that drops some of its keys):
`--ablate stems` drops the stem keys, `--ablate joined` the joined identifier forms, `--ablate
exactq` makes a query of several words look a stemmed word up by its exact form beside its stem
(what token_keys gives); `--k1`, `--b` and `--weights` change the BM25F configuration of the
index for the run. The last lines pool both languages' queries (en+ja) and compare with FTS5's
best.

    python benchmarks/ranking_quality.py [--set debian-reference] [--translated] [--lang en,ja]
        [--engines convmem,fts5] [--json out.json]
"""
from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import sqlite3
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402,F401
import _results  # noqa: E402

from convmem._core import pytokenizer as pt  # noqa: E402

MIN_BODY = 200
K = 10
MAX_CONTENT = 60_000  # characters of a section kept (the longest tables are cut)
TRANSLATED = 0.3  # a Japanese section with a smaller share of CJK letters is untranslated English


@dataclass(frozen=True)
class Manual:
    """An installed manual in English and Japanese: its page files in reading order (globs under
    a directory per language, `{lang}` filled in) and, where the HTML wraps the text in
    navigation, the markers of the part of a page that is the manual's text."""
    dirs: dict[str, str]
    globs: tuple[str, ...]
    packages: dict[str, str]
    skip: tuple[str, ...] = ()       # pages that are not text (tables of contents, search)
    start: str | None = None         # the text begins after this
    end: str | None = None           # ... and ends before this


_SPHINX = dict(start='<div class="body" role="main">', end='<div class="sphinxsidebar"')
MANUALS = {
    # DocBook, one page per chapter; its navigation footer is kept, as the first figures had it.
    "debian-reference": Manual(
        {"en": "/usr/share/debian-reference", "ja": "/usr/share/debian-reference"},
        ("ch*.{lang}.html", "ap*.{lang}.html"),
        {"en": "debian-reference-en", "ja": "debian-reference-ja"}),
    # Sphinx, one page per chapter; the sidebar holds the page's table of contents.
    "developers-reference": Manual(
        {"en": "/usr/share/developers-reference", "ja": "/usr/share/developers-reference/ja"},
        ("*.html",), {"en": "developers-reference", "ja": "developers-reference-ja"},
        skip=("index.html", "search.html", "genindex.html", "developers-reference.html"),
        **_SPHINX),
    # DocBook, one page per chapter.
    "maint-guide": Manual(
        {"en": "/usr/share/doc/maint-guide/html", "ja": "/usr/share/doc/maint-guide-ja/html"},
        ("*.{lang}.html",), {"en": "maint-guide", "ja": "maint-guide-ja"},
        skip=("index.en.html", "index.ja.html"), end='<div class="navfooter">'),
    # Publican (DocBook), one page per section.
    "debian-handbook": Manual(
        {"en": "/usr/share/doc/debian-handbook/html/en-US",
         "ja": "/usr/share/doc/debian-handbook/html/ja-JP"},
        ("*.html",), {"en": "debian-handbook", "ja": "debian-handbook"},
        skip=("index.html",), end='<ul class="docnav">'),
}
# debmake-doc ships *.ja.html, but its Japanese pages are the English text (1% CJK letters).
SETS = (*MANUALS, "pooled")

_HEADING = re.compile(r"<h([2-5])\b[^>]*>(.*?)</h\1>", re.S)
_ANCHOR = re.compile(r'(?:\bid="|href="#)([^"]+)"')
_PERMALINK = re.compile(r'<a class="headerlink"[^>]*>.*?</a>', re.S)
_TAG = re.compile(r"<[^>]+>")
_NUMBER = re.compile(r"^\s*(?:[A-Z]|\d+)(?:\.\d+)*\.\s*")
_SPACE = re.compile(r"\s+")


def _text(fragment: str) -> str:
    return _SPACE.sub(" ", html.unescape(_TAG.sub(" ", fragment))).strip()


class Section(NamedTuple):
    anchor: str   # manual/page#id of the heading, the same in both languages' editions
    heading: str
    body: str


def sections(lang: str, name: str = "debian-reference") -> list[Section]:
    """Every section (h2-h5) of an installed manual in `lang`: the text up to the next heading."""
    manual = MANUALS[name]
    root = Path(manual.dirs[lang])
    files = [f for g in manual.globs for f in sorted(root.glob(g.format(lang=lang)))
             if f.name not in manual.skip]
    if not files:
        raise SystemExit(f"no {root}/{manual.globs[0].format(lang=lang)}: "
                         f"apt-get install {manual.packages[lang]}")
    out: list[Section] = []
    for path in files:
        page_id = name + "/" + path.name.replace(f".{lang}.", ".")  # the same in both languages
        page = path.read_text(encoding="utf-8")
        if manual.start and manual.start in page:
            page = page[page.find(manual.start) + len(manual.start):]
        if manual.end and manual.end in page:
            page = page[:page.rfind(manual.end)]
        marks = list(_HEADING.finditer(page))
        for i, m in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(page)
            anchor = _ANCHOR.search(m.group(2))
            heading = _NUMBER.sub("", _text(_PERMALINK.sub("", m.group(2))))
            body = _text(page[m.end():end])[:MAX_CONTENT]
            out.append(Section(f"{page_id}#{anchor.group(1) if anchor else i}", heading, body))
    return out


def cjk_share(text: str) -> float:
    """The share of CJK characters among the letters of `text`."""
    letters = [c for c in text if c.isalpha()]
    return sum(1 for c in letters if pt.is_cjk(ord(c))) / len(letters) if letters else 0.0


def _set_sections(lang: str, name: str) -> list[Section]:
    names = list(MANUALS) if name == "pooled" else [name]
    return [s for n in names for s in sections(lang, n)]


def dataset(lang: str, name: str = "debian-reference",
            translated: bool = False) -> tuple[list[str], list[tuple[str, int]]]:
    """Documents (section bodies) and known-item queries (heading, index of its section) of a
    set. `translated` keeps only the queries of the sections that are queries in both languages
    and translated in the Japanese edition (the same sections in either language); the
    documents stay the same."""
    secs = _set_sections(lang, name)
    docs = [s.body or "-" for s in secs]
    first: dict[str, int] = {}
    for i, d in enumerate(docs):
        first.setdefault(d, i)
    wanted = parallel_anchors(name) if translated else None
    # The answer is the first section with the right text (all engines see the same ids).
    return docs, [(s.heading, first[docs[i]]) for i, s in _query_sections(secs)
                  if wanted is None or s.anchor in wanted]


def _query_sections(secs: list[Section]) -> list[tuple[int, Section]]:
    """The sections whose heading is unique in the set and whose body has MIN_BODY characters."""
    counts = Counter(s.heading.casefold() for s in secs)
    return [(i, s) for i, s in enumerate(secs)
            if s.heading and counts[s.heading.casefold()] == 1 and len(s.body) >= MIN_BODY]


def query_anchors(lang: str, name: str, translated: bool = False) -> list[str]:
    """The anchors of dataset(lang, name, translated)'s queries, in their order."""
    wanted = parallel_anchors(name) if translated else None
    return [s.anchor for _, s in _query_sections(_set_sections(lang, name))
            if wanted is None or s.anchor in wanted]


def parallel_anchors(name: str) -> set[str]:
    """Anchors of the sections that are queries in both languages and translated in Japanese
    (at least TRANSLATED CJK letters)."""
    ja = {s.anchor for _, s in _query_sections(_set_sections("ja", name))
          if cjk_share(s.body) >= TRANSLATED}
    return ja & {s.anchor for _, s in _query_sections(_set_sections("en", name))}


def key_shares(queries: list[tuple[str, int]], docs: list[str]) -> list[float]:
    """How much of each query its right section holds, by the analyzer's keys (query_keys
    against the section's token_keys). What no ranking can recover: a heading translated in
    other words than its section's text."""
    shares = []
    for query, want in queries:
        keys = set(pt.query_keys(query).tolist())
        found = keys & set(pt.token_keys(docs[want]).tolist())
        shares.append(len(found) / len(keys) if keys else 0.0)
    return shares


def coverage(shares: list[float]) -> dict[str, float]:
    """The mean key share, and the share of queries all of whose keys their section holds."""
    return {"mean_key_share": round(float(np.mean(shares)), 3),
            "all_keys_share": round(sum(1 for x in shares if x == 1.0) / len(shares), 3)}


# Queries grouped by the share of their keys their right section holds (lower bounds).
SHARE_BUCKETS = (1.0, 0.75, 0.5, 0.0)


def share_bucket(share: float) -> float:
    return next(lo for lo in SHARE_BUCKETS if share >= lo)


def by_share(rr: list[float], shares: list[float]) -> dict[float, tuple[int, float]]:
    """(queries, MRR@10) of each key-share bucket that holds a query."""
    out: dict[float, tuple[int, float]] = {}
    for lo in SHARE_BUCKETS:
        got = [r for r, s in zip(rr, shares) if share_bucket(s) == lo]
        if got:
            out[lo] = (len(got), round(float(np.mean(got)), 4))
    return out


def at_shares_of(ours: dict[float, tuple[int, float]],
                 theirs: dict[float, tuple[int, float]]) -> float | None:
    """Our MRR@10 with our buckets weighted as their queries fall in them: how one language would
    rank if its headings shared as many keys with their sections as the other's. None when a
    bucket of theirs has no query of ours."""
    if any(lo not in ours for lo in theirs):
        return None
    n = sum(c for c, _ in theirs.values())
    return round(sum(c * ours[lo][1] for lo, (c, _) in theirs.items()) / n, 4)


def untranslated(queries: list[tuple[str, int]], docs: list[str]) -> int:
    """How many queries' sections have less than TRANSLATED CJK letters."""
    return sum(1 for _, i in queries if cjk_share(docs[i]) < TRANSLATED)


# -- engines ------------------------------------------------------------------------------------
class ConvmemEngine:
    def __init__(self, docs: list[str], workdir: Path, ablate: str = "", b: float | None = None,
                 weights: tuple[float, float, float] | None = None,
                 k1: float | None = None, lead: float | None = None,
                 cjk_weights: bool = True) -> None:
        from convmem import MemoryStore
        _configure(ablate, b, weights, k1, lead, cjk_weights)
        self.store = MemoryStore.open(workdir / "convmem")
        items = [{"session_id": "doc", "role": "assistant", "content": d} for d in docs]
        self.store.import_messages(items, batch_size=1000)
        # A result names its section by its text (sections with the same text are one answer).
        self.by_text: dict[str, int] = {}
        for i, d in enumerate(docs):
            self.by_text.setdefault(d, i)

    def search(self, query: str) -> list[int]:
        res = self.store.search_messages(query=query, limit=K)["results"]
        return [self.by_text[r["content"]] for r in res]

    def close(self) -> None:
        self.store.close()


class Fts5Engine:
    def __init__(self, docs: list[str], tokenizer: str) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.execute(f"CREATE VIRTUAL TABLE fts USING fts5(content, tokenize='{tokenizer}')")
        self.db.executemany("INSERT INTO fts(rowid, content) VALUES (?, ?)",
                            ((i + 1, d) for i, d in enumerate(docs)))
        self.trigram = tokenizer.startswith("trigram")
        self.first = [0] * len(docs)
        seen: dict[str, int] = {}
        for i, d in enumerate(docs):
            self.first[i] = seen.setdefault(d, i)

    def search(self, query: str) -> list[int]:
        chunks = [c for c in re.split(r"[\s\"]+", query) if c]
        if self.trigram:  # trigram strings need three characters
            chunks = [c for c in chunks if len(c) >= 3] or chunks
        expr = " OR ".join('"' + c + '"' for c in chunks)
        try:
            rows = self.db.execute("SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rank LIMIT ?",
                                   (expr, K)).fetchall()
        except sqlite3.OperationalError:
            return []
        return [self.first[r[0] - 1] for r in rows]

    def close(self) -> None:
        self.db.close()


# -- convmem configuration for ablations (benchmark only) ---------------------------------------
def _configure(ablate: str, b: float | None, weights: tuple[float, float, float] | None,
               k1: float | None = None, lead: float | None = None,
               cjk_weights: bool = True) -> None:
    from convmem._core import index as core_index
    from convmem._core import tokenizer as real
    from convmem.api import store as store_module
    from convmem.catalog import catalog as catalog_module
    from convmem.catalog import docs as docs_module

    if b is not None or weights is not None or k1 is not None or lead is not None \
            or not cjk_weights:
        w = weights or (1.0, 1.5, 2.0)
        bb = (b, b, 0.5) if b is not None else (0.75, 0.75, 0.5)

        def configured(cls: type) -> Any:
            ix = core_index.SearchIndex(k1 or 1.2, w, bb)
            if lead is not None:
                ix._set_lead_weight(lead)
            ix._set_cjk_weights(cjk_weights)
            return ix

        catalog_module.core_index = SimpleNamespace(
            SearchIndex=type("SearchIndex", (), {
                "__new__": configured,
                "from_arrays": core_index.SearchIndex.from_arrays}),
            ARRAYS_FORMAT=core_index.ARRAYS_FORMAT)
    if not ablate:
        return
    joiners = set("_-./:")
    stem_of = {}

    def keep(tokens: list[str]) -> list[str]:
        out = []
        for i, t in enumerate(tokens):
            if "joined" in ablate and len(t) > 1 and any(c in joiners for c in t):
                continue
            if "stems" in ablate and i > 0 and out and tokens[i - 1] != t and _is_stem(
                    tokens[i - 1], t, stem_of):
                continue
            out.append(t)
        return out

    def token_keys(text: str) -> np.ndarray:
        return np.array([real.key_of_token(t) for t in keep(real.tokenize(text))], dtype=np.uint64)

    def query_keys(text: str) -> np.ndarray:
        toks = keep(real.tokenize(text))
        stems = [i > 0 and _is_stem(toks[i - 1], t, stem_of) and toks[i - 1] != t
                 for i, t in enumerate(toks)]
        if "exactq" not in ablate and len(toks) - sum(stems) > 1:
            # as query_keys: the stem alone in a query of several words
            toks = [t for i, t in enumerate(toks) if not (i + 1 < len(toks) and stems[i + 1])]
        return np.array([real.key_of_token(t) for t in toks], dtype=np.uint64)

    shim = SimpleNamespace(**{k: getattr(real, k) for k in dir(real) if not k.startswith("__")})
    shim.token_keys = token_keys
    for mod in (catalog_module, docs_module):
        mod.tokenizer = shim
    qshim = SimpleNamespace(**vars(shim))
    qshim.query_keys = query_keys
    store_module.tokenizer = qshim


def _is_stem(word: str, tok: str, cache: dict[str, str]) -> bool:
    from convmem._core import pytokenizer
    if not (3 <= len(word) <= 64 and word.isascii() and word.isalpha()):
        return False
    s = cache.get(word)
    if s is None:
        s = cache[word] = pytokenizer._stem(word)
    return s == tok


# -- the run ------------------------------------------------------------------------------------
def evaluate(engine: Any, queries: list[tuple[str, int]]) -> tuple[dict[str, float], list[float]]:
    rr, hits, times = [], 0, []
    for q, want in queries:
        t0 = time.perf_counter()
        got = engine.search(q)
        times.append(time.perf_counter() - t0)
        if want in got:
            rank = got.index(want) + 1
            rr.append(1.0 / rank)
            hits += 1
        else:
            rr.append(0.0)
    return {"mrr@10": round(float(np.mean(rr)), 4), "recall@10": round(hits / len(queries), 4),
            "p50_ms": round(float(np.percentile(times, 50)) * 1000, 3)}, rr


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lang", default="en,ja")
    p.add_argument("--set", default="debian-reference", choices=SETS,
                   help="the manual the known-item set is built from (pooled: all of them)")
    p.add_argument("--translated", action="store_true",
                   help="only the queries of sections translated in the Japanese edition")
    p.add_argument("--engines", default="convmem,fts5")
    p.add_argument("--ablate", default="", help="convmem only, +-joined: stems (no stem keys), joined (no whole "
                        "forms of identifiers), exactq (queries of several words look a stemmed "
                        "word up by its exact form too)")
    p.add_argument("--b", type=float, default=None, help="convmem only: b of content and summary")
    p.add_argument("--weights", default=None, help="convmem only: w_c,w_s,w_t")
    p.add_argument("--k1", type=float, default=None, help="convmem only: k1")
    p.add_argument("--lead", type=float, default=None,
                   help="convmem only: the lead bonus's weight (0: none; default 0.3)")
    p.add_argument("--no-cjk-weights", action="store_true",
                   help="convmem only: no query weights for CJK bigrams (docs/SCORING.md)")
    p.add_argument("--json", default=None, help="write the figures there too")
    args = p.parse_args()
    weights = tuple(float(x) for x in args.weights.split(",")) if args.weights else None
    results: dict[str, Any] = {}
    pooled: dict[str, list[float]] = {}
    for lang in args.lang.split(","):
        docs, queries = dataset(lang, args.set, args.translated)
        shares = key_shares(queries, docs)
        cov = coverage(shares)
        results.setdefault(lang, {})["coverage"] = cov
        print(f"{args.set} {lang}: {len(docs)} sections, {len(queries)} queries"
              + (f" ({untranslated(queries, docs)} untranslated)" if lang == "ja" else "")
              + f"; the right section holds {cov['mean_key_share']:.3f} of a query's keys,"
              f" all of them for {cov['all_keys_share']:.3f} of the queries", flush=True)
        engines: list[tuple[str, Any]] = []
        work = Path(tempfile.mkdtemp(prefix="ranking_quality_"))
        try:
            for name in args.engines.split(","):
                if name == "convmem":
                    label = "convmem" + (f" -{args.ablate}" if args.ablate else "") + (
                        f" b={args.b}" if args.b is not None else "") + (
                        f" w={args.weights}" if args.weights else "") + (
                        f" k1={args.k1}" if args.k1 is not None else "") + (
                        f" lead={args.lead}" if args.lead is not None else "") + (
                        " -cjk-weights" if args.no_cjk_weights else "")
                    engines.append((label, ConvmemEngine(docs, work, args.ablate, args.b, weights,
                                                          args.k1, args.lead,
                                                          not args.no_cjk_weights)))
                elif name == "fts5":
                    for tok in ("unicode61", "porter unicode61", "trigram"):
                        engines.append((f"fts5-{tok.split()[0]}", Fts5Engine(docs, tok)))
            for label, engine in engines:
                r, rr = evaluate(engine, queries)
                results.setdefault(lang, {})[label] = r
                pooled.setdefault(label, []).extend(rr)
                r["by_key_share"] = by_share(rr, shares)
                print(f"  {label:28s} MRR@10 {r['mrr@10']:.4f}  recall@10 {r['recall@10']:.4f}  "
                      f"p50 {r['p50_ms']:.2f} ms", flush=True)
                print(f"  {'':28s} by key share: " + ", ".join(
                    f">={lo:g}: {c} q {m:.3f}" for lo, (c, m) in r["by_key_share"].items()))
                engine.close()
            _against_fts5(results[lang], "  ")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    _at_same_shares(results)
    if len(results) > 1:
        both = "+".join(results)
        results[both] = {label: {"mrr@10": round(float(np.mean(rr)), 4)}
                         for label, rr in pooled.items()}
        print(f"{both} ({sum(len(v) for v in list(pooled.values())[:1])} queries):")
        for label, r in results[both].items():
            print(f"  {label:28s} MRR@10 {r['mrr@10']:.4f}")
        _against_fts5(results[both], "  ")
    if args.json:
        results["machine"] = _results.machine_info()
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


def _at_same_shares(results: dict[str, Any]) -> None:
    """Japanese at English's key shares, for each engine that ran on both (the ranking's part of
    the gap between them; the rest is how the headings were translated)."""
    if "en" not in results or "ja" not in results:
        return
    for label, r in results["ja"].items():
        en = results["en"].get(label)
        if label == "coverage" or en is None:
            continue
        same = at_shares_of(r["by_key_share"], en["by_key_share"])
        if same is not None:
            r["mrr@10_at_en_key_shares"] = same
            print(f"ja at en's key shares: {label:28s} MRR@10 {same:.4f} (en {en['mrr@10']:.4f},"
                  f" ja {r['mrr@10']:.4f})")


def _against_fts5(by_engine: dict[str, dict[str, float]], indent: str) -> None:
    """convmem's MRR@10 over the best of FTS5 unicode61 and porter (the target's reference)."""
    ours = [(k, v["mrr@10"]) for k, v in by_engine.items() if k.startswith("convmem")]
    ref = [(k, v["mrr@10"]) for k, v in by_engine.items() if k in ("fts5-unicode61", "fts5-porter")]
    if ours and ref:
        best = max(ref, key=lambda kv: kv[1])
        print(f"{indent}{ours[0][0]} / {best[0]} = {ours[0][1] / best[1]:.3f}")


if __name__ == "__main__":
    main()
