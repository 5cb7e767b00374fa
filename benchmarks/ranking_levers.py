"""What ranking changes would buy on the known-item set of ranking_quality.py, before any of
them is built into the index: a small BM25 over convmem's own keys (analyzer v2, query_keys'
rules), checked against convmem's MRR@10 on the same queries, with one lever at a time.

The levers (issue 9 lists the candidates; each is scored over every document, exactly):
- `lead`: a bonus of LEAD_W * idf for each query key among the first LEAD_KEYS keys of a
  message's content (its opening words), added to the BM25 part;
- `lead-tf`: the same keys counted LEAD_TF more times in tf instead (saturated by BM25's k1);
- `adjacent`: a bonus of ADJ_W * the pair's smaller idf for each pair of consecutive query
  words found next to each other in the content;
- `cjk-runs`: the bigrams of a CJK run of the query weighted 1/(bigrams in the run), so that a
  long katakana word counts about as much as one English word;
- `k1=…, b=…`: BM25's own parameters.

    python benchmarks/ranking_levers.py [--lang en,ja]

Prints MRR@10 per language and lever; nothing is written. The BM25 here has one field (the
set's messages have no summary or tags) and no pruning: it is a model, not the engine; the
first line of each language is the model without levers beside convmem itself.
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


def _is_cjk_bigram(t: str) -> bool:
    return len(t) == 2 and all(pt.is_cjk(ord(c)) for c in t)


class Model:
    def __init__(self, docs: list[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.toks = [pt.tokenize(d) for d in docs]
        self.tf = [Counter(t) for t in self.toks]
        self.lens = np.array([len(t) for t in self.toks], dtype=float)
        self.avg = float(self.lens.mean())
        self.df: Counter = Counter()
        for c in self.tf:
            self.df.update(c.keys())
        self.n = len(docs)
        self.lead = [Counter(t[:LEAD_KEYS]) for t in self.toks]
        # word positions (a stem or a chain's whole form shares its word's position)
        self.pos = [self._positions(d) for d in docs]

    @staticmethod
    def _positions(text: str) -> list[set[str]]:
        out: list[set[str]] = []
        for t, stem in pt._tokens(text):
            if out and (stem or (len(t) > 1 and any(c in "_-./:" for c in t))):
                out[-1].add(t)
            else:
                out.append({t})
        return out

    def idf(self, t: str) -> float:
        d = self.df.get(t, 0)
        return math.log(1 + (self.n - d + 0.5) / (d + 0.5))

    def rank(self, query: str, lever: str) -> list[int]:
        tokens = pt._tokens(query)
        toks: list[str] = []
        for t, stem in tokens:
            if stem:
                toks[-1] = t  # query_keys: the stem alone in a query of several words
            else:
                toks.append(t)
        if sum(1 for _, stem in tokens if not stem) <= 1:
            toks = [t for t, _ in tokens]  # one word: its exact form and its stem
        weight: dict[str, float] = {}
        run: list[str] = []

        def close_run() -> None:
            for t in run:
                w = 1.0 / len(run) if lever == "cjk-runs" and len(run) > 1 else 1.0
                weight[t] = max(weight.get(t, 0.0), w)
            run.clear()

        for t in toks:
            if _is_cjk_bigram(t) and run and _is_cjk_bigram(run[-1]) and run[-1][1] == t[0]:
                run.append(t)
            else:
                close_run()
                run.append(t)
        close_run()
        scores = np.zeros(self.n)
        norm = (1 - self.b) + self.b * self.lens / self.avg
        for t, w in weight.items():
            if not self.df.get(t):
                continue
            idf = self.idf(t)
            for j in range(self.n):
                f = self.tf[j].get(t, 0)
                if lever == "lead-tf":
                    f += LEAD_TF * self.lead[j].get(t, 0)
                if f:
                    x = f / norm[j]
                    scores[j] += w * idf * x / (self.k1 + x)
                if lever == "lead" and t in self.lead[j]:
                    scores[j] += w * LEAD_W * idf
        if lever == "adjacent":
            pairs = list(zip(toks, toks[1:]))
            for j in range(self.n):
                p = self.pos[j]
                for a, c in pairs:
                    if any(a in p[i] and c in p[i + 1] for i in range(len(p) - 1)):
                        scores[j] += ADJ_W * min(self.idf(a), self.idf(c))
        order = np.argsort(-scores, kind="stable")[:K]
        return [int(i) for i in order if scores[i] > 0]


def mrr(ranked: list[list[int]], queries: list[tuple[str, int]]) -> float:
    return float(np.mean([1.0 / (r.index(want) + 1) if want in r else 0.0
                          for r, (_, want) in zip(ranked, queries)]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lang", default="en,ja")
    args = p.parse_args()
    levers = ["", "lead", "lead-tf", "adjacent", "cjk-runs"]
    for lang in args.lang.split(","):
        docs, queries = rq.dataset(lang)
        engine = rq.ConvmemEngine(docs, Path(tempfile.mkdtemp(prefix="ranking_levers_")))
        ours = mrr([engine.search(q) for q, _ in queries], queries)
        engine.close()
        print(f"{lang}: {len(queries)} queries; convmem MRR@10 {ours:.4f}")
        for k1, b in ((1.2, 0.75), (1.6, 0.75), (2.0, 0.75)):
            model = Model(docs, k1, b)
            for lever in levers if (k1, b) == (1.2, 0.75) else [""]:
                got = mrr([model.rank(q, lever) for q, _ in queries], queries)
                print(f"  model k1={k1} b={b} {lever or 'no lever':10s} MRR@10 {got:.4f}", flush=True)


if __name__ == "__main__":
    main()
