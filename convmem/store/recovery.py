"""Recovery at open: load the snapshot if it belongs to the log, replay the log after it, repair
a torn tail, report damage in the middle, and verify in the background what the snapshot stood
in for (docs/FORMAT.md, "Recovery").

What is found goes into a `Findings` (health's recovered_tail, snapshot_valid, last_error); the
store decides what to do with it. Nothing here serves a damaged record: the state built only
holds records whose checksum was checked, and every later read checks it again.
"""
from __future__ import annotations

import logging
import mmap
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._core import codec
from ..catalog.catalog import Catalog, ReadRecord
from ..errors import ConvMemError
from .background import background_thread
from .io import drop_pages
from .logfile import LogFile
from .snapshot import (SNAPSHOT_NAME, Deferred, Expected, SnapshotError, SnapshotVersionError, read_snapshot,
                       snapshot_size, verify_deferred)

log = logging.getLogger("convmem")

VERIFY_IN_FOREGROUND_BYTES = 64 * 1024 * 1024  # larger stores are verified in the background
# ... starting this long after open: the pass reads the whole log and the large index sections
# (~1 GB at 1M messages) and would otherwise share the two cores with what a spawned server does
# before its first answer (importing the MCP SDK, the first query): measured at 1M over stdio,
# spawn to first answer 1007 -> 744 ms with the pass held back. Nothing waits for it: reads
# check their record's checksum and posting lists are checked on first use meanwhile.
VERIFY_DELAY_SECONDS = 1.0
# ... and so are the snapshot's sections from this size: an open checks only the small ones
# (written together at the end of the file, snapshot.write_snapshot) before its first answer. At
# 1M messages that is 9 MB instead of 122 (every section but the index's big ones), and open +
# first query with the page cache dropped went from 184.5 to 136.7 ms (benchmarks/open_latency.py
# open --drop-caches, paired). Until the check has run, a snapshot written from the state would
# copy those sections under fresh checksums: MemoryStore checks them first (Unchecked).
DEFER_SECTION_BYTES = 1024 * 1024
# A replay of the whole log from this size on (a store without a current snapshot, e.g. one
# written by an older tokenizer) reports its progress on stderr, every 10%.
REINDEX_PROGRESS_BYTES = 64 * 1024 * 1024

Damage = tuple[int, int, str]  # (start, end, reason) of a damaged stretch of the log


@dataclass
class Findings:
    """What recovery found, as health reports it."""

    recovered_tail: bool = False
    snapshot_valid: bool = True
    last_error: str = ""
    deferred: Deferred = field(default_factory=list)  # snapshot sections left to verify

    def damage(self, offset: int, reason: str, nbytes: int) -> None:
        msg = (f"CORRUPT_STORE: log record at byte offset {offset} is damaged ({reason}); "
               f"{nbytes} bytes skipped")
        log.error("%s", msg)
        if not self.last_error:
            self.last_error = msg

    def snapshot_rejected(self, why: str) -> None:
        self.snapshot_valid = False
        self.last_error = why
        log.warning("%s", why)


# -- snapshot -------------------------------------------------------------------------------
def load_snapshot(directory: Path, logfile: LogFile, read_record: ReadRecord,
                  findings: Findings, defer: bool = True,
                  ) -> tuple[Catalog, int, dict[str, Any]] | None:
    """The state of the snapshot if it belongs to this log: (catalog, the log offset it covers,
    its meta); None when there is none or it cannot be used (findings say why when that is
    damage rather than another version). With `defer`, the big sections of a big snapshot are
    left unchecked, in `findings.deferred`, for the caller to check later."""
    path = directory / SNAPSHOT_NAME
    # The big sections of a big snapshot are checksummed in the background (with the log); a
    # bad one then rebuilds the state from the log.
    big = defer and snapshot_size(path) > VERIFY_IN_FOREGROUND_BYTES
    deferred: Deferred = []

    def defer(name: str, view: memoryview, expected: Expected) -> bool:
        if big and len(view) >= DEFER_SECTION_BYTES:
            deferred.append((name, view, expected))
            return True
        return False

    try:
        meta, arrays = read_snapshot(path, defer=defer, growable=Catalog.growable_section)
    except FileNotFoundError:
        return None
    except SnapshotVersionError as exc:
        log.info("%s: re-indexing from the log", exc)
        return None
    except (SnapshotError, ValueError, TypeError) as exc:
        # (ValueError, TypeError: a section numpy cannot view, e.g. an object dtype in a meta
        # whose checksum was forged along with it)
        findings.snapshot_rejected(f"snapshot is damaged ({exc}); state rebuilt from the log")
        return None
    try:
        if meta.get("log_id") != logfile.log_id.hex():
            # A crash between the two renames of rebuild_index: the log is the truth.
            findings.snapshot_valid = False
            return None
        if not Catalog.snapshot_is_current(meta, arrays):
            log.info("snapshot written by another version (index, tokenizer or Unicode): "
                     "re-indexing from the log")
            return None
        covered = int(meta["covered_end"])
        if not snapshot_matches_log(logfile, covered, int(meta["last_record_offset"]),
                                    int(meta["last_seq"])):
            # The log lost its tail after the snapshot was taken (a torn or damaged last
            # record): the snapshot is stale, the log is the truth and replay repairs it.
            findings.snapshot_valid = False
            return None
        catalog = Catalog.from_snapshot(read_record, meta, arrays)
    except (SnapshotError, codec.CorruptRecord, ConvMemError, KeyError, ValueError,
            TypeError, IndexError) as exc:
        findings.snapshot_rejected(f"snapshot is unusable ({exc}); state rebuilt from the log")
        return None
    findings.deferred = deferred
    return catalog, covered, meta


def snapshot_matches_log(logfile: LogFile, covered: int, last_off: int, last_seq: int) -> bool:
    """Whether the log still holds, at the snapshot's last record offset, a whole record with
    its sequence number ending exactly where the snapshot's coverage ends."""
    if covered > logfile.size:
        return False
    if last_off < 0:
        return covered == codec.LOG_HEADER_SIZE
    try:
        head = logfile.read(last_off, covered - last_off)
        _, seq, _, _, nxt = codec.read_record(head, 0)
    except (codec.CorruptRecord, ConvMemError):
        return False
    return seq == last_seq and nxt == len(head)


# -- replay ---------------------------------------------------------------------------------
def replay(logfile: LogFile, catalog: Catalog, start: int, findings: Findings) -> int:
    """Apply the log from `start` to the catalog; repair a torn tail; report damage in the
    middle. Returns the number of records applied."""
    applied = 0
    mm = logfile.map()
    if mm is None:
        return 0
    header = codec.RECORD_HEADER_SIZE
    total = logfile.size - start
    progress = start <= codec.LOG_HEADER_SIZE and total >= REINDEX_PROGRESS_BYTES
    next_report = start + total // 10 if progress else logfile.size + 1
    if progress:
        # (at warning level: the default, so that a long re-index at open is seen on stderr)
        log.warning("indexing the log (%.0f MiB)...", total / 2**20)

    def apply(records: Records) -> None:
        nonlocal applied, next_report
        offsets, types, seqs, lengths = records
        for off, rtype, seq, plen in zip(offsets.tolist(), types.tolist(), seqs.tolist(),
                                         lengths.tolist()):
            flen = header + plen
            if off >= next_report:
                done = off - start
                log.warning("indexing the log: %d%%", 100 * done // total)
                next_report = off + total // 10
            if seq <= catalog.last_seq:
                findings.damage(off, "sequence number does not increase", flen)
                continue
            try:
                if rtype == codec.REC_MESSAGE:
                    catalog.apply_message(codec.decode_message(mm, off + header, plen), off, flen)
                else:
                    catalog.apply_delete(codec.decode_delete(mm, off + header, plen), seq=seq)
            except codec.CorruptRecord as exc:
                findings.damage(off, exc.reason, flen)
                continue
            catalog.last_seq = seq
            catalog.last_record_offset = off
            applied += 1

    try:
        pos = start
        while pos < logfile.size:
            # (a window at a time: the records' offsets and the log's pages stay bounded)
            stop, error, resync = scan_windowed(mm, pos, logfile.size, apply)
            if error is None:
                break
            if resync < 0:
                # Nothing valid follows: a torn tail left by a crash. Cut it off durably.
                mm = None  # (the map goes before the cut)
                logfile.truncate(stop)
                findings.recovered_tail = True
                log.warning("log: torn tail at byte offset %d truncated (%s)", stop, error)
                break
            findings.damage(stop, error, resync - stop)
            pos = resync
    finally:
        if mm is not None:
            mm.close()
    if progress:
        log.warning("indexing the log: done, %d records", applied)
    return applied


# The log is scanned this much at a time (a record is at most 16 MiB and 20 bytes of header, so
# a window always holds the next record whole): what a scan keeps per record stays bounded, and
# the pages behind it leave the process. Scanned whole, at 10M messages (7.2 GB of log) the
# background pass held 9 GB of the log's pages and 0.2 GB of record offsets at its peak.
SCAN_WINDOW_BYTES = 64 * 1024 * 1024
assert SCAN_WINDOW_BYTES > codec.RECORD_HEADER_SIZE + codec.MAX_PAYLOAD
_TORN = (codec.TRUNCATED_HEADER, codec.TRUNCATED_PAYLOAD)
Records = tuple[Any, Any, Any, Any]  # (offsets, types, seqs, lengths) of valid records, in order


def find_damage(mm: mmap.mmap, end: int,
                on_records: Callable[[Records], None] | None = None) -> list[Damage]:
    """(start, end, reason) of each damaged stretch of log[header:end]; `on_records` gets the
    valid records between them (scan_windowed)."""
    found = []
    pos = codec.LOG_HEADER_SIZE
    while pos < end:
        stop, error, resync = scan_windowed(mm, pos, end, on_records)
        if error is None:
            break
        nxt = resync if resync >= 0 else end
        found.append((stop, nxt, error))
        pos = nxt
    return found


def scan_windowed(mm: mmap.mmap, pos: int, end: int,
                  on_records: Callable[[Records], None] | None = None,
                  ) -> tuple[int, str | None, int]:
    """(stop, error, resync) of codec.scan_log(mm, pos, end), read SCAN_WINDOW_BYTES at a time,
    each window's pages dropped from the map once walked (the file keeps them; a read-only map
    faults them in again if touched); `on_records` gets the valid records a window at a time,
    each record once, in order. Where a window ends inside a record, the next one starts at
    that record (twice as long if it held no whole record: a length field damaged into a record
    longer than the window). An error found inside a window is taken again by one scan_log from
    the last record before the window to `end`, which sees what a single scan would: the same
    record checks, the sequence compared with the record before, the same resync."""
    last = -1      # the offset of the last record walked in an earlier window
    last_seq = 0
    window = SCAN_WINDOW_BYTES
    while True:
        hi = min(end, pos + window)
        res = codec.scan_log(mm, pos, hi)
        seq_broken = last >= 0 and len(res.seqs) > 0 and int(res.seqs[0]) <= last_seq
        torn_at_window_end = res.error in _TORN and hi < end
        if seq_broken or (res.error is not None and not torn_at_window_end):
            res = codec.scan_log(mm, last if last >= 0 else pos, end)
            if on_records is not None:
                skip = 1 if last >= 0 else 0  # (the record at `last` was given before)
                on_records((res.offsets[skip:], res.types[skip:], res.seqs[skip:],
                            res.lengths[skip:]))
            return res.stop, res.error, res.resync
        if res.stop == pos and res.error is not None:
            window *= 2
            continue
        window = SCAN_WINDOW_BYTES
        if len(res.offsets):
            last, last_seq = int(res.offsets[-1]), int(res.seqs[-1])
            if on_records is not None:
                on_records((res.offsets, res.types, res.seqs, res.lengths))
        drop_pages(mm, pos, res.stop)
        if res.error is None and hi == end:
            return res.stop, None, -1
        pos = res.stop  # (the start of the record the window cut, or hi)


# -- verification of what the snapshot stood in for -------------------------------------------
VerifyResult = tuple[str | None, list[Damage]]  # (first bad snapshot section, log damage)


def verify_covered(logfile: LogFile, end: int, unchecked: "Unchecked",
                   apply: Callable[[str | None, list[Damage]], None],
                   lock: threading.RLock, still_current: Callable[[], bool],
                   ) -> "Verification | None":
    """Check every checksum of log[header:end] (the part the snapshot stood in for) and the
    snapshot sections whose check was deferred, then `apply(bad section, damage)`.

    Reads verify their record's checksum anyway, so nothing damaged is ever served; this pass
    finds damage early and reports it in health. A large store is checked in a background thread
    (xxhash and the log scan run without the GIL) from VERIFY_DELAY_SECONDS on, which applies its
    result under `lock` if `still_current()` (the store was not closed or rebuilt meanwhile);
    returns that Verification.
    """
    mm = logfile.map()

    def check() -> VerifyResult:
        try:
            bad = unchecked.check(drop=True)
            return bad, (find_damage(mm, end) if mm is not None and bad is None else [])
        finally:
            if mm is not None:
                mm.close()

    if unchecked.done() and end - codec.LOG_HEADER_SIZE <= VERIFY_IN_FOREGROUND_BYTES:
        apply(*check())
        return None

    cancelled = threading.Event()

    def verify() -> None:
        if cancelled.wait(VERIFY_DELAY_SECONDS):
            if mm is not None:
                mm.close()
            return  # (closed before it began: the next open verifies)
        result = check()
        with lock:
            if still_current():
                apply(*result)

    thread = background_thread(verify, "convmem-verify")
    thread.start()
    return Verification(thread, cancelled)


class Unchecked:
    """The snapshot sections whose checksums an open left for later (load_snapshot's
    `findings.deferred`), kept with the state they were loaded into: checked once, by the
    background pass or at once by a caller about to copy them into a new file."""

    def __init__(self, deferred: Deferred) -> None:
        self._deferred = deferred
        self._lock = threading.Lock()  # (held while they are checked)
        self._bad: str | None = None

    def done(self) -> bool:
        return not self._deferred

    def check(self, drop: bool = False) -> str | None:
        """The first damaged section, or None; checks them if that has not been done (with
        `drop`, each piece's pages are dropped once hashed: snapshot.verify_deferred)."""
        with self._lock:
            if self._deferred:
                self._bad = verify_deferred(self._deferred, drop=drop)
                self._deferred = []
            return self._bad


class Verification:
    """A background verification (verify_covered): join() waits for its end; cancel() drops it
    if it has not begun (a store being closed)."""

    def __init__(self, thread: threading.Thread, cancelled: threading.Event) -> None:
        self.thread, self._cancelled = thread, cancelled

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    def cancel(self) -> None:
        self._cancelled.set()
