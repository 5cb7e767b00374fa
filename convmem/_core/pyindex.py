"""Readable pure-Python twin of `convmem._core.index`: the test oracle.

Same Python API, same scores to the last bit (docs/SCORING.md is implemented literally, in the
order written there), same `to_arrays` layout. Each document keeps a `Counter` per field; search
scans every live document. Fine for tests, far too slow for a real corpus.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from convmem._core.bm25f import check_config

FIELDS = ("content", "summary", "tags")
ARRAYS_FORMAT = 5  # 4: doc_meta holds the role in bits 5-6; 5: content lead flags
BLOCK = 128  # postings per compressed block
TF_CAP = 127
LEAD_BIT = 0x80  # a content tf byte's lead flag (docs/SCORING.md)
LEAD_KEYS = 16  # the lead: the first 16 content keys (a CJK bigram a quarter key)
LEAD_WEIGHT = 0.3  # a lead group adds this times its idf to the content part
# The compiled index's default least postings of a pruned query (the twin never prunes).
PRUNE_MIN_POSTINGS = 3000
SEAM_WEIGHT = 0.5  # a query's CJK bigram across a change of script (docs/SCORING.md)


def _lead_keys(content: list[int]) -> frozenset:
    """The content keys that are lead: the longest prefix of at most LEAD_KEYS keys, a CJK
    bigram counted as a quarter key."""
    used, lead = 0, []
    for key in content:
        cost = 1 if key >> 62 == 0b10 else 4
        if used + cost > 4 * LEAD_KEYS:
            break
        used += cost
        lead.append(key)
    return frozenset(lead)


def _script(cp: int) -> int:
    return 1 if 0x3040 <= cp <= 0x309F else (2 if 0x30A0 <= cp <= 0x30FF else 0)


def query_weights(keys) -> dict[int, float]:
    """The weights of the query's CJK bigram keys (docs/SCORING.md "Query weights")."""
    qk = _as_keys(keys)
    out: dict[int, float] = {}
    i = 0
    while i < len(qk):
        if qk[i] >> 62 != 0b10:
            i += 1
            continue
        j = i + 1
        while j < len(qk) and qk[j] >> 62 == 0b10 and (qk[j] >> 21) & _CP_MASK == qk[j - 1] & _CP_MASK:
            j += 1
        for key in qk[i:j]:
            w = 1.0 / math.sqrt(float(j - i))
            if _script((key >> 21) & _CP_MASK) != _script(key & _CP_MASK):
                w = w * SEAM_WEIGHT
            out[key] = max(out.get(key, 0.0), w)
        i = j
    return {key: w for key, w in out.items() if w != 1.0}
MAX_KIND = 5
MAX_TIER = 3
MAX_ROLE = 2
ULID_SIZE = 16
LIVE_BIT = 0x80
TABLE_MIN = 1024
_U64 = (1 << 64) - 1
_CP_MASK = 0x1FFFFF




class DamagedPostings(ValueError):
    """The compiled index's error for a posting list found damaged on first use (the twin
    checks every list when it adopts arrays, so it never raises this itself)."""

def _mix64(z: int) -> int:
    """splitmix64 finaliser: spreads structured keys (CJK bigrams) over the hash table."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _U64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _U64
    return z ^ (z >> 31)


def build_term_table(keys: list[int]) -> np.ndarray:
    """The open-addressing table of the compiled index: slot holds term id + 1, 0 when empty.

    Capacity: the smallest power of two >= 1024 that is at least twice the number of terms; keys are
    inserted in term-id order with linear probing, so the layout depends only on the key list.
    """
    cap = TABLE_MIN
    while cap < 2 * len(keys):
        cap *= 2
    table = np.zeros(cap, dtype=np.uint32)
    mask = cap - 1
    for tid, key in enumerate(keys):
        slot = _mix64(key) & mask
        while table[slot]:
            slot = (slot + 1) & mask
        table[slot] = tid + 1
    return table


def _varint(v: int, out: bytearray) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def _pack(values: list[int], bits: int) -> bytes:
    """Values of `bits` bits each as a little-endian bit stream, padded to whole bytes."""
    stream = 0
    for i, v in enumerate(values):
        stream |= v << (i * bits)
    return stream.to_bytes((len(values) * bits + 7) // 8, "little")


def _unpack(data: bytes, pos: int, n: int, bits: int) -> tuple[list[int], int]:
    size = (n * bits + 7) // 8
    stream = int.from_bytes(data[pos:pos + size], "little")
    mask = (1 << bits) - 1
    return [(stream >> (i * bits)) & mask for i in range(n)], pos + size


def _tf_code(max_tf1: int) -> tuple[int, int]:
    """(code, bits) for the largest tf - 1 of a block."""
    for code, bits in enumerate((0, 1, 2, 8)):
        if max_tf1 < (1 << bits):
            return code, bits
    raise ValueError("tf above 256")


def encode_postings(docs: list[int], tfs: list[int], lead: bool = False) -> bytes:
    """One posting list in the compressed format described at the top of postings.pxd; tfs are
    tf bytes (bit 7 the lead flag, written when `lead`: a content list)."""
    n = len(docs)
    out = bytearray()
    _varint(n, out)
    _varint(docs[0], out)
    blocks = [range(lo, min(lo + BLOCK, n)) for lo in range(0, n, BLOCK)]
    skip = bytearray()
    payload = bytearray()
    prev = docs[0] - 1
    for blk in blocks:
        if len(blocks) > 1:
            skip += docs[blk[-1]].to_bytes(4, "little") + len(payload).to_bytes(4, "little")
        deltas = []
        for i in blk:
            deltas.append(docs[i] - prev - 1)
            prev = docs[i]
        db = max(deltas).bit_length()
        code, tb = _tf_code(max((tfs[i] & TF_CAP) - 1 for i in blk))
        leads = [tfs[i] >> 7 for i in blk]
        lc = 0 if not any(leads) else (1 if all(leads) else 2)
        payload.append(db | (code << 6))
        if lead:
            payload.append(lc)
        payload += _pack(deltas, db)
        payload += _pack([(tfs[i] & TF_CAP) - 1 for i in blk], tb)
        if lead and lc == 2:
            payload += _pack(leads, 1)
    return bytes(out + skip + payload)


def decode_postings(data: bytes, pos: int = 0, lead: bool = False) -> tuple[list[int], list[int]]:
    """The docs and tf bytes of the list at pos (`lead`: a content list)."""
    n, pos = _read_varint(data, pos)
    first, pos = _read_varint(data, pos)
    nb = (n + BLOCK - 1) // BLOCK
    if nb > 1:
        pos += 8 * nb  # the skip table: the blocks follow each other anyway
    docs: list[int] = []
    tfs: list[int] = []
    prev = first - 1
    for j in range(nb):
        cnt = min(BLOCK, n - j * BLOCK)
        hdr = data[pos]
        pos += 1
        lc = 0
        if lead:
            lc = data[pos]
            pos += 1
        deltas, pos = _unpack(data, pos, cnt, hdr & 63)
        tf1, pos = _unpack(data, pos, cnt, (0, 1, 2, 8)[hdr >> 6])
        leads = [lc] * cnt
        if lc == 2:
            leads, pos = _unpack(data, pos, cnt, 1)
        for dl, t, ld in zip(deltas, tf1, leads):
            prev += dl + 1
            docs.append(prev)
            tfs.append((t + 1) | (LEAD_BIT if ld else 0))
    return docs, tfs


@dataclass
class _Doc:
    tfs: tuple[Counter, Counter, Counter]  # key -> tf (capped) per field; empty once removed
    lens: tuple[int, int, int]
    tags: tuple[int, ...]
    session: int
    kind: int
    tier: int
    importance: int
    timestamp: int
    ulid: bytes
    role: int = 0
    live: bool = True
    keys: frozenset = field(default_factory=frozenset)  # all keys of all fields
    lead: frozenset = field(default_factory=frozenset)  # the first LEAD_KEYS content keys


def _as_keys(keys) -> list[int]:
    return [int(k) for k in np.asarray(keys, dtype=np.uint64).ravel()]


class SearchIndex:
    """BM25F over (content, summary, tags) with filters and a deterministic top-k."""

    ADD_BATCH_RELEASES_GIL = False  # (add_batch holds the GIL: the catalog calls it inline)

    def __init__(self, k1: float = 1.2, weights=(1.0, 1.5, 2.0), b=(0.75, 0.75, 0.5)) -> None:
        self._k1, self._w, self._b = check_config(k1, weights, b)
        self._lead = LEAD_WEIGHT
        self._cjk_weights = True
        self._docs: list[_Doc] = []
        self._term_ids: dict[int, int] = {}
        self._term_keys: list[int] = []
        # the twin always scores exhaustively, in one thread, every doc
        self.window = 4096
        # prune_density exists for the compiled index's API; the twin never prunes, whatever it is
        self.prune_density = 0
        self.prune_min_postings = 0
        self.last_postings = 0  # (the compiled index's count of the query's postings)
        self.last_pruned = False
        self.last_parallel = False
        self.parallel_min_postings = 30000  # (index.pyx IX_PAR_MIN; the twin never splits)
        self.prime_max_postings = 4096  # (index.pyx IX_PRIME_MAX; the twin never prunes)
        self.last_primed = 0
        self.sparse_block_span = 32768  # (index.pyx IX_SPARSE_SPAN; the twin never prunes)
        self.filter_maxima = True  # (index.pyx; the twin never prunes)
        self.impact_prime_blocks = 32  # (index.pyx IX_IMPACT_BLOCKS; the twin never prunes)
        self.prime_docs_per_k = 4  # (score.pxd IX_PRIME_PER_K; the twin never prunes)
        self.merge_factor = 2  # (index.pyx; the twin has no segments)
        self.last_session_docs = False
        # The twin scores every doc: it never skips anything (the compiled index counts what its
        # pruning skipped in the last search here).
        self.last_windows_skipped = 0
        self.last_blocks_skipped = 0
        self.last_docs_skipped = 0
        self.last_theta_shared = 0  # (the twin runs on one thread)
        # (n_live, token totals per field, df per distinct query key ascending) of the last search
        self.last_stats: tuple | None = None

    def _set_prune_density(self, n: int, min_postings: int | None = None) -> None:
        m = (0 if n == 0 else PRUNE_MIN_POSTINGS) if min_postings is None else min_postings
        if n < 0 or m < 0:
            raise ValueError("prune_density and min_postings must be >= 0")
        self.prune_density = n
        self.prune_min_postings = m

    def _set_lead_weight(self, w: float) -> None:
        if not w >= 0:
            raise ValueError("the lead weight must be >= 0")
        self._lead = float(w)

    def _set_cjk_weights(self, on: bool) -> None:
        self._cjk_weights = bool(on)

    def _set_window(self, n: int) -> None:
        if n <= 0 or n % 64 != 0 or n > 4096:
            raise ValueError("window must be a positive multiple of 64, at most 4096")
        self.window = n

    # -- building -------------------------------------------------------------------------------

    @property
    def n_docs(self) -> int:
        return len(self._docs)

    @property
    def n_live(self) -> int:
        return sum(1 for d in self._docs if d.live)

    def add(self, doc, content_keys, summary_keys, tag_keys, tag_hashes, session, kind, tier,
            importance, timestamp, ulid, role=0) -> None:
        if doc != len(self._docs):
            raise ValueError(f"doc must be {len(self._docs)} (the next doc id), got {doc}")
        if not 0 <= kind <= MAX_KIND or not 0 <= tier <= MAX_TIER or not 0 <= role <= MAX_ROLE:
            raise ValueError("kind must be in 0..5, tier in 0..3 and role in 0..2")
        if not 0 <= importance <= 100 or not 0 <= session <= 0x7FFFFFFF:
            raise ValueError("importance must be in 0..100 and session in 0..2**31-1")
        ulid = bytes(ulid)
        if len(ulid) != ULID_SIZE:
            raise ValueError("ulid must be 16 bytes")
        fields = [_as_keys(k) for k in (content_keys, summary_keys, tag_keys)]
        tfs = []
        for keys in fields:
            counts = Counter(keys)
            for key in counts:  # new terms get ids field by field, in order of first occurrence
                if key not in self._term_ids:
                    self._term_ids[key] = len(self._term_keys)
                    self._term_keys.append(key)
            tfs.append(Counter({k: min(TF_CAP, c) for k, c in counts.items()}))
        self._docs.append(_Doc(
            tfs=tuple(tfs), lens=tuple(len(k) for k in fields),
            tags=tuple(_as_keys(tag_hashes)), session=int(session), kind=int(kind),
            tier=int(tier), importance=int(importance), timestamp=int(timestamp), ulid=ulid,
            role=int(role), keys=frozenset().union(*fields),
            lead=_lead_keys(fields[0])))

    def add_batch(self, doc0, content_keys, summary_keys, tag_keys, tag_hashes, sessions, kinds,
                  tiers, importances, timestamps, ulids, roles) -> None:
        """add() for docs doc0, doc0 + 1, ...; every argument is checked before any is added."""
        n = len(content_keys)
        if doc0 != len(self._docs):
            raise ValueError(f"doc must be {len(self._docs)} (the next doc id), got {doc0}")
        columns = [list(c) for c in (sessions, kinds, tiers, importances, timestamps, roles)]
        if any(len(x) != n for x in (summary_keys, tag_keys, tag_hashes, *columns)) \
                or len(ulids) != ULID_SIZE * n:
            raise ValueError("add_batch: every list and column must have one entry a doc")
        sess, kind, tier, imp, ts, role = columns
        for i in range(n):
            if not 0 <= kind[i] <= MAX_KIND or not 0 <= tier[i] <= MAX_TIER \
                    or not 0 <= role[i] <= MAX_ROLE:
                raise ValueError("kind must be in 0..5, tier in 0..3 and role in 0..2")
            if not 0 <= imp[i] <= 100 or not 0 <= sess[i] <= 0x7FFFFFFF:
                raise ValueError("importance must be in 0..100 and session in 0..2**31-1")
        for i in range(n):
            self.add(doc0 + i, content_keys[i], summary_keys[i], tag_keys[i], tag_hashes[i],
                     sess[i], kind[i], tier[i], imp[i], ts[i],
                     ulids[ULID_SIZE * i:ULID_SIZE * (i + 1)], role[i])

    def remove(self, doc: int, content_keys=None, summary_keys=None, tag_keys=None) -> None:
        """The keys, when given, must be those `add` got (the compiled module lowers df by them)."""
        if not 0 <= doc < len(self._docs):
            raise ValueError(f"no doc {doc}")
        given = (content_keys, summary_keys, tag_keys)
        if any(k is not None for k in given) and any(k is None for k in given):
            raise TypeError("give all three key arrays or none")
        d = self._docs[doc]
        if not d.live:
            return
        if content_keys is not None:
            for f, keys in enumerate(given):
                counts = Counter(_as_keys(keys))
                if counts.keys() != d.tfs[f].keys() or sum(counts.values()) != d.lens[f]:
                    raise ValueError(f"the keys of doc {doc} do not match what was added")
        d.live = False

    def is_live(self, doc: int) -> bool:
        return 0 <= doc < len(self._docs) and self._docs[doc].live

    n_segments = 0  # (the twin has no segments)

    def merge_segments(self) -> None:
        """The twin has no segments."""

    def spill_postings(self, take: Callable[[np.ndarray], np.ndarray | None],
                       min_bytes: int) -> int:
        """The twin's postings are Python lists, which no file can hold: none moved."""
        return 0

    def adopt_postings(self, data: dict[str, np.ndarray],
                       only: Callable[[np.ndarray], bool]) -> int:
        """(Nothing was spilled.)"""
        return 0

    # -- scoring (docs/SCORING.md) --------------------------------------------------------------

    def _groups(self, query_keys) -> list[tuple[int, frozenset]]:
        groups = []
        for q in sorted(set(_as_keys(query_keys))):
            keys = {q}
            if q >> 62 == 0b11:
                c = q & _CP_MASK
                keys.update(key for key in self._term_keys
                            if key >> 62 == 0b10 and ((key >> 21) & _CP_MASK == c or key & _CP_MASK == c))
            groups.append((q, frozenset(keys)))
        return groups

    def _passes(self, d: _Doc, session, kind_mask, tier_mask, min_importance, tags, ts_lo,
                ts_hi, role_mask) -> bool:
        return ((session < 0 or d.session == session)
                and (kind_mask >> d.kind) & 1 == 1
                and (tier_mask >> d.tier) & 1 == 1
                and (role_mask >> d.role) & 1 == 1
                and d.importance >= min_importance
                and (ts_lo is None or d.timestamp >= ts_lo)
                and (ts_hi is None or d.timestamp < ts_hi)
                and all(t in d.tags for t in tags))

    def _sort_key(self, item):
        doc, score, _ = item
        d = self._docs[doc]
        return (-score, -d.importance, -d.timestamp, d.ulid, doc)

    def search(self, query_keys, k: int, session: int = -1, kind_mask: int = 0x3F,
               tier_mask: int = 0x0F, min_importance: int = 0, tag_hashes=None,
               exhaustive: bool = False, session_docs=None, ts_lo=None, ts_hi=None,
               role_mask: int = 0x07, doc_limit: int = -1, stats=None):
        """`stats`: (n_live, token totals per field, df per distinct query key ascending), as
        `last_stats` holds them after a search: scores are computed with those instead."""
        if k < 0:
            raise ValueError("k must be >= 0")
        self.last_stats = None
        tags = [] if tag_hashes is None else _as_keys(tag_hashes)
        live = [(i, d) for i, d in enumerate(self._docs) if d.live]
        n = len(live)
        totals = [sum(d.lens[f] for _, d in live) for f in range(3)]
        if stats is not None:
            n, totals = int(stats[0]), [int(x) for x in stats[1]]
            if n < 0 or min(totals) < 0 or any(int(x) < 0 for x in stats[2]):
                raise ValueError("bad stats")
        if min(k, self.n_live) == 0 or len(_as_keys(query_keys)) == 0:
            return self._hits([])
        avgdl = [float(total) / float(n) if total != 0 else 1.0 for total in totals]
        groups = []
        dfs = []
        qgroups = self._groups(query_keys)
        if stats is not None and len(stats[2]) != len(qgroups):
            raise ValueError(f"stats hold {len(stats[2])} df values for {len(qgroups)} "
                             "distinct query keys")
        weights = query_weights(query_keys) if self._cjk_weights else {}
        for gi, (qkey, keys) in enumerate(qgroups):
            if stats is not None:
                df = int(stats[2][gi])
            else:
                df = sum(1 for _, d in live if not keys.isdisjoint(d.keys))
            dfs.append(df)
            if df == 0:
                continue
            idf = math.log(1.0 + (float(n - df) + 0.5) / (float(df) + 0.5))
            if qkey in weights:
                idf = weights[qkey] * idf
            groups.append((keys, idf))
        self.last_stats = (n, tuple(totals), tuple(dfs))
        hits = []
        for i, d in live:
            if 0 <= doc_limit <= i:
                continue
            if not self._passes(d, session, kind_mask, tier_mask, min_importance, tags, ts_lo,
                                ts_hi, role_mask):
                continue
            breakdown = [0.0, 0.0, 0.0]
            matched = False
            for keys, idf in groups:
                tf = [min(TF_CAP, sum(d.tfs[f].get(key, 0) for key in keys)) for f in range(3)]
                if tf == [0, 0, 0]:
                    continue
                matched = True
                x = [0.0, 0.0, 0.0]
                for f in range(3):
                    if tf[f] > 0:
                        norm = (1.0 - self._b[f]) + self._b[f] * float(d.lens[f]) / avgdl[f]
                        x[f] = self._w[f] * float(tf[f]) / norm
                big_x = (x[0] + x[1]) + x[2]
                for f in range(3):
                    breakdown[f] += idf * x[f] / (self._k1 + big_x)
                    if f == 0 and not keys.isdisjoint(d.lead):
                        breakdown[0] += self._lead * idf
            if matched:
                hits.append((i, (breakdown[0] + breakdown[1]) + breakdown[2], breakdown))
        hits.sort(key=self._sort_key)
        return self._hits(hits[:k])

    @staticmethod
    def _hits(hits: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return (np.array([h[0] for h in hits], dtype=np.int64),
                np.array([h[1] for h in hits], dtype=np.float64),
                np.array([h[2] for h in hits], dtype=np.float64).reshape(len(hits), 3))

    # -- compaction, memory, snapshot arrays ----------------------------------------------------

    def _live_df(self, tid: int) -> int:
        key = self._term_keys[tid]
        return sum(1 for d in self._docs if d.live and key in d.keys)

    def compacted(self):
        keep = [tid for tid in range(len(self._term_keys)) if self._live_df(tid) > 0]
        out = SearchIndex(self._k1, self._w, self._b)
        out._lead = self._lead
        out._cjk_weights = self._cjk_weights
        out._term_keys = [self._term_keys[t] for t in keep]
        out._term_ids = {key: i for i, key in enumerate(out._term_keys)}
        old_to_new = np.full(len(self._docs), -1, dtype=np.int64)
        for i, d in enumerate(self._docs):
            if d.live:
                old_to_new[i] = len(out._docs)
                out._docs.append(_Doc(**d.__dict__))
        return out, old_to_new

    def nbytes(self) -> dict[str, int]:
        """Rough figures only: the twin is not meant to be measured."""
        n_post = sum(len(c) for d in self._docs if d.live for c in d.tfs)
        return {"postings": 5 * n_post, "terms": 16 * len(self._term_keys),
                "doc_columns": 60 * len(self._docs), "scratch": 0}

    def release_frozen(self) -> None:
        """The compiled index's freeze shares memory and takes it back here; this one copies."""

    def freeze(self) -> "_Frozen":
        """The compiled index's two-step to_arrays (taken now, merged later off the lock); the
        twin has nothing to merge: its arrays are built now, as fresh arrays."""
        return _Frozen(self.to_arrays())

    def block_max_arrays(self) -> dict[str, np.ndarray]:
        """The compiled index's stored block maxima; the twin has none (its from_arrays
        ignores them)."""
        return {}

    def to_arrays(self) -> dict[str, np.ndarray]:
        docs = self._docs
        n = len(docs)
        out: dict[str, np.ndarray] = {
            "format": np.array(ARRAYS_FORMAT, dtype=np.int64),
            "n_docs": np.array(n, dtype=np.int64),
            "n_live": np.array(self.n_live, dtype=np.int64),
            "sum_len": np.array([sum(d.lens[f] for d in docs if d.live) for f in range(3)],
                                dtype=np.int64),
            "term_keys": np.array(self._term_keys, dtype=np.uint64),
            "term_df": np.array([self._live_df(t) for t in range(len(self._term_keys))],
                                dtype=np.uint32),
            "term_table": build_term_table(self._term_keys),
        }
        for f, name in enumerate(FIELDS):
            postings: dict[int, list[tuple[int, int]]] = {}
            for i, d in enumerate(docs):
                if d.live:
                    for key, tf in d.tfs[f].items():
                        if f == 0 and key in d.lead:
                            tf |= LEAD_BIT
                        postings.setdefault(self._term_ids[key], []).append((i, tf))
            tids = sorted(postings)
            lists = [encode_postings([p[0] for p in postings[t]], [p[1] for p in postings[t]],
                                     lead=f == 0)
                     for t in tids]
            offsets = np.zeros(len(tids) + 1, dtype=np.uint32)
            offsets[1:] = np.cumsum([len(b) for b in lists])
            out[f"post_terms_{name}"] = np.array(tids, dtype=np.uint32)
            out[f"post_offsets_{name}"] = offsets
            out[f"post_data_{name}"] = np.frombuffer(b"".join(lists), dtype=np.uint8).copy()
        out["doc_meta"] = np.array([(LIVE_BIT if d.live else 0) | d.kind | (d.tier << 3) | (d.role << 5)
                                    for d in docs], dtype=np.uint8)
        out["doc_importance"] = np.array([d.importance for d in docs], dtype=np.uint8)
        out["doc_session"] = np.array([d.session for d in docs], dtype=np.int32)
        out["doc_timestamp"] = np.array([d.timestamp for d in docs], dtype=np.int64)
        out["doc_ulid"] = np.frombuffer(b"".join(d.ulid for d in docs),
                                        dtype=np.uint8).reshape(n, ULID_SIZE).copy()
        out["doc_lens"] = np.array([d.lens for d in docs], dtype=np.uint32).reshape(n, 3)
        out["tag_offsets"] = np.concatenate(
            ([0], np.cumsum([len(d.tags) for d in docs]))).astype(np.uint32)
        out["tag_hashes"] = np.array([t for d in docs for t in d.tags], dtype=np.uint64)
        return out

    @classmethod
    def from_arrays(cls, arrays, k1: float = 1.2, weights=(1.0, 1.5, 2.0),
                    b=(0.75, 0.75, 0.5)) -> SearchIndex:
        if int(arrays["format"]) != ARRAYS_FORMAT:
            raise ValueError(f"unknown index arrays format {int(arrays['format'])}")
        out = cls(k1, weights, b)
        out._term_keys = [int(k) for k in arrays["term_keys"]]
        out._term_ids = {key: i for i, key in enumerate(out._term_keys)}
        n = int(arrays["n_docs"])
        tfs = [[Counter(), Counter(), Counter()] for _ in range(n)]
        leads: list[set[int]] = [set() for _ in range(n)]
        for f, name in enumerate(FIELDS):
            offsets = arrays[f"post_offsets_{name}"]
            data = arrays[f"post_data_{name}"].tobytes()
            for j, tid in enumerate(arrays[f"post_terms_{name}"]):
                key = out._term_keys[int(tid)]
                for doc, tf in zip(*decode_postings(data, int(offsets[j]), lead=f == 0)):
                    tfs[doc][f][key] = tf & TF_CAP
                    if tf & LEAD_BIT:
                        leads[doc].add(key)
        tag_off = arrays["tag_offsets"]
        for i in range(n):
            meta = int(arrays["doc_meta"][i])
            out._docs.append(_Doc(
                tfs=tuple(tfs[i]), lens=tuple(int(x) for x in arrays["doc_lens"][i]),
                tags=tuple(int(t) for t in arrays["tag_hashes"][tag_off[i]:tag_off[i + 1]]),
                session=int(arrays["doc_session"][i]), kind=meta & 7, tier=(meta >> 3) & 3,
                role=(meta >> 5) & 3,
                importance=int(arrays["doc_importance"][i]),
                timestamp=int(arrays["doc_timestamp"][i]),
                ulid=arrays["doc_ulid"][i].tobytes(),
                live=bool(meta & LIVE_BIT),
                keys=frozenset().union(*(c.keys() for c in tfs[i])),
                lead=frozenset(leads[i])))
        return out


class _Frozen:
    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self._arrays = arrays

    def arrays(self) -> dict[str, np.ndarray]:
        return self._arrays
