"""Pure-Python twin of idmap.IdMap (the test oracle): a list of ids and a dict."""
from __future__ import annotations

from collections.abc import Callable

import numpy as np


class IdMap:
    def __init__(self, capacity: int = 1024) -> None:
        self._keys: list[bytes] = []
        self._slots: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def get(self, key: bytes, default: int | None = None) -> int | None:
        if len(key) != 16:
            raise ValueError("an id is 16 bytes")
        return self._slots.get(bytes(key), default)

    def __contains__(self, key: bytes) -> bool:
        return self.get(key) is not None

    def __getitem__(self, key: bytes) -> int:
        slot = self.get(key)
        if slot is None:
            raise KeyError("id not present")
        return slot

    def add(self, key: bytes) -> int:
        if len(key) != 16:
            raise ValueError("an id is 16 bytes")
        key = bytes(key)
        if key in self._slots:
            raise ValueError("id already present")
        self._slots[key] = len(self._keys)
        self._keys.append(key)
        return len(self._keys) - 1

    def key(self, slot: int) -> bytes:
        if slot < 0 or slot >= len(self._keys):
            raise IndexError("slot out of range")
        return self._keys[slot]

    def keys_array(self, share: bool = False) -> np.ndarray:
        """A copy (the compiled IdMap may share its memory instead: the same values)."""
        return np.frombuffer(b"".join(self._keys), dtype=np.uint8).reshape(-1, 16).copy()

    def release_frozen(self) -> None:
        """The compiled IdMap takes shared memory back here; this one shares none."""

    def frozen_table(self) -> Callable[[], np.ndarray]:
        """What table_array() returns now, as a function (the compiled IdMap's builds it)."""
        return self.table_array

    def table_array(self) -> np.ndarray:
        return np.zeros(0, dtype=np.int32)  # the twin has no table; from_arrays rebuilds

    @classmethod
    def from_arrays(cls, keys: np.ndarray, table: np.ndarray | None = None) -> "IdMap":
        m = cls()
        for row in keys:
            m.add(row.tobytes())
        return m

    @property
    def nbytes(self) -> int:
        return len(self._keys) * (33 + 16 + 101)
