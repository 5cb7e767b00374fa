"""MemoryStore: the library face of convmem, one method per MCP tool.

Each tool method takes the tool's arguments as keyword arguments, returns the dict that the tool's
JSON text holds, and raises ConvMemError for application errors. All calls are serialised by one
lock. A write is acknowledged only once its record has been fdatasync'ed; its in-memory work runs
while the flush does (on the flusher thread) and is committed after it (docs/DESIGN.md).

This module owns the lifecycle (open, recovery, close), the write protocol, the snapshot cadence
and health; the state is the Catalog's, the views are in views.py, recovery and compaction in
store/.
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from .. import validation as v
from .._core import codec
from ..catalog.catalog import Catalog
from ..catalog.docs import (R_CONTENT, R_REVISION, R_ROLE, R_SESSION_ID, R_TIMESTAMP,
                            R_ULID, R_UPDATED_AT, Prepared, Record, field_keys, prepare)
from ..domain import MAX_CONTENT_BYTES, MAX_REVISION, MAX_SESSION_BYTES
from ..errors import CONFLICT, INTERNAL_ERROR, IO_ERROR, ConvMemError
from ..ids import UlidClock, now_ms
from ..store import compaction, recovery
from ..store.cursor_key import CURSOR_KEY_NAME, load_cursor_key
from ..store.io import IoCounters, prepare_data_dir
from ..store.lock import DirLock
from ..store.logfile import LOG_NAME, LogFile
from ..store.records import read_message_at
from ..store.snapshot import SNAPSHOT_NAME, snapshot_size
from ..store.spill import SpillFile, SpilledDataChanged
from . import bulk, gc_pause, heap, search, snapshots, views
from .maintenance import MaintenanceTools
from .trash import TrashTools
from .guards import Applying, IndexRebuilt, StoreMutex, is_index_damage, once_more
from .paging import Cursors
from .recall import RecallTools
from .records import RecordReader, message, metadata_of, new_record
from ..wording import counted
from ..typed import (DeleteAnswer, HealthAnswer, ImportItem, ImportOutcome, MetadataInput,
                    Order, ReadAnswer, RebuildAnswer, Role, SearchAnswer, UpdateAnswer, View,
                    WriteAnswer)

log = logging.getLogger("convmem")

# Half-written files of an interrupted snapshot, rebuild_index or key write, removed at open.
LEFTOVER_NAMES = (compaction.COMPACT_NAME, compaction.NEXT_SNAPSHOT_NAME,
                  compaction.NEXT_SNAPSHOT_NAME + ".tmp", SNAPSHOT_NAME + ".tmp",
                  CURSOR_KEY_NAME + ".tmp")
_T = TypeVar("_T")
# Segments the index merges at once during a bulk import (SearchIndex.merge_factor; 2 otherwise):
# each posting is rewritten fewer times, and the import's checkpoint merges them into one.
IMPORT_MERGE_FACTOR = 8


class MemoryStore(RecallTools, TrashTools, MaintenanceTools):
    """A conversation-memory store in one data directory (see docs/DESIGN.md); the recall
    toolset's methods are RecallTools's (api/recall.py), the trash's (list_deleted,
    restore_message) TrashTools's (api/trash.py), verify, backup and export_messages
    MaintenanceTools's (api/maintenance.py)."""

    # -- lifecycle -----------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str], *, lock_note: str = "",
             read_only: bool = False) -> "MemoryStore":
        return cls(Path(path), lock_note=lock_note, read_only=read_only)

    def __init__(self, directory: Path, *, lock_note: str = "", read_only: bool = False) -> None:
        """`read_only`: for a store on read-only media or in a directory this user may not write
        (a backup): nothing is created, written, truncated or renamed; every write tool answers
        IO_ERROR; a torn tail is left in place and not served."""
        self._mutex = StoreMutex(self._settle_indexing)
        self.directory = directory
        self.read_only = read_only
        if read_only:
            self._dirlock = DirLock.shared(directory)
        else:
            prepare_data_dir(directory)
            self._dirlock = DirLock(directory, lock_note)
        started = time.perf_counter()
        try:
            with self._mutex:  # a background verifier started by _open waits for it to finish
                self._open()
        except BaseException:
            self._dirlock.release()
            raise
        log.info("opened %s%s in %.0f ms: %s in %s, log %d bytes", directory,
                 " read-only" if read_only else "", (time.perf_counter() - started) * 1000,
                 counted(self._catalog.index.n_live, "message"),
                 counted(self._catalog.sessions.live_sessions, "session"), self._log.size)

    def __enter__(self) -> "MemoryStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._verifier is not None:
            # (not begun yet: nothing to wait for; the snapshot below checks the sections it
            # would copy, _sections_checked)
            self._verifier.cancel()
            self._verifier.join()
            self._verifier = None
        with self._mutex:
            if self._log is None:
                return
            try:
                self._wait_snapshot()
                if self._catalog.unsaved_records:
                    self._write_snapshot()
            except ConvMemError as exc:
                log.warning("snapshot at close failed: %s", exc.message)
            finally:
                base = self._log.base_sequence
                self._log.close()
                self._log = None  # type: ignore[assignment]
                self._dirlock.release()
                # An empty catalog in place of the state: the store and its catalog refer to
                # each other (the catalog reads records back through the store), so the
                # snapshot's map would otherwise stay until the cyclic collector ran.
                self._set_catalog(self._empty_catalog(base))

    def checkpoint(self) -> None:
        """Write a snapshot now (after a bulk import, so that the next open replays nothing)."""
        with self._mutex:
            self._check_open()
            self._wait_snapshot()
            if self._catalog.unsaved_records:
                self._write_snapshot()

    @contextlib.contextmanager
    def deferring_snapshots(self) -> Iterator[None]:
        """No periodic snapshot while the block runs (a bulk import: from empty, snapshots every
        quarter of the store write the whole state about five times over); the log holds every
        record, so nothing acknowledged depends on them. After it, one is due as usual. The
        cyclic garbage collector is paused meanwhile too (gc_pause.py)."""
        with self._mutex:
            self._defer_snapshots += 1
            if self._defer_snapshots == 1:
                self._catalog.index.merge_factor = IMPORT_MERGE_FACTOR
        try:
            with gc_pause.paused():
                yield
            with self._mutex.raw:  # (the last batch's indexing: its failure is the import's)
                self._settle_indexing(raise_failure=True)
        finally:
            with self._mutex:
                self._defer_snapshots -= 1
                outermost = not self._defer_snapshots
                if outermost:
                    self._catalog.index.merge_factor = 2
                if outermost and self._log is not None:
                    self._after_write()
        if outermost:  # (outside the lock: the batches' buffers are free now)
            heap.give_back()

    def _open(self) -> None:
        self._verifier: recovery.Verification | None = None
        self._io = IoCounters()
        self._findings = recovery.Findings()
        self._generation = 0  # bumped whenever slot numbers change (rebuild, reload)
        self._cadence = snapshots.Cadence()
        self._defer_snapshots = 0  # (deferring_snapshots blocks running)
        self._snapshot_job: snapshots.SnapshotJob | None = None  # a periodic snapshot being written
        self._spill_trusted = True  # (until its file gives back bytes it was not given)
        if not self.read_only:
            for leftover in LEFTOVER_NAMES:
                compaction.remove_quietly(self.directory / leftover)
        self._cursors = Cursors(load_cursor_key(self.directory, self._io, create=not self.read_only))
        log_path = self.directory / LOG_NAME
        had_log = log_path.exists() and log_path.stat().st_size > 0
        self._log = LogFile.open(log_path, self._io, read_only=self.read_only)
        if not had_log and snapshot_size(self.directory / SNAPSHOT_NAME) > 0:
            # A snapshot without its log: the log was lost or emptied; what it held is gone.
            self._findings.last_error = ("CORRUPT_STORE: the log was missing or empty beside an "
                                         "existing snapshot; the store starts empty")
            log.error("%s", self._findings.last_error)
        self._clock = UlidClock()
        self._set_catalog(self._empty_catalog())
        start = codec.LOG_HEADER_SIZE
        loaded = recovery.load_snapshot(self.directory, self._log, self._read_record,
                                        self._findings)
        if loaded is not None:
            catalog, start, meta = loaded
            unchecked = recovery.Unchecked(self._findings.deferred)
            self._findings.deferred = []
            self._set_catalog(catalog, unchecked)
            self._clock = UlidClock.from_meta(meta.get("ulid_last"))
            self._verify_covered(start, unchecked)
        replayed = recovery.replay(self._log, self._catalog, start, self._findings)
        log.debug("%s: %s, %d log records replayed after it", self.directory,
                  "snapshot loaded" if loaded is not None else "no usable snapshot", replayed)
        cat = self._catalog
        cat.unsaved_records = 0
        if replayed or loaded is None and self._log.size > codec.LOG_HEADER_SIZE:
            cat.unsaved_records = max(replayed, 1)
        if cat.unsaved_records >= 1 and (loaded is None or replayed >= 1000):
            # The snapshot is an optimisation: on a full disk the store opens without it (reads
            # work; writes fail with IO_ERROR until there is room) and tries again later.
            self._try_snapshot("snapshot at open")

    def _empty_catalog(self, base_sequence: int | None = None) -> Catalog:
        """A catalog holding nothing, for the log now open (or one whose base_sequence is given:
        close's, once its log is closed)."""
        if base_sequence is None:
            base_sequence = self._log.base_sequence
        return Catalog(self._read_record, base_sequence)

    def _set_catalog(self, catalog: Catalog, unchecked: recovery.Unchecked | None = None) -> None:
        """Serve `catalog`; `unchecked`: the sections of the snapshot it was loaded from whose
        check is still to come (nothing copies them before it, _sections_checked)."""
        self._catalog = catalog
        self._unchecked = unchecked
        self._reader = RecordReader(self._log, catalog)
        self._generation = getattr(self, "_generation", 0) + 1

    def _read_record(self, offset: int, length: int) -> Record:
        """The catalog's way back to a version's record (in the log the store has now)."""
        return read_message_at(self._log, offset, length, codec.decode_message)

    def _verify_covered(self, end: int, unchecked: recovery.Unchecked) -> None:
        generation = self._generation

        def apply(bad: str | None, damage: list[recovery.Damage]) -> None:
            if bad is not None:
                self._reload_from_log(f"snapshot section {bad!r} is damaged; state rebuilt from the log")
                return
            for start, stop, reason in damage:
                self._findings.damage(start, reason, stop - start)
                self._catalog.drop_damaged(start, stop)

        self._verifier = recovery.verify_covered(
            self._log, end, unchecked, apply, self._mutex,
            lambda: self._log is not None and self._generation == generation)

    def _reload_from_log(self, why: str) -> None:
        self._findings.snapshot_rejected(why)
        self._set_catalog(self._empty_catalog())
        recovery.replay(self._log, self._catalog, codec.LOG_HEADER_SIZE, self._findings)
        self._try_snapshot("snapshot after reloading")

    def _settle_indexing(self, *, raise_failure: bool = False) -> None:
        """Wait for the batch a bulk import left indexing (guards.StoreMutex; the caller holds
        the lock). If its indexing failed, the state is rebuilt from the log, where the batch's
        records are durable, as when a write's in-memory work fails: the import sees the error
        (`raise_failure`), any other call goes on with the rebuilt state."""
        catalog = getattr(self, "_catalog", None)
        if catalog is None or not catalog.indexing_pending:
            return
        try:
            catalog.settle()
        except Exception as exc:  # (KeyboardInterrupt in the wait passes; the batch stays pending)
            self.last_error = f"INTERNAL_ERROR: indexing an import batch failed ({exc})"
            if is_index_damage(exc):
                self._index_damaged(exc)
            else:
                self._rebuild_state(f"indexing an import batch failed ({type(exc).__name__})")
            if raise_failure:
                raise

    def _index_damaged(self, exc: ValueError) -> None:
        # (a mapped snapshot's list that failed its check, or a merge that failed after giving
        # back its inputs' memory: postings._merge)
        self._reload_from_log(f"CORRUPT_STORE: the search index is damaged ({exc}); "
                              "state rebuilt from the log")

    def _rebuild_state(self, why: str) -> None:
        """The in-memory state may have missed records that are durable in the log (applying
        them was interrupted): build it again from the snapshot and the log, as open does."""
        log.error("%s: rebuilding the in-memory state from the log", why)
        self._set_catalog(self._empty_catalog())
        start = codec.LOG_HEADER_SIZE
        # (every section checked now: no background pass follows to check deferred ones)
        loaded = recovery.load_snapshot(self.directory, self._log, self._read_record,
                                        recovery.Findings(), defer=False)
        if loaded is not None:
            catalog, start, _ = loaded
            self._set_catalog(catalog)
        replayed = recovery.replay(self._log, self._catalog, start, self._findings)
        self._catalog.unsaved_records = max(replayed, 1)

    def _applying(self, why: str, durable: bool = True) -> Applying:
        """Around the in-memory work that follows a durable append (see guards.Applying)."""
        return Applying(self, why, durable)

    # -- health state --------------------------------------------------------------------
    @property
    def last_error(self) -> str:
        return self._findings.last_error

    @last_error.setter
    def last_error(self, value: str) -> None:
        self._findings.last_error = value

    @property
    def recovered_tail(self) -> bool:
        return self._findings.recovered_tail

    @property
    def snapshot_valid(self) -> bool:
        return self._findings.snapshot_valid

    # -- snapshot ------------------------------------------------------------------------
    def _write_snapshot(self, background: bool = False) -> None:
        """Write a snapshot of the state now. The state is taken under the mutex (the caller
        holds it) as frozen sections (Catalog.snapshot_state); with `background`, they are
        checksummed and written by a thread of their own while writes go on (one at a time:
        a snapshot waits for the one before), else here. Either way the file is replaced
        atomically, so a crash leaves the old snapshot or the complete new one, and the new one
        describes exactly the state taken (covered_end, last_seq, last_record_offset)."""
        if self.read_only:
            return  # (replayed again at the next open)
        self._wait_snapshot()
        if not self._sections_checked(wait=not background):
            return  # (a later write tries again)
        index_sections = None
        # (in the foreground, a merged index's large posting data moves to a file first)
        spill = None
        if not background and self._spill_trusted:
            spill = SpillFile(self.directory, self._io)
        try:
            if background:  # (the index's sections are merged by the thread: freeze_state)
                meta, arrays, index_sections = self._catalog.freeze_state()
            else:
                meta, arrays = snapshots.foreground_state(self._catalog, spill)
        except ValueError as exc:
            if not is_index_damage(exc):
                raise
            self._index_damaged(exc)  # a new state from the log, snapshotted there
            return
        except (OverflowError, MemoryError) as exc:
            # A merge past the index's limits (4 GiB of postings in one segment field, see
            # docs/FORMAT.md "Limits") or out of memory: no snapshot now; the log has it all.
            raise self._snapshot_failed(exc, self._catalog.unsaved_records) from exc
        meta.update(self._log_meta(), covered_end=self._log.size)
        job = snapshots.SnapshotJob(self.directory / SNAPSHOT_NAME, meta, arrays, index_sections, self._io,
                           self._catalog, self._catalog.unsaved_records, self._log.log_id, spill)
        if background:
            self._snapshot_job = job
            job.start()
            return
        arrays = {}  # (the job's are gone once written; nothing else may hold the spilled data)
        job.run()
        self._snapshot_done(job)
        if spill is not None and spill.taken and job.error is None:
            snapshots.adopt_snapshot_postings(self.directory / SNAPSHOT_NAME, self._catalog.index)

    def _sections_checked(self, wait: bool) -> bool:
        """Whether the state may be copied into a new snapshot (a rebuild's and a backup's
        too): not while sections of the snapshot it was loaded from are unchecked (a copy would
        carry their damage on under fresh checksums, past every later check). With `wait`
        they are checked now; damage found then rebuilds the state from the log, a state with
        nothing unchecked (False: the caller's copy of the old state is not to be made)."""
        unchecked = self._unchecked
        if unchecked is None or unchecked.done():
            return True
        if not wait:
            return False
        bad = unchecked.check()
        if bad is None:
            return True
        # (a new state: the background pass, finding the same, applies nothing to it)
        self._reload_from_log(f"snapshot section {bad!r} is damaged; state rebuilt from the log")
        return False

    def _wait_snapshot(self) -> None:
        """Wait for a background snapshot (the caller holds the mutex; the thread never takes
        it) and take its outcome; a failure is last_error, as for one written here."""
        job = self._snapshot_job
        if job is None:
            return
        job.join()
        self._snapshot_job = None
        try:
            self._snapshot_done(job)
        except ConvMemError as exc:
            log.warning("periodic snapshot failed: %s", exc.message)

    def _reap_snapshot(self) -> None:
        """Take the outcome of a background snapshot that has finished (under the mutex)."""
        job = self._snapshot_job
        if job is not None and job.finished():
            self._wait_snapshot()

    def _snapshot_failed(self, exc: BaseException, records: int) -> ConvMemError:
        """Report a failed snapshot in health and back off (from `records` unsaved)."""
        self.last_error, error = snapshots.failure(exc)
        self._cadence.failed(records)
        return error

    def _snapshot_done(self, job: snapshots.SnapshotJob) -> None:
        exc = job.error
        job.catalog.release_frozen()  # (the job is over: nothing reads its sections any more)
        same = job.catalog is self._catalog and job.log_id == self._log.log_id
        if is_index_damage(exc):  # (met by the thread's merge, or the spill's check)
            if isinstance(exc, SpilledDataChanged):
                self._spill_trusted = False  # (the rebuilt state's snapshot keeps its postings)
            if same:
                self._index_damaged(exc)  # a new state from the log, snapshotted there
            return
        if exc is not None:
            # (the back-off counts from the state taken, as for a snapshot written here)
            raise self._snapshot_failed(
                exc, job.records if same else self._catalog.unsaved_records) from exc
        if same:
            # The records written since the state was taken are still unsaved.
            self._catalog.unsaved_records = max(0, self._catalog.unsaved_records - job.records)
        self._cadence.succeeded()
        if self.last_error.startswith(snapshots.SNAPSHOT_FAILED):
            self.last_error = ""  # (room again: the failure it reported is over)

    def _try_snapshot(self, what: str) -> None:
        try:
            self._write_snapshot()
        except ConvMemError as exc:
            log.warning("%s failed: %s", what, exc.message)

    def _log_meta(self, log_id: bytes | None = None) -> dict[str, Any]:
        """The snapshot meta that ties it to its log and the store's clock."""
        return {"format_version": codec.FORMAT_VERSION,
                "log_id": (log_id or self._log.log_id).hex(),
                "ulid_last": self._clock.to_meta()}

    def _after_write(self) -> None:
        if self._snapshot_job is not None:
            self._reap_snapshot()  # (its outcome first: a failure sets the back-off below)
            if self._snapshot_job is not None:
                return  # (one at a time: a later write looks again)
        if self._defer_snapshots:
            return
        if not self._cadence.due(self._catalog.unsaved_records, self._catalog.index.n_docs):
            return
        try:
            self._write_snapshot(background=True)
        except ConvMemError as exc:
            log.warning("periodic snapshot failed: %s", exc.message)

    # -- the write protocol --------------------------------------------------------------
    def _noting_errors(self, step: Callable[[], _T]) -> _T:
        """Run a log step; an I/O failure is also health's last_error."""
        try:
            return step()
        except ConvMemError as exc:
            self.last_error = f"{exc.code}: {exc.message}"
            raise

    def _append(self, frames: list[bytes]) -> list[int]:
        """Append frames with one write and one fdatasync; returns their offsets."""
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        start = self._noting_errors(lambda: self._log.append(data))
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
        offset = self._noting_errors(lambda: self._log.begin_append(frame))
        try:
            result = work(offset)
        except BaseException as exc:
            self._log.abort_append()
            if is_index_damage(exc):
                # Staging merged a damaged list of the mapped snapshot: nothing was written;
                # the state is rebuilt from the log and the call runs again (guards.once_more).
                self._index_damaged(exc)
                raise IndexRebuilt from exc
            # Staging may have stopped half way (the index took the doc, its columns did not):
            # the record is cut back, and the state is rebuilt from what the log holds.
            self._rebuild_state(f"a write's in-memory work failed ({type(exc).__name__})")
            if isinstance(exc, OverflowError):  # past one of the index's limits
                raise ConvMemError(INTERNAL_ERROR, f"the search index cannot take this "
                                                   f"message: {exc}") from exc
            raise
        try:
            self._noting_errors(self._log.finish_append)
        except ConvMemError:
            if undo is not None:
                undo(result)
            raise
        self._catalog.last_seq += 1
        self._catalog.last_record_offset = offset
        return offset, result

    def _frame(self, rtype: int, payload: bytes) -> bytes:
        return codec.encode_record(rtype, self._catalog.last_seq + 1, payload)

    def _check_open(self) -> None:
        if self._log is None:
            raise ConvMemError(INTERNAL_ERROR, "the store is closed")

    # =====================================================================================
    # Tools
    # =====================================================================================
    # Each tool takes keyword arguments named as in tools/list, annotated with the intended
    # types (api/typed.py); every value is still checked here, as MCP clients send anything.
    # In-process callers may give `metadata` as a dict instead of the metadata_json text.
    @once_more
    def write_message(self, *, session_id: str, role: Role, content: str,
                      metadata_json: str | None = None,
                      metadata: MetadataInput | None = None) -> WriteAnswer:
        session = v.string("session_id", session_id, min_bytes=1, max_bytes=MAX_SESSION_BYTES)
        role_i = v.role(role)
        body = v.string("content", content, min_bytes=1, max_bytes=MAX_CONTENT_BYTES)
        meta = v.apply_metadata(None, v.metadata_argument(metadata, metadata_json) or {})
        with self._mutex:
            self._check_open()
            cat = self._catalog
            cat.check_room(1, 1)
            clock_before = self._clock.last
            ulid, ts = self._clock.new()
            rec = new_record(ulid, ts, ts, 1, role_i, session, body, meta)
            frame = self._frame(codec.REC_MESSAGE, codec.encode_message(*rec))

            def stage(offset: int) -> tuple[int, Prepared, dict[str, Any]]:
                prep = prepare(rec)
                answer = {"status": "OK", "message": message(rec)}
                return cat.stage_new(rec, offset, len(frame), prep), prep, answer

            try:
                _, (doc, prep, answer) = self._append_overlapped(
                    frame, stage, lambda staged: cat.unstage(staged[0], staged[1]))
            except BaseException:
                self._clock.last = clock_before  # the id was not used
                raise
            with self._applying("a write was interrupted after its record was durable"):
                cat.commit_new(rec, doc, len(frame), prep)
            self._after_write()
            return answer

    @once_more
    def update_message(self, *, message_id: str, content: str | None = None,
                       metadata_json: str | None = None, expected_revision: int | None = None,
                       metadata: MetadataInput | None = None) -> UpdateAnswer:
        ulid = v.ulid("message_id", message_id)
        if content is not None:
            content = v.string("content", content, min_bytes=1, max_bytes=MAX_CONTENT_BYTES)
        fields = v.metadata_argument(metadata, metadata_json)
        expected = v.integer("expected_revision", expected_revision, lo=1, hi=None, default=None)
        if content is None and fields is None:
            raise v.fail("update_message needs content or metadata_json (or metadata)")
        with self._mutex:
            self._check_open()
            cat = self._catalog
            slot, doc = cat.live_doc(ulid)
            rec = self._reader.record(doc)
            if expected is not None and expected != rec[R_REVISION]:
                raise ConvMemError(CONFLICT, "expected_revision does not match the current revision")
            old_meta = metadata_of(rec)
            meta = v.apply_metadata(old_meta, fields or {})
            body = rec[R_CONTENT] if content is None else content
            if body == rec[R_CONTENT] and meta == old_meta:
                return {"status": "OK", "changed": False, "message": message(rec)}
            cat.check_room(0, 1)
            if rec[R_REVISION] >= MAX_REVISION:
                raise ConvMemError(INTERNAL_ERROR, f"the message is at the highest revision the "
                                                   f"format stores ({MAX_REVISION})")
            new = new_record(ulid, rec[R_TIMESTAMP], max(now_ms(), rec[R_UPDATED_AT]),
                             rec[R_REVISION] + 1, rec[R_ROLE], rec[R_SESSION_ID], body, meta)
            frame = self._frame(codec.REC_MESSAGE, codec.encode_message(*new))

            def stage(offset: int) -> tuple[int, Prepared, tuple[Any, Any, Any], dict[str, Any]]:
                prep = prepare(new)
                # The old version's keys come from the record read above, not from the log again.
                old_keys = field_keys(rec)
                answer = {"status": "OK", "changed": True, "message": message(new)}
                return cat.stage_version(new, offset, len(frame), slot, prep), prep, old_keys, answer

            _, (new_doc, prep, old_keys, answer) = self._append_overlapped(
                frame, stage, lambda staged: cat.unstage(staged[0], staged[1]))
            with self._applying("an update was interrupted after its record was durable"):
                cat.commit_version(new, slot, new_doc, len(frame), old_keys, prep)
            self._after_write()
            return answer

    @once_more
    def delete_message(self, *, message_id: str, session_id: str | None = None) -> DeleteAnswer:
        ulid = v.ulid("message_id", message_id)
        guard = None
        if session_id is not None:
            guard = v.string("session_id", session_id, min_bytes=1, max_bytes=MAX_SESSION_BYTES)
        with self._mutex:
            self._check_open()
            cat = self._catalog
            slot = cat.ids.get(ulid)
            if slot is None or cat.current_doc(slot) < 0:
                return {"status": "NOT_FOUND"}
            if guard is not None and cat.session_of_slot(slot).name != guard:
                return {"status": "NOT_FOUND"}
            doc = cat.current_doc(slot)
            frame = self._frame(codec.REC_DELETE, codec.encode_delete(ulid))
            _, old_keys = self._append_overlapped(frame, lambda offset: cat.index_keys(doc))
            with self._applying("a delete was interrupted after its record was durable"):
                cat.apply_delete(ulid, old_keys)
            self._after_write()
            return {"status": "OK"}

    def read_messages(self, *, view: View | None = None, limit: int | None = None,
                      cursor: str | None = None, session_id: str | None = None,
                      message_id: str | None = None, content_offset: int | None = None,
                      content_limit: int | None = None, expected_revision: int | None = None,
                      before: int | None = None, after: int | None = None,
                      relation_depth: int | None = None,
                      relation_types_json: str | None = None, order: Order | None = None,
                      snippet_bytes: int | None = None) -> ReadAnswer:
        """One of four views (views.py); each names what it needs when it is not given. `order`
        (history, sessions) and `snippet_bytes` (sessions): the extended schema's."""
        run = views.request(view, limit, cursor, session_id, message_id, content_offset,
                            content_limit, expected_revision, before, after, relation_depth,
                            relation_types_json, order, snippet_bytes)
        with self._mutex:
            self._check_open()
            return run(self._reader, self._cursors)

    def search_messages(self, *, query: str, session_id: str | None = None,
                        filters_json: str | None = None, min_importance: int | None = None,
                        context_size: int | None = None, limit: int | None = None,
                        snippet_bytes: int | None = None,
                        cursor: str | None = None) -> SearchAnswer:
        """snippet_bytes and cursor: the extended schema's (docs/SERVER.md); see api/search.py."""
        req = search.parse(query, session_id, filters_json, min_importance, context_size, limit,
                           snippet_bytes, cursor)
        with self._mutex:
            self._check_open()
            return search.run(self, req)

    def rebuild_index(self) -> RebuildAnswer:
        with self._mutex:
            self._check_open()
            return self._rebuild()

    def _rebuild(self) -> RebuildAnswer:
        if self.read_only:
            raise ConvMemError(IO_ERROR, "the store is open read-only")
        self._wait_snapshot()  # (it would rename a snapshot of the old log over the new one)
        self._sections_checked(wait=True)  # (damage found: the state is the log's now)
        bytes_before = self._log.size
        records_before = self._catalog.record_count
        try:
            rebuilt = compaction.write_rebuild(self.directory, self._log, self._catalog,
                                               self._log_meta, self._io)
            switched = compaction.switch(self.directory, rebuilt.new, rebuilt.snapshot_tmp,
                                         self._io)
        except ConvMemError as exc:
            if exc.code == IO_ERROR:
                self.last_error = f"IO_ERROR: rebuild failed: {_cause(exc)}"
            raise
        # The store is NEW from here on: writes go to the log a restart opens.
        self._log.close()
        self._log = switched.log
        if switched.error:
            meta, arrays = rebuilt.meta, rebuilt.arrays
        else:
            meta, arrays = compaction.mapped_state(self.directory, rebuilt,
                                                   Catalog.growable_section)
        rebuilt.arrays = {}  # (the arrays in memory are freed unless they are what serves)
        self._set_catalog(Catalog.from_snapshot(self._read_record, meta, arrays))
        heap.give_back()  # (the old state and the rebuild's buffers are free now)
        self._catalog.unsaved_records = 0
        self.last_error = ""
        if switched.error:
            self.last_error = f"IO_ERROR: rebuild_index: {switched.error}"
            log.error("%s", self.last_error)
            self._catalog.unsaved_records = 1  # the snapshot in place is not the new log's
            raise ConvMemError(IO_ERROR, "rebuild_index compacted the log, but " + switched.error)
        return {
            "status": "OK",
            "messages_indexed": rebuilt.messages,
            "records_removed": records_before - rebuilt.messages,
            "bytes_before": bytes_before,
            "bytes_after": rebuilt.new.size,
        }

    def get_system_health(self) -> HealthAnswer:
        with self._mutex:
            self._check_open()
            self._reap_snapshot()
            cat = self._catalog
            mem = cat.memory_estimate()
            return {
                "status": "DEGRADED" if self.last_error else "OK",
                "format_version": codec.FORMAT_VERSION,
                "log_size": self._log.size,
                "snapshot_size": snapshot_size(self.directory / SNAPSHOT_NAME),
                "active_messages": cat.index.n_live,
                "session_count": cat.sessions.live_sessions,
                "deleted_messages": cat.deleted_messages,
                "last_sequence": cat.last_seq,
                "update_records": cat.update_records,
                "dead_bytes": self._log.size - codec.LOG_HEADER_SIZE - cat.live_bytes,
                "memory_estimate": {"total_bytes": sum(mem.values()), **mem},
                "io": self._io.as_dict(),
                "recovered_tail": self.recovered_tail,
                "snapshot_valid": self.snapshot_valid,
                "last_error": self.last_error,
            }

    # =====================================================================================
    # Bulk import and export
    # =====================================================================================
    def import_messages(self, items: Iterable[ImportItem], *, batch_size: int = 1000) -> int:
        """Import dicts in groups of `batch_size`, one fdatasync per group; returns the count.

        Each group is all or nothing: the first invalid item raises its ConvMemError, and
        nothing of its group is written (items of earlier groups stay imported).
        """
        return bulk.import_all(self, items, batch_size)

    def import_message_batch(self, items: Sequence[ImportItem], *, all_or_nothing: bool = False,
                             existing: Literal["conflict", "compare"] = "conflict",
                             ) -> list[ImportOutcome]:
        """Validate and append a group with one write and one fdatasync.

        Returns one entry per item: None when imported, else its error. Invalid items are
        skipped (or, with all_or_nothing, nothing is written when any item is invalid).

        An item whose message_id is already stored (or earlier in the group) is a CONFLICT. With
        existing="compare" it is instead `bulk.PRESENT` when the stored message equals it in
        every field it gives (bulk.same_message), `bulk.DELETED` when that message was deleted,
        and otherwise a CONFLICT whose `.existing` is the stored message dict; none of these
        is written, so re-importing what is already there is not an error.
        """
        results: list[ImportOutcome] = []
        compare = existing == "compare"
        # (raw: the batch before may still be indexing while this one is checked; the ids,
        # sessions and columns it reads are complete, and it settles before the index is used)
        with self._mutex.raw:
            self._check_open()
            cat = self._catalog
            prepared = []
            seen: dict[bytes, Any] = {}
            for item in items:
                try:
                    rec = bulk.prepare_import(item, self._clock)
                    ulid = rec[R_ULID]
                    if ulid in cat.ids or ulid in seen:
                        if not compare:
                            raise ConvMemError(CONFLICT, "message_id already exists")
                        results.append(bulk.compare_existing(self._reader, item, rec, seen.get(ulid)))
                        continue
                    seen[ulid] = rec
                    prepared.append(rec)
                    results.append(None)
                except ConvMemError as exc:
                    results.append(exc)
            if not prepared or (all_or_nothing and len(prepared) != len(items)):
                return results
            encode_message, encode_record, rtype = codec.encode_message, codec.encode_record, codec.REC_MESSAGE
            seq = cat.last_seq
            frames = [encode_record(rtype, seq + i, encode_message(*rec))
                      for i, rec in enumerate(prepared, start=1)]
            if cat.indexing_failed:  # (a batch before this one; nothing of this one is written)
                self._settle_indexing(raise_failure=True)
            cat.check_room(len(prepared), len(prepared))
            bulk_import = self._defer_snapshots > 0
            with self._applying("an import batch was interrupted after its records were durable",
                                durable=False) as applying:
                offsets = self._append(frames)  # (IO_ERROR: nothing was appended)
                applying.durable = True
                cat.last_seq = seq + len(frames)
                cat.last_record_offset = offsets[-1]
                # A bulk import goes on with its next batch while the index takes this one.
                cat.apply_new_batch(prepared, offsets, [len(f) for f in frames],
                                    settle_later=bulk_import)
            if not bulk_import:  # (deferring_snapshots' end looks at the snapshot)
                self._after_write()
        return results


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__
    if isinstance(cause, OSError):
        return cause.strerror or str(cause)
    return getattr(exc, "message", str(exc))
