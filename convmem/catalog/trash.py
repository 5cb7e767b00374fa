"""The trash: deleted messages that can still be restored, in the order they were deleted.

A delete retires a message's current version from every index (Catalog.retire) but its record
stays in the log until rebuild_index compacts it away; the trash remembers, per deleted message,
that version's doc (so its record can be read back) and the sequence number of the DELETE record
(the order of deletion, and the position a list_deleted cursor pages from). An entry leaves the
trash when its message is restored (a MESSAGE record for it is applied again) and the whole trash
is emptied by compaction, which keeps live messages only.

Three columns in delete order (seq ascending), each slot at most once. Removing one entry shifts
the ones after it (a memmove of 16 bytes per entry): restores are rare, admin calls.
"""
from __future__ import annotations

import numpy as np

from .columns import Column

SECTIONS = ("trash_slot", "trash_doc", "trash_seq")  # snapshot section names


class Trash:
    __slots__ = ("slots", "docs", "seqs")

    def __init__(self) -> None:
        # (no capacity until the first delete: a store without deletions holds nothing here)
        self.slots = Column("i4", capacity=0)  # the deleted message
        self.docs = Column("i4", capacity=0)  # its version when it was deleted
        self.seqs = Column("i8", capacity=0)  # the DELETE record's sequence number

    def __len__(self) -> int:
        return self.slots.n

    def add(self, slot: int, doc: int, seq: int) -> None:
        self.slots.append(slot)
        self.docs.append(doc)
        self.seqs.append(seq)

    def find(self, slot: int) -> int:
        """The entry index of a slot in the trash, or -1."""
        hits = np.flatnonzero(self.slots.view() == slot)
        return int(hits[0]) if len(hits) else -1

    def discard(self, slot: int) -> None:
        """Take a slot out of the trash (its message is live again); no-op if it is not there."""
        if not self.slots.n:
            return
        i = self.find(slot)
        if i < 0:
            return
        for col in (self.slots, self.docs, self.seqs):
            data = col.writable()
            data[i:col.n - 1] = data[i + 1:col.n]
            col.n -= 1

    def columns(self) -> list[Column]:
        return [self.slots, self.docs, self.seqs]

    def arrays(self) -> dict[str, np.ndarray]:
        """The snapshot's sections (frozen: copied before they change); none when empty."""
        if not self.slots.n:
            return {}
        return {name: col.frozen()
                for name, col in zip(SECTIONS, (self.slots, self.docs, self.seqs))}

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "Trash":
        """The trash of a snapshot's sections (absent: an empty trash)."""
        trash = cls()
        present = [name in arrays for name in SECTIONS]
        if not any(present):
            return trash
        if not all(present):
            raise ValueError("a trash section is missing")
        cols = [np.asarray(arrays[name]) for name in SECTIONS]
        if not len({len(c) for c in cols}) == 1:
            raise ValueError("the trash sections differ in length")
        if len(cols[2]) > 1 and not bool(np.all(cols[2][1:] > cols[2][:-1])):
            raise ValueError("the trash is not in delete order")
        if len(np.unique(cols[0])) != len(cols[0]):
            raise ValueError("the trash holds a message twice")
        trash.slots = Column.from_array(cols[0].astype(np.int32, copy=False))
        trash.docs = Column.from_array(cols[1].astype(np.int32, copy=False))
        trash.seqs = Column.from_array(cols[2].astype(np.int64, copy=False))
        return trash

    @property
    def nbytes(self) -> int:
        return self.slots.nbytes + self.docs.nbytes + self.seqs.nbytes
