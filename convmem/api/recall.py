"""The recall toolset as MemoryStore methods: recall, start_session, list_tags, remember.

MemoryStore inherits them (RecallTools); each validates its arguments (VALIDATION_ERROR naming
the field), then works under the store's lock through the store's own search and read paths (so
every filter search_messages takes applies to recall too) and the catalog's recall keys
(catalog/recall_keys.py). Only remember writes, through write_message.
"""
from __future__ import annotations

import bisect
import threading
from typing import TYPE_CHECKING, Any

from .. import validation as v
from .._core import tokenizer
from ..catalog.catalog import Catalog
from ..catalog.docs import R_CONTENT, R_SESSION_ID, R_SUMMARY, R_TAGS, Record
from ..catalog.recall_keys import content_key, gist_key, normalize
from ..typed import Role
from ..domain import (BUDGET_TOKENS, LIST_TAGS_LIMIT, MAX_CONTENT_BYTES, MAX_SESSION_BYTES,
                      MIN_IMPORTANCE, NEAR_DUPLICATE_SIMILARITY, RECALL_LIMIT,
                      RECALL_NEIGHBOURS, RECALL_RELATION_DEPTH, ROLES)
from . import bootstrap
from .budget import with_text
from .bundle import pack, used_tokens
from ..store.logfile import LogFile
from .paging import Cursors
from .records import RecordReader, message

NEAR_QUERY_BYTES = 1024  # of a remembered text, searched for near-duplicates
NEAR_HITS = 5
NEAR_COMPARE_CHARS = 65536  # of each text, compared by token sets
_TAGS_CURSOR = b"t"


class RecallTools:
    """Mixed into MemoryStore (which provides these attributes and the seven tools)."""

    _mutex: threading.RLock
    _catalog: Catalog
    _reader: RecordReader
    _cursors: Cursors

    _log: LogFile

    if TYPE_CHECKING:  # (MemoryStore's)
        def _check_open(self) -> None: ...
        def search_messages(self, **args: Any) -> dict[str, Any]: ...
        def read_messages(self, **args: Any) -> dict[str, Any]: ...
        def write_message(self, **args: Any) -> dict[str, Any]: ...

    # -- recall ----------------------------------------------------------------------------
    def recall(self, *, query: str, budget_tokens: int, session_id: str | None = None,
               filters_json: str | None = None, min_importance: int | None = None,
               limit: int | None = None, neighbours: int | None = None,
               relation_depth: int | None = None) -> dict[str, Any]:
        """The best hits for `query`, each followed by its neighbours in its session and its
        related messages, each once, cut to fit `budget_tokens` (estimated), most relevant first."""
        budget = v.integer("budget_tokens", budget_tokens, lo=BUDGET_TOKENS[0], hi=BUDGET_TOKENS[1],
                           default=None)
        if budget is None:
            raise v.fail("budget_tokens is required")
        lim = v.ranged("limit", limit, RECALL_LIMIT)
        near = v.ranged("neighbours", neighbours, RECALL_NEIGHBOURS)
        depth = v.ranged("relation_depth", relation_depth, RECALL_RELATION_DEPTH)
        v.ranged("min_importance", min_importance, MIN_IMPORTANCE)
        with self._mutex:
            self._check_open()
            # (search_messages validates query, session_id, filters_json and min_importance)
            hits = self.search_messages(query=query, session_id=session_id, filters_json=filters_json,
                                        min_importance=min_importance, limit=lim)["results"]
            parts, duplicates, hit_ids = self._recall_parts(hits, near, depth)
        packed = pack(parts, budget)
        kept_hits = sum(1 for p in packed.parts if p["why"] == "hit")
        return {
            "status": "OK",
            "budget_tokens": budget,
            "used_tokens": used_tokens(packed.parts),
            "items": packed.parts,
            "omitted": {
                "hits": len(hit_ids) - kept_hits,
                "neighbours": packed.left_out - (len(hit_ids) - kept_hits),
                "trimmed": packed.trimmed,
                "duplicates": duplicates,
                "more_hits": len(hits) == lim,
            },
        }

    def _recall_parts(self, hits: list[dict[str, Any]], near: int, depth: int,
                      ) -> tuple[list[dict[str, Any]], int, list[str]]:
        parts: list[dict[str, Any]] = []
        seen: set[str] = set()
        duplicates = 0
        hit_ids = [h["message_id"] for h in hits]
        seen.update(hit_ids)  # (a hit is shown as a hit, never as another hit's neighbour)
        for hit in hits:
            parts.append(_part(hit, "hit", score=hit["score"]))
            if not near and not depth:
                continue
            ctx = self.read_messages(view="context", message_id=hit["message_id"], before=near,
                                     after=near, relation_depth=depth)
            around = ([("before", m, None) for m in ctx["chronological_context"]["before"]]
                      + [("after", m, None) for m in ctx["chronological_context"]["after"]]
                      + [("relation", r["message"], r) for r in ctx["relations"] if "message" in r])
            for why, m, rel in around:
                if m["message_id"] in seen:
                    duplicates += 1
                    continue
                seen.add(m["message_id"])
                part = _part(m, why, anchor=hit["message_id"])
                if rel is not None:
                    part["relation"] = rel["type"]
                    part["direction"] = rel["direction"]
                parts.append(part)
        return parts, duplicates, hit_ids

    # -- start_session -----------------------------------------------------------------------
    def start_session(self, *, budget_tokens: int, since: str | None = None) -> dict[str, Any]:
        """What an agent should know at the start of a session, within `budget_tokens`; changes
        since the `cursor` of an earlier start_session. Reads only (nothing is written)."""
        budget = v.integer("budget_tokens", budget_tokens, lo=BUDGET_TOKENS[0], hi=BUDGET_TOKENS[1],
                           default=None)
        if budget is None:
            raise v.fail("budget_tokens is required")
        if since is not None and not isinstance(since, str):
            raise v.fail("since must be the cursor of an earlier start_session")
        with self._mutex:
            self._check_open()
            return bootstrap.start_session(self._reader, self._log, self._cursors, budget, since)

    # -- list_tags -------------------------------------------------------------------------
    def list_tags(self, *, cursor: str | None = None, limit: int | None = None) -> dict[str, Any]:
        """Tags of live messages with their message counts, in code point order, paged."""
        lim = v.ranged("limit", limit, LIST_TAGS_LIMIT)
        with self._mutex:
            self._check_open()
            rk = self._catalog.recall
            tags = rk.sorted_tags()
            start = 0
            if cursor is not None:
                after = self._cursors.open(cursor, _TAGS_CURSOR).decode("utf-8")
                start = bisect.bisect_right(tags, after)
            page = tags[start:start + lim]
            out: dict[str, Any] = {"tags": [{"tag": t, "count": rk.tag_counts[t]} for t in page]}
            if start + lim < len(tags):
                out["nextCursor"] = self._cursors.make(_TAGS_CURSOR, page[-1].encode("utf-8"))
            return out

    # -- remember --------------------------------------------------------------------------
    def remember(self, *, content: str, session_id: str, role: Role | None = None,
                 metadata_json: str | None = None) -> dict[str, Any]:
        """write_message, unless the same memory is stored: the same normalized content in the
        same session, or the same summary and tags (normalized) in any session. Then the stored
        message is returned with duplicate: true and nothing is written. Near-duplicates (search
        hits whose token sets are similar) are listed either way."""
        session = v.string("session_id", session_id, min_bytes=1, max_bytes=MAX_SESSION_BYTES)
        role_name = "assistant" if role is None else ROLES[v.role(role)]
        body = v.string("content", content, min_bytes=1, max_bytes=MAX_CONTENT_BYTES)
        fields = {} if metadata_json is None else v.metadata_fields(
            v.json_arg("metadata_json", metadata_json))
        meta = v.apply_metadata(None, fields)
        with self._mutex:  # (two remembers of one memory: the second finds the first)
            self._check_open()
            found = self._same_memory(session, body, meta.summary, meta.tags)
            near = self._near_duplicates(body, None if found is None else found[1])
            if found is not None:
                return {"status": "OK", "duplicate": True, "matched": found[0],
                        "message": message(found[2]), "near_duplicates": near}
            written = self.write_message(session_id=session, role=role_name, content=body,
                                         metadata_json=metadata_json)
            return {"status": "OK", "duplicate": False, "message": written["message"],
                    "near_duplicates": near}

    def _same_memory(self, session: str, body: str, summary: str | None, tags: list[str],
                     ) -> tuple[str, str, Record] | None:
        """("content" or "summary_tags", message id, record) of a stored duplicate, else None.
        The key lookups give candidates; each is checked against its record exactly."""
        cat, reader = self._catalog, self._reader
        norm = normalize(body)
        for slot in cat.recall.by_content.slots_of(content_key(session, body)):
            doc = cat.current_doc(slot)
            if doc < 0:
                continue
            rec = reader.record(doc)
            if rec[R_SESSION_ID] == session and normalize(rec[R_CONTENT]) == norm:
                return "content", rec_id(rec), rec
        gk = gist_key(summary, tags)
        if not gk:
            return None
        want = (normalize(summary or ""), {normalize(t) for t in tags})
        for slot in cat.recall.by_gist.slots_of(gk):
            doc = cat.current_doc(slot)
            if doc < 0:
                continue
            rec = reader.record(doc)
            if rec[R_SUMMARY] and (normalize(rec[R_SUMMARY]), {normalize(t) for t in rec[R_TAGS]}) == want:
                return "summary_tags", rec_id(rec), rec
        return None

    def _near_duplicates(self, body: str, exclude: str | None) -> list[dict[str, Any]]:
        """Search hits for the text's beginning whose token sets overlap it (Jaccard) at least
        NEAR_DUPLICATE_SIMILARITY, most similar first."""
        query = body.encode("utf-8")[:NEAR_QUERY_BYTES].decode("utf-8", "ignore").strip()
        if not query or not len(tokenizer.query_keys(query)):
            return []
        mine = set(tokenizer.token_keys(body[:NEAR_COMPARE_CHARS]).tolist())
        if not mine:
            return []
        hits = self.search_messages(query=query, limit=NEAR_HITS)["results"]
        out = []
        for h in hits:
            if h["message_id"] == exclude:
                continue
            theirs = set(tokenizer.token_keys(h["content"][:NEAR_COMPARE_CHARS]).tolist())
            sim = len(mine & theirs) / len(mine | theirs) if theirs else 0.0
            if sim >= NEAR_DUPLICATE_SIMILARITY:
                out.append({"message_id": h["message_id"], "session_id": h["session_id"],
                            "similarity": round(sim, 3), "content": h["content"][:200],
                            "content_truncated": len(h["content"]) > 200})
        out.sort(key=lambda d: -d["similarity"])
        return out


def rec_id(rec: Record) -> str:
    return v.ulid_str(rec[0])


def _part(m: dict[str, Any], why: str, **extra: Any) -> dict[str, Any]:
    """A bundle part: the message's identity and facets, why it is here, and its text."""
    meta = m["metadata"]
    part: dict[str, Any] = {"why": why, **extra, "message_id": m["message_id"],
                            "session_id": m["session_id"], "role": m["role"],
                            "timestamp": m["timestamp"], "memory_kind": meta["memory_kind"],
                            "importance": meta["importance"]}
    return with_text(part, m)
