"""What the recall tools need per message, kept as the catalog changes: duplicate keys, tags and
the facets of long-term memory, so that `remember`, `list_tags` and `start_session` never scan
the store or read the log to answer.

Per message ("slot"), for its current version (kept, not cleared, when the message is deleted,
so a version made current again finds its values in place):
- `content_key`: a 64-bit hash of (session id, the content's token keys): "the same memory in
  the same session". The index's token keys are computed from the NFKC, case-folded text and
  whitespace only separates them, so two contents equal after normalization (below) have the
  same keys, and hashing the keys a write computes anyway costs far less than normalizing again
  (a content without tokens is hashed as its normalized text). Contents that differ only in
  punctuation share a key too: remember() compares every candidate's record exactly, so neither
  that nor a hash collision ever makes a duplicate.
- `gist_key`: a 64-bit hash of (normalized summary, the set of normalized tags), 0 without a
  summary. "The same summary and tags", in any session.
- `tagset`: the number of the message's tag list (tag lists are interned: stores repeat a few).
- `facet`: kind * len(TIERS) + tier; `importance`.

Normalization (`normalize`): NFKC, case folding (tokenizer.normalize), then every run of
whitespace (str.split's) made one space, leading and trailing whitespace dropped.

Derived, never saved: the live message count of each tag and of each facet (kept on every
change: commit, retire; after a load derived from the columns when first asked for, so that
opening a store does no work proportional to it for tools that may never ask), each session's last message time (by
session number, -1 without live messages: the most recent sessions without a pass over all),
the first long-term memories in rank order (kept while writes only add to them, computed again
after one of them changed), and the key lookups (sorted copies of a key column, built when
first asked for, plus the keys set since in a small dict; rebuilt once that has grown).
"""
from __future__ import annotations

import bisect
import hashlib
import sys
from collections import Counter
from typing import Any

import numpy as np
import orjson

from .._core import tokenizer
from ..domain import KINDS, TIERS
from .columns import Column
from .sessions import Session
from .docs import R_CONTENT, R_IMPORTANCE, R_KIND, R_SESSION_ID, R_SUMMARY, R_TAGS, R_TIER, Record

N_TIERS = len(TIERS)
N_FACETS = len(KINDS) * N_TIERS
LONG_TERM = np.zeros(256, dtype=bool)  # by facet: kind preference or semantic, or tier long; not discard
for _f in range(N_FACETS):
    _kind, _tier = KINDS[_f // N_TIERS], TIERS[_f % N_TIERS]
    LONG_TERM[_f] = (_kind in ("preference", "semantic") or _tier == "long") and _tier != "discard"
_sizeof = sys.getsizeof
SECTION_PREFIX = "rk."
_COLUMNS = ("content_key", "gist_key", "tagset", "facet", "importance")
COLUMN_SECTIONS = tuple(SECTION_PREFIX + name for name in _COLUMNS)  # (their snapshot sections)


TAGSETS, TAGSET_COUNT = "recall_tagsets", "recall_tagset_count"  # the snapshot meta's keys


def _tag_meta(tagsets_json: str, count: int) -> dict[str, Any]:
    return {TAGSETS: tagsets_json, TAGSET_COUNT: count}


def normalize(text: str) -> str:
    """NFKC, case-folded, whitespace collapsed (the module docstring)."""
    return " ".join(tokenizer.normalize(text).split())


def _hash(data: bytes) -> int:
    key = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
    return key or 1  # 0 means "no key"


def content_key(session_id: str, content: str, keys: np.ndarray | None = None) -> int:
    """`keys`: the content's token keys, when the caller has them (tokenizer.token_keys)."""
    if keys is None:
        keys = tokenizer.token_keys(content)
    head = session_id.encode("utf-8") + b"\0"
    if len(keys):
        return _hash(b"k" + head + keys.astype("<u8", copy=False).tobytes())
    return _hash(b"c" + head + normalize(content).encode("utf-8"))


def gist_key(summary: str | None, tags: list[str]) -> int:
    if not summary:
        return 0
    norm_tags = sorted({normalize(t) for t in tags})
    return _hash(b"g" + normalize(summary).encode("utf-8") + b"\0"
                 + "\0".join(norm_tags).encode("utf-8"))


class KeyLookup:
    """Slots by key for one key column: a sorted copy (built when first asked for) and the keys
    set since (a dict). Entries may be stale (the slot's key changed since): callers get only
    slots whose column still holds the key."""

    __slots__ = ("_column", "_keys", "_slots", "_delta")

    def __init__(self, column: Column) -> None:
        self._column = column
        self._keys: np.ndarray | None = None
        self._slots: np.ndarray | None = None
        self._delta: dict[int, list[int]] = {}

    def reset(self, column: Column) -> None:
        self._column = column
        self._keys = self._slots = None
        self._delta = {}

    def note(self, key: int, slot: int) -> None:
        if not key or self._keys is None:
            return  # (built from the column when asked for)
        self._delta.setdefault(key, []).append(slot)
        if len(self._delta) > max(4096, len(self._keys) // 16):
            self._keys = self._slots = None  # (cheaper to sort again than to keep a big dict)

    def slots_of(self, key: int) -> list[int]:
        col = self._column.view()
        if self._keys is None:
            order = np.argsort(col)  # (ties in any order: candidates are deduplicated)
            self._keys, self._slots = col[order], order.astype(np.int32)
            self._delta = {}
        k = np.uint64(key)
        lo = int(np.searchsorted(self._keys, k, side="left"))
        hi = int(np.searchsorted(self._keys, k, side="right"))
        found = self._slots[lo:hi].tolist() + self._delta.get(key, [])
        return [s for s in dict.fromkeys(found) if int(col[s]) == key]

    def nbytes(self) -> int:
        arrays = 0 if self._keys is None else self._keys.nbytes + self._slots.nbytes  # type: ignore[union-attr]
        return arrays + _sizeof(self._delta) + sum(_sizeof(v) + 8 * len(v) for v in self._delta.values())


class RecallKeys:
    """The per-message columns and derived counts above (the catalog owns one)."""

    def __init__(self) -> None:
        self.content_key = Column("u8")
        self.gist_key = Column("u8")
        self.tagset = Column("u4")
        self.facet = Column("u1")
        self.importance = Column("u1")
        self._tagsets: list[tuple[str, ...]] | None = [()]  # (None: in _tagsets_json)
        # A loaded snapshot's tag lists as the JSON it holds, parsed when first needed (9k lists
        # at 1M messages were 4.6 of the 5.4 ms its meta took to parse at open).
        self._tagsets_json: str | None = None
        self._tagset_count = 1  # (len(tagsets) while it is parsed)
        self._ids: dict[tuple[str, ...], int] | None = {(): 0}  # (None: built when first needed)
        # The counts below are kept only while `_counted`; after a load they are derived from
        # the columns and `_live` (the catalog's slot_doc) when first asked for (_ensure_counts).
        self._counted = True
        self._live: Column | None = None
        self._tag_counts: dict[str, int] = {}
        self._facet_counts = np.zeros(N_FACETS, dtype=np.int64)  # live messages by facet
        self._sorted_tags: list[str] | None = None  # tag_counts' keys, sorted (cached)
        self.by_content = KeyLookup(self.content_key)
        self.by_gist = KeyLookup(self.gist_key)
        self.session_last = Column("i8")  # by session number
        self._top: list[int] | None = None  # long_term(want=self._top_want), kept while valid
        self._top_want = 0

    @property
    def tagsets(self) -> list[tuple[str, ...]]:
        """Every tag list a message has had, numbered by the tagset column's values."""
        if self._tagsets is None:
            assert self._tagsets_json is not None
            lists = orjson.loads(self._tagsets_json)
            if not isinstance(lists, list) or not all(
                    isinstance(t, list) and all(isinstance(x, str) for x in t) for t in lists):
                raise ValueError("the snapshot's tag lists are not lists of strings")
            if lists[:1] != [[]]:
                raise ValueError("the snapshot's first tag list is not the empty one")
            if len(lists) != self._tagset_count:
                raise ValueError(f"the snapshot holds {len(lists)} tag lists, not "
                                 f"{self._tagset_count}")
            self._tagsets, self._tagsets_json = [tuple(t) for t in lists] or [()], None
        return self._tagsets

    # -- derived counts --------------------------------------------------------------------
    @property
    def tag_counts(self) -> dict[str, int]:
        """Live messages by tag."""
        self._ensure_counts()
        return self._tag_counts

    @property
    def facet_counts(self) -> np.ndarray:
        """Live messages by facet."""
        self._ensure_counts()
        return self._facet_counts

    def _ensure_counts(self) -> None:
        if self._counted:
            return
        assert self._live is not None
        live = self._live.view() >= 0
        ids = self.tagset.view()[:len(live)]
        counts = np.bincount(ids[live], minlength=len(self.tagsets))
        self._tag_counts = {}
        self._counted = True  # (before _count, which keeps counts only once they are held)
        for i in np.flatnonzero(counts).tolist():
            self._count(i, int(counts[i]))
        self._facet_counts = np.bincount(self.facet.view()[:len(live)][live],
                                         minlength=N_FACETS).astype(np.int64)
        self._live = None

    def _tagset_ids(self) -> dict[tuple[str, ...], int]:
        if self._ids is None:
            self._ids = {t: i for i, t in enumerate(self.tagsets)}
        return self._ids

    # -- changes ---------------------------------------------------------------------------
    def _tagset_id(self, tags: list[str]) -> int:
        if not tags:
            return 0  # (the empty list is always 0: no parse of loaded tag lists for it)
        key = tuple(tags)
        ids = self._tagset_ids()
        i = ids.get(key)
        if i is None:
            i = ids[key] = len(self.tagsets)
            self.tagsets.append(key)
        return i

    def _count(self, tagset: int, delta: int) -> None:
        if not self._counted or not tagset:
            return  # (derived from the columns, this change included, when first asked for;
            # tag list 0 is the empty one)
        counts = self._tag_counts
        for tag in dict.fromkeys(self.tagsets[tagset]):
            n = counts.get(tag, 0) + delta
            if n:
                if tag not in counts:
                    self._sorted_tags = None
                counts[tag] = n
            else:
                del counts[tag]
                self._sorted_tags = None

    def sorted_tags(self) -> list[str]:
        """The tags of live messages in code point order (list_tags pages through it)."""
        if self._sorted_tags is None:
            self._sorted_tags = sorted(self.tag_counts)
        return self._sorted_tags

    def _values(self, rec: Record, keys: np.ndarray | None) -> tuple[int, int, int, int, int]:
        return (content_key(rec[R_SESSION_ID], rec[R_CONTENT], keys), gist_key(rec[R_SUMMARY], rec[R_TAGS]),
                self._tagset_id(rec[R_TAGS]), rec[R_KIND] * N_TIERS + rec[R_TIER], rec[R_IMPORTANCE])

    def add(self, slot: int, rec: Record, keys: np.ndarray | None = None) -> None:
        """A new message, in slot order (its slot is the next one); `keys`: its content's token
        keys if the caller has them."""
        ck, gk, ts, facet, imp = self._values(rec, keys)
        self.content_key.append(ck)
        self.gist_key.append(gk)
        self.tagset.append(ts)
        self.facet.append(facet)
        self.importance.append(imp)
        self._count(ts, 1)
        self._facet_delta(facet, 1)
        self.by_content.note(ck, slot)
        self.by_gist.note(gk, slot)
        if LONG_TERM[facet]:
            self._top_offer(slot)

    def add_batch(self, slot0: int, recs: list[Record], keys: list[np.ndarray]) -> None:
        """New messages in slots slot0, slot0 + 1, ... (an import batch): add() for each, with
        each column extended once."""
        cks = [content_key(r[R_SESSION_ID], r[R_CONTENT], k) for r, k in zip(recs, keys)]
        gks = [gist_key(r[R_SUMMARY], r[R_TAGS]) if r[R_SUMMARY] else 0 for r in recs]
        tagset_id, ids = self._tagset_id, self._tagset_ids()
        sets = [ids.get(tuple(r[R_TAGS])) or tagset_id(r[R_TAGS]) if r[R_TAGS] else 0 for r in recs]
        facets = [r[R_KIND] * N_TIERS + r[R_TIER] for r in recs]
        self.content_key.extend(cks)
        self.gist_key.extend(gks)
        self.tagset.extend(sets)
        self.facet.extend(facets)
        self.importance.extend([r[R_IMPORTANCE] for r in recs])
        for ts, n in Counter(sets).items():
            if ts:
                self._count(ts, n)
        if self._counted:
            self._facet_counts += np.bincount(facets, minlength=N_FACETS)[:N_FACETS]
        for i, (ck, gk, facet) in enumerate(zip(cks, gks, facets)):
            self.by_content.note(ck, slot0 + i)
            self.by_gist.note(gk, slot0 + i)
            if LONG_TERM[facet]:
                self._top_offer(slot0 + i)

    def replace(self, slot: int, rec: Record, was_live: bool, keys: np.ndarray | None = None) -> None:
        """A new current version of the message in `slot` (which was deleted unless `was_live`)."""
        if was_live:
            self._count(int(self.tagset.data[slot]), -1)
            self._facet_delta(int(self.facet.data[slot]), -1)
        if self._top is not None and slot in self._top:
            self._top = None  # (it may rank lower now: computed again when asked for)
        ck, gk, ts, facet, imp = self._values(rec, keys)
        if int(self.content_key.data[slot]) != ck:
            self.content_key.writable()[slot] = ck
            self.by_content.note(ck, slot)
        if int(self.gist_key.data[slot]) != gk:
            self.gist_key.writable()[slot] = gk
            self.by_gist.note(gk, slot)
        self.tagset.writable()[slot] = ts
        self.facet.writable()[slot] = facet
        self.importance.writable()[slot] = imp
        self._count(ts, 1)
        self._facet_delta(facet, 1)
        if LONG_TERM[facet]:
            self._top_offer(slot)

    def _facet_delta(self, facet: int, delta: int) -> None:
        if self._counted:
            self._facet_counts[facet] += delta

    def retire(self, slot: int) -> None:
        """The message in `slot` is no longer live (its values stay, see the module docstring)."""
        self._count(int(self.tagset.data[slot]), -1)
        self._facet_delta(int(self.facet.data[slot]), -1)
        if self._top is not None and slot in self._top:
            self._top = None

    def _top_offer(self, slot: int) -> None:
        """A live long-term memory: into the kept first ones if it ranks among them."""
        top = self._top
        if top is None or slot in top:
            return
        imp = self.importance.data
        rank = (-int(imp[slot]), -slot)
        i = bisect.bisect_left([(-int(imp[s]), -s) for s in top], rank)
        if i < self._top_want:
            top.insert(i, slot)
            del top[self._top_want:]

    def touch_session(self, s: "Session") -> None:
        """A session's history changed: its last message time (-1 when it has none)."""
        col = self.session_last
        while col.n <= s.num:
            col.append(-1)
        col.writable()[s.num] = s.last_message_at if s.n else -1

    def load_sessions(self, hist_off: np.ndarray, hist_ts: np.ndarray) -> None:
        """Each session's last message time from a snapshot's history arrays."""
        ends = hist_off[1:].astype(np.int64)
        last = np.full(len(ends), -1, dtype=np.int64)
        has = ends > hist_off[:-1]
        last[has] = hist_ts[ends[has] - 1]
        self.session_last = Column.from_array(last)

    def recent_sessions(self, want: int) -> list[int]:
        """Numbers of the `want` sessions with the latest last message, latest first."""
        last = self.session_last.view()
        idx = np.flatnonzero(last >= 0) if len(last) <= want else np.argpartition(last, -want)[-want:]
        idx = idx[last[idx] >= 0]
        order = np.lexsort((-idx, -last[idx]))
        return idx[order].tolist()

    # -- snapshot --------------------------------------------------------------------------
    def columns(self) -> list[Column]:
        """The per-slot columns that snapshot sections are frozen from."""
        return [getattr(self, name) for name in _COLUMNS]

    def sections(self, slots: np.ndarray | None = None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """(the meta's entries: the tag lists as JSON text and their count, the columns as
        sections); `slots`: keep only these, renumbered in order (rebuild_index)."""
        arrays = {}
        for name in _COLUMNS:
            col = getattr(self, name)
            arrays[SECTION_PREFIX + name] = col.frozen() if slots is None else col.view()[slots]
        if slots is None:
            if self._tagsets is None:  # (not parsed since the load: written back as it came)
                assert self._tagsets_json is not None
                return _tag_meta(self._tagsets_json, self._tagset_count), arrays
            return _tag_meta(orjson.dumps(self._tagsets).decode(), len(self._tagsets)), arrays
        # Compaction keeps only the tag lists of the messages kept (the others' tags leave the
        # files with their messages), renumbered.
        used, renumbered = np.unique(arrays[SECTION_PREFIX + "tagset"], return_inverse=True)
        if not len(used) or used[0] != 0:
            used = np.concatenate([[0], used]).astype(used.dtype)
            renumbered = renumbered + 1
        arrays[SECTION_PREFIX + "tagset"] = renumbered.astype(np.uint32)
        kept = [self.tagsets[int(i)] for i in used]
        return _tag_meta(orjson.dumps(kept).decode(), len(kept)), arrays

    @classmethod
    def from_sections(cls, meta: dict[str, Any], arrays: dict[str, np.ndarray],
                      slot_doc: Column) -> "RecallKeys":
        """Adopt saved columns (checked against the message count and their ranges) and the
        meta's tag lists (JSON text parsed when first needed; a list in snapshots before that);
        the counts are derived from them and `slot_doc` (the catalog's, kept current) when
        first needed."""
        rk = cls()
        n = slot_doc.n
        for name in _COLUMNS:
            arr = arrays[SECTION_PREFIX + name]
            if len(arr) != n:
                raise ValueError(f"section {SECTION_PREFIX + name} has {len(arr)} entries for {n} messages")
            setattr(rk, name, Column.from_array(arr))
        rk.by_content.reset(rk.content_key)
        rk.by_gist.reset(rk.gist_key)
        tagsets = meta[TAGSETS]
        if isinstance(tagsets, str) != (meta.get("state_version", 4) >= 5):
            raise ValueError(f"meta {TAGSETS} is not what its state version holds")
        if isinstance(tagsets, str):
            count = meta[TAGSET_COUNT]
            if type(count) is not int or count < 1:
                raise ValueError(f"meta {TAGSET_COUNT} is not a positive count")
            rk._tagsets, rk._tagsets_json, rk._tagset_count = None, tagsets, count
        else:
            rk._tagsets = [tuple(t) for t in tagsets] or [()]
            count = len(rk._tagsets)
            if rk._tagsets[0]:
                raise ValueError("the snapshot's first tag list is not the empty one")
        rk._ids = None
        if n and int(rk.tagset.view().max()) >= count:
            raise ValueError("section rk.tagset names a tag list the snapshot does not hold")
        # (every slot's facet, a deleted message's too, was a valid one when it was written)
        if n and int(rk.facet.view().max()) >= N_FACETS:
            raise ValueError("section rk.facet holds a value out of range")
        rk._counted, rk._live = False, slot_doc
        return rk

    def long_term(self, slot_doc: np.ndarray, want: int) -> list[int]:
        """Up to `want` live slots of long-term memory (kind preference or semantic, or tier
        long; never tier discard), highest importance first, then the newest message first.
        Kept between calls (see the module docstring); else vectorised over the columns."""
        if self._top is None or self._top_want != want:
            self._top = self._long_term(slot_doc, want)
            self._top_want = want
        return list(self._top)

    def _long_term(self, slot_doc: np.ndarray, want: int) -> list[int]:
        n = len(slot_doc)
        facet = self.facet.view()[:n]
        mask = LONG_TERM[facet] & (slot_doc >= 0)
        cand = np.flatnonzero(mask)
        if not len(cand) or want <= 0:
            return []
        imp = self.importance.view()[cand]
        by_level = np.bincount(imp, minlength=101)[:101][::-1].cumsum()  # (from importance 100 down)
        level = 100 - int(np.searchsorted(by_level, min(want, len(cand))))
        above = cand[imp > level]
        at = cand[imp == level][::-1][: want - len(above)]
        chosen = np.concatenate([above, at])
        order = np.lexsort((-chosen.astype(np.int64), -self.importance.view()[chosen].astype(np.int64)))
        return chosen[order].tolist()

    # -- memory ----------------------------------------------------------------------------
    def nbytes(self) -> int:
        cols = sum(getattr(self, name).nbytes for name in _COLUMNS)
        tagsets = self._tagsets or []  # (none while they are the loaded JSON text)
        strings = {s for t in tagsets for s in t} | set(self._tag_counts)
        interned = (_sizeof(tagsets) + _sizeof(self._ids or {}) + _sizeof(self._tagsets_json)
                    + sum(_sizeof(t) for t in tagsets) + sum(_sizeof(s) for s in strings)
                    + _sizeof(self._tag_counts))
        return (cols + interned + self.by_content.nbytes() + self.by_gist.nbytes()
                + self.session_last.nbytes + _sizeof(self._top or []))
