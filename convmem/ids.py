"""Message ids: ULIDs (48-bit millisecond time, 80 random bits) made monotonic per store, so that
messages written in the same millisecond keep their write order."""
from __future__ import annotations

import os
import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class UlidClock:
    """Makes monotonic ULIDs; its state (the newest id made) is saved in the snapshot so that
    ids stay increasing across restarts."""

    __slots__ = ("last",)

    def __init__(self, last: tuple[int, int] = (0, 0)) -> None:
        self.last = last  # (ms, 80-bit random part) of the newest id made here

    def new(self) -> tuple[bytes, int]:
        """A ULID greater than every one made before, and its millisecond timestamp."""
        now = now_ms()
        last_ms, last_rand = self.last
        if now > last_ms:
            ms, rand = now, int.from_bytes(os.urandom(10), "big") >> 1  # room to increment
        else:
            ms, rand = last_ms, last_rand + 1
        self.last = (ms, rand)
        return ((ms << 80) | rand).to_bytes(16, "big"), ms

    def to_meta(self) -> list[int | str]:
        return [self.last[0], format(self.last[1], "x")]

    @classmethod
    def from_meta(cls, value: list | None) -> "UlidClock":
        last = value or [0, "0"]
        return cls((int(last[0]), int(last[1], 16)))
