"""search_messages: validation, the index query, result shaping (snippets, context previews) and
the search cursor.

Search cursor (docs/SERVER.md): a signed, self-contained token; the server keeps nothing per
cursor. It holds the request's scope (query, session, filters, min_importance: a cursor from
another request is a VALIDATION_ERROR), the log's identity (rebuild_index makes old cursors
stale), the doc watermark of the first page (docs numbered from it on are versions written later:
left out), the statistics the first page was scored with (n live docs, token totals, df per
query key) and the last result returned (score, doc). Later pages score with those frozen
statistics over the docs below the watermark, so every message that existed at the first page
and still exists unchanged keeps its first-page score and place: pages concatenated are the
first page's ranking, never repeating or skipping one of them; a message deleted or updated
meanwhile is left out (an update is a new version, above the watermark).
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from .. import validation as v
from .._core import codec, tokenizer
from ..catalog.docs import R_IMPORTANCE, R_RELATIONS, R_TIMESTAMP, R_ULID, tag_hashes
from ..domain import (MAX_QUERY_BYTES, MAX_SEARCH_CURSOR_CHARS, MAX_SESSION_BYTES,
                      MIN_IMPORTANCE, SEARCH_CONTEXT_SIZE, SEARCH_CURSOR_DEPTH, SEARCH_LIMIT,
                      SNIPPET_BYTES)
from . import snippets
from .guards import is_index_damage
from .paging import Budget, json_bound
from .records import message

if TYPE_CHECKING:
    from .store import MemoryStore

SESSION_DOCS_MAX = 1 << 16  # sessions up to this size hand their docs to the index's search
_KIND = b"Q"
# scope, log tag, watermark, results so far, last score, last doc, n_live, token totals, n df
_HEAD = struct.Struct("<8s8sIIdIQ3QI")


@dataclass
class Request:
    query: str
    keys: np.ndarray
    session: str | None
    filters: v.Filters
    min_importance: int
    context_size: int
    limit: int
    snippet_bytes: int | None
    cursor: str | None  # None: no paging (today's answer); "": first page of a paged search

    def scope(self) -> bytes:
        f = self.filters
        canon = orjson.dumps([self.query, self.session, f.kind_mask, f.tier_mask,
                              sorted(f.tags), f.after, f.before, f.role_mask,
                              self.min_importance])
        return hashlib.sha256(canon).digest()[:8]


def parse(query: Any, session_id: Any, filters_json: Any, min_importance: Any,
          context_size: Any, limit: Any, snippet_bytes: Any, cursor: Any) -> Request:
    q = v.string("query", query, min_bytes=1, max_bytes=MAX_QUERY_BYTES)
    name = None
    if session_id is not None:
        name = v.string("session_id", session_id, min_bytes=1, max_bytes=MAX_SESSION_BYTES)
    flt = v.filters(filters_json)
    min_imp = v.ranged("min_importance", min_importance, MIN_IMPORTANCE)
    ctx = v.ranged("context_size", context_size, SEARCH_CONTEXT_SIZE)
    lim = v.ranged("limit", limit, SEARCH_LIMIT)
    lo, hi, _ = SNIPPET_BYTES
    snip = v.integer("snippet_bytes", snippet_bytes, lo=lo, hi=hi, default=None)
    if cursor is not None and not isinstance(cursor, str):
        raise v.fail("cursor must be a string: \"\" for the first page, then nextCursor")
    return Request(q, tokenizer.query_keys(q), name, flt, min_imp, ctx, lim, snip, cursor)


@dataclass
class _Resume:
    watermark: int
    returned: int
    score: float
    doc: int
    stats: tuple


def _log_tag(log_id: bytes) -> bytes:
    return hashlib.sha256(log_id).digest()[:8]


def _open_cursor(store: "MemoryStore", req: Request) -> _Resume | None:
    if not req.cursor:
        return None
    raw = store._cursors.open(req.cursor, _KIND, MAX_SEARCH_CURSOR_CHARS)
    if len(raw) < _HEAD.size:
        raise v.fail("cursor is not valid for this request")
    (scope, tag, watermark, returned, score, doc, n_live, s0, s1, s2,
     n_df) = _HEAD.unpack_from(raw)
    if scope != req.scope():
        raise v.fail("cursor belongs to another search (query, session_id, filters_json and "
                     "min_importance must be those of its first page)")
    if tag != _log_tag(store._log.log_id) or watermark > store._catalog.index.n_docs:
        raise v.fail("cursor is stale: the index was rebuilt since its first page; search again")
    dfs = np.frombuffer(raw, dtype="<u4", count=n_df, offset=_HEAD.size) \
        if len(raw) == _HEAD.size + 4 * n_df else None
    if dfs is None or len(req.keys) == 0:
        raise v.fail("cursor is not valid for this request")
    return _Resume(watermark, returned, score, doc,
                   (n_live, (s0, s1, s2), tuple(int(x) for x in dfs)))


def _make_cursor(store: "MemoryStore", req: Request, watermark: int, returned: int,
                 score: float, doc: int, stats: tuple) -> str | None:
    n_live, sums, dfs = stats
    raw = _HEAD.pack(req.scope(), _log_tag(store._log.log_id), watermark, returned, score, doc,
                     n_live, *sums, len(dfs)) + np.asarray(dfs, dtype="<u4").tobytes()
    token = store._cursors.make(_KIND, raw)
    return token if len(token) <= MAX_SEARCH_CURSOR_CHARS else None


def _rank_key(rec: Any, score: float, doc: int) -> tuple:
    """The result order of docs/SCORING.md as a sort key (smaller first)."""
    return (-score, -rec[R_IMPORTANCE], -rec[R_TIMESTAMP], rec[R_ULID], doc)


def run(store: "MemoryStore", req: Request) -> dict[str, Any]:
    """The answer; the caller holds the store's lock and has checked it is open."""
    results: list[dict[str, Any]] = []
    resume = _open_cursor(store, req)
    cat, reader = store._catalog, store._reader
    flt = req.filters
    search_args: dict[str, Any] = dict(
        session=-1, kind_mask=flt.kind_mask, tier_mask=flt.tier_mask,
        min_importance=req.min_importance, tag_hashes=tag_hashes(flt.tags),
        ts_lo=flt.after, ts_hi=flt.before, role_mask=flt.role_mask)
    session_docs = None
    if req.session is not None:
        s = cat.sessions.get(req.session)
        if s is None or s.n == 0:
            return {"results": results}
        search_args["session"] = s.num
        if s.n <= SESSION_DOCS_MAX:
            # The index may score just these instead of scanning postings for them.
            session_docs = cat.session_docs(s)
    if len(req.keys) == 0:
        return {"results": results}
    k = req.limit
    if resume is not None:
        search_args.update(doc_limit=resume.watermark, stats=resume.stats)
        k = min(resume.returned, SEARCH_CURSOR_DEPTH) + req.limit + 1
    elif req.cursor is not None:
        k = req.limit + 1
    watermark = cat.index.n_docs
    try:
        docs, scores, parts = cat.index.search(req.keys, k, session_docs=session_docs,
                                               **search_args)
    except ValueError as exc:
        if not is_index_damage(exc):
            raise
        # A posting list of the mapped snapshot failed its check on first use: it is never
        # read. The state is rebuilt from the log (the truth) and the query runs there; health
        # reports the damage.
        store._index_damaged(exc)
        cat, reader = store._catalog, store._reader
        if req.session is not None:
            s = cat.sessions.get(req.session)
            search_args["session"] = s.num
            if session_docs is not None:
                session_docs = cat.session_docs(s)
        watermark = cat.index.n_docs
        docs, scores, parts = cat.index.search(req.keys, k, session_docs=session_docs,
                                               **search_args)
    stats = cat.index.last_stats if resume is None else resume.stats
    if resume is not None:
        watermark = resume.watermark
    docs_l, scores_l, parts_l = docs.tolist(), scores.tolist(), parts.tolist()
    offsets = cat.doc_offset.data[docs].tolist()
    lengths = cat.doc_len.data[docs].tolist()
    decode = codec.decode_message
    first = 0
    if resume is not None:
        first = _after_last(reader, docs_l, scores_l, offsets, lengths, resume)
    budget = Budget(results)
    query_keys = frozenset(req.keys.tolist()) if req.snippet_bytes is not None else frozenset()
    last = -1
    for i in range(first, len(docs_l)):
        if len(results) >= req.limit:
            break
        doc, score, (c, sm, tg) = docs_l[i], scores_l[i], parts_l[i]
        rec = reader.at(offsets[i], lengths[i], decode)
        item = message(rec)
        if req.snippet_bytes is not None:
            snippets.apply(item, req.snippet_bytes, query_keys)
        item["score"] = score
        item["score_breakdown"] = {"content": c, "summary": sm, "tags": tg}
        item["matched_fields"] = [f for f, x in (("content", c), ("summary", sm),
                                                 ("tags", tg)) if x > 0.0]
        item["relation_count"] = len(rec[R_RELATIONS])
        if req.context_size > 0:
            before, after, _ = cat.neighbours(int(cat.doc_slot.data[doc]), req.context_size,
                                              req.context_size)
            item["context_preview"] = {
                "before": [_preview(reader, sl, req.snippet_bytes, query_keys) for sl in before],
                "after": [_preview(reader, sl, req.snippet_bytes, query_keys) for sl in after],
            }
        bound = None if req.context_size > 0 else json_bound(lengths[i])
        if not budget.take(item, bound):
            break
        results.append(item)
        last = i
    answer: dict[str, Any] = {"results": results}
    if req.cursor is not None and last >= 0 and last + 1 < len(docs_l) and stats is not None:
        returned = (resume.returned if resume is not None else 0) + len(results)
        if returned < SEARCH_CURSOR_DEPTH:
            token = _make_cursor(store, req, watermark, returned, scores_l[last], docs_l[last],
                                 stats)
            if token is not None:
                answer["nextCursor"] = token
    return answer


def _after_last(reader: Any, docs: list[int], scores: list[float], offsets: list[int],
                lengths: list[int], resume: _Resume) -> int:
    """Where the results after the cursor's last one start. Scores are the first page's (frozen
    statistics), so a higher score came before; on an equal score the tie-breaks decide (the
    last doc's own record may be gone: its key is rebuilt from the doc found, or compared by
    reading the tied records)."""
    i = 0
    n = len(docs)
    while i < n and scores[i] > resume.score:
        i += 1
    if i < n and scores[i] == resume.score:
        if resume.doc in docs[i:]:
            tied_end = docs.index(resume.doc, i)
            return tied_end + 1
        # The last result is gone (deleted or updated): its place among the tied is unknown
        # without its record; the log still has it (nothing is removed before rebuild_index).
        cat = reader.catalog
        if resume.doc < cat.index.n_docs:
            off, ln = cat.doc_span(resume.doc)
            if off >= 0:
                last_key = _rank_key(reader.at(off, ln, codec.decode_message), resume.score,
                                     resume.doc)
                while i < n and scores[i] == resume.score and _rank_key(
                        reader.at(offsets[i], lengths[i], codec.decode_message), scores[i],
                        docs[i]) <= last_key:
                    i += 1
    return i


def _preview(reader: Any, slot: int, budget: int | None, query: frozenset) -> dict[str, Any]:
    msg = reader.message_of_slot(slot)
    if budget is not None:
        snippets.apply(msg, budget, query)
    return msg
