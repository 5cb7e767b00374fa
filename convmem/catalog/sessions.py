"""Sessions: each one's live messages in history order, counts per kind, and the session list.

History order is (timestamp, message id). Server-made ids are monotonic, so ties between
messages written in the same millisecond follow write order.
"""
from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..domain import KINDS

N_KINDS = len(KINDS)
_sizeof = sys.getsizeof  # numpy arrays that own their data count it too
# The name -> number dict's values: an int object each but the interpreter's cached small ones.
_SMALL_INTS, _INT_BYTES = 257, _sizeof(1 << 20)


def _array_bytes(a: np.ndarray) -> int:
    """An array with its data, a view too: a reopened store's histories are disjoint slices of
    the snapshot's hist_* sections, used in place (mapped), which getsizeof leaves out."""
    return _sizeof(a) + (0 if a.flags.owndata else a.nbytes)


class Session:
    # epoch, counts_epoch: the SessionIndex freeze whose sections no longer hold this session's
    # arrays, its kind counts (they were copied since, or made after it). _loaded: for a session
    # loaded from a snapshot, the SessionIndex's loaded sections, which its ts and slots are
    # sliced from on first use (__getattr__), and a weak reference to the SessionIndex (which
    # counts their bytes); unset for a session made since. Not the SessionIndex itself: that
    # was a reference cycle (the index lists its sessions), and a catalog replaced by
    # rebuild_index kept the old snapshot mapped (its file deleted, its pages resident) until
    # the cyclic collector happened to run.
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
        loaded, index_ref = object.__getattribute__(self, "_loaded")
        offsets, hist_ts, hist_slots, counts = loaded
        index = index_ref()
        if name == "kind_counts":
            self.kind_counts = counts[self.num].tolist()
            if index is not None:
                index._bytes += _sizeof(self.kind_counts)  # (load counted what existed then)
            return self.kind_counts
        a, b = int(offsets[self.num]), int(offsets[self.num + 1])
        self.ts = hist_ts[a:b]
        self.slots = hist_slots[a:b]
        if index is not None:
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


Loaded = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # a snapshot's hist_off,
# hist_ts, hist_slots and kind_counts, as SessionIndex.load got them


@dataclass(frozen=True, slots=True)
class Histories:
    """Sessions' histories for the snapshot's hist_* sections (SessionIndex.freeze, histories):
    sessions 0..count-1; those numbered in `made` (ascending) by their arrays (entries past a
    length are not theirs) and kind counts, every other one as `loaded` holds it (a session
    loaded from a snapshot that nothing has asked for since: its history is a range of the
    loaded arrays, which nothing changes)."""
    count: int
    made: list[int]
    ts: list[np.ndarray]
    slots: list[np.ndarray]
    ns: list[int]
    counts: list[list[int]]
    loaded: Loaded | None = None


def histories(sessions: list[Session]) -> Histories:
    """The histories of `sessions`, numbered by their place in the list."""
    return Histories(len(sessions), list(range(len(sessions))), [s.ts for s in sessions],
                     [s.slots for s in sessions], [s.n for s in sessions],
                     [s.kind_counts for s in sessions])


class SessionIndex:
    """Every session by number (dense, in order of first appearance) and by name.

    A store opened from a snapshot makes no object per session: the names come from the
    snapshot's meta, the histories stay ranges of its hist_* sections, and a session's object is
    made when something asks for it (`at`, `get`); the rest are written to the next snapshot
    straight from those sections (`freeze`). Opening a 10M store made 98k objects before any
    query (66-74 ms)."""

    def __init__(self, ulid_of: Callable[[int], bytes]) -> None:
        self._ulid_of = ulid_of  # slot -> 16-byte id, for ordering ties
        self.names: list[str] = []  # by number
        self._nums: dict[str, int] | None = {}  # name -> number (None: made when first needed)
        self._by_num: list[Session | None] = []  # None: loaded and not asked for yet (_make)
        self.live_sessions = 0
        self._order: list[tuple[int, bytes, int]] | None = None  # (started_at, name utf-8, num)
        self._bytes = 0  # the sessions' own bytes (Session.nbytes), kept as they change
        # Copy on write for a snapshot written in the background (`freeze`): while `_frozen`,
        # a session whose epoch is older than `_epoch` still shares its arrays with the frozen
        # histories and copies them before changing one of their first n entries.
        self._epoch = 0
        self._frozen = False
        self._loaded: Loaded | None = None  # (load)
        self._loaded_names_bytes = 0  # the loaded names' strings (-1: not summed yet)

    # -- membership ------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._by_num)

    def number(self, name: str) -> int:
        """The session's number, creating the session when new."""
        nums = self._names_to_nums()
        num = nums.get(name)
        if num is None:
            num = len(self._by_num)
            s = Session(name, num, self._epoch)
            nums[name] = num
            self.names.append(name)
            self._by_num.append(s)
            self._bytes += s.nbytes()
        return num

    def at(self, num: int) -> Session:
        """Session number `num`."""
        s = self._by_num[num]
        return s if s is not None else self._make(num)

    def get(self, name: str) -> Session | None:
        num = self._names_to_nums().get(name)
        return None if num is None else self.at(num)

    def _names_to_nums(self) -> dict[str, int]:
        nums = self._nums
        if nums is None:  # (after a load: the first write or read by session id makes it)
            nums = self._nums = dict(zip(self.names, range(len(self.names))))
            if len(nums) != len(self.names):
                raise ValueError("the snapshot names a session twice")
        return nums

    def all(self) -> list[Session]:
        """Every session, by number (made where not yet: for the rare whole passes)."""
        return [self.at(num) for num in range(len(self._by_num))]

    def _make(self, num: int) -> Session:
        """The object of loaded session `num` (load): its arrays are made on first use too."""
        assert self._loaded is not None
        offsets = self._loaded[0]
        s = Session.__new__(Session)
        s.name = self.names[num]
        s.num = num
        s._loaded = (self._loaded, weakref.ref(self))
        s.n = int(offsets[num + 1]) - int(offsets[num])
        s.epoch = s.counts_epoch = 0  # (its arrays are the loaded ones: _own copies them)
        self._by_num[num] = s
        self._bytes += _sizeof(s)  # (its name and history entries are counted with load's)
        return s

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
        s = self.at(num)
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
        s = self.at(num)
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

    def freeze(self) -> Histories:
        """Every session's history as it is now, without copying the arrays: until `release`,
        a session copies its arrays (its kind counts) before it changes an entry they hold
        (appends go past n; growing allocates anew). Lists of references, no object per
        session (a tuple each would wake the garbage collector: 28 ms at 10k sessions) and no
        copy per message: a background snapshot concatenates them off the mutex. Sessions not
        made since the load are left to the loaded sections (Histories.loaded)."""
        self._epoch += 1
        self._frozen = True
        made = [num for num, s in enumerate(self._by_num) if s is not None]
        got = [self._by_num[num] for num in made]
        return Histories(len(self._by_num), made, [s.ts for s in got], [s.slots for s in got],
                         [s.n for s in got], [s.kind_counts for s in got], self._loaded)

    def release(self) -> None:
        """The frozen histories are written: no more copies on change."""
        self._frozen = False

    def change_kind(self, num: int, old: int, new: int) -> None:
        s = self.at(num)
        self._own_counts(s)
        counts = s.kind_counts
        counts[old] -= 1
        counts[new] += 1

    def load(self, names: list[str], hist_off: np.ndarray, hist_ts: np.ndarray,
             hist_slots: np.ndarray, kind_counts: np.ndarray) -> None:
        """Restore from a snapshot's arrays (each session's history is hist_*[off[i]:off[i+1]]),
        on an empty index. No session object is made (the class docstring): a session's is on
        first use (`_make`), its history a view of the snapshot's arrays (read-only, not copied)
        after that (Session.__getattr__): the first insert copies it as it grows, remove copies
        it first (_own)."""
        n = len(names)
        if self._by_num or len(hist_off) != n + 1 or len(kind_counts) != n:
            raise ValueError("session sections do not match the sessions")
        self.names = names  # (the caller's list: a snapshot's meta, parsed for this)
        self._nums = None  # (_names_to_nums)
        self._by_num = [None] * n
        self._loaded = (hist_off, hist_ts, hist_slots, kind_counts)
        self.live_sessions += int(np.count_nonzero(hist_off[1:] > hist_off[:-1]))
        # what Session.nbytes counts of each but its object (counted by _make) and its name
        # (nbytes sums the loaded ones when first asked): the histories' entries (the views'
        # data, mapped); the views and count lists are counted when made (Session.__getattr__)
        entries = int(hist_off[n]) if n else 0
        self._bytes += entries * (hist_ts.itemsize + hist_slots.itemsize)
        self._loaded_names_bytes = -1  # (their strings' bytes: summed when first asked for)
        self._order = None

    # -- queries ---------------------------------------------------------------------------
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
            order = []
            offsets = hist_ts = None
            if self._loaded is not None:
                offsets, hist_ts = self._loaded[0].tolist(), self._loaded[1]
            for num, s in enumerate(self._by_num):
                if s is None:  # (a loaded session not made: no object for this either)
                    a = offsets[num]
                    if offsets[num + 1] > a:
                        order.append((int(hist_ts[a]),
                                      self.names[num].encode("utf-8", "surrogatepass"), num))
                elif s.n:
                    order.append((s.started_at, s.name.encode("utf-8", "surrogatepass"), num))
            order.sort()
            self._order = order
        return self._order

    def nbytes(self) -> int:
        """Bytes held: the sessions, the containers that hold them, and the session order while
        it is cached (a list of (started_at, name bytes, num) tuples)."""
        total = self._bytes + _sizeof(self.names) + _sizeof(self._by_num)
        if self._loaded_names_bytes < 0:
            self._loaded_names_bytes = sum(map(_sizeof, self.names[:len(self._loaded[0]) - 1]))
        total += self._loaded_names_bytes
        if self._nums is not None:
            total += _sizeof(self._nums) + _INT_BYTES * max(0, len(self._nums) - _SMALL_INTS)
        if self._order is not None:
            total += _sizeof(self._order) + sum(_sizeof(t) + _sizeof(t[0]) + _sizeof(t[1])
                                                for t in self._order)
        return total
