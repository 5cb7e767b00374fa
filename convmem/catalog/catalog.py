"""Catalog: the in-memory state of a store, and the operations that apply records to it.

Per message ("slot", numbered in creation order): its current version's doc (-1 once deleted),
its session and timestamp, and its 16-byte id (`ids`). Per stored version ("doc", the search
index's document number): where its record lies in the log, its slot, kind and flags. Beside
them: the sessions' histories, the relations, the compiled search index, the recall tools' keys
and counts (recall_keys.py), and the counters that health reports. The catalog knows nothing of files: it reads a version's record through the
`read_record(offset, length)` it is given (used only to find the keys of a version it removes).

A version is applied in two steps: its doc goes into the index and the doc columns first
(`stage_new`, `stage_version`: the costly part, done while a write's flush is in flight and
undone by `unstage` if the flush fails), then it is committed (`commit_new`: the message's slot,
session history and relations; `commit_version`: it replaces the current version). Nothing reads
the catalog in between: the store holds its lock.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .._core import idmap, index as core_index, tokenizer
from .. import domain
from ..domain import KINDS
from ..errors import INTERNAL_ERROR, NOT_FOUND, ConvMemError
from .columns import Column
from .docs import (EMPTY_KEYS, FLAG_HAS_RELATIONS, R_CONTENT, R_IMPORTANCE, R_KIND, R_RELATIONS,
                   R_REVISION, R_ROLE, R_SESSION_ID, R_SUMMARY, R_TAGS, R_TIER, R_TIMESTAMP, R_ULID,
                   FieldKeys, Prepared, Record, doc_flags, field_keys, prepare, tag_hashes,
                   tag_keys)
from .recall_keys import COLUMN_SECTIONS as RECALL_COLUMN_SECTIONS, RecallKeys
from .relations import RelationIndex
from .sessions import Histories, Session, SessionIndex, histories
from .trash import Trash

# Of the snapshot sections written here; a snapshot of a version not readable is re-derived.
# 5: the recall keys' tag lists are JSON text in the meta (4: an array, still read; code that
# reads only 4 re-derives a 5 rather than take the text for a list).
STATE_VERSION = 5
READABLE_STATE_VERSIONS = (4, 5)
# (4: the recall keys and the trash sections)

ReadRecord = Callable[[int, int], Record]  # (log offset, frame length) -> decoded record
OptionalKeys = FieldKeys | tuple[None, None, None]

COLUMN_SECTIONS = ("slot_doc", "slot_session", "slot_ts", "doc_offset", "doc_len", "doc_slot",
                   "doc_kind", "doc_flags")  # (Catalog._columns's names)
# What the index (SearchIndex.from_arrays) and the id map adopt into growable C arrays
# (shared.garr_borrow): appended to, or changed in place, by every write.
INDEX_GROWABLE_SECTIONS = tuple("ix." + name for name in (
    "term_keys", "term_df", "term_table", "doc_meta", "doc_importance", "doc_session",
    "doc_timestamp", "doc_ulid", "doc_lens", "tag_offsets", "tag_hashes", "qlen", "qlen2", "tagb"))
GROWABLE_SECTIONS = frozenset(COLUMN_SECTIONS + RECALL_COLUMN_SECTIONS + INDEX_GROWABLE_SECTIONS
                              + ("slot_ulid", "id_table"))


class Catalog:
    """The state of one store in memory (see the module docstring)."""

    def __init__(self, read_record: ReadRecord, base_sequence: int = 0) -> None:
        self._read_record = read_record
        # Per message ("slot", in creation order).
        self.slot_doc = Column("i4")  # current version's doc, -1 when deleted
        self.slot_session = Column("i4")
        self.slot_ts = Column("i8")
        self.ids = idmap.IdMap()  # the 16-byte ids in slot order, and id -> slot
        # Per stored version ("doc", the search index's document number).
        self.doc_offset = Column("i8")
        self.doc_len = Column("u4")
        self.doc_slot = Column("i4")
        self.doc_kind = Column("u1")
        self.doc_flags = Column("u1")
        self.sessions = SessionIndex(self.ids.key)
        self.relations = RelationIndex()
        self.recall = RecallKeys()  # duplicate keys, tags, facets (the recall tools)
        self.index = core_index.SearchIndex()
        self.trash = Trash()  # deleted messages that can be restored (until compaction)
        # Where the state stands in the log, and health's counters.
        self.last_seq = base_sequence
        self.last_record_offset = -1
        self.update_records = 0
        self.deleted_messages = 0
        self.live_bytes = 0
        self.unsaved_records = 0  # records applied since the state was last saved (snapshot)
        self._indexing: _IndexingWorker | None = None  # import batches still being indexed

    # -- lookups -------------------------------------------------------------------------
    def ulid_of(self, slot: int) -> bytes:
        return self.ids.key(slot)

    def current_doc(self, slot: int) -> int:
        return int(self.slot_doc.data[slot])

    def live_doc(self, ulid: bytes) -> tuple[int, int]:
        """(slot, current doc) of a live message; NOT_FOUND otherwise."""
        slot = self.ids.get(ulid)
        if slot is None or int(self.slot_doc.data[slot]) < 0:
            raise ConvMemError(NOT_FOUND, "message not found")
        return slot, int(self.slot_doc.data[slot])

    def doc_span(self, doc: int) -> tuple[int, int]:
        """(log offset, frame length) of a stored version's record."""
        return int(self.doc_offset.data[doc]), int(self.doc_len.data[doc])

    def session_of_slot(self, slot: int) -> Session:
        return self.sessions.at(int(self.slot_session.data[slot]))

    def neighbours(self, slot: int, before: int, after: int) -> tuple[list[int], list[int], Session]:
        """The slots of up to `before` earlier and `after` later messages of the slot's session."""
        s = self.session_of_slot(slot)
        i = self.sessions.index_of(s, int(self.slot_ts.data[slot]), slot, self.ulid_of(slot))
        earlier = [int(x) for x in s.slots[max(0, i - before):i]]
        later = [int(x) for x in s.slots[i + 1:min(s.n, i + 1 + after)]]
        return earlier, later, s

    def session_docs(self, s: Session) -> np.ndarray:
        """The current docs of a session's live messages, ascending."""
        docs = self.slot_doc.data[s.slots[:s.n]]
        return np.sort(docs[docs >= 0])

    def live_slots(self) -> np.ndarray:
        return np.nonzero(self.slot_doc.view() >= 0)[0]

    @property
    def record_count(self) -> int:
        """Records of the log the state was built from (every version and every delete)."""
        return self.index.n_docs + self.deleted_messages

    def index_keys(self, doc: int) -> OptionalKeys:
        """The key arrays the index was given for doc (re-read from the log), so that removing it
        lowers df without a forward index; (None,) * 3 when the record is damaged (the index then
        finds the doc's terms in its postings)."""
        try:
            return field_keys(self._read_record(*self.doc_span(doc)))
        except ConvMemError:
            return None, None, None

    def check_room(self, new_messages: int, new_versions: int) -> None:
        """INTERNAL_ERROR, before anything is written, when the numbering would overflow."""
        if len(self.ids) + new_messages > domain.MAX_MESSAGES:
            raise ConvMemError(INTERNAL_ERROR, f"the store holds the most messages its format "
                                               f"numbers ({domain.MAX_MESSAGES})")
        if self.doc_offset.n + new_versions > domain.MAX_VERSIONS:  # (= index.n_docs, settled)
            raise ConvMemError(INTERNAL_ERROR, f"the store holds the most stored versions its "
                                               f"format numbers ({domain.MAX_VERSIONS}); "
                                               f"rebuild_index drops replaced and deleted ones")

    # -- applying records ------------------------------------------------------------------
    def apply_message(self, rec: Record, offset: int, frame_len: int) -> int:
        """Apply a MESSAGE record in one step (replay); returns its slot."""
        prep = prepare(rec)
        slot = self.ids.get(rec[R_ULID])
        if slot is None:
            return self.commit_new(rec, self.stage_new(rec, offset, frame_len, prep), frame_len,
                                   prep)
        doc = self.stage_version(rec, offset, frame_len, slot, prep)
        self.commit_version(rec, slot, doc, frame_len, prep=prep)
        return slot

    def stage_new(self, rec: Record, offset: int, frame_len: int, prep: Prepared) -> int:
        """A new message's doc, numbered as commit_new will number its slot and session."""
        s = self.sessions.get(rec[R_SESSION_ID])
        num = s.num if s is not None else len(self.sessions)
        return self._add_doc(rec, offset, frame_len, len(self.ids), num, prep)

    def stage_version(self, rec: Record, offset: int, frame_len: int, slot: int,
                      prep: Prepared) -> int:
        """A new version's doc for the message in `slot`."""
        return self._add_doc(rec, offset, frame_len, slot, int(self.slot_session.data[slot]), prep)

    def unstage(self, doc: int, prep: Prepared) -> None:
        """Withdraw a staged doc whose record did not become durable. Its number stays used, as a
        dead doc like a replaced version (the index gives the same scores without it, see
        docs/SCORING.md), with no record: offset -1 keeps it out of damage checks."""
        self.index.remove(doc, *prep.keys)
        self.doc_offset.writable()[doc] = -1
        self.doc_len.writable()[doc] = 0

    def commit_new(self, rec: Record, doc: int, frame_len: int, prep: Prepared | None = None) -> int:
        """`prep`: what staging computed (its token keys give the recall keys without tokenizing
        the content again)."""
        ulid, ts = rec[R_ULID], rec[R_TIMESTAMP]
        slot = self.ids.add(ulid)
        self.recall.add(slot, rec, None if prep is None else prep.keys[0])
        num = self.sessions.number(rec[R_SESSION_ID])
        self.slot_doc.append(doc)
        self.slot_session.append(num)
        self.slot_ts.append(ts)
        self.sessions.insert(num, ts, slot, ulid, rec[R_KIND])
        self.recall.touch_session(self.sessions.at(num))
        self.relations.add_new(slot, rec[R_RELATIONS])
        self._count_version(rec, frame_len)
        return slot

    def commit_version(self, rec: Record, slot: int, doc: int, frame_len: int,
                       old_keys: OptionalKeys | None = None, prep: Prepared | None = None) -> None:
        """Make `doc` the current version of the message in `slot`; `old_keys`: the replaced
        version's key arrays, when the caller has them (else they are read from the log)."""
        kind = rec[R_KIND]
        old_doc = int(self.slot_doc.data[slot])
        num = int(self.slot_session.data[slot])
        if old_doc >= 0:
            old_kind = int(self.doc_kind.data[old_doc])
            self.index.remove(old_doc, *(old_keys or self.index_keys(old_doc)))
            self.live_bytes -= int(self.doc_len.data[old_doc])
            if old_kind != kind:
                self.sessions.change_kind(num, old_kind, kind)
        else:
            self.sessions.insert(num, int(self.slot_ts.data[slot]), slot, rec[R_ULID], kind)
            self.recall.touch_session(self.sessions.at(num))
            self.trash.discard(slot)  # a deleted message's version again: it is restored
        self.slot_doc.writable()[slot] = doc
        self.recall.replace(slot, rec, old_doc >= 0, None if prep is None else prep.keys[0])
        if old_doc >= 0 and (rec[R_RELATIONS] or self.doc_flags.data[old_doc] & FLAG_HAS_RELATIONS):
            self.relations.set(slot, rec[R_RELATIONS])
        elif old_doc < 0:
            self.relations.add_new(slot, rec[R_RELATIONS])
        self._count_version(rec, frame_len)

    def _count_version(self, rec: Record, frame_len: int) -> None:
        """The counters for a version that has become current (apply_new_batch counts a batch
        the same way at once)."""
        self.live_bytes += frame_len
        if rec[R_REVISION] > 1:
            self.update_records += 1
        self.unsaved_records += 1

    def _add_doc(self, rec: Record, offset: int, frame_len: int, slot: int, session: int,
                 prep: Prepared) -> int:
        doc = self.index.n_docs
        self.index.add(doc, *prep.keys, prep.tag_hashes, session, rec[R_KIND], rec[R_TIER],
                       rec[R_IMPORTANCE], rec[R_TIMESTAMP], rec[R_ULID], rec[R_ROLE])
        self.doc_offset.append(offset)
        self.doc_len.append(frame_len)
        self.doc_slot.append(slot)
        self.doc_kind.append(rec[R_KIND])
        self.doc_flags.append(prep.flags)
        return doc

    def apply_delete(self, ulid: bytes, old_keys: OptionalKeys | None = None,
                     seq: int | None = None) -> None:
        """Apply a DELETE record; `seq`: its sequence number (default: last_seq, which the store
        has advanced to it already; replay passes it). The version stays restorable (trash)."""
        slot = self.ids.get(ulid)
        self.deleted_messages += 1
        self.unsaved_records += 1
        if slot is None:
            return
        doc = int(self.slot_doc.data[slot])
        if doc >= 0:
            self.retire(slot, doc, old_keys)
            self.slot_doc.writable()[slot] = -1
            self.trash.add(slot, doc, self.last_seq if seq is None else seq)

    def retire(self, slot: int, doc: int, keys: OptionalKeys | None = None) -> None:
        """Take a message's current version out of every index (`keys`: its key arrays, when
        the caller has them)."""
        self.index.remove(doc, *(keys or self.index_keys(doc)))
        self.live_bytes -= int(self.doc_len.data[doc])
        self.recall.retire(slot)
        self.sessions.remove(int(self.slot_session.data[slot]), int(self.slot_ts.data[slot]),
                             slot, self.ulid_of(slot), int(self.doc_kind.data[doc]))
        self.recall.touch_session(self.session_of_slot(slot))
        if self.doc_flags.data[doc] & FLAG_HAS_RELATIONS:
            self.relations.clear(slot)

    def drop_damaged(self, start: int, end: int) -> None:
        """Messages whose current version lies in damaged log bytes can no longer be served."""
        offsets = self.doc_offset.view()
        for doc in np.nonzero((offsets >= start) & (offsets < end))[0].tolist():
            slot = int(self.doc_slot.data[doc])
            if int(self.slot_doc.data[slot]) == doc:
                self.retire(slot, doc)
                self.slot_doc.writable()[slot] = -1
            elif int(self.slot_doc.data[slot]) < 0:
                i = self.trash.find(slot)
                if i >= 0 and int(self.trash.docs.data[i]) == doc:
                    self.trash.discard(slot)  # (its deleted version cannot be read back)

    def apply_new_batch(self, recs: list[Record], offsets: list[int], lengths: list[int], *,
                        settle_later: bool = False) -> None:
        """Apply appended records of new messages (ids checked unused) as apply_message would
        one by one, with each column extended once for the batch. The index takes the batch
        in one add_batch, on a thread of its own when the compiled index buffers it without the
        GIL (_IndexingWorker), while the other structures take it here.

        With `settle_later` (a bulk import), the index may still be taking the batch, and the
        ones before it, when this returns: the caller reads and checks the next batch
        meanwhile, and must call settle() before anything else uses this catalog (MemoryStore's
        mutex does it when taken)."""
        threaded = (getattr(self.index, "ADD_BATCH_RELEASES_GIL", False)
                    and len(recs) >= THREAD_MIN_BATCH)
        if not (settle_later and threaded):
            self.settle()
        # (the index's next doc once the batches queued before are in; add_batch checks it)
        doc0 = self.doc_offset.n if self._indexing is not None else self.index.n_docs
        index, ids, sessions, relations = self.index, self.ids, self.sessions, self.relations
        session_at = sessions.at
        slot0 = len(ids)
        token_keys = tokenizer.token_keys
        # New sessions are numbered in the order of their first message, as one by one.
        nums = [sessions.number(rec[R_SESSION_ID]) for rec in recs]
        contents = [token_keys(rec[R_CONTENT]) for rec in recs]
        # tags -> (their keys as field_keys gives them, their hashes): a batch repeats a few
        # tag lists (the index copies what add gets, so sharing arrays is safe)
        by_tags: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {EMPTY_TAGS: (EMPTY_KEYS, EMPTY_KEYS)}
        tagged = []
        for rec in recs:
            tags = tuple(rec[R_TAGS])
            t = by_tags.get(tags)
            if t is None:
                t = by_tags[tags] = (tag_keys(rec[R_TAGS]), tag_hashes(rec[R_TAGS]))
            tagged.append(t)
        kinds = [r[R_KIND] for r in recs]
        stamps = [r[R_TIMESTAMP] for r in recs]
        args = (
            doc0, contents, [token_keys(r[R_SUMMARY]) if r[R_SUMMARY] else EMPTY_KEYS for r in recs],
            [t[0] for t in tagged], [t[1] for t in tagged], nums, kinds,
            [r[R_TIER] for r in recs], [r[R_IMPORTANCE] for r in recs], stamps,
            b"".join([r[R_ULID] for r in recs]), [r[R_ROLE] for r in recs])
        if threaded:
            if self._indexing is None:
                self._indexing = _IndexingWorker(index)
            self._indexing.submit(args)
        else:
            index.add_batch(*args)
        n = 0
        try:
            for rec, num, kind, ts in zip(recs, nums, kinds, stamps):
                ulid = rec[R_ULID]
                slot = ids.add(ulid)
                sessions.insert(num, ts, slot, ulid, kind)
                self.recall.touch_session(session_at(num))
                if rec[R_RELATIONS]:
                    relations.add_new(slot, rec[R_RELATIONS])
                n += 1
        finally:
            if not (settle_later and n == len(recs)):
                self.settle()  # (its error, if any, is raised here: the store rebuilds its state)
            # The columns of the records applied (all of them unless one raised).
            self.doc_offset.extend(offsets[:n])
            self.doc_len.extend(lengths[:n])
            self.doc_slot.extend(range(slot0, slot0 + n))
            self.doc_kind.extend(kinds[:n])
            self.doc_flags.extend([doc_flags(rec) for rec in recs[:n]])
            self.recall.add_batch(slot0, recs[:n], contents[:n])
            self.slot_doc.extend(range(doc0, doc0 + n))
            self.slot_session.extend(nums[:n])
            self.slot_ts.extend(stamps[:n])
            self.live_bytes += sum(lengths[:n])
            self.update_records += sum(1 for rec in recs[:n] if rec[R_REVISION] > 1)
            self.unsaved_records += n

    @property
    def indexing_pending(self) -> bool:
        """Whether batches apply_new_batch(settle_later=True) queued may still be indexing."""
        return self._indexing is not None

    @property
    def indexing_failed(self) -> bool:
        """Whether one of the batches queued failed to index (settle() raises its error)."""
        return self._indexing is not None and self._indexing.failed

    def settle(self) -> None:
        """Wait until the index has taken every batch apply_new_batch queued, and end its
        thread; raises the first error of their add_batch (the index may then hold part of
        the batches, and the store rebuilds its state from the log)."""
        worker = self._indexing
        if worker is not None:
            try:
                worker.finish()
            finally:
                if worker.finished:  # (an interrupted wait leaves it pending)
                    self._indexing = None

    # -- snapshot state --------------------------------------------------------------------
    def snapshot_state(self, spill: Callable[[np.ndarray], np.ndarray | None] | None = None,
                       spill_min: int = 0) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The state as snapshot meta and sections (the store adds the log's identity).

        Every section is frozen: a copy, an array nothing changes any more (the index's
        postings and block maxima), or a column's `frozen` view (copied before a value of it
        changes), so the sections can be written off the store's mutex while writes go on.
        `release_frozen` once they are written. With `spill`, the merged index's posting data
        of each field of at least `spill_min` bytes moves to where it puts it
        (SearchIndex.spill_postings; store/spill.py)."""
        # Merged, then frozen (which builds the merged index's character lists, for it to keep):
        # the frozen arrays are to_arrays + block_max_arrays (derived, stored so that open does
        # not recompute them; the compiled index only) with the columns that only grow shared
        # rather than copied (at 10M messages half a gigabyte, at the peak of an import's end).
        # The spill comes between the two, before the character lists and the histories and
        # id table are built beside the postings.
        self.index.merge_segments()
        if spill is not None:
            self.index.spill_postings(spill, spill_min)
        meta, arrays, later = self._state_sections()
        arrays.update(later())
        for name, arr in self.index.freeze().arrays().items():
            arrays["ix." + name] = arr
        return meta, arrays

    def freeze_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray],
                                    Callable[[], dict[str, np.ndarray]]]:
        """snapshot_state in two steps, for a snapshot written in the background: the meta and
        the frozen sections but the histories', the id table and the index's, taken now (cheap:
        views and copies), and a function that returns those of this same moment (the index's
        with "ix." names, merged when it is called), on any thread, while the state goes on changing
        (SearchIndex.freeze; ValueError if a posting list is damaged). The live index is not
        merged."""
        meta, arrays, histories = self._state_sections()
        frozen = self.index.freeze()

        def index_sections() -> dict[str, np.ndarray]:
            return {**histories(), **{"ix." + name: arr for name, arr in frozen.arrays().items()}}

        return meta, arrays, index_sections

    def release_frozen(self) -> None:
        """The sections of the last snapshot_state or freeze_state are written and dropped:
        the columns may change in place again without a copy."""
        for col in (*self._columns().values(), *self.recall.columns(), *self.trash.columns()):
            col.release()
        self.sessions.release()
        self.index.release_frozen()
        self.ids.release_frozen()

    def _columns(self) -> dict[str, Column]:
        """The catalog's own columns, by their snapshot section names (COLUMN_SECTIONS)."""
        return {"slot_doc": self.slot_doc, "slot_session": self.slot_session,
                "slot_ts": self.slot_ts, "doc_offset": self.doc_offset, "doc_len": self.doc_len,
                "doc_slot": self.doc_slot, "doc_kind": self.doc_kind, "doc_flags": self.doc_flags}

    def _state_sections(self) -> tuple[dict[str, Any], dict[str, np.ndarray],
                                       Callable[[], dict[str, np.ndarray]]]:
        """(meta, the frozen sections, a function that returns the histories' sections and the
        id table of this moment: concatenated and built when called, from SessionIndex.freeze's
        and IdMap.frozen_table's views)."""
        meta = {
            **_versions_meta(self.sessions.names),
            "last_seq": self.last_seq,
            "last_record_offset": self.last_record_offset,
            "update_records": self.update_records,
            "deleted_messages": self.deleted_messages,
            "live_bytes": self.live_bytes,
        }
        recall_meta, recall_arrays = self.recall.sections()
        meta.update(recall_meta)
        arrays = {
            "slot_ulid": self.ids.keys_array(share=True),
            **{name: col.frozen() for name, col in self._columns().items()},
            **self.relations.arrays(),
            **recall_arrays,
            **self.trash.arrays(),
        }
        histories = self.sessions.freeze()
        id_table = self.ids.frozen_table()  # (the id table is built by `later`, off the lock)
        return meta, arrays, lambda: {**_history_arrays(histories), "id_table": id_table()}

    @staticmethod
    def growable_section(name: str) -> bool:
        """Whether a snapshot section is a column that writes append to (mapped with room:
        store/snapshot.read_snapshot)."""
        return name in GROWABLE_SECTIONS

    @staticmethod
    def snapshot_is_current(meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> bool:
        """Whether the snapshot's sections were written by this version of the state, index,
        tokenizer and Unicode tables (else the state is re-derived from the log)."""
        ix_format = arrays.get("ix.format")
        return (meta.get("state_version") in READABLE_STATE_VERSIONS
                and ix_format is not None and int(ix_format) == core_index.ARRAYS_FORMAT
                and meta.get("tokenizer_version") == tokenizer.TOKENIZER_VERSION
                and meta.get("unicode_version") == tokenizer.UNICODE_VERSION)

    @classmethod
    def from_snapshot(cls, read_record: ReadRecord, meta: dict[str, Any],
                      arrays: dict[str, np.ndarray]) -> "Catalog":
        """The state a snapshot holds (its sections are validated as they are adopted)."""
        cat = cls(read_record)
        for name in cat._columns():
            setattr(cat, name, Column.from_array(arrays[name]))
        table = arrays.get("id_table")
        cat.ids = idmap.IdMap.from_arrays(arrays["slot_ulid"],
                                          table if table is not None and len(table) else None)
        cat.sessions = SessionIndex(cat.ids.key)
        cat.sessions.load(meta["sessions"], arrays["hist_off"], arrays["hist_ts"],
                          arrays["hist_slots"], arrays["kind_counts"])
        cat.relations = RelationIndex.from_arrays(arrays["rel_src"], arrays["rel_type"],
                                                  arrays["rel_target"])
        cat.recall = RecallKeys.from_sections(meta, arrays, cat.slot_doc)
        cat.recall.load_sessions(arrays["hist_off"], arrays["hist_ts"])
        cat.index = core_index.SearchIndex.from_arrays(
            {k[3:]: a for k, a in arrays.items() if k.startswith("ix.")})
        cat.trash = Trash.from_arrays(arrays)
        trash_slots, trash_docs = cat.trash.slots.view(), cat.trash.docs.view()
        if len(trash_slots) and (int(trash_slots.min()) < 0 or int(trash_slots.max()) >= cat.slot_doc.n
                                 or int(trash_docs.min()) < 0 or int(trash_docs.max()) >= cat.doc_slot.n
                                 or bool(np.any(cat.slot_doc.data[trash_slots] >= 0))
                                 or bool(np.any(cat.doc_slot.data[trash_docs] != trash_slots))):
            raise ValueError("the trash names a message or version the snapshot does not hold")
        cat.last_seq = int(meta["last_seq"])
        cat.last_record_offset = int(meta["last_record_offset"])
        cat.update_records = int(meta["update_records"])
        cat.deleted_messages = int(meta["deleted_messages"])
        cat.live_bytes = int(meta["live_bytes"])
        return cat

    def compacted_state(self, live_slots: np.ndarray, old_to_new: np.ndarray, new_index: Any,
                        doc_offset: np.ndarray, doc_len: np.ndarray,
                        spill: Callable[[np.ndarray], np.ndarray | None] | None = None,
                        spill_min: int = 0,
                        ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The snapshot state after compaction (live messages only): `new_index` and
        `old_to_new` from index.compacted(); `doc_offset`/`doc_len` by new doc number. `spill`
        as for snapshot_state."""
        n = len(live_slots)
        slot_map = np.full(self.slot_doc.n, -1, dtype=np.int64)
        slot_map[live_slots] = np.arange(n)
        old_docs = self.slot_doc.data[live_slots].astype(np.int64)
        new_docs = old_to_new[old_docs]
        doc_slot = np.zeros(n, dtype=np.int32)
        doc_slot[new_docs] = np.arange(n, dtype=np.int32)
        kinds = np.zeros(n, dtype=np.uint8)
        kinds[new_docs] = self.doc_kind.data[old_docs]
        flags = np.zeros(n, dtype=np.uint8)
        flags[new_docs] = self.doc_flags.data[old_docs]
        # Sessions without live messages are dropped (their ids belong to deleted messages);
        # the others are renumbered densely, in the index's doc columns too.
        sessions = [s for s in self.sessions.all() if s.n]
        session_map = np.full(max(1, len(self.sessions)), -1, dtype=np.int64)
        for i, s in enumerate(sessions):
            session_map[s.num] = i
        meta = _versions_meta([s.name for s in sessions])
        recall_meta, recall_arrays = self.recall.sections(live_slots)
        meta.update(recall_meta)
        live_ids = self.ids.keys_array()[live_slots]
        arrays = {
            "slot_ulid": live_ids,
            # The renumbered ids' hash table, stored: without it every open rebuilt it (982 ms
            # of a 10M store's 1.3 s open after rebuild_index).
            "id_table": idmap.IdMap.from_arrays(live_ids).table_array(),
            "slot_doc": new_docs.astype(np.int32),
            "slot_session": session_map[self.slot_session.data[live_slots]].astype(np.int32),
            "slot_ts": self.slot_ts.data[live_slots],
            "doc_offset": doc_offset,
            "doc_len": doc_len,
            "doc_slot": doc_slot,
            "doc_kind": kinds,
            "doc_flags": flags,
            **_history_arrays(histories(sessions), slot_map),
            **self.relations.arrays(slot_map),
            **recall_arrays,
            # (no trash sections: deleted messages are gone for good)
        }
        new_index.merge_segments()
        if spill is not None:
            new_index.spill_postings(spill, spill_min)
        for name, arr in new_index.to_arrays().items():
            if name == "doc_session":
                arr = session_map[arr].astype(arr.dtype)
            arrays["ix." + name] = arr
        for name, arr in new_index.block_max_arrays().items():
            arrays["ix." + name] = arr
        return meta, arrays

    # -- memory ----------------------------------------------------------------------------
    def memory_estimate(self) -> dict[str, int]:
        """Bytes held, by health's categories (each container counts its own capacity)."""
        ix = self.index.nbytes()
        entries = (self.slot_doc.nbytes + self.slot_session.nbytes + self.slot_ts.nbytes
                   + self.doc_offset.nbytes + self.doc_len.nbytes + self.doc_slot.nbytes
                   + self.doc_kind.nbytes + self.doc_flags.nbytes + self.ids.nbytes
                   + self.trash.nbytes)
        return {
            "store_entries_bytes": entries,
            "body_bytes": 0,
            "metadata_bytes": ix.get("doc_columns", 0) + self.recall.nbytes(),
            "search_index_bytes": ix.get("postings", 0) + ix.get("terms", 0) + ix.get("scratch", 0),
            "history_index_bytes": self.sessions.nbytes(),
            "relation_index_bytes": self.relations.nbytes(),
        }


def _versions_meta(session_names: list[str]) -> dict[str, Any]:
    return {
        "state_version": STATE_VERSION,
        "tokenizer_version": tokenizer.TOKENIZER_VERSION,
        "unicode_version": tokenizer.UNICODE_VERSION,
        "sessions": list(session_names),  # (a copy: the live list grows on)
    }


def _history_arrays(frozen: Histories, slot_map: np.ndarray | None = None,
                    ) -> dict[str, np.ndarray]:
    """Each session's history (SessionIndex.freeze, sessions.histories), concatenated
    (hist_*[off[i]:off[i+1]]), slots optionally remapped. A run of sessions left to the loaded
    sections is one slice of them (they hold those sessions in the same order)."""
    count, made, loaded = frozen.count, frozen.made, frozen.loaded
    n_kinds = len(KINDS)
    ns = np.zeros(count, dtype=np.int64)
    counts = np.zeros((count, n_kinds), dtype=np.int64)
    n_loaded = 0
    if loaded is not None:
        l_off, l_ts, l_slots, l_counts = loaded
        n_loaded = min(count, len(l_off) - 1)
        ns[:n_loaded] = np.diff(l_off[:n_loaded + 1])
        counts[:n_loaded] = l_counts[:n_loaded]
    if made:
        ns[made] = frozen.ns
        counts[made] = np.array(frozen.counts, dtype=np.int64).reshape(-1, n_kinds)
    hist_off = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(ns, out=hist_off[1:])
    ts: list[np.ndarray] = []
    slots: list[np.ndarray] = []
    prev = 0  # the first session number not yet placed

    def loaded_run(end: int) -> None:
        """Sessions prev..end-1 (none of them made) from the loaded sections."""
        hi = min(end, n_loaded)
        if hi > prev:
            a, b = int(l_off[prev]), int(l_off[hi])
            ts.append(l_ts[a:b])
            slots.append(l_slots[a:b])

    for num, t, sl, n in zip(made, frozen.ts, frozen.slots, frozen.ns):
        loaded_run(num)
        ts.append(t[:n])
        slots.append(sl[:n])
        prev = num + 1
    loaded_run(count)
    if slot_map is not None:
        slots = [slot_map[sl] for sl in slots]
    return {
        "hist_off": hist_off,
        "hist_ts": np.concatenate(ts) if ts else np.zeros(0, "i8"),
        "hist_slots": (np.concatenate(slots) if slots else np.zeros(0, "i4")).astype(np.int32),
        "kind_counts": counts,
    }


EMPTY_TAGS: tuple[str, ...] = ()
THREAD_MIN_BATCH = 64  # smaller batches are indexed inline (a thread costs ~0.1 ms to start)


class _IndexingWorker:
    """index.add_batch of import batches, in the order submitted, on one thread of its own
    while the caller goes on (the compiled index buffers postings without the GIL, so a batch's
    indexing overlaps the catalog's Python work and the reading, checking and writing of the
    batches after it, on a second core). Up to QUEUE_BATCHES wait: a flush or merge of the
    index that takes longer than a batch does not stall the import, and what waits stays
    bounded. After an error the batches still queued are dropped (the store rebuilds its
    state from the log); finish() raises it."""

    QUEUE_BATCHES = 32

    __slots__ = ("_index", "_queue", "_thread", "_error", "_closing")

    def __init__(self, index: Any) -> None:
        self._index = index
        self._queue: queue.Queue[tuple | None] = queue.Queue(self.QUEUE_BATCHES)
        self._error: BaseException | None = None
        self._closing = False
        self._thread: threading.Thread | None = threading.Thread(
            target=self._loop, name="convmem-index", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            args = self._queue.get()
            if args is None:
                return
            if self._error is None:
                try:
                    self._index.add_batch(*args)
                except BaseException as exc:  # (raised again by finish, on the caller's thread)
                    self._error = exc

    def submit(self, args: tuple) -> None:
        """Queue add_batch(*args); waits while QUEUE_BATCHES are queued."""
        self._queue.put(args)

    @property
    def failed(self) -> bool:
        return self._error is not None

    @property
    def finished(self) -> bool:
        """Whether finish() has seen every batch through (its error raised, if any)."""
        return self._thread is None

    def finish(self) -> None:
        """Wait for every batch submitted and end the thread; raises the first error."""
        if self._thread is None:
            return
        if not self._closing:
            self._closing = True
            self._queue.put(None)
        self._thread.join()
        self._thread = None
        if self._error is not None:
            raise self._error
