"""What ranking changes would buy on the known-item sets of ranking_quality.py, before any of
them is built into the index: a small BM25 over convmem's own keys (analyzer v2, query_keys'
rules), checked against convmem's MRR@10 on the same queries, with one lever at a time.

The levers (issue 9 lists the candidates; each is scored over every document, exactly; `a+b`
combines two):
- `lead`: a bonus of LEAD_W * idf for each query key among the first LEAD_KEYS keys of a
  message's content (its opening words), added to the BM25 part;
- `lead-chars`: the same bonus for the keys of the content's first 100 characters (the
  same stretch of text in both scripts: 16 keys are about 16 words of English but 16 characters
  of Japanese, whose bigrams overlap);
- `lead-cjk`: the `lead` window of LEAD_KEYS keys with a CJK bigram counted as 0.25 key
  (English keeps the `lead` window exactly; Japanese gets 64 characters' worth);
- `lead-tf`: the lead keys counted LEAD_TF more times in tf instead (saturated by BM25's k1);
- `adjacent`: a bonus of ADJ_W * the pair's smaller idf for each pair of consecutive query
  words found next to each other in the content;
- `cjk-runs`: the bigrams of a CJK run of the query weighted 1/(bigrams in the run), so that a
  long katakana word counts about as much as one English word (`cjk-runs=p`: 1/(bigrams)^p);
- `particle`: a query's CJK bigrams that hold a particle (PARTICLES) weighted 0.5;
- `seam`: a query's CJK bigrams that straddle a change of script (kanji/hiragana/katakana, e.g.
  の変 in パッケージの変更) weighted 0.5: most are not words;
- `words`: the bigrams of one script's stretch of a query's CJK run (a katakana word, a kanji
  compound: about one word) weighted 1/(bigrams in the stretch), the `cjk-runs` idea at word
  size (a Japanese query's whole phrase is one run); `words-sqrt` weights them 1/sqrt(...);
- `b-cjk`: BM25's b for CJK bigram keys 0.5 (Japanese text makes about one key per character);
- `k1=…, b=…`: BM25's own parameters (`--k1s`).

A lever that takes a value is given it after `=` (`seam=0.25`, `lead-chars=64`, `b-cjk=0.9`,
`lead-cjk=0.5`). As the index does, a tf is capped at 255 and a lone CJK character of a query
finds every bigram holding it.

    python benchmarks/ranking_levers.py [--set debian-reference] [--translated] [--lang en,ja]
        [--levers none,lead,...] [--explain 12]

Prints MRR@10 per language and lever, and its difference from the model without levers on the
same queries with a 95% paired bootstrap interval; with `--translated` and both languages, the
Japanese minus English difference per lever on the same sections, with its interval. Nothing is
written. The BM25 here has one field (the
set's messages have no summary or tags) and no pruning: it is a model, not the engine; the
first line of each language is the model without levers beside convmem itself. `--explain N`
prints N of the queries the model without levers misses (right section not first): the rank of
the right section, the section ranked first, and each query key's idf and BM25 part in both.
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402,F401
import ranking_quality as rq  # noqa: E402

from convmem._core import pytokenizer as pt  # noqa: E402

K = 10
LEAD_KEYS, LEAD_W, LEAD_TF = 16, 0.3, 2
ADJ_W = 0.3
TF_CAP = 255  # the index keeps a tf in one byte
PARTICLES = set("のをにはがとでもへやか")
# The levers that take a value (`seam=0.25`, `lead-chars=64`), and the value they have without.
DEFAULTS = {"lead-chars": 100.0, "lead-cjk": 0.25, "cjk-runs": 1.0, "particle": 0.5,
            "seam": 0.5, "b-cjk": 0.5}
NAMES = {"lead", "lead-chars", "lead-cjk", "lead-tf", "adjacent", "cjk-runs", "particle", "seam",
         "words", "words-sqrt", "b-cjk"}
LEVERS = ("lead", "lead-chars", "lead-cjk", "lead-tf", "adjacent", "cjk-runs", "cjk-runs=0.75",
          "particle", "seam", "words", "words-sqrt+seam", "b-cjk", "cjk-runs+seam",
          "lead+cjk-runs", "lead-cjk+cjk-runs", "lead-chars+cjk-runs+seam",
          "lead-cjk+cjk-runs+seam", "lead-cjk+cjk-runs+particle",
          "lead-cjk+cjk-runs+seam+particle")


def _is_cjk_bigram(t: str) -> bool:
    return len(t) == 2 and all(pt.is_cjk(ord(c)) for c in t)


def _script(c: str) -> str:
    o = ord(c)
    return "hira" if 0x3040 <= o <= 0x309F else "kata" if 0x30A0 <= o <= 0x30FF else "han"


def _stretches(toks: list[str]) -> list[list[str]]:
    """The chained CJK bigrams of `toks` grouped by stretches of one script (both characters of
    each bigram in it): ファイルシステムの設定 gives [ファ ァイ イル ルシ シス ステ テム], [設定]."""
    out: list[list[str]] = []
    prev = ""
    for t in toks:
        pure = _is_cjk_bigram(t) and _script(t[0]) == _script(t[1])
        if pure and out and prev and prev[1] == t[0] and _script(prev[0]) == _script(t[0]) \
                and _script(prev[1]) == _script(t[0]):
            out[-1].append(t)
        elif pure:
            out.append([t])
        prev = t if _is_cjk_bigram(t) else ""
    return out


class Model:
    def __init__(self, docs: list[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.toks = [pt.tokenize(d) for d in docs]
        self.lens = np.array([len(t) for t in self.toks], dtype=float)
        self.avg = float(self.lens.mean())
        self.n = len(docs)
        # postings: key -> (document ids, tf), the lead keys' document ids
        post: dict[str, dict[int, int]] = {}
        for j, t in enumerate(self.toks):
            for key, f in Counter(t).items():
                post.setdefault(key, {})[j] = min(f, TF_CAP)  # as the index keeps it
        self.post = {key: (np.fromiter(p.keys(), int), np.fromiter(p.values(), float))
                     for key, p in post.items()}
        self.lead = self._lead_postings([t[:LEAD_KEYS] for t in self.toks])
        self._lead_chars: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
        self._lead_cjk: dict[float, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
        self.docs = docs
        self._unigrams: set[str] = set()  # lone CJK characters whose postings are merged
        self._unigrams_lead: set[tuple[int, str]] = set()  # ... and in which lead dictionary
        self.pos: list[list[set[str]]] | None = None  # word positions, built for `adjacent`

    def lead_chars(self, n: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The lead postings of the content's first `n` characters."""
        if n not in self._lead_chars:
            self._lead_chars[n] = self._lead_postings([pt.tokenize(d[:n]) for d in self.docs])
        return self._lead_chars[n]

    def lead_cjk(self, r: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """The lead postings of the first LEAD_KEYS keys, a CJK bigram counted as `r` key."""
        if r not in self._lead_cjk:
            leads = []
            for toks in self.toks:
                n, used = 0, 0.0
                while n < len(toks) and used + (r if _is_cjk_bigram(toks[n]) else 1) <= LEAD_KEYS:
                    used += r if _is_cjk_bigram(toks[n]) else 1
                    n += 1
                leads.append(toks[:n])
            self._lead_cjk[r] = self._lead_postings(leads)
        return self._lead_cjk[r]

    @staticmethod
    def _lead_postings(leads: list[list[str]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """key -> (ids of the documents whose lead holds it, how many times)."""
        out: dict[str, dict[int, int]] = {}
        for j, t in enumerate(leads):
            for key, f in Counter(t).items():
                out.setdefault(key, {})[j] = f
        return {key: (np.fromiter(p.keys(), int), np.fromiter(p.values(), float))
                for key, p in out.items()}

    @staticmethod
    def _positions(text: str) -> list[set[str]]:
        out: list[set[str]] = []
        for t, stem in pt._tokens(text):
            if out and (stem or (len(t) > 1 and any(c in "_-./:" for c in t))):
                out[-1].add(t)
            else:
                out.append({t})
        return out

    def _unigram(self, t: str) -> None:
        """A lone CJK character of a query finds every bigram holding it, as the index does:
        its postings become the sum of theirs (and its own)."""
        if len(t) != 1 or not pt.is_cjk(ord(t)) or t in self._unigrams:
            return
        self._unigrams.add(t)
        tf: Counter = Counter()
        for key in [k for k in self.post if k == t or (_is_cjk_bigram(k) and t in k)]:
            for j, f in zip(*self.post[key]):
                tf[int(j)] += int(f)
        if tf:
            self.post[t] = (np.fromiter(tf.keys(), int),
                            np.fromiter((min(f, TF_CAP) for f in tf.values()), float))

    def idf(self, t: str) -> float:
        d = len(self.post[t][0]) if t in self.post else 0
        return math.log(1 + (self.n - d + 0.5) / (d + 0.5))

    @staticmethod
    def query_terms(query: str) -> list[str]:
        tokens = pt._tokens(query)
        toks: list[str] = []
        for t, stem in tokens:
            if stem:
                toks[-1] = t  # query_keys: the stem alone in a query of several words
            else:
                toks.append(t)
        if sum(1 for _, stem in tokens if not stem) <= 1:
            toks = [t for t, _ in tokens]  # one word: its exact form and its stem
        return toks

    @staticmethod
    def weights(toks: list[str], levers: dict[str, float]) -> dict[str, float]:
        """Each distinct query key's weight (1 unless a query-side lever lowers it)."""
        weight: dict[str, float] = {}
        run: list[str] = []

        def close_run() -> None:
            for t in run:
                w = len(run) ** -levers["cjk-runs"] if "cjk-runs" in levers else 1.0
                if _is_cjk_bigram(t):
                    if "particle" in levers and PARTICLES & set(t):
                        w *= levers["particle"]
                    if "seam" in levers and _script(t[0]) != _script(t[1]):
                        w *= levers["seam"]
                weight[t] = max(weight.get(t, 0.0), w)
            run.clear()

        for t in toks:
            if _is_cjk_bigram(t) and run and _is_cjk_bigram(run[-1]) and run[-1][1] == t[0]:
                run.append(t)
            else:
                close_run()
                run.append(t)
        close_run()
        if "words" in levers or "words-sqrt" in levers:
            factor: dict[str, float] = {}
            for stretch in _stretches(toks):
                n = len(stretch)
                for t in stretch:
                    f = 1.0 / (n if "words" in levers else math.sqrt(n))
                    factor[t] = max(factor.get(t, 0.0), f)
            for t, f in factor.items():
                weight[t] *= f
        return weight

    def parts(self, t: str, levers: dict[str, float]) -> np.ndarray:
        """Key `t`'s contribution to every document's score, at weight 1."""
        out = np.zeros(self.n)
        if t not in self.post:
            return out
        ids, f = self.post[t]
        idf = self.idf(t)
        self._unigram_lead(self.lead, t)
        if "lead-tf" in levers and t in self.lead:
            in_lead = np.zeros(self.n)
            in_lead[self.lead[t][0]] = self.lead[t][1]
            f = f + LEAD_TF * in_lead[ids]
        b = levers["b-cjk"] if "b-cjk" in levers and _is_cjk_bigram(t) else self.b
        x = f / ((1 - b) + b * self.lens[ids] / self.avg)
        out[ids] = idf * x / (self.k1 + x)
        leads = [self.lead] if "lead" in levers else []
        if "lead-chars" in levers:
            leads.append(self.lead_chars(int(levers["lead-chars"])))
        if "lead-cjk" in levers:
            leads.append(self.lead_cjk(levers["lead-cjk"]))
        for lead in leads:
            self._unigram_lead(lead, t)
            if t in lead:
                out[lead[t][0]] += LEAD_W * idf
        return out

    def _unigram_lead(self, lead: dict[str, tuple[np.ndarray, np.ndarray]], t: str) -> None:
        """A lone CJK character is in a document's lead when a bigram holding it is (its
        postings are theirs): the lead's entry for it becomes the sum of theirs."""
        if len(t) != 1 or not pt.is_cjk(ord(t)) or (id(lead), t) in self._unigrams_lead:
            return
        self._unigrams_lead.add((id(lead), t))
        tf: Counter = Counter()
        for key in [k for k in lead if k == t or (_is_cjk_bigram(k) and t in k)]:
            for j, f in zip(*lead[key]):
                tf[int(j)] += int(f)
        if tf:
            lead[t] = (np.fromiter(tf.keys(), int), np.fromiter(tf.values(), float))

    def scores(self, query: str, levers: dict[str, float]) -> np.ndarray:
        toks = self.query_terms(query)
        for t in toks:
            self._unigram(t)
        scores = np.zeros(self.n)
        for t, w in self.weights(toks, levers).items():
            scores += w * self.parts(t, levers)
        if "adjacent" in levers:
            if self.pos is None:
                self.pos = [self._positions(d) for d in self.docs]
            pairs = [(a, c) for a, c in zip(toks, toks[1:]) if a in self.post and c in self.post]
            for a, c in pairs:
                for j in np.intersect1d(self.post[a][0], self.post[c][0]):
                    p = self.pos[j]
                    if any(a in p[i] and c in p[i + 1] for i in range(len(p) - 1)):
                        scores[j] += ADJ_W * min(self.idf(a), self.idf(c))
        return scores

    def rank(self, query: str, lever: str) -> list[int]:
        scores = self.scores(query, parse(lever))
        order = np.argsort(-scores, kind="stable")[:K]
        return [int(i) for i in order if scores[i] > 0]

    def explain(self, query: str, want: int, lever: str = "none") -> str:
        """Why the model with `lever` ranks another section first: each key's part in both."""
        levers = parse(lever)
        scores = self.scores(query, levers)
        order = np.argsort(-scores, kind="stable")
        rank = int(np.nonzero(order == want)[0][0]) + 1 if scores[want] > 0 else 0
        top = int(order[0])
        lines = [f"{query!r}: right section at rank {rank or '-'} ({scores[want]:.2f}); first "
                 f"{scores[top]:.2f} ({len(self.toks[top])} keys vs {len(self.toks[want])}): "
                 f"{self.docs[top][:70]!r}"]
        for t, w in self.weights(self.query_terms(query), levers).items():
            p = w * self.parts(t, levers)
            lines.append(f"    {t:14s} idf {self.idf(t):5.2f} w {w:4.2f}  right {p[want]:5.2f}  "
                         f"first {p[top]:5.2f}")
        return "\n".join(lines)


def parse(lever: str) -> dict[str, float]:
    """`lead+seam=0.25` -> {"lead": 0, "seam": 0.25}: each lever and its value (DEFAULTS')."""
    out: dict[str, float] = {}
    for part in lever.split("+"):
        name, _, value = part.partition("=")
        if name != "none":
            out[name] = float(value) if value else DEFAULTS.get(name, 0.0)
    return out


def reciprocal_ranks(ranked: list[list[int]], queries: list[tuple[str, int]]) -> np.ndarray:
    return np.array([1.0 / (r.index(want) + 1) if want in r else 0.0
                     for r, (_, want) in zip(ranked, queries)])


def mrr(ranked: list[list[int]], queries: list[tuple[str, int]]) -> float:
    return float(reciprocal_ranks(ranked, queries).mean())


def paired_interval(a: np.ndarray, b: np.ndarray, rounds: int = 2000) -> tuple[float, float]:
    """95% bootstrap interval of mean(b - a) over the same queries (seeded: reruns agree)."""
    d = b - a
    rng = np.random.default_rng(9)
    means = d[rng.integers(0, len(d), (rounds, len(d)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lang", default="en,ja")
    p.add_argument("--set", default="debian-reference", choices=rq.SETS)
    p.add_argument("--translated", action="store_true",
                   help="only the queries of sections translated in the Japanese edition")
    p.add_argument("--levers", default=",".join(LEVERS))
    p.add_argument("--k1s", default="1.2,1.6,2.0", help="k1 values tried without levers")
    p.add_argument("--explain", type=int, default=0, help="print N missed queries, explained")
    p.add_argument("--explain-with", default="none", help="the lever the explained ranking uses")
    args = p.parse_args()
    for lever in args.levers.split(","):
        unknown = set(parse(lever)) - NAMES
        if unknown:
            p.error(f"unknown lever {', '.join(sorted(unknown))}: one of {', '.join(sorted(NAMES))}")
    by_lang: dict[str, dict[str, np.ndarray]] = {}
    for lang in args.lang.split(","):
        docs, queries = rq.dataset(lang, args.set, args.translated)
        engine = rq.ConvmemEngine(docs, Path(tempfile.mkdtemp(prefix="ranking_levers_")))
        ours = mrr([engine.search(q) for q, _ in queries], queries)
        engine.close()
        print(f"{args.set}{' translated' if args.translated else ''} {lang}: {len(queries)} "
              f"queries; convmem MRR@10 {ours:.4f}", flush=True)
        model = Model(docs)
        base = reciprocal_ranks([model.rank(q, "none") for q, _ in queries], queries)
        by_lang.setdefault(lang, {})["none"] = base
        print(f"  model k1=1.2 b=0.75 {'none':20s} MRR@10 {base.mean():.4f}", flush=True)
        for lever in args.levers.split(","):
            rr = reciprocal_ranks([model.rank(q, lever) for q, _ in queries], queries)
            by_lang.setdefault(lang, {})[lever] = rr
            lo, hi = paired_interval(base, rr)
            print(f"  model k1=1.2 b=0.75 {lever:20s} MRR@10 {rr.mean():.4f}  vs none "
                  f"{rr.mean() - base.mean():+.4f} [{lo:+.4f}, {hi:+.4f}]", flush=True)
        for k1 in (float(x) for x in args.k1s.split(",") if x and float(x) != 1.2):
            km = Model(docs, k1, 0.75)
            got = mrr([km.rank(q, "none") for q, _ in queries], queries)
            print(f"  model k1={k1} b=0.75 {'none':20s} MRR@10 {got:.4f}", flush=True)
        missed = [(q, w) for q, w in queries if model.rank(q, args.explain_with)[:1] != [w]]
        for q, want in missed[:args.explain]:
            print(model.explain(q, want, args.explain_with))
    if args.translated and {"en", "ja"} <= set(by_lang) and "none" in by_lang["en"]:
        _gap(by_lang, args.set)


def _gap(by_lang: dict[str, dict[str, np.ndarray]], name: str) -> None:
    """Japanese minus English per lever on the same known items (--translated pairs them)."""
    if rq.query_anchors("en", name, True) != rq.query_anchors("ja", name, True):
        raise SystemExit("the two languages' queries are not the same sections")
    print(f"{name} translated, ja - en on the same {len(by_lang['en']['none'])} sections:")
    for lever, ja in by_lang["ja"].items():
        en = by_lang["en"][lever]
        lo, hi = paired_interval(en, ja)
        print(f"  {lever:28s} {ja.mean() - en.mean():+.4f} [{lo:+.4f}, {hi:+.4f}]")


if __name__ == "__main__":
    main()
