"""Relations between messages: each live message's outgoing edges and the incoming edges of any id.

Targets are kept as 16-byte ids because a relation may name a message that no longer exists.
A store opened from a snapshot keeps the edges as the snapshot's arrays until something needs
them as dicts (a context view, a write that touches relations): opening stays cheap.
"""
from __future__ import annotations

import sys

import numpy as np

Edge = tuple[int, bytes]  # (relation type, target id)
_sizeof = sys.getsizeof


class RelationIndex:
    def __init__(self) -> None:
        self._outgoing: dict[int, tuple[Edge, ...]] = {}  # source slot -> its current edges
        self._incoming: dict[bytes, list[tuple[int, int]]] = {}  # target id -> [(type, source)]
        self._pending: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._edges = 0
        # Bytes of the objects inside the two dicts (edge tuples, ids, incoming lists and their
        # entries), kept exact as edges come and go; the dicts themselves are measured when asked.
        self._object_bytes = 0

    @classmethod
    def from_arrays(cls, src: np.ndarray, rtype: np.ndarray, target: np.ndarray) -> "RelationIndex":
        r = cls()
        if len(src):
            r._pending = (src, rtype, target)
            r._edges = len(src)
        return r

    def arrays(self, slot_map: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The edges as snapshot sections (rel_src, rel_type, rel_target); with `slot_map`, the
        sources renumbered and those mapped to -1 dropped."""
        if self._pending is not None and slot_map is None:
            src, types, targets = self._pending
        else:
            src_l, types_l, targets_l = [], [], []
            self._materialize()
            for slot, edges in self._outgoing.items():
                for rtype, target in edges:
                    src_l.append(slot)
                    types_l.append(rtype)
                    targets_l.append(target)
            src = np.array(src_l, dtype=np.int32)
            types = np.array(types_l, dtype=np.uint8)
            targets = np.frombuffer(b"".join(targets_l), dtype=np.uint8).reshape(-1, 16)
            if slot_map is not None:
                keep = slot_map[src] >= 0
                src, types, targets = slot_map[src][keep].astype(np.int32), types[keep], targets[keep]
        return {"rel_src": src, "rel_type": types, "rel_target": targets}

    def _materialize(self) -> None:
        if self._pending is None:
            return
        src, types, targets = self._pending
        self._pending = None
        blob = np.ascontiguousarray(targets).tobytes()
        grouped: dict[int, list[Edge]] = {}
        for i, (slot, rtype) in enumerate(zip(src.tolist(), types.tolist())):
            target = blob[16 * i: 16 * i + 16]
            grouped.setdefault(slot, []).append((rtype, target))
        for slot, edges in grouped.items():
            self._add(slot, tuple(edges))

    def add_new(self, slot: int, edges: list[Edge] | tuple[Edge, ...]) -> None:
        """Edges of a message that had none (a new message): nothing to clear."""
        if edges:
            self.set(slot, edges)

    def set(self, slot: int, edges: list[Edge] | tuple[Edge, ...]) -> None:
        """Replace the edges of `slot` (an empty list clears them)."""
        self._materialize()
        self.clear(slot)
        if edges:
            self._add(slot, tuple(edges))

    def _add(self, slot: int, edges: tuple[Edge, ...]) -> None:
        self._outgoing[slot] = edges
        size = _sizeof(edges) + _sizeof(slot)
        for rtype, target in edges:
            size += _sizeof(target) + _sizeof((rtype, target))
            lst = self._incoming.get(target)
            if lst is None:
                lst = self._incoming[target] = []
                size += _sizeof(lst)
            before = _sizeof(lst)
            lst.append((rtype, slot))
            size += _sizeof(lst) - before + _sizeof((rtype, slot))
        self._object_bytes += size
        self._edges += len(edges)

    def clear(self, slot: int) -> None:
        self._materialize()
        old = self._outgoing.pop(slot, None)
        if not old:
            return
        size = _sizeof(old) + _sizeof(slot)
        for rtype, target in old:
            size += _sizeof(target) + _sizeof((rtype, target))
            lst = self._incoming.get(target)
            if lst is not None:
                before = _sizeof(lst)
                try:
                    lst.remove((rtype, slot))
                    size += _sizeof((rtype, slot))
                except ValueError:
                    pass
                size += before - _sizeof(lst)
                if not lst:
                    size += _sizeof(lst)
                    del self._incoming[target]
        self._object_bytes -= size
        self._edges -= len(old)

    def incoming_of(self, target: bytes) -> list[tuple[int, int]]:
        self._materialize()
        return self._incoming.get(target, [])

    def nbytes(self) -> int:
        if self._pending is not None:
            return sum(a.nbytes for a in self._pending)
        return self._object_bytes + _sizeof(self._outgoing) + _sizeof(self._incoming)
