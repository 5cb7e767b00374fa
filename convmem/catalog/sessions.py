"""Sessions: each one's live messages in history order, counts per kind, and the session list.

History order is (timestamp, message id). Server-made ids are monotonic, so ties between
messages written in the same millisecond follow write order.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

import numpy as np

from ..domain import KINDS

N_KINDS = len(KINDS)
_sizeof = sys.getsizeof  # numpy arrays that own their data count it too


def _array_bytes(a: np.ndarray) -> int:
    """An array with its data, a view too: a reopened store's histories are disjoint slices of
    the snapshot's hist_* sections, used in place (mapped), which getsizeof leaves out."""
    return _sizeof(a) + (0 if a.flags.owndata else a.nbytes)


class Session:
    # epoch, counts_epoch: the SessionIndex freeze whose sections no longer hold this session's
    # arrays, its kind counts (they were copied since, or made after it). _loaded: the
    # SessionIndex that loaded it from a snapshot, which its ts and slots are sliced from on
    # first use (__getattr__); unset for a session made since.
    __slots__ = ("name", "num", "ts", "slots", "n", "kind_counts", "epoch", "counts_epoch",
                 "_loaded")

    def __init__(self, name: str, num: int, epoch: int = 0) -> None:
        self.name = name
        self.num = num
        self.ts = np.zeros(4, dtype=np.int64)
        self.slots = np.zeros(4, dtype=np.int32)
        self.n = 0
        self.kind_counts = [0] * N_KINDS
        self.epoch = self.counts_epoch = epoch

    def __getattr__(self, name: str) -> Any:
        """`ts`, `slots` and `kind_counts` of a session loaded from a snapshot (views of its
        hist_* sections, a list from kind_counts), made on first use rather than at open: they
        were most of loading the sessions (167 -> 102 ms for 98k sessions, a 10M store's)."""
        if name not in ("ts", "slots", "kind_counts"):
            raise AttributeError(name)
        index = object.__getattribute__(self, "_loaded")
        offsets, hist_ts, hist_slots, counts = index._loaded
        if name == "kind_counts":
            self.kind_counts = counts[self.num].tolist()
            index._bytes += _sizeof(self.kind_counts)  # (load counted what existed then)
            return self.kind_counts
        a, b = offsets[self.num], offsets[self.num + 1]
        self.ts = hist_ts[a:b]
        self.slots = hist_slots[a:b]
        index._bytes += _sizeof(self.ts) + _sizeof(self.slots)  # (their data: counted by load)
        return self.ts if name == "ts" else self.slots

    @property
    def started_at(self) -> int:
        return int(self.ts[0])

    @property
    def last_message_at(self) -> int:
        return int(self.ts[self.n - 1])

    def nbytes(self) -> int:
        """What this session holds: the object, its name, its two arrays and its counts."""
        return (_sizeof(self) + _sizeof(self.name) + _array_bytes(self.ts)
                + _array_bytes(self.slots) + _sizeof(self.kind_counts))

    def arrays_nbytes(self) -> int:
        return _array_bytes(self.ts) + _array_bytes(self.slots)


# Sessions' histories for the snapshot's hist_* sections: (ts arrays, slot arrays, lengths,
# kind counts), one entry per session in number order (entries past a length are not theirs).
Histories = tuple[list[np.ndarray], list[np.ndarray], list[int], list[list[int]]]


def histories(sessions: list[Session]) -> Histories:
    return ([s.ts for s in sessions], [s.slots for s in sessions], [s.n for s in sessions],
            [s.kind_counts for s in sessions])


class SessionIndex:
    def __init__(self, ulid_of: Callable[[int], bytes]) -> None:
        self._ulid_of = ulid_of  # slot -> 16-byte id, for ordering ties
        self.by_name: dict[str, Session] = {}
        self.by_num: list[Session] = []
        self.live_sessions = 0
        self._order: list[tuple[int, bytes, int]] | None = None  # (started_at, name utf-8, num)
        self._bytes = 0  # the sessions' own bytes (Session.nbytes), kept as they change
        # Copy on write for a snapshot written in the background (`freeze`): while `_frozen`,
        # a session whose epoch is older than `_epoch` still shares its arrays with the frozen
        # histories and copies them before changing one of their first n entries.
        self._epoch = 0
        self._frozen = False
        self._loaded: tuple[list[int], np.ndarray, np.ndarray, np.ndarray] | None = None  # (load)

    # -- membership ------------------------------------------------------------------------
    def number(self, name: str) -> int:
        """The session's number, creating the session when new."""
        s = self.by_name.get(name)
        if s is None:
            s = Session(name, len(self.by_num), self._epoch)
            self.by_name[name] = s
            self.by_num.append(s)
            self._bytes += s.nbytes()
        return s.num

    def _position(self, s: Session, ts: int, ulid: bytes) -> int:
        """Index of the first entry ordered after (ts, ulid) or equal to it."""
        if s.n == 0:
            return 0
        last = s.ts[s.n - 1]
        if ts > last or (ts == last and ulid > self._ulid_of(int(s.slots[s.n - 1]))):
            return s.n  # the common case: a new message is the session's latest
        view = s.ts[: s.n]
        lo = int(np.searchsorted(view, ts, side="left"))
        hi = int(np.searchsorted(view, ts, side="right"))
        # Within a run of equal timestamps (an import of messages made in one millisecond, or
        # given one timestamp), ids decide: a binary search, so that such runs stay logarithmic.
        while lo < hi:
            mid = (lo + hi) // 2
            if self._ulid_of(int(s.slots[mid])) < ulid:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def insert(self, num: int, ts: int, slot: int, ulid: bytes, kind: int) -> None:
        s = self.by_num[num]
        i = self._position(s, ts, ulid)
        if s.n == len(s.ts):
            self._bytes -= s.arrays_nbytes()
            extra = max(4, len(s.ts) // 2)
            s.ts = np.concatenate([s.ts, np.zeros(extra, dtype=np.int64)])
            s.slots = np.concatenate([s.slots, np.zeros(extra, dtype=np.int32)])
            self._bytes += s.arrays_nbytes()
        if i < s.n:
            self._own(s)
            s.ts[i + 1 : s.n + 1] = s.ts[i : s.n].copy()
            s.slots[i + 1 : s.n + 1] = s.slots[i : s.n].copy()
        s.ts[i] = ts
        s.slots[i] = slot
        s.n += 1
        self._own_counts(s)
        s.kind_counts[kind] += 1
        if s.n == 1:
            self.live_sessions += 1
            self._order = None
        elif i == 0:
            self._order = None

    def remove(self, num: int, ts: int, slot: int, ulid: bytes, kind: int) -> None:
        s = self.by_num[num]
        i = self._position(s, ts, ulid)
        if i >= s.n or int(s.slots[i]) != slot:
            raise RuntimeError("history index lost track of a message")
        self._own(s)
        s.ts[i : s.n - 1] = s.ts[i + 1 : s.n].copy()
        s.slots[i : s.n - 1] = s.slots[i + 1 : s.n].copy()
        s.n -= 1
        self._own_counts(s)
        s.kind_counts[kind] -= 1
        if s.n == 0:
            self.live_sessions -= 1
            self._order = None
        elif i == 0:
            self._order = None

    def _own(self, s: Session) -> None:
        """Make s's arrays its own before a change of one of its first n entries: a read-only
        view of a mapped snapshot, or arrays a frozen history still holds, are copied."""
        if not s.ts.flags.writeable or (self._frozen and s.epoch < self._epoch):
            self._bytes -= s.arrays_nbytes()
            s.ts = s.ts.copy()
            s.slots = s.slots.copy()
            self._bytes += s.arrays_nbytes()
            s.epoch = self._epoch

    def _own_counts(self, s: Session) -> None:
        """Make s's kind counts its own before they change (a frozen history holds the list)."""
        if self._frozen and s.counts_epoch < self._epoch:
            s.kind_counts = list(s.kind_counts)
            s.counts_epoch = self._epoch

    def freeze(self) -> "Histories":
        """Every session's history as it is now, without copying the arrays: until `release`,
        a session copies its arrays (its kind counts) before it changes an entry they hold
        (appends go past n; growing allocates anew). Four lists of references, no object per
        session (a tuple each would wake the garbage collector: 28 ms at 10k sessions) and no
        copy per message: a background snapshot concatenates them off the mutex."""
        self._epoch += 1
        self._frozen = True
        return histories(self.by_num)

    def release(self) -> None:
        """The frozen histories are written: no more copies on change."""
        self._frozen = False

    def change_kind(self, num: int, old: int, new: int) -> None:
        s = self.by_num[num]
        self._own_counts(s)
        counts = s.kind_counts
        counts[old] -= 1
        counts[new] += 1

    def load(self, names: list[str], hist_off: np.ndarray, hist_ts: np.ndarray,
             hist_slots: np.ndarray, kind_counts: np.ndarray) -> None:
        """Restore from a snapshot's arrays (each session's history is hist_*[off[i]:off[i+1]]).

        Each session's history is a view of the snapshot's arrays (read-only, not copied), made
        on its first use (Session.__getattr__): the first insert copies it as it grows, remove
        copies it first (_own)."""
        offsets = hist_off.tolist()
        # what loaded sessions take their histories and counts from (Session.__getattr__)
        self._loaded = (offsets, hist_ts, hist_slots, kind_counts)
        new = Session.__new__
        by_name, by_num = self.by_name, self.by_num
        live = 0
        for num, name in enumerate(names):
            s = new(Session)
            s.name = name
            s.num = num
            a, b = offsets[num], offsets[num + 1]
            s._loaded = self  # (ts and slots sliced on first use: no object per session)
            s.n = b - a
            s.epoch = s.counts_epoch = 0
            by_name[name] = s
            by_num.append(s)
            live += s.n > 0
        self.live_sessions += live
        if by_num:  # what Session.nbytes counts of each, summed without a call per session:
            # the objects and names, and the histories' entries (the views' data, mapped); the
            # views and count lists are counted when made (Session.__getattr__)
            entries = offsets[len(names)]
            data = entries * (hist_ts.itemsize + hist_slots.itemsize)
            self._bytes += _sizeof(by_num[0]) * len(names) + sum(map(_sizeof, names)) + data
        self._order = None

    # -- queries ---------------------------------------------------------------------------
    def get(self, name: str) -> Session | None:
        return self.by_name.get(name)

    def after(self, s: Session, ts: int, ulid: bytes) -> int:
        """Index of the first entry strictly after (ts, ulid)."""
        i = self._position(s, ts, ulid)
        if i < s.n and int(s.ts[i]) == ts and self._ulid_of(int(s.slots[i])) == ulid:
            i += 1
        return i

    def before(self, s: Session, ts: int, ulid: bytes) -> int:
        """Index of the last entry strictly before (ts, ulid); -1 when there is none."""
        return self._position(s, ts, ulid) - 1

    def index_of(self, s: Session, ts: int, slot: int, ulid: bytes) -> int:
        i = self._position(s, ts, ulid)
        if i >= s.n or int(s.slots[i]) != slot:
            raise RuntimeError("history index lost track of a message")
        return i

    def ordered(self) -> list[tuple[int, bytes, int]]:
        """Sessions with live messages by (started_at, session id bytes)."""
        if self._order is None:
            self._order = sorted(
                (s.started_at, s.name.encode("utf-8", "surrogatepass"), s.num)
                for s in self.by_num
                if s.n
            )
        return self._order

    def nbytes(self) -> int:
        """Bytes held: the sessions, the two containers that hold them, and the session order
        while it is cached (a list of (started_at, name bytes, num) tuples)."""
        total = self._bytes + _sizeof(self.by_name) + _sizeof(self.by_num)
        if self._order is not None:
            total += _sizeof(self._order) + sum(_sizeof(t) + _sizeof(t[0]) + _sizeof(t[1])
                                                for t in self._order)
        return total
