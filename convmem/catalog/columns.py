"""A growable numpy column: amortised O(1) append, capacity-based byte accounting."""
from __future__ import annotations

import numpy as np


class Column:
    __slots__ = ("data", "n")

    def __init__(self, dtype: str, width: int = 0, capacity: int = 256) -> None:
        shape = (capacity, width) if width else (capacity,)
        self.data = np.zeros(shape, dtype=dtype)
        self.n = 0

    @classmethod
    def from_array(cls, array: np.ndarray) -> "Column":
        """Adopt loaded values without copying them (a snapshot's read-only view is used in
        place); the first change copies them (`writable`, or an append, which grows by a
        quarter). No slack: a store that is only read holds no spare capacity."""
        col = cls.__new__(cls)
        col.data = array
        col.n = len(array)
        return col

    def writable(self) -> np.ndarray:
        """The data, copied first if it is still a read-only view (copy on write)."""
        if not self.data.flags.writeable:
            grown = np.empty((max(256, self.n),) + self.data.shape[1:], dtype=self.data.dtype)
            grown[: self.n] = self.data[: self.n]
            self.data = grown
        return self.data

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

    def view(self) -> np.ndarray:
        return self.data[: self.n]

    @property
    def nbytes(self) -> int:
        return self.data.nbytes
