"""The CLI's maintenance calls: verify, backup and export_messages (MemoryStore methods).

verify and backup do their work in store/maintenance.py; here they take the store's lock for
what they must read under it. export_messages yields the live messages as import dicts.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..catalog.catalog import Catalog
from ..errors import CONFLICT, ConvMemError
from ..store import maintenance
from ..store.cursor_key import CURSOR_KEY_NAME
from ..store.io import IoCounters
from ..store.logfile import LogFile
from ..typed import ImportItem
from . import bulk
from .records import RecordReader, message


class MaintenanceTools:
    """verify, backup and export_messages, as methods of MemoryStore (which this is mixed into
    and which provides these attributes)."""

    directory: Path
    _mutex: threading.RLock
    _catalog: Catalog
    _reader: RecordReader
    _log: LogFile
    _io: IoCounters
    _generation: int

    if TYPE_CHECKING:  # (MemoryStore's)
        def _check_open(self) -> None: ...
        def _log_meta(self) -> dict[str, Any]: ...
        def _sections_checked(self, wait: bool) -> bool: ...

    def verify(self) -> dict[str, Any]:
        """Check every record of the log, every section of the snapshot and every posting list
        it holds; changes nothing. `ok` is False on any damage (store/maintenance.py)."""
        with self._mutex:
            self._check_open()
            return maintenance.verify(self.directory, self._log)

    def backup(self, dest: str | os.PathLike[str]) -> dict[str, Any]:
        """Write a copy of the store as it is now to `dest` (new or empty), openable by itself.
        Writes wait only while the state is serialised; the log is copied after, from a
        descriptor of its own."""
        with self._mutex:
            self._check_open()
            self._sections_checked(wait=True)  # (damage found: the state is the log's now)
            meta, arrays = self._catalog.snapshot_state()
            meta.update(self._log_meta(), covered_end=self._log.size)
            arrays = {name: np.array(a) for name, a in arrays.items()}  # (a copy: writes go on)
            log_end = self._log.size
            logfile = self._log
            fd = os.dup(logfile.fd)  # (the copy's own: a rebuild may replace the log meanwhile)
        try:
            view = LogFile(logfile.path, fd, logfile.log_id, logfile.base_sequence, log_end, self._io)
            return maintenance.backup(Path(dest), view, log_end, meta, arrays,
                                      self.directory / CURSOR_KEY_NAME)
        finally:
            os.close(fd)

    def export_messages(self, session_id: str | None = None) -> Iterator[ImportItem]:
        """Live messages as import dicts, session by session (by start time), in history order."""
        with self._mutex:
            self._check_open()
            generation = self._generation
            sessions = self._catalog.sessions
            if session_id is not None:
                s = sessions.get(session_id)
                nums = [s.num] if s is not None and s.n else []
            else:
                nums = [num for _, _, num in sessions.ordered()]
            slots = [int(x) for s in map(sessions.at, nums) for x in s.slots[: s.n]]
        for slot in slots:
            with self._mutex:
                self._check_open()
                if self._generation != generation:
                    # rebuild_index renumbered the messages: the list taken above means nothing
                    # now. Fail rather than export a mix of two states.
                    raise ConvMemError(CONFLICT, "the store was rebuilt during the export; "
                                                 "nothing after this point was exported")
                doc = self._catalog.current_doc(slot)
                if doc < 0:
                    continue
                m = message(self._reader.record(doc))
            yield bulk.export_item(m)
