"""MemoryStore: the library face of convmem, one method per MCP tool.

Each tool method takes the tool's arguments as keyword arguments, returns the dict that the tool's
JSON text holds, and raises ConvMemError for application errors. All calls are serialised by one
lock. A write is acknowledged only once its record has been fdatasync'ed; its in-memory work runs
while the flush does (on the flusher thread) and is committed after it (docs/DESIGN.md).
"""
from __future__ import annotations

import bisect
import hashlib
import hmac
import base64
import logging
import os
import struct
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple, TypeVar

import numpy as np
import orjson

from . import validation as v
from ._core import PURE as _PURE_CORE, codec, idmap, index as core_index, tokenizer as tok
from .errors import CONFLICT, CORRUPT_STORE, IO_ERROR, NOT_FOUND, ConvMemError, INTERNAL_ERROR
from .index.columns import Column
from .index.relations import RelationIndex
from .index.sessions import SessionIndex
from .store.io import IoCounters, fsync_dir, write_all
from .store.lock import DirLock
from .store.logfile import LOG_NAME, LogFile
from .store.snapshot import (SNAPSHOT_NAME, SnapshotError, read_snapshot, snapshot_size,
                             verify_deferred, write_snapshot)

log = logging.getLogger("convmem")

RESPONSE_BUDGET = 8 * 1024 * 1024 - 16 * 1024  # ~8 MiB, keeping room for the envelope
CONTEXT_MESSAGE_CAP = 50
SNAPSHOT_EVERY_RECORDS = 50_000
VERIFY_IN_FOREGROUND_BYTES = 64 * 1024 * 1024
DEFER_SECTION_BYTES = 4 * 1024 * 1024
CURSOR_KEY_NAME = "cursor.key"
COMPACT_NAME = "messages.log.compact"  # rebuild_index's new log before it is renamed
NEXT_SNAPSHOT_NAME = SNAPSHOT_NAME + ".next"  # and its snapshot
# Half-written files of an interrupted snapshot or rebuild_index, removed at open.
LEFTOVER_NAMES = (COMPACT_NAME, NEXT_SNAPSHOT_NAME, NEXT_SNAPSHOT_NAME + ".tmp",
                  SNAPSHOT_NAME + ".tmp")
STATE_VERSION = 3  # of the snapshot's sections as this module writes them; others are re-derived
FLAG_HAS_SUMMARY = 1  # doc flags
FLAG_HAS_RELATIONS = 2
_EMPTY_KEYS = np.zeros(0, dtype=np.uint64)
_REVISION = struct.Struct("<I")  # at payload offset 32 (docs/FORMAT.md)

Record = tuple  # decoded MESSAGE payload: see codec.decode_message
_MAX_MS = (1 << 48) - 1  # timestamps: 48 bits, as in a ULID
_T = TypeVar("_T")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _find_damage(mm: Any, end: int) -> list[tuple[int, int, str]]:
    """(start, end, reason) of each damaged stretch of log[header:end]."""
    found = []
    pos = codec.LOG_HEADER_SIZE
    while pos < end:
        res = codec.scan_log(mm, pos, end)
        if res.error is None:
            break
        nxt = res.resync if res.resync >= 0 else end
        found.append((res.stop, nxt, res.error))
        pos = nxt
    return found


_SESSION_DOCS_MAX = 1 << 16  # sessions up to this size hand their docs to the index's search


class _Budget:
    """The ~8 MiB response budget: items are taken while they fit; the first always fits.

    `take(item, bound)` with an upper bound of the item's JSON size skips serialising it while
    the bounds taken so far still fit; the first time they would not, the items taken are
    measured exactly (`taken`) and measuring goes on from there. The answer is the same.
    """

    def __init__(self, taken: list[dict[str, Any]] | None = None) -> None:
        self.used = 0
        self.count = 0
        self.exact = False
        self._taken = taken

    def take(self, item: dict[str, Any], bound: int | None = None) -> bool:
        if not self.exact:
            if bound is not None and self.used + bound <= RESPONSE_BUDGET:
                self.used += bound
                self.count += 1
                return True
            self.exact = True
            self.used = sum(len(orjson.dumps(it)) + 1 for it in self._taken or ())
        size = len(orjson.dumps(item)) + 1
        if self.count and self.used + size > RESPONSE_BUDGET:
            return False
        self.used += size
        self.count += 1
        return True


def _json_bound(record_bytes: int) -> int:
    """An upper bound of the JSON size of a search result built from a log record of this many
    bytes (without context_preview): a byte of stored text takes at most 6 in JSON (an escape),
    ids, numbers and relations less than that; the keys, enums and scores fit in the rest."""
    return 6 * record_bytes + 2048


def _field_keys(rec: Record) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The token keys of a message's content, summary and tags (all tags' tokens together)."""
    summary = rec[11]
    return (tok.token_keys(rec[9]), tok.token_keys(summary) if summary else _EMPTY_KEYS,
            _tag_keys(rec[12]))


def _tag_keys(tags: list[str]) -> np.ndarray:
    if not tags:
        return _EMPTY_KEYS
    if len(tags) == 1:
        return tok.token_keys(tags[0])  # (no concatenate for the common single tag)
    return np.concatenate([tok.token_keys(t) for t in tags])


class _Prepared(NamedTuple):
    """What adding a message's doc needs that can be computed without touching the store."""

    keys: tuple[np.ndarray, np.ndarray, np.ndarray]  # content, summary, tags (see _field_keys)
    tag_hashes: np.ndarray
    flags: int


def _prepare(rec: Record) -> _Prepared:
    return _Prepared(_field_keys(rec), _tag_hashes(rec[12]), _doc_flags(rec))


def _tag_hashes(tags: list[str]) -> np.ndarray:
    """The hashes the index keeps for a doc's tags (and a tag filter is matched against)."""
    if not tags:
        return _EMPTY_KEYS
    return np.array([tok.hash_utf8(t.encode("utf-8")) for t in tags], dtype=np.uint64)


def _doc_flags(rec: Record) -> int:
    return (FLAG_HAS_SUMMARY if rec[11] is not None else 0) | (FLAG_HAS_RELATIONS if rec[13] else 0)


def _history_arrays(sessions: list, slot_map: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Each session's history, concatenated (hist_*[off[i]:off[i+1]]), slots optionally remapped."""
    hist_off = np.zeros(len(sessions) + 1, dtype=np.int64)
    np.cumsum([s.n for s in sessions], out=hist_off[1:])
    ts = [s.ts[: s.n] for s in sessions]
    slots = [s.slots[: s.n] if slot_map is None else slot_map[s.slots[: s.n]] for s in sessions]
    return {
        "hist_off": hist_off,
        "hist_ts": np.concatenate(ts) if ts else np.zeros(0, "i8"),
        "hist_slots": (np.concatenate(slots) if slots else np.zeros(0, "i4")).astype(np.int32),
        "kind_counts": np.array([s.kind_counts for s in sessions], dtype=np.int64).reshape(-1, 6),
    }


class MemoryStore:
    """A conversation-memory store in one data directory (see docs/DESIGN.md)."""

    # -- lifecycle -----------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> "MemoryStore":
        return cls(Path(path))

    def __init__(self, directory: Path) -> None:
        self._mutex = threading.RLock()
        self.directory = directory
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConvMemError(IO_ERROR, f"cannot create the data directory: {exc.strerror}") from exc
        self._dirlock = DirLock(directory)
        try:
            with self._mutex:  # a background verifier started by _open waits for it to finish
                self._open()
        except BaseException:
            self._dirlock.release()
            raise

    def __enter__(self) -> "MemoryStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._verifier is not None:
            self._verifier.join()
            self._verifier = None
        with self._mutex:
            if self._log is None:
                return
            try:
                if self._records_since_snapshot:
                    self._write_snapshot()
            except ConvMemError as exc:
                log.warning("snapshot at close failed: %s", exc.message)
            finally:
                self._log.close()
                self._log = None  # type: ignore[assignment]
                self._dirlock.release()

    def checkpoint(self) -> None:
        """Write a snapshot now (after a bulk import, so that the next open replays nothing)."""
        with self._mutex:
            self._check_open()
            if self._records_since_snapshot:
                self._write_snapshot()

    # -- state ---------------------------------------------------------------------------
    def _reset_state(self) -> None:
        # Per message ("slot", in creation order).
        self._slot_doc = Column("i4")  # current version's doc, -1 when deleted
        self._slot_session = Column("i4")
        self._slot_ts = Column("i8")
        self._ids = idmap.IdMap()  # the 16-byte ids in slot order, and id -> slot
        # Per stored version ("doc", the search index's document number).
        self._doc_offset = Column("i8")
        self._doc_len = Column("u4")
        self._doc_slot = Column("i4")
        self._doc_kind = Column("u1")
        self._doc_flags = Column("u1")
        self._sessions = SessionIndex(self._ulid_of)
        self._relations = RelationIndex()
        self._index = core_index.SearchIndex()
        self._last_seq = 0
        self._last_record_offset = -1
        self._update_records = 0
        self._deleted_messages = 0
        self._live_bytes = 0
        self._records_since_snapshot = 0
        self._ulid_last = (0, 0)  # (ms, 80-bit random) of the newest id made here

    def _ulid_of(self, slot: int) -> bytes:
        return self._ids.key(slot)

    def _open(self) -> None:
        self._verifier: threading.Thread | None = None
        self._deferred_sections: list[tuple[str, memoryview, int]] = []
        self._io = IoCounters()
        self.recovered_tail = False
        self.snapshot_valid = True
        self.last_error = ""
        for leftover in LEFTOVER_NAMES:
            try:
                (self.directory / leftover).unlink()
            except FileNotFoundError:
                pass
        self._cursor_key = self._load_cursor_key()
        log_path = self.directory / LOG_NAME
        had_log = log_path.exists() and log_path.stat().st_size > 0
        self._log = LogFile.open(log_path, self._io)
        if not had_log and snapshot_size(self.directory / SNAPSHOT_NAME) > 0:
            # A snapshot without its log: the log was lost or emptied; what it held is gone.
            self.last_error = ("CORRUPT_STORE: the log was missing or empty beside an existing "
                               "snapshot; the store starts empty")
            log.error("%s", self.last_error)
        self._reset_state()
        start = codec.LOG_HEADER_SIZE
        self._last_seq = self._log.base_sequence
        loaded = self._load_snapshot()
        if loaded is not None:
            start = loaded
            self._verify_covered(loaded)
        replayed = self._replay(start)
        if replayed or loaded is None and self._log.size > codec.LOG_HEADER_SIZE:
            self._records_since_snapshot = max(replayed, 1)
        if self._records_since_snapshot >= 1 and (loaded is None or replayed >= 1000):
            self._write_snapshot()

    def _load_cursor_key(self) -> bytes:
        path = self.directory / CURSOR_KEY_NAME
        try:
            key = path.read_bytes()
            if len(key) == 32:
                return key
        except FileNotFoundError:
            pass
        key = os.urandom(32)
        tmp = path.with_name(CURSOR_KEY_NAME + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, key)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        return key

    # -- snapshot --------------------------------------------------------------------------
    def _snapshot_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        self._index.merge_segments()
        sessions = self._sessions.by_num
        meta = {
            **self._common_meta(sessions),
            "log_id": self._log.log_id.hex(),
            "covered_end": self._log.size,
            "last_seq": self._last_seq,
            "last_record_offset": self._last_record_offset,
            "update_records": self._update_records,
            "deleted_messages": self._deleted_messages,
            "live_bytes": self._live_bytes,
        }
        arrays = {
            "slot_ulid": self._ids.keys_array(),
            "id_table": self._ids.table_array(),
            "slot_doc": self._slot_doc.view(),
            "slot_session": self._slot_session.view(),
            "slot_ts": self._slot_ts.view(),
            "doc_offset": self._doc_offset.view(),
            "doc_len": self._doc_len.view(),
            "doc_slot": self._doc_slot.view(),
            "doc_kind": self._doc_kind.view(),
            "doc_flags": self._doc_flags.view(),
            **_history_arrays(sessions),
            **self._relations.arrays(),
        }
        for name, arr in self._index.to_arrays().items():
            arrays["ix." + name] = arr
        return meta, arrays

    def _common_meta(self, sessions: list) -> dict[str, Any]:
        return {
            "format_version": codec.FORMAT_VERSION,
            "state_version": STATE_VERSION,
            "tokenizer_version": tok.TOKENIZER_VERSION,
            "unicode_version": tok.UNICODE_VERSION,
            "sessions": [s.name for s in sessions],
            "ulid_last": [self._ulid_last[0], format(self._ulid_last[1], "x")],
        }

    def _write_snapshot(self) -> None:
        meta, arrays = self._snapshot_state()
        try:
            write_snapshot(self.directory / SNAPSHOT_NAME, meta, arrays, self._io)
        except OSError as exc:
            self.last_error = f"IO_ERROR: snapshot write failed: {exc.strerror or exc}"
            raise ConvMemError(IO_ERROR, "snapshot write failed") from exc
        self._records_since_snapshot = 0

    def _load_snapshot(self) -> int | None:
        """Load the snapshot if it belongs to this log; returns the log offset it covers."""
        path = self.directory / SNAPSHOT_NAME
        # The big index sections of a big snapshot are checksummed in the background (with the
        # log); a bad one then rebuilds the state from the log.
        big = snapshot_size(path) > VERIFY_IN_FOREGROUND_BYTES

        deferred: list[tuple[str, memoryview, int]] = []

        def defer(name: str, view: memoryview, crc: int) -> bool:
            if big and name.startswith("ix.") and len(view) >= DEFER_SECTION_BYTES:
                deferred.append((name, view, crc))
                return True
            return False

        try:
            meta, arrays = read_snapshot(path, defer=defer)
        except FileNotFoundError:
            return None
        except SnapshotError as exc:
            self._snapshot_rejected(f"snapshot is damaged ({exc}); state rebuilt from the log")
            return None
        try:
            if meta.get("log_id") != self._log.log_id.hex():
                # A crash between the two renames of rebuild_index: the log is the truth.
                self.snapshot_valid = False
                return None
            ix_format = arrays.get("ix.format")
            if (meta.get("state_version") != STATE_VERSION
                    or ix_format is None or int(ix_format) != core_index.ARRAYS_FORMAT
                    or meta.get("tokenizer_version") != tok.TOKENIZER_VERSION
                    or meta.get("unicode_version") != tok.UNICODE_VERSION):
                log.info("snapshot written by another version (index, tokenizer or Unicode): "
                         "re-indexing from the log")
                return None
            covered = int(meta["covered_end"])
            last_off = int(meta["last_record_offset"])
            if not self._snapshot_matches_log(covered, last_off, int(meta["last_seq"])):
                # The log lost its tail after the snapshot was taken (a torn or damaged last
                # record): the snapshot is stale, the log is the truth and replay repairs it.
                self.snapshot_valid = False
                return None
            self._load_state(meta, arrays)
            self._deferred_sections = deferred
        except (SnapshotError, codec.CorruptRecord, ConvMemError, KeyError, ValueError,
                TypeError, IndexError) as exc:
            self._reset_state()
            self._last_seq = self._log.base_sequence
            self._snapshot_rejected(f"snapshot is unusable ({exc}); state rebuilt from the log")
            return None
        return covered

    def _snapshot_matches_log(self, covered: int, last_off: int, last_seq: int) -> bool:
        if covered > self._log.size:
            return False
        if last_off < 0:
            return covered == codec.LOG_HEADER_SIZE
        try:
            head = self._log.read(last_off, covered - last_off)
            _, seq, _, _, nxt = codec.read_record(head, 0)
        except (codec.CorruptRecord, ConvMemError):
            return False
        return seq == last_seq and nxt == len(head)

    def _snapshot_rejected(self, why: str) -> None:
        self.snapshot_valid = False
        self.last_error = why
        log.warning("%s", why)

    def _load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self._reset_state()
        self._slot_doc = Column.from_array(arrays["slot_doc"])
        self._slot_session = Column.from_array(arrays["slot_session"])
        self._slot_ts = Column.from_array(arrays["slot_ts"])
        self._doc_offset = Column.from_array(arrays["doc_offset"])
        self._doc_len = Column.from_array(arrays["doc_len"])
        self._doc_slot = Column.from_array(arrays["doc_slot"])
        self._doc_kind = Column.from_array(arrays["doc_kind"])
        self._doc_flags = Column.from_array(arrays["doc_flags"])
        table = arrays.get("id_table")
        usable = table is not None and len(table) > 0 and not _PURE_CORE
        self._ids = idmap.IdMap.from_arrays(arrays["slot_ulid"], table if usable else None)
        self._sessions.load(meta["sessions"], arrays["hist_off"], arrays["hist_ts"],
                            arrays["hist_slots"], arrays["kind_counts"])
        self._relations = RelationIndex.from_arrays(arrays["rel_src"], arrays["rel_type"],
                                                    arrays["rel_target"])
        ix = {k[3:]: a for k, a in arrays.items() if k.startswith("ix.")}
        self._index = core_index.SearchIndex.from_arrays(ix)
        self._last_seq = int(meta["last_seq"])
        self._last_record_offset = int(meta["last_record_offset"])
        self._update_records = int(meta["update_records"])
        self._deleted_messages = int(meta["deleted_messages"])
        self._live_bytes = int(meta["live_bytes"])
        last = meta.get("ulid_last") or [0, "0"]
        self._ulid_last = (int(last[0]), int(last[1], 16))

    # -- replay and verification -----------------------------------------------------------
    def _replay(self, start: int) -> int:
        """Apply the log from `start`; repair a torn tail; report damage in the middle."""
        applied = 0
        mm = self._log.map()
        if mm is None:
            return 0
        try:
            pos = start
            while pos < self._log.size:
                res = codec.scan_log(mm, pos, self._log.size)
                for off, rtype, seq, plen in zip(res.offsets.tolist(), res.types.tolist(),
                                                 res.seqs.tolist(), res.lengths.tolist()):
                    if seq <= self._last_seq:
                        self._damage(off, "sequence number does not increase", plen + codec.RECORD_HEADER_SIZE)
                        continue
                    flen = codec.RECORD_HEADER_SIZE + plen
                    try:
                        if rtype == codec.REC_MESSAGE:
                            rec = codec.decode_message(mm, off + codec.RECORD_HEADER_SIZE, plen)
                            self._apply_message(rec, off, flen)
                        else:
                            self._apply_delete(codec.decode_delete(mm, off + codec.RECORD_HEADER_SIZE, plen))
                    except codec.CorruptRecord as exc:
                        self._damage(off, exc.reason, flen)
                        continue
                    self._last_seq = seq
                    self._last_record_offset = off
                    applied += 1
                if res.error is None:
                    break
                if res.resync < 0:
                    # Nothing valid follows: a torn tail left by a crash. Cut it off durably.
                    del mm
                    mm = None
                    self._log.truncate(res.stop)
                    self.recovered_tail = True
                    log.warning("log: torn tail at byte offset %d truncated (%s)", res.stop, res.error)
                    break
                self._damage(res.stop, res.error, res.resync - res.stop)
                pos = res.resync
        finally:
            if mm is not None:
                mm.close()
        return applied

    def _damage(self, offset: int, reason: str, nbytes: int) -> None:
        msg = (f"CORRUPT_STORE: log record at byte offset {offset} is damaged ({reason}); "
               f"{nbytes} bytes skipped")
        log.error("%s", msg)
        if not self.last_error:
            self.last_error = msg

    def _verify_covered(self, end: int) -> None:
        """Check every checksum in the part of the log that the snapshot stood in for, and the
        snapshot sections whose check was deferred.

        Reads verify their record's checksum anyway, so nothing damaged is ever served; this
        pass finds damage early and reports it in health. A large store is checked in a
        background thread (zlib and the log scan run without the GIL) so that opening stays fast.
        """
        deferred, self._deferred_sections = self._deferred_sections, []
        mm = self._log.map()

        def check() -> tuple[str | None, list[tuple[int, int, str]]]:
            try:
                bad = verify_deferred(deferred)
                return bad, (_find_damage(mm, end) if mm is not None and bad is None else [])
            finally:
                if mm is not None:
                    mm.close()

        def apply(bad: str | None, damage: list[tuple[int, int, str]]) -> None:
            if bad is not None:
                self._reload_from_log(f"snapshot section {bad!r} is damaged; state rebuilt from the log")
            else:
                self._apply_damage(damage)

        if not deferred and end - codec.LOG_HEADER_SIZE <= VERIFY_IN_FOREGROUND_BYTES:
            apply(*check())
            return
        log_id = self._log.log_id

        def verify() -> None:
            result = check()
            with self._mutex:
                if self._log is not None and self._log.log_id == log_id:
                    apply(*result)

        self._verifier = threading.Thread(target=verify, name="convmem-verify", daemon=True)
        self._verifier.start()

    def _reload_from_log(self, why: str) -> None:
        self._snapshot_rejected(why)
        self._reset_state()
        self._last_seq = self._log.base_sequence
        self._replay(codec.LOG_HEADER_SIZE)
        self._write_snapshot()

    def _apply_damage(self, damage: list[tuple[int, int, str]]) -> None:
        for start, end, reason in damage:
            self._damage(start, reason, end - start)
            self._drop_damaged_docs(start, end)

    def _drop_damaged_docs(self, start: int, end: int) -> None:
        """Messages whose current version lies in damaged bytes can no longer be served."""
        offsets = self._doc_offset.view()
        for doc in np.nonzero((offsets >= start) & (offsets < end))[0].tolist():
            slot = int(self._doc_slot.data[doc])
            if int(self._slot_doc.data[slot]) == doc:
                self._retire(slot, doc)
                self._slot_doc.data[slot] = -1

    # -- applying records ------------------------------------------------------------------
    # A version is applied in two steps: its doc goes into the index and the doc columns first
    # (_stage_new, _add_doc: the costly part, done while a write's flush is in flight and undone
    # by _unstage if the flush fails), then it is committed (_commit_new: the message's slot,
    # session history and relations; _commit_version: it replaces the current version). Nothing
    # reads the store in between: the caller holds _mutex.
    def _apply_message(self, rec: Record, offset: int, frame_len: int) -> int:
        """Apply a MESSAGE record (replay); returns its slot."""
        prep = _prepare(rec)
        slot = self._ids.get(rec[0])
        if slot is None:
            return self._commit_new(rec, self._stage_new(rec, offset, frame_len, prep), frame_len)
        doc = self._add_doc(rec, offset, frame_len, slot, int(self._slot_session.data[slot]), prep)
        self._commit_version(rec, slot, doc, frame_len)
        return slot

    def _commit_version(self, rec: Record, slot: int, doc: int, frame_len: int,
                        old_keys: tuple[Any, Any, Any] | None = None) -> None:
        """Make `doc` the current version of the message in `slot`; `old_keys`: the replaced
        version's key arrays, when the caller has them (else they are read from the log)."""
        kind = rec[5]
        old_doc = int(self._slot_doc.data[slot])
        num = int(self._slot_session.data[slot])
        if old_doc >= 0:
            old_kind = int(self._doc_kind.data[old_doc])
            self._index.remove(old_doc, *(old_keys or self._index_keys(old_doc)))
            self._live_bytes -= int(self._doc_len.data[old_doc])
            if old_kind != kind:
                self._sessions.change_kind(num, old_kind, kind)
        else:
            self._sessions.insert(num, int(self._slot_ts.data[slot]), slot, rec[0], kind)
        self._slot_doc.data[slot] = doc
        if old_doc >= 0 and (rec[13] or self._doc_flags.data[old_doc] & FLAG_HAS_RELATIONS):
            self._relations.set(slot, rec[13])
        elif old_doc < 0:
            self._relations.add_new(slot, rec[13])
        self._count_version(rec, frame_len)

    def _stage_new(self, rec: Record, offset: int, frame_len: int, prep: _Prepared) -> int:
        """A new message's doc, numbered as _commit_new will number its slot and session."""
        s = self._sessions.get(rec[8])
        num = s.num if s is not None else len(self._sessions.by_num)
        return self._add_doc(rec, offset, frame_len, len(self._ids), num, prep)

    def _unstage(self, doc: int, prep: _Prepared) -> None:
        """Withdraw a staged doc whose record did not become durable. Its number stays used, as a
        dead doc like a replaced version (the index gives the same scores without it, see
        docs/SCORING.md), with no record: offset -1 keeps it out of damage checks."""
        self._index.remove(doc, *prep.keys)
        self._doc_offset.data[doc] = -1
        self._doc_len.data[doc] = 0

    def _commit_new(self, rec: Record, doc: int, frame_len: int) -> int:
        ulid, ts = rec[0], rec[1]
        slot = self._ids.add(ulid)
        num = self._sessions.number(rec[8])
        self._slot_doc.append(doc)
        self._slot_session.append(num)
        self._slot_ts.append(ts)
        self._sessions.insert(num, ts, slot, ulid, rec[5])
        self._relations.add_new(slot, rec[13])
        self._count_version(rec, frame_len)
        return slot

    def _count_version(self, rec: Record, frame_len: int) -> None:
        """The store's counters for a version that has become current (_apply_new_batch counts a
        batch the same way at once)."""
        self._live_bytes += frame_len
        if rec[3] > 1:
            self._update_records += 1
        self._records_since_snapshot += 1

    def _add_doc(self, rec: Record, offset: int, frame_len: int, slot: int, session: int,
                 prep: _Prepared) -> int:
        doc = self._index.n_docs
        self._index.add(doc, *prep.keys, prep.tag_hashes, session, rec[5], rec[6], rec[7], rec[1],
                        rec[0])
        self._doc_offset.append(offset)
        self._doc_len.append(frame_len)
        self._doc_slot.append(slot)
        self._doc_kind.append(rec[5])
        self._doc_flags.append(prep.flags)
        return doc

    def _index_keys(self, doc: int) -> tuple[Any, Any, Any]:
        """The key arrays `_add_doc` gave the index for doc (re-read from the log), so that
        removing it lowers df without a forward index; (None,) * 3 when the record is damaged
        (the index then finds the doc's terms in its postings)."""
        try:
            return _field_keys(self._record(doc))
        except ConvMemError:
            return None, None, None

    def _apply_delete(self, ulid: bytes, old_keys: tuple[Any, Any, Any] | None = None) -> None:
        slot = self._ids.get(ulid)
        self._deleted_messages += 1
        self._records_since_snapshot += 1
        if slot is None:
            return
        doc = int(self._slot_doc.data[slot])
        if doc >= 0:
            self._retire(slot, doc, old_keys)
            self._slot_doc.data[slot] = -1

    def _retire(self, slot: int, doc: int, keys: tuple[Any, Any, Any] | None = None) -> None:
        """Take a message's current version out of every index (`keys`: its key arrays, when
        the caller has them)."""
        self._index.remove(doc, *(keys or self._index_keys(doc)))
        self._live_bytes -= int(self._doc_len.data[doc])
        self._sessions.remove(int(self._slot_session.data[slot]), int(self._slot_ts.data[slot]),
                              slot, self._ulid_of(slot), int(self._doc_kind.data[doc]))
        if self._doc_flags.data[doc] & FLAG_HAS_RELATIONS:
            self._relations.clear(slot)

    # -- writing records -------------------------------------------------------------------
    def _append(self, frames: list[bytes]) -> list[int]:
        """Append frames with one write and one fdatasync; returns their offsets."""
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        try:
            start = self._log.append(data)
        except ConvMemError as exc:
            self.last_error = f"{exc.code}: {exc.message}"
            raise
        offsets = []
        pos = start
        for f in frames:
            offsets.append(pos)
            pos += len(f)
        return offsets

    def _append_overlapped(self, frame: bytes, work: Callable[[int], _T],
                           undo: Callable[[_T], None] | None = None) -> tuple[int, _T]:
        """Append one record (the next sequence number) and run `work(offset)` while its flush
        runs on the flusher thread; returns (offset, what work returned) once it is durable.

        What `work` changes in the store must be invisible to reads until the caller commits it,
        must come last in it (if `work` raises, the record is cut back and the exception passes
        on, nothing is undone), and is withdrawn by `undo(its result)` if the flush fails
        (IO_ERROR: the record is cut back off the log).
        """
        offset = self._begin_append(frame)
        try:
            result = work(offset)
        except BaseException:
            self._log.abort_append()
            raise
        try:
            self._finish_append()
        except ConvMemError:
            if undo is not None:
                undo(result)
            raise
        self._last_seq += 1
        self._last_record_offset = offset
        return offset, result

    def _begin_append(self, frame: bytes) -> int:
        """Write one record and start its flush (LogFile.begin_append); returns its offset."""
        try:
            return self._log.begin_append(frame)
        except ConvMemError as exc:
            self.last_error = f"{exc.code}: {exc.message}"
            raise

    def _finish_append(self) -> None:
        """The record is durable once this returns; IO_ERROR (record cut back off) otherwise."""
        try:
            self._log.finish_append()
        except ConvMemError as exc:
            self.last_error = f"{exc.code}: {exc.message}"
            raise

    def _after_write(self) -> None:
        # A snapshot bounds the replay at the next open; its cost grows with the store, so the
        # interval grows too (replay after a crash stays under a quarter of the store).
        due = max(SNAPSHOT_EVERY_RECORDS, self._index.n_docs // 4)
        if self._records_since_snapshot >= due:
            try:
                self._write_snapshot()
            except ConvMemError as exc:
                log.warning("periodic snapshot failed: %s", exc.message)

    def _new_ulid(self) -> tuple[bytes, int]:
        """A monotonic ULID and its millisecond timestamp (ties keep write order)."""
        now = _now_ms()
        last_ms, last_rand = self._ulid_last
        if now > last_ms:
            ms, rand = now, int.from_bytes(os.urandom(10), "big") >> 1  # room to increment
        else:
            ms, rand = last_ms, last_rand + 1
        self._ulid_last = (ms, rand)
        return ((ms << 80) | rand).to_bytes(16, "big"), ms

    # -- reading records -------------------------------------------------------------------
    def _record(self, doc: int) -> Record:
        return self._read_doc(doc, codec.decode_message)

    def _read_doc(self, doc: int, decode):
        """Read a stored version's record, verify its checksum, and `decode(data, off, len)` its
        payload; damage is CORRUPT_STORE with the byte offset."""
        return self._read_at(int(self._doc_offset.data[doc]), int(self._doc_len.data[doc]), decode)

    def _read_at(self, off: int, length: int, decode):
        """_read_doc for a record whose offset and length are known."""
        data = self._log.read(off, length)
        try:
            rtype, _, poff, plen, _ = codec.read_record(data, 0)
            if rtype != codec.REC_MESSAGE:
                raise codec.CorruptRecord(0, "record is not a message")
            return decode(data, poff, plen)
        except codec.CorruptRecord as exc:
            raise ConvMemError(
                CORRUPT_STORE, f"log record at byte offset {off + exc.offset} is damaged: {exc.reason}"
            ) from None

    def _live_doc(self, ulid: bytes) -> tuple[int, int]:
        slot = self._ids.get(ulid)
        if slot is None or int(self._slot_doc.data[slot]) < 0:
            raise ConvMemError(NOT_FOUND, "message not found")
        return slot, int(self._slot_doc.data[slot])

    @staticmethod
    def _metadata_of(rec: Record) -> v.Metadata:
        return v.Metadata(rec[10], list(rec[12]), rec[6], rec[5], rec[7], rec[11],
                          list(rec[13]), list(rec[14]))

    @staticmethod
    def _message(rec: Record) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        if rec[10] is not None:
            meta["tool_call_id"] = rec[10]
        meta["tags"] = list(rec[12])
        meta["memory_tier"] = v.TIERS[rec[6]]
        meta["memory_kind"] = v.KINDS[rec[5]]
        meta["importance"] = rec[7]
        if rec[11] is not None:
            meta["summary"] = rec[11]
        meta["relations"] = [{"type": v.RELATION_TYPES[t], "message_id": v.ulid_str(u)}
                             for t, u in rec[13]]
        meta["source_message_ids"] = [v.ulid_str(u) for u in rec[14]]
        return {
            "message_id": v.ulid_str(rec[0]),
            "session_id": rec[8],
            "timestamp": rec[1],
            "role": v.ROLES[rec[4]],
            "content": rec[9],
            "revision": rec[3],
            "updated_at": rec[2],
            "metadata": meta,
        }

    def _message_of_slot(self, slot: int) -> dict[str, Any]:
        return self._message(self._record(int(self._slot_doc.data[slot])))

    # -- cursors ---------------------------------------------------------------------------
    def _make_cursor(self, payload: bytes) -> str:
        mac = hmac.new(self._cursor_key, payload, hashlib.sha256).digest()[:12]
        return base64.urlsafe_b64encode(payload + mac).rstrip(b"=").decode("ascii")

    def _open_cursor(self, cursor: Any, kind: bytes) -> bytes:
        if not isinstance(cursor, str) or not cursor or len(cursor) > 2048:
            raise v.fail("cursor must be a nextCursor value from an earlier response")
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        except (ValueError, TypeError):
            raise v.fail("cursor is not valid") from None
        payload, mac = raw[:-12], raw[-12:]
        good = hmac.new(self._cursor_key, payload, hashlib.sha256).digest()[:12]
        if len(raw) < 13 or not hmac.compare_digest(mac, good) or payload[:1] != kind:
            raise v.fail("cursor is not valid for this request")
        return payload[1:]

    # =====================================================================================
    # Tools
    # =====================================================================================
    def write_message(self, *, session_id: Any = None, role: Any = None, content: Any = None,
                      metadata_json: Any = None) -> dict[str, Any]:
        session = v.string("session_id", session_id, min_bytes=1, max_bytes=v.MAX_SESSION_BYTES)
        role_i = v.role(role)
        body = v.string("content", content, min_bytes=1, max_bytes=v.MAX_CONTENT_BYTES)
        fields = {} if metadata_json is None else v.metadata_fields(
            v.json_arg("metadata_json", metadata_json))
        meta = v.apply_metadata(None, fields)
        with self._mutex:
            self._check_open()
            ulid_last = self._ulid_last
            ulid, ts = self._new_ulid()
            rec = (ulid, ts, ts, 1, role_i, meta.kind, meta.tier, meta.importance, session, body,
                   meta.tool_call_id, meta.summary, meta.tags, meta.relations, meta.sources)
            frame = codec.encode_record(codec.REC_MESSAGE, self._last_seq + 1,
                                        codec.encode_message(*rec))

            def stage(offset: int) -> tuple[int, _Prepared, dict[str, Any]]:
                prep = _prepare(rec)
                answer = {"status": "OK", "message": self._message(rec)}
                return self._stage_new(rec, offset, len(frame), prep), prep, answer

            try:
                _, (doc, prep, answer) = self._append_overlapped(
                    frame, stage, lambda staged: self._unstage(staged[0], staged[1]))
            except BaseException:
                self._ulid_last = ulid_last  # the id was not used
                raise
            self._commit_new(rec, doc, len(frame))
            self._after_write()
            return answer

    def update_message(self, *, message_id: Any = None, content: Any = None,
                       metadata_json: Any = None, expected_revision: Any = None) -> dict[str, Any]:
        ulid = v.ulid("message_id", message_id)
        if content is not None:
            content = v.string("content", content, min_bytes=1, max_bytes=v.MAX_CONTENT_BYTES)
        fields = None if metadata_json is None else v.metadata_fields(
            v.json_arg("metadata_json", metadata_json))
        expected = v.integer("expected_revision", expected_revision, lo=1, hi=None, default=None)
        if content is None and fields is None:
            raise v.fail("update_message needs content or metadata_json")
        with self._mutex:
            self._check_open()
            slot, doc = self._live_doc(ulid)
            rec = self._record(doc)
            if expected is not None and expected != rec[3]:
                raise ConvMemError(CONFLICT, "expected_revision does not match the current revision")
            old_meta = self._metadata_of(rec)
            meta = v.apply_metadata(old_meta, fields or {})
            body = rec[9] if content is None else content
            if body == rec[9] and meta == old_meta:
                return {"status": "OK", "changed": False, "message": self._message(rec)}
            revision = rec[3] + 1
            updated_at = max(_now_ms(), rec[2])
            new = (ulid, rec[1], updated_at, revision, rec[4], meta.kind, meta.tier,
                   meta.importance, rec[8], body, meta.tool_call_id, meta.summary, meta.tags,
                   meta.relations, meta.sources)
            frame = codec.encode_record(codec.REC_MESSAGE, self._last_seq + 1,
                                        codec.encode_message(*new))

            def stage(offset: int) -> tuple[int, _Prepared, tuple[Any, Any, Any], dict[str, Any]]:
                prep = _prepare(new)
                # The old version's keys come from the record read above, not from the log again.
                old_keys = _field_keys(rec)
                answer = {"status": "OK", "changed": True, "message": self._message(new)}
                new_doc = self._add_doc(new, offset, len(frame), slot,
                                        int(self._slot_session.data[slot]), prep)
                return new_doc, prep, old_keys, answer

            _, (new_doc, _, old_keys, answer) = self._append_overlapped(
                frame, stage, lambda staged: self._unstage(staged[0], staged[1]))
            self._commit_version(new, slot, new_doc, len(frame), old_keys)
            self._after_write()
            return answer

    def delete_message(self, *, message_id: Any = None, session_id: Any = None) -> dict[str, Any]:
        ulid = v.ulid("message_id", message_id)
        guard = None
        if session_id is not None:
            guard = v.string("session_id", session_id, min_bytes=1, max_bytes=v.MAX_SESSION_BYTES)
        with self._mutex:
            self._check_open()
            slot = self._ids.get(ulid)
            if slot is None or int(self._slot_doc.data[slot]) < 0:
                return {"status": "NOT_FOUND"}
            if guard is not None:
                name = self._sessions.by_num[int(self._slot_session.data[slot])].name
                if name != guard:
                    return {"status": "NOT_FOUND"}
            doc = int(self._slot_doc.data[slot])
            frame = codec.encode_record(codec.REC_DELETE, self._last_seq + 1,
                                        codec.encode_delete(ulid))
            _, old_keys = self._append_overlapped(frame, lambda offset: self._index_keys(doc))
            self._apply_delete(ulid, old_keys)
            self._after_write()
            return {"status": "OK"}

    # -- read_messages -------------------------------------------------------------------
    def read_messages(self, *, view: Any = None, limit: Any = None, cursor: Any = None,
                      session_id: Any = None, message_id: Any = None, content_offset: Any = None,
                      content_limit: Any = None, expected_revision: Any = None, before: Any = None,
                      after: Any = None, relation_depth: Any = None,
                      relation_types_json: Any = None) -> dict[str, Any]:
        view = v.choice("view", view, v.VIEWS, default="history")
        lim = v.integer("limit", limit, lo=1, hi=1000, default=100)
        if view == "history":
            name = v.string("session_id", session_id, min_bytes=1, max_bytes=v.MAX_SESSION_BYTES)
            with self._mutex:
                self._check_open()
                return self._history(name, lim, cursor)
        if view == "sessions":
            with self._mutex:
                self._check_open()
                return self._session_list(lim, cursor)
        ulid = v.ulid("message_id", message_id)
        if view == "content":
            off = v.integer("content_offset", content_offset, lo=0, hi=None, default=0)
            clim = v.integer("content_limit", content_limit, lo=1, hi=65536, default=4096)
            expected = v.integer("expected_revision", expected_revision, lo=1, hi=None, default=None)
            with self._mutex:
                self._check_open()
                return self._content_range(ulid, off, clim, expected)
        nb = v.integer("before", before, lo=0, hi=10, default=1)
        na = v.integer("after", after, lo=0, hi=10, default=1)
        depth = v.integer("relation_depth", relation_depth, lo=0, hi=2, default=1)
        types = v.relation_types(relation_types_json)
        with self._mutex:
            self._check_open()
            return self._context(ulid, nb, na, depth, types)

    def _history(self, name: str, limit: int, cursor: Any) -> dict[str, Any]:
        scope = hashlib.sha256(name.encode("utf-8")).digest()[:8]
        s = self._sessions.get(name)
        start = 0
        if cursor is not None:
            raw = self._open_cursor(cursor, b"H")
            if len(raw) != 32 or raw[:8] != scope:
                raise v.fail("cursor does not belong to this session's history")
            (ts,) = struct.unpack("<q", raw[8:16])
            if s is not None:
                start = self._sessions.after(s, ts, raw[16:32])
        out: list[dict[str, Any]] = []
        result: dict[str, Any] = {"history": out}
        if s is None:
            return result
        budget = _Budget()
        i = start
        while i < s.n and len(out) < limit:
            msg = self._message_of_slot(int(s.slots[i]))
            if not budget.take(msg):
                break
            out.append(msg)
            i += 1
        if i < s.n and out:
            last_slot = int(s.slots[i - 1])
            payload = b"H" + scope + struct.pack("<q", int(s.ts[i - 1])) + self._ulid_of(last_slot)
            result["nextCursor"] = self._make_cursor(payload)
        return result

    def _session_list(self, limit: int, cursor: Any) -> dict[str, Any]:
        order = self._sessions.ordered()
        start = 0
        if cursor is not None:
            raw = self._open_cursor(cursor, b"S")
            if len(raw) < 8:
                raise v.fail("cursor is not valid for this request")
            (started,) = struct.unpack("<q", raw[:8])
            start = bisect.bisect_right(order, (started, raw[8:], 1 << 62))
        out: list[dict[str, Any]] = []
        budget = _Budget()
        i = start
        while i < len(order) and len(out) < limit:
            s = self._sessions.by_num[order[i][2]]
            item = {
                "session_id": s.name,
                "message_count": s.n,
                "kind_counts": dict(zip(v.KINDS, s.kind_counts)),
                "representative_summary": self._representative(s),
                "started_at": s.started_at,
                "last_message_at": s.last_message_at,
            }
            if not budget.take(item):
                break
            out.append(item)
            i += 1
        result: dict[str, Any] = {"sessions": out}
        if i < len(order) and out:
            started, name_bytes, _ = order[i - 1]
            result["nextCursor"] = self._make_cursor(b"S" + struct.pack("<q", started) + name_bytes)
        return result

    def _representative(self, s) -> str:
        """The latest summary in the session, else the latest message's full content."""
        flags = self._doc_flags.data
        slot_doc = self._slot_doc.data
        for i in range(s.n - 1, -1, -1):
            doc = int(slot_doc[int(s.slots[i])])
            if flags[doc] & FLAG_HAS_SUMMARY:
                return self._record(doc)[11]
        return self._record(int(slot_doc[int(s.slots[s.n - 1])]))[9]

    def _content_range(self, ulid: bytes, off: int, limit: int, expected: int | None) -> dict[str, Any]:
        _, doc = self._live_doc(ulid)

        def content_bytes(data: bytes, poff: int, plen: int) -> tuple[int, bytes]:
            start, length = codec.message_content_span(data, poff, plen)
            return _REVISION.unpack_from(data, poff + 32)[0], data[start:start + length]

        revision, data = self._read_doc(doc, content_bytes)
        if expected is not None and expected != revision:
            raise ConvMemError(CONFLICT, "expected_revision does not match the current revision")
        total = len(data)
        if off > total:
            raise v.fail("content_offset is past the end of the content")
        if off < total and (data[off] & 0xC0) == 0x80:
            raise v.fail("content_offset is not on a UTF-8 code point boundary")
        end = min(off + limit, total)
        while end < total and end > off and (data[end] & 0xC0) == 0x80:
            end -= 1
        if end == off and off < total:
            # The limit is smaller than one code point: return that code point whole.
            lead = data[off]
            end = off + (1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4)
        return {
            "content_range": {
                "message_id": v.ulid_str(ulid),
                "revision": revision,
                "total_bytes": total,
                "content_offset": off,
                "next_content_offset": end,
                "complete": end == total,
                "content": data[off:end].decode("utf-8"),
            }
        }

    def _neighbours(self, slot: int, nb: int, na: int) -> tuple[list[int], list[int], Any]:
        num = int(self._slot_session.data[slot])
        s = self._sessions.by_num[num]
        i = self._sessions.index_of(s, int(self._slot_ts.data[slot]), slot, self._ulid_of(slot))
        before = [int(x) for x in s.slots[max(0, i - nb):i]]
        after = [int(x) for x in s.slots[i + 1:min(s.n, i + 1 + na)]]
        return before, after, s

    def _context(self, ulid: bytes, nb: int, na: int, depth: int, types: int) -> dict[str, Any]:
        slot, doc = self._live_doc(ulid)
        rec = self._record(doc)
        before, after, s = self._neighbours(slot, nb, na)
        count = 1
        truncated = False
        used = len(orjson.dumps(self._message(rec)))

        def take(msg: dict[str, Any] | None) -> bool:
            nonlocal count, used, truncated
            size = len(orjson.dumps(msg)) + 1 if msg is not None else 80
            if count >= CONTEXT_MESSAGE_CAP or used + size > RESPONSE_BUDGET:
                truncated = True
                return False
            count += 1
            used += size
            return True

        before_msgs: list[dict[str, Any]] = []
        after_msgs: list[dict[str, Any]] = []
        for sl in before:
            m = self._message_of_slot(sl)
            if take(m):
                before_msgs.append(m)
        for sl in after:
            m = self._message_of_slot(sl)
            if take(m):
                after_msgs.append(m)
        relations: list[dict[str, Any]] = []
        if depth >= 1 and not truncated:
            self._walk_relations(slot, rec, depth, types, relations, take)
        return {
            "message": self._message(rec),
            "chronological_context": {"before": before_msgs, "after": after_msgs},
            "relations": relations,
            "session": {"session_id": s.name, "message_count": s.n},
            "truncated": truncated,
        }

    def _walk_relations(self, slot: int, rec: Record, depth: int, types: int,
                        out: list[dict[str, Any]], take) -> None:
        """Breadth-first: depth 1 outgoing then incoming, then depth 2 in the same directions."""
        me = rec[0]
        seen: set[tuple[str, int, bytes]] = set()
        # frontier entries: (direction, record of the message whose edges we follow)
        frontier: list[tuple[str, Record]] = [("outgoing", rec), ("incoming", rec)]
        for d in range(1, depth + 1):
            next_frontier: list[tuple[str, Record]] = []
            for direction, src in frontier:
                if direction == "outgoing":
                    edges = [(t, u) for t, u in src[13]]
                else:
                    incoming = sorted(self._relations.incoming_of(src[0]), key=lambda e: e[1])
                    edges = [(t, self._ulid_of(slot)) for t, slot in incoming]
                for rtype, other in edges:
                    if not (types >> rtype) & 1 or other == me:
                        continue
                    key = (direction, rtype, other)
                    if key in seen:
                        continue
                    seen.add(key)
                    oslot = self._ids.get(other)
                    odoc = int(self._slot_doc.data[oslot]) if oslot is not None else -1
                    entry: dict[str, Any] = {"type": v.RELATION_TYPES[rtype],
                                             "direction": direction, "depth": d}
                    if odoc < 0:
                        entry["message_id"] = v.ulid_str(other)
                        entry["status"] = "deleted"
                        if not take(None):
                            return
                        out.append(entry)
                        continue
                    orec = self._record(odoc)
                    msg = self._message(orec)
                    if not take(msg):
                        return
                    entry["message"] = msg
                    out.append(entry)
                    next_frontier.append((direction, orec))
            frontier = next_frontier

    # -- search ----------------------------------------------------------------------------
    def search_messages(self, *, query: Any = None, session_id: Any = None,
                        filters_json: Any = None, min_importance: Any = None,
                        context_size: Any = None, limit: Any = None) -> dict[str, Any]:
        q = v.string("query", query, min_bytes=1, max_bytes=v.MAX_QUERY_BYTES)
        name = None
        if session_id is not None:
            name = v.string("session_id", session_id, min_bytes=1, max_bytes=v.MAX_SESSION_BYTES)
        flt = v.filters(filters_json)
        min_imp = v.integer("min_importance", min_importance, lo=0, hi=100, default=0)
        ctx = v.integer("context_size", context_size, lo=0, hi=3, default=0)
        lim = v.integer("limit", limit, lo=1, hi=100, default=20)
        keys = tok.token_keys(q)
        tag_hashes = _tag_hashes(flt.tags)
        results: list[dict[str, Any]] = []
        with self._mutex:
            self._check_open()
            session_num = -1
            session_docs = None
            if name is not None:
                s = self._sessions.get(name)
                if s is None or s.n == 0:
                    return {"results": results}
                session_num = s.num
                if s.n <= _SESSION_DOCS_MAX:
                    # The index may score just these instead of scanning postings for them.
                    session_docs = self._slot_doc.data[s.slots[:s.n]]
                    session_docs = np.sort(session_docs[session_docs >= 0])
            if len(keys) == 0:
                return {"results": results}
            docs, scores, parts = self._index.search(
                keys, lim, session=session_num, kind_mask=flt.kind_mask, tier_mask=flt.tier_mask,
                min_importance=min_imp, tag_hashes=tag_hashes, session_docs=session_docs)
            budget = _Budget(results)
            offsets = self._doc_offset.data[docs].tolist()
            lengths = self._doc_len.data[docs].tolist()
            decode = codec.decode_message
            for i, (doc, score, (c, sm, tg)) in enumerate(zip(docs.tolist(), scores.tolist(),
                                                             parts.tolist())):
                rec = self._read_at(offsets[i], lengths[i], decode)
                item = self._message(rec)
                item["score"] = score
                item["score_breakdown"] = {"content": c, "summary": sm, "tags": tg}
                item["matched_fields"] = [f for f, x in (("content", c), ("summary", sm),
                                                         ("tags", tg)) if x > 0.0]
                item["relation_count"] = len(rec[13])
                if ctx > 0:
                    slot = int(self._doc_slot.data[doc])
                    before, after, _ = self._neighbours(slot, ctx, ctx)
                    item["context_preview"] = {
                        "before": [self._message_of_slot(sl) for sl in before],
                        "after": [self._message_of_slot(sl) for sl in after],
                    }
                bound = None if ctx > 0 else _json_bound(lengths[i])
                if not budget.take(item, bound):
                    break
                results.append(item)
        return {"results": results}

    # -- rebuild ---------------------------------------------------------------------------
    def rebuild_index(self) -> dict[str, Any]:
        with self._mutex:
            self._check_open()
            return self._rebuild()

    def _rebuild(self) -> dict[str, Any]:
        bytes_before = self._log.size
        records_before = self._count_records()
        live_slots = np.nonzero(self._slot_doc.view() >= 0)[0]
        n_live = len(live_slots)
        base = self._last_seq - n_live
        compact_path = self.directory / COMPACT_NAME
        snap_tmp = self.directory / NEXT_SNAPSHOT_NAME
        io = self._io
        new_ix, old_to_new = self._index.compacted()
        fd = -1
        try:
            log_id = os.urandom(16)
            fd = os.open(compact_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            header = codec.encode_log_header(log_id, base)
            write_all(fd, header, io)
            pos = len(header)
            doc_offset = np.zeros(n_live, dtype=np.int64)
            doc_len = np.zeros(n_live, dtype=np.uint32)
            pending: list[bytes] = []
            pending_size = 0
            last_off = -1
            updated = 0  # live versions with revision > 1: they stay update records
            for i, slot in enumerate(live_slots.tolist()):
                old_doc = int(self._slot_doc.data[slot])
                data = self._log.read(int(self._doc_offset.data[old_doc]), int(self._doc_len.data[old_doc]))
                try:
                    _, _, poff, plen, _ = codec.read_record(data, 0)
                except codec.CorruptRecord as exc:
                    raise ConvMemError(CORRUPT_STORE, "log record at byte offset "
                                       f"{int(self._doc_offset.data[old_doc]) + exc.offset} is damaged: {exc.reason}") from None
                if _REVISION.unpack_from(data, poff + 32)[0] > 1:
                    updated += 1
                frame = codec.encode_record(codec.REC_MESSAGE, base + i + 1, data[poff:poff + plen])
                new_doc = int(old_to_new[old_doc])
                doc_offset[new_doc] = pos
                doc_len[new_doc] = len(frame)
                last_off = pos
                pos += len(frame)
                pending.append(frame)
                pending_size += len(frame)
                if pending_size >= 1 << 20:
                    write_all(fd, b"".join(pending), io)
                    pending, pending_size = [], 0
            if pending:
                write_all(fd, b"".join(pending), io)
            os.fsync(fd)
            io.flush_calls += 1
            meta, arrays = self._compacted_state(live_slots, old_to_new, new_ix, doc_offset, doc_len)
            meta.update(log_id=log_id.hex(), covered_end=pos, last_seq=self._last_seq,
                        last_record_offset=last_off, update_records=updated, deleted_messages=0,
                        live_bytes=int(doc_len.sum()))
            # The new snapshot waits under its own name; the two renames come after.
            write_snapshot(snap_tmp, meta, arrays, io)
        except OSError as exc:
            if fd >= 0:
                os.close(fd)
            for p in (compact_path, snap_tmp):
                try:
                    p.unlink()
                except FileNotFoundError:
                    pass
            self.last_error = f"IO_ERROR: rebuild failed: {exc.strerror or exc}"
            raise ConvMemError(IO_ERROR, "rebuild_index failed; the store is unchanged") from exc
        except BaseException:
            if fd >= 0:
                os.close(fd)
            try:
                compact_path.unlink()
            except FileNotFoundError:
                pass
            raise
        # Switch: the log first (a crash now leaves the new log and a stale snapshot, which is
        # detected by log_id and rebuilt from the new log), then the snapshot.
        os.replace(compact_path, self.directory / LOG_NAME)
        io.replace_calls += 1
        fsync_dir(self.directory, io)
        os.replace(snap_tmp, self.directory / SNAPSHOT_NAME)
        io.replace_calls += 1
        fsync_dir(self.directory, io)
        self._log.close()
        self._log = LogFile(self.directory / LOG_NAME, fd, log_id, base, pos, io)
        self._load_state(meta, arrays)
        self._records_since_snapshot = 0
        self.last_error = ""
        records_after = n_live
        return {
            "status": "OK",
            "messages_indexed": n_live,
            "records_removed": records_before - records_after,
            "bytes_before": bytes_before,
            "bytes_after": pos,
        }

    def _count_records(self) -> int:
        return self._index.n_docs + self._deleted_messages

    def _compacted_state(self, live_slots: np.ndarray, old_to_new: np.ndarray, new_ix,
                         doc_offset: np.ndarray, doc_len: np.ndarray):
        """The snapshot state of the store after compaction (live messages only)."""
        n = len(live_slots)
        slot_map = np.full(self._slot_doc.n, -1, dtype=np.int64)
        slot_map[live_slots] = np.arange(n)
        old_docs = self._slot_doc.data[live_slots].astype(np.int64)
        new_docs = old_to_new[old_docs]
        doc_slot = np.zeros(n, dtype=np.int32)
        doc_slot[new_docs] = np.arange(n, dtype=np.int32)
        doc_kind = np.zeros(n, dtype=np.uint8)
        doc_kind[new_docs] = self._doc_kind.data[old_docs]
        doc_flags = np.zeros(n, dtype=np.uint8)
        doc_flags[new_docs] = self._doc_flags.data[old_docs]
        # Sessions without live messages are dropped (their ids belong to deleted messages);
        # the others are renumbered densely, in the index's doc columns too.
        sessions = [s for s in self._sessions.by_num if s.n]
        session_map = np.full(max(1, len(self._sessions.by_num)), -1, dtype=np.int64)
        for i, s in enumerate(sessions):
            session_map[s.num] = i
        meta = self._common_meta(sessions)
        arrays = {
            "slot_ulid": self._ids.keys_array()[live_slots],
            "slot_doc": new_docs.astype(np.int32),
            "slot_session": session_map[self._slot_session.data[live_slots]].astype(np.int32),
            "slot_ts": self._slot_ts.data[live_slots],
            "doc_offset": doc_offset,
            "doc_len": doc_len,
            "doc_slot": doc_slot,
            "doc_kind": doc_kind,
            "doc_flags": doc_flags,
            **_history_arrays(sessions, slot_map),
            **self._relations.arrays(slot_map),
        }
        new_ix.merge_segments()
        for name, arr in new_ix.to_arrays().items():
            if name == "doc_session":
                arr = session_map[arr].astype(arr.dtype)
            arrays["ix." + name] = arr
        return meta, arrays

    # -- health ----------------------------------------------------------------------------
    def get_system_health(self) -> dict[str, Any]:
        with self._mutex:
            self._check_open()
            ix = self._index.nbytes()
            entries = (self._slot_doc.nbytes + self._slot_session.nbytes
                       + self._slot_ts.nbytes + self._doc_offset.nbytes + self._doc_len.nbytes
                       + self._doc_slot.nbytes + self._doc_kind.nbytes + self._doc_flags.nbytes
                       + self._ids.nbytes)
            mem = {
                "store_entries_bytes": entries,
                "body_bytes": 0,
                "metadata_bytes": ix.get("doc_columns", 0),
                "search_index_bytes": ix.get("postings", 0) + ix.get("terms", 0) + ix.get("scratch", 0),
                "history_index_bytes": self._sessions.nbytes(),
                "relation_index_bytes": self._relations.nbytes(),
            }
            return {
                "status": "DEGRADED" if self.last_error else "OK",
                "format_version": codec.FORMAT_VERSION,
                "log_size": self._log.size,
                "snapshot_size": snapshot_size(self.directory / SNAPSHOT_NAME),
                "active_messages": self._index.n_live,
                "session_count": self._sessions.live_sessions,
                "deleted_messages": self._deleted_messages,
                "last_sequence": self._last_seq,
                "update_records": self._update_records,
                "dead_bytes": self._log.size - codec.LOG_HEADER_SIZE - self._live_bytes,
                "memory_estimate": {"total_bytes": sum(mem.values()), **mem},
                "io": self._io.as_dict(),
                "recovered_tail": self.recovered_tail,
                "snapshot_valid": self.snapshot_valid,
                "last_error": self.last_error,
            }

    def _check_open(self) -> None:
        if self._log is None:
            raise ConvMemError(INTERNAL_ERROR, "the store is closed")

    # -- bulk import / export ----------------------------------------------------------------
    def import_messages(self, items: Iterable[dict[str, Any]], *, batch_size: int = 1000) -> int:
        """Import dicts in groups of `batch_size`, one fdatasync per group; returns the count.

        The first invalid item raises its ConvMemError (items of earlier groups stay imported).
        """
        total = 0
        batch: list[dict[str, Any]] = []
        for item in items:
            batch.append(item)
            if len(batch) >= batch_size:
                total += self._import_strict(batch)
                batch = []
        if batch:
            total += self._import_strict(batch)
        self.checkpoint()
        return total

    def _import_strict(self, batch: list[dict[str, Any]]) -> int:
        errors = self.import_message_batch(batch, all_or_nothing=True)
        for err in errors:
            if err is not None:
                raise err
        return len(batch)

    def import_message_batch(self, items: list[dict[str, Any]], *,
                             all_or_nothing: bool = False) -> list[ConvMemError | None]:
        """Validate and append a group with one write and one fdatasync.

        Returns one entry per item: None when imported, else its error. Invalid items are
        skipped (or, with all_or_nothing, nothing is written when any item is invalid).
        """
        results: list[ConvMemError | None] = []
        with self._mutex:
            self._check_open()
            prepared = []
            seen: set[bytes] = set()
            for item in items:
                try:
                    rec = self._prepare_import(item)
                    if rec[0] in self._ids or rec[0] in seen:
                        raise ConvMemError(CONFLICT, "message_id already exists")
                    seen.add(rec[0])
                    prepared.append(rec)
                    results.append(None)
                except ConvMemError as exc:
                    results.append(exc)
            if not prepared or (all_or_nothing and len(prepared) != len(items)):
                return results
            encode_message, encode_record, rtype = codec.encode_message, codec.encode_record, codec.REC_MESSAGE
            seq = self._last_seq
            frames = [encode_record(rtype, seq + i, encode_message(*rec))
                      for i, rec in enumerate(prepared, start=1)]
            offsets = self._append(frames)
            self._last_seq = seq + len(frames)
            self._last_record_offset = offsets[-1]
            self._apply_new_batch(prepared, offsets, [len(f) for f in frames])
            self._after_write()
        return results

    def _apply_new_batch(self, recs: list[Record], offsets: list[int], lengths: list[int]) -> None:
        """Apply appended records of new messages (ids checked unused) as _apply_message would
        one by one, with each column extended once for the batch."""
        index, ids, sessions, relations = self._index, self._ids, self._sessions, self._relations
        by_name, by_num = sessions.by_name, sessions.by_num
        doc0 = index.n_docs
        slot0 = len(ids)
        token_keys = tok.token_keys
        nums: list[int] = []
        flags: list[int] = []
        # tags -> (their keys as _field_keys gives them, their hashes): a batch
        # repeats a few tag lists (the index copies what add gets, so sharing arrays is safe)
        by_tags: dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]] = {}
        try:
            for doc, rec in enumerate(recs, start=doc0):
                ulid, ts, kind, summary, tags = rec[0], rec[1], rec[5], rec[11], rec[12]
                s = by_name.get(rec[8])
                num = s.num if s is not None else len(by_num)
                if tags:
                    tagged = by_tags.get(tuple(tags))
                    if tagged is None:
                        tagged = by_tags[tuple(tags)] = (_tag_keys(tags), _tag_hashes(tags))
                else:
                    tagged = (_EMPTY_KEYS, _EMPTY_KEYS)
                index.add(doc, token_keys(rec[9]), token_keys(summary) if summary else _EMPTY_KEYS,
                          *tagged, num, kind, rec[6], rec[7], ts, ulid)
                slot = ids.add(ulid)
                if s is None:
                    sessions.number(rec[8])
                sessions.insert(num, ts, slot, ulid, kind)
                if rec[13]:
                    relations.add_new(slot, rec[13])
                nums.append(num)
                flags.append(_doc_flags(rec))
        finally:
            # The columns of the records applied (all of them unless one raised).
            n = len(nums)
            self._doc_offset.extend(offsets[:n])
            self._doc_len.extend(lengths[:n])
            self._doc_slot.extend(range(slot0, slot0 + n))
            self._doc_kind.extend([rec[5] for rec in recs[:n]])
            self._doc_flags.extend(flags)
            self._slot_doc.extend(range(doc0, doc0 + n))
            self._slot_session.extend(nums)
            self._slot_ts.extend([rec[1] for rec in recs[:n]])
            self._live_bytes += sum(lengths[:n])
            self._update_records += sum(1 for rec in recs[:n] if rec[3] > 1)
            self._records_since_snapshot += n

    def _prepare_import(self, item: Any) -> Record:
        if not isinstance(item, dict):
            raise v.fail("each imported item must be a JSON object")
        if not v.IMPORT_FIELDS.issuperset(item):
            raise v.fail(f"unknown field; allowed fields are {', '.join(sorted(v.IMPORT_FIELDS))}")
        get = item.get
        session = v.string("session_id", get("session_id"), min_bytes=1, max_bytes=v.MAX_SESSION_BYTES)
        role_i = v.role(get("role"))
        body = v.string("content", get("content"), min_bytes=1, max_bytes=v.MAX_CONTENT_BYTES)
        raw_meta = get("metadata")
        fields = {} if raw_meta is None else v.metadata_fields(raw_meta, "metadata")
        meta = v.apply_metadata(None, fields)
        ts = v.integer("timestamp", get("timestamp"), lo=0, hi=_MAX_MS, default=None)
        message_id = get("message_id")
        if message_id is not None:
            ulid = v.ulid("message_id", message_id)
            if ts is None:
                ts = int.from_bytes(ulid[:6], "big")
        else:
            ulid, now = self._new_ulid()
            ts = now if ts is None else ts
        revision = v.integer("revision", get("revision"), lo=1, hi=(1 << 32) - 1, default=1)
        updated = v.integer("updated_at", get("updated_at"), lo=0, hi=_MAX_MS, default=ts)
        return (ulid, ts, updated, revision, role_i, meta.kind, meta.tier, meta.importance,
                session, body, meta.tool_call_id, meta.summary, meta.tags, meta.relations,
                meta.sources)

    def export_messages(self, session_id: str | None = None) -> Iterator[dict[str, Any]]:
        """Live messages as import dicts, session by session (by start time), in history order."""
        with self._mutex:
            self._check_open()
            if session_id is not None:
                s = self._sessions.get(session_id)
                nums = [s.num] if s is not None and s.n else []
            else:
                nums = [num for _, _, num in self._sessions.ordered()]
            slots = [int(x) for num in nums for x in
                     self._sessions.by_num[num].slots[: self._sessions.by_num[num].n]]
        for slot in slots:
            with self._mutex:
                doc = int(self._slot_doc.data[slot])
                if doc < 0:
                    continue
                m = self._message(self._record(doc))
            yield {
                "message_id": m["message_id"],
                "session_id": m["session_id"],
                "timestamp": m["timestamp"],
                "role": m["role"],
                "content": m["content"],
                "metadata": m["metadata"],
                "revision": m["revision"],
                "updated_at": m["updated_at"],
            }
