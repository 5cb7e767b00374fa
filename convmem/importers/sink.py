"""The writer the chat importers share: items in group-committed batches (one write and one
fdatasync each, import_message_batch), with the answers counted in each file's report.

An id already stored with the same content is "already present". A source message whose content
changed under the same id (a Claude Code answer whose blocks arrived later, a Gemini upsert) is
updated in place: the content is replaced, the metadata the user may have set in convmem stays.
"""
from __future__ import annotations

import logging
from typing import Any

from ..api.bulk import DELETED, PRESENT
from ..errors import CONFLICT, ConvMemError
from .common import FileReport

log = logging.getLogger(__name__)

BATCH_SIZE = 1000
BATCH_BYTES = 16 * 1024 * 1024


class Sink:
    def __init__(self, store: Any, progress: Any = None, batch_size: int = BATCH_SIZE) -> None:
        self.store = store
        self.progress = progress
        self.batch_size = batch_size
        self.items: list[dict[str, Any]] = []
        self.reports: list[FileReport] = []
        self.where: list[str] = []
        self.index: dict[str, int] = {}  # message_id -> position in items
        self.bytes = 0
        self.written = 0  # imported + updated, over the sink's life

    def add(self, item: dict[str, Any], report: FileReport, where: str = "") -> None:
        mid = item["message_id"]
        at = self.index.get(mid)
        if at is not None:  # the same source message twice in one batch
            earlier = self.items[at]
            if earlier["content"] == item["content"]:
                report.present += 1  # a copy (resumed session, /branch): kept where first seen
            elif earlier["session_id"] != item["session_id"] or earlier["role"] != item["role"]:
                report.reject(where or item["session_id"],
                              "CONFLICT: the derived message_id is used in another session or role")
            else:
                earlier["content"] = item["content"]  # the later version of the message wins
                report.updated += 1
            return
        self.index[mid] = len(self.items)
        self.items.append(item)
        self.reports.append(report)
        self.where.append(where)
        report.sessions.add(item["session_id"])
        self.bytes += len(item["content"])
        if len(self.items) >= self.batch_size or self.bytes >= BATCH_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self.items:
            return
        items, reports, where = self.items, self.reports, self.where
        self.items, self.reports, self.where, self.index, self.bytes = [], [], [], {}, 0
        try:
            results = self.store.import_message_batch(items, existing="compare")
        except ConvMemError as exc:  # the whole batch failed (IO_ERROR): every item reported
            results = [exc] * len(items)
        for item, report, at, res in zip(items, reports, where, results, strict=True):
            if res is None:
                report.imported += 1
                self.written += 1
            elif res is PRESENT or res is DELETED:
                report.present += 1
            elif res.code == CONFLICT and getattr(res, "existing", None) is not None:
                self._upsert(item, report, at, res.existing)
            else:
                report.reject(at or item["session_id"], f"{res.code}: {res.message}")
        if self.progress is not None:
            self.progress.advance(len(items))

    def _upsert(self, item: dict[str, Any], report: FileReport, where: str,
                existing: dict[str, Any]) -> None:
        if existing["content"] == item["content"]:
            # Only metadata differs (what was set in convmem stays), or a copy of a message in
            # another file (a resumed Claude Code session): it stays where it was first seen.
            report.present += 1
            return
        if existing["session_id"] != item["session_id"] or existing["role"] != item["role"]:
            report.reject(where or item["session_id"],
                          "CONFLICT: the derived message_id is stored for another session or role")
            return
        try:
            self.store.update_message(message_id=item["message_id"], content=item["content"])
        except ConvMemError as exc:
            report.reject(where or item["session_id"], f"{exc.code}: {exc.message}")
            return
        report.updated += 1
        self.written += 1
