"""A growable numpy column: amortised O(1) append, capacity-based byte accounting."""
from __future__ import annotations

import numpy as np


class Column:
    """Values in data[:n]; data may be a read-only view of a mapped snapshot (copied on the
    first change) or shared with a frozen snapshot section (`frozen`: copied on the first change
    of a value it holds; appends write past it and need no copy)."""
    __slots__ = ("data", "n", "shared", "mapped")

    def __init__(self, dtype: str, width: int = 0, capacity: int = 256) -> None:
        shape = (capacity, width) if width else (capacity,)
        self.data = np.zeros(shape, dtype=dtype)
        self.n = 0
        self.shared = False
        self.mapped = False  # (data is a private mapping's, past n the file's bytes: room)

    @classmethod
    def from_array(cls, array: np.ndarray) -> "Column":
        """Adopt loaded values without copying them (a snapshot's read-only view is used in
        place); the first change copies them (`writable`, or an append, which grows by a
        quarter). No slack: a store that is only read holds no spare capacity.

        A writable view whose base runs on past it (a growable section of a private mapping,
        store/snapshot.py) is adopted with that base as its capacity: changes and appends write
        in place, copying only the pages they touch, until the room is used up."""
        col = cls.__new__(cls)
        col.data = array
        col.n = len(array)
        col.shared = False
        col.mapped = False
        base = array.base  # (the test shared.room_base makes for the core's arrays)
        if (array.flags.writeable and isinstance(base, np.ndarray) and base.flags.writeable
                and base.flags.c_contiguous and base.dtype == array.dtype
                and base.ndim == array.ndim and base.shape[1:] == array.shape[1:]
                and len(base) > len(array)
                and base.__array_interface__["data"][0] == array.__array_interface__["data"][0]):
            col.data = base
            col.mapped = True
        return col

    def writable(self) -> np.ndarray:
        """The data for a change in place: copied first if it is a read-only view or shared
        with a frozen section (copy on write)."""
        if self.shared or not self.data.flags.writeable:
            grown = np.empty((max(256, len(self.data)),) + self.data.shape[1:], dtype=self.data.dtype)
            grown[: self.n] = self.data[: self.n]
            self.data = grown
            self.shared = False
            self.mapped = False
        return self.data

    def frozen(self) -> np.ndarray:
        """data[:n] as it is now, for a snapshot written while the column goes on changing,
        without a copy: the values it holds are copied away before any of them changes
        (`writable`), appends go past it, and growing allocates new storage. A background
        snapshot thus costs the writer no copy of the column (the columns are most of what a
        store holds at millions of messages)."""
        if self.data.flags.writeable:
            self.shared = True
        return self.data[: self.n]

    def release(self) -> None:
        """No frozen section holds the data any more (its snapshot is written)."""
        self.shared = False

    def append(self, value) -> int:
        i = self.n
        if i == len(self.data):
            self._grow(i + 1)
        elif not self.data.flags.writeable:
            self.writable()
        self.data[i] = value
        self.n = i + 1
        return i

    def extend(self, values) -> None:
        """Append a sequence of values (a batch: one numpy conversion and copy for all)."""
        k = len(values)
        i = self.n
        if i + k > len(self.data):
            self._grow(i + k)
        elif not self.data.flags.writeable:
            self.writable()
        self.data[i : i + k] = values
        self.n = i + k

    def _grow(self, need: int) -> None:
        # Grow by a quarter: amortised O(1) appends with at most 25% slack held (the columns
        # are a large part of the store's memory at millions of messages). extend grows in the
        # same steps as appends one by one would, so the capacity does not depend on batching.
        capacity = len(self.data)
        while capacity < need:
            capacity = max(256, capacity + capacity // 4)
        grown = np.zeros((capacity,) + self.data.shape[1:], dtype=self.data.dtype)
        grown[: self.n] = self.data[: self.n]
        self.data = grown
        self.shared = False
        self.mapped = False

    def view(self) -> np.ndarray:
        return self.data[: self.n]

    @property
    def nbytes(self) -> int:
        # (a mapped column's room past n is the file's bytes, resident only once written)
        return self.data[: self.n].nbytes if self.mapped else self.data.nbytes
