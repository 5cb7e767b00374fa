"""Pure-Python twin of idmap.IdMap (the test oracle): a dict with the same interface."""
from __future__ import annotations

import numpy as np


class IdMap:
    def __init__(self, capacity: int = 1024) -> None:
        self._d: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._d)

    def get(self, key: bytes, default: int | None = None) -> int | None:
        if len(key) != 16:
            raise ValueError("an id is 16 bytes")
        return self._d.get(bytes(key), default)

    def __contains__(self, key: bytes) -> bool:
        return self.get(key) is not None

    def __getitem__(self, key: bytes) -> int:
        v = self.get(key)
        if v is None:
            raise KeyError("id not present")
        return v

    def __setitem__(self, key: bytes, value: int) -> None:
        if len(key) != 16 or value < 0:
            raise ValueError("an id is 16 bytes and its value is >= 0")
        self._d[bytes(key)] = value

    @classmethod
    def from_column(cls, ids: np.ndarray) -> "IdMap":
        m = cls()
        for i in range(len(ids)):
            m._d[ids[i].tobytes()] = i
        return m

    def to_array(self) -> np.ndarray:
        """(n, 3) uint64 rows (hi, lo, value): the same information as the compiled table."""
        rows = [(int.from_bytes(k[:8], "big"), int.from_bytes(k[8:], "big"), v)
                for k, v in self._d.items()]
        return np.array(rows, dtype=np.uint64).reshape(-1, 3)

    @classmethod
    def from_array(cls, table: np.ndarray) -> "IdMap":
        m = cls()
        for hi, lo, value in table.tolist():
            if value < (1 << 63):  # the compiled table marks empty slots with -1
                m._d[hi.to_bytes(8, "big") + lo.to_bytes(8, "big")] = value
        return m

    @property
    def nbytes(self) -> int:
        return len(self._d) * 101 + 64
