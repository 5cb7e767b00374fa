"""Relations between messages: each live message's outgoing edges and the incoming edges of any id.

Targets are kept as 16-byte ids because a relation may name a message that no longer exists.
"""
from __future__ import annotations

Edge = tuple[int, bytes]  # (relation type, target id)


class RelationIndex:
    def __init__(self) -> None:
        self.outgoing: dict[int, tuple[Edge, ...]] = {}  # source slot -> its current edges
        self.incoming: dict[bytes, list[tuple[int, int]]] = {}  # target id -> [(type, source slot)]
        self._edges = 0

    def set(self, slot: int, edges: list[Edge] | tuple[Edge, ...]) -> None:
        """Replace the edges of `slot` (an empty list clears them)."""
        self.clear(slot)
        if not edges:
            return
        edges = tuple(edges)
        self.outgoing[slot] = edges
        for rtype, target in edges:
            self.incoming.setdefault(target, []).append((rtype, slot))
        self._edges += len(edges)

    def clear(self, slot: int) -> None:
        old = self.outgoing.pop(slot, None)
        if not old:
            return
        for rtype, target in old:
            lst = self.incoming.get(target)
            if lst is not None:
                try:
                    lst.remove((rtype, slot))
                except ValueError:
                    pass
                if not lst:
                    del self.incoming[target]
        self._edges -= len(old)

    def incoming_of(self, target: bytes) -> list[tuple[int, int]]:
        return self.incoming.get(target, [])

    def nbytes(self) -> int:
        # dict slots, tuples, 16-byte keys and list entries: an O(1) estimate per edge.
        return self._edges * 230 + len(self.outgoing) * 100
