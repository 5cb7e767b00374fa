"""Guards of MemoryStore's write protocol: the in-memory work after a durable append is not cut
short (Applying), and a write that found the snapshot's index damaged runs once more on a state
rebuilt from the log (IndexRebuilt, once_more), and the store's mutex, taken only once an
import's indexing has caught up (StoreMutex)."""
from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .._core import index as core_index
from ..store.spill import SpilledDataChanged

if TYPE_CHECKING:
    from .store import MemoryStore

_T = TypeVar("_T")
_DEFERRED_SIGNALS = {signal.SIGINT, signal.SIGTERM}
_MAIN_THREAD = threading.main_thread().ident  # (Python runs signal handlers there only)


class StoreMutex:
    """The store's reentrant lock. A bulk import leaves each batch's indexing running on its
    own thread while the next batch is read, checked and encoded (Catalog.apply_new_batch with
    settle_later); whoever takes this lock first waits for that batch (`settle`, called with the
    lock held), so no other call ever sees a batch half indexed. The import itself takes `raw`,
    the lock without the wait, and settles at the point where it needs the index."""

    __slots__ = ("raw", "_settle")

    def __init__(self, settle: Callable[[], None]) -> None:
        self.raw = threading.RLock()
        self._settle = settle

    def __enter__(self) -> "StoreMutex":
        self.raw.acquire()
        try:
            self._settle()
        except BaseException:
            self.raw.release()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.raw.release()


class IndexRebuilt(Exception):
    """A write found the snapshot's index damaged before writing anything; the state has been
    rebuilt from the log, and the write may run again."""


def once_more(method: Callable[..., _T]) -> Callable[..., _T]:
    """Run a write tool again, once, if it stopped at a damaged index (IndexRebuilt)."""
    @functools.wraps(method)
    def run(self: "MemoryStore", **kwargs: Any) -> _T:
        try:
            return method(self, **kwargs)
        except IndexRebuilt:
            return method(self, **kwargs)
    return run


def is_index_damage(exc: BaseException | None) -> bool:
    """A posting list of a mapped snapshot that failed its check when first used, or posting
    data read back from a spill file that is not what was written to it."""
    return isinstance(exc, (core_index.DamagedPostings, SpilledDataChanged))


class Applying:
    """The in-memory work after an append became durable must not be cut short: the log would
    then hold records the state never saw, and the next snapshot would claim to cover them.

    SIGINT and SIGTERM are held back meanwhile (on the main thread, where Python runs signal
    handlers), so Ctrl-C during an import stops it between batches; any exception that still
    escapes (MemoryError...) rebuilds the state from the snapshot and the log before it passes.
    """

    __slots__ = ("store", "why", "durable", "blocked")

    def __init__(self, store: "MemoryStore", why: str, durable: bool) -> None:
        self.store = store
        self.why = why
        self.durable = durable  # whether the records are in the log yet
        self.blocked: set[signal.Signals] | None = None

    def __enter__(self) -> "Applying":
        if threading.get_ident() == _MAIN_THREAD:
            self.blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED_SIGNALS)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        try:
            if exc is not None and self.durable:
                if is_index_damage(exc):
                    self.store._index_damaged(exc)  # noqa: SLF001 (from the log alone)
                else:
                    self.store._rebuild_state(self.why)  # noqa: SLF001
        finally:
            if self.blocked is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, self.blocked)
