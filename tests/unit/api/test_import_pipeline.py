"""A bulk import indexes its batches on a thread of its own while it reads, checks and writes
the next ones (Catalog.apply_new_batch(settle_later=True), _IndexingWorker): nothing else ever
sees a batch half indexed (the store's mutex settles first), the result is the index a batch
at a time would build, and a batch that fails to index fails the import with every durable
record still served."""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from convmem import MemoryStore
from convmem._core import codec
from convmem.catalog import catalog as catalog_module
from convmem.store.logfile import LOG_NAME

BATCH = catalog_module.THREAD_MIN_BATCH


class SlowIndex:
    """The store's index with add_batch made slow (and failing from batch `fail_at`): the
    batches then queue up behind the import. It says it releases the GIL, so the pure-Python
    twin is queued too (its sleep releases it)."""

    ADD_BATCH_RELEASES_GIL = True

    def __init__(self, real: Any, delay: float, fail_at: int = -1) -> None:
        self._real = real
        self._delay = delay
        self._fail_at = fail_at
        self.batches = 0
        self.max_behind = 0

    def add_batch(self, *args: Any) -> None:
        self.batches += 1
        if self.batches == self._fail_at:
            raise RuntimeError("injected indexing failure")
        time.sleep(self._delay)
        self._real.add_batch(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def log_records(store_dir: Path) -> int:
    data = (store_dir / LOG_NAME).read_bytes()
    return len(codec.scan_log(data, codec.LOG_HEADER_SIZE, len(data)).offsets)


def items(n: int, start: int = 0) -> list[dict[str, Any]]:
    """Message i holds the word `batchK` of its batch K (BATCH a batch)."""
    return [{"session_id": f"s{i // 50}", "role": "user",
             "content": f"pipelined message {i} batch{i // BATCH}"} for i in range(start, start + n)]


def slow_store(store_dir: Path, delay: float, fail_at: int = -1) -> tuple[MemoryStore, SlowIndex]:
    s = MemoryStore.open(store_dir)
    slow = SlowIndex(s._catalog.index, delay, fail_at)
    s._catalog.index = slow
    return s, slow


def test_batches_queue_behind_the_import_and_the_result_is_the_same_index(store_dir, tmp_path):
    n = 8 * BATCH
    s, slow = slow_store(store_dir, delay=0.05)
    seen_pending = []
    real_batch = s.import_message_batch

    def batch_noting_the_queue(*args: Any, **kwargs: Any) -> Any:
        out = real_batch(*args, **kwargs)
        seen_pending.append(s._catalog.indexing_pending)
        return out

    s.import_message_batch = batch_noting_the_queue  # type: ignore[method-assign]
    assert s.import_messages(items(n), batch_size=BATCH) == n
    assert any(seen_pending)  # the import went on while batches were still indexing
    assert not s._catalog.indexing_pending
    cat = s._catalog
    assert cat.index.n_docs == cat.doc_offset.n == n
    got = [r["message_id"] for r in s.search_messages(query="pipelined", limit=100)["results"]]
    s.close()
    # the same corpus, a batch at a time, each indexed before the next
    with MemoryStore.open(tmp_path / "plain") as p:
        for i in range(0, n, BATCH):
            p.import_message_batch(items(BATCH, i))
        want_n = p.get_system_health()["active_messages"]
        want_scores = [r["score"] for r in p.search_messages(query="pipelined 7", limit=100)["results"]]
    with MemoryStore.open(store_dir) as s:
        assert s.get_system_health()["active_messages"] == want_n == n
        assert [r["score"] for r in s.search_messages(query="pipelined 7", limit=100)["results"]] == want_scores
        assert len(got) == 100


def test_no_other_call_sees_a_batch_half_indexed(store_dir):
    """While an import runs on a thread with its indexing slowed, what another thread sees
    agrees with the log: each message written is counted by health and found by search."""
    n = 24 * BATCH
    s, _slow = slow_store(store_dir, delay=0.03)
    done = threading.Event()
    errors: list[BaseException] = []

    def paced():  # (the import lets go of the lock between batches, as reading a file does)
        for i, item in enumerate(items(n)):
            if i % BATCH == 0:
                time.sleep(0.01)
            yield item

    def run() -> None:
        try:
            s.import_messages(paced(), batch_size=BATCH)
        except BaseException as exc:  # (reported by the assertion below)
            errors.append(exc)
        finally:
            done.set()

    t = threading.Thread(target=run)
    t.start()
    checks = pending = 0
    while not done.is_set():
        pending += s._catalog.indexing_pending  # (batches queued that this check must wait for)
        with s._mutex:  # (no batch is written meanwhile: one view of the log and the store)
            logged = log_records(store_dir)
            active = s.get_system_health()["active_messages"]
            hits = _count_hits(s, n // BATCH)
        assert hits == active == logged, (hits, active, logged)
        checks += 1
        time.sleep(0.01)
    t.join()
    assert not errors
    assert checks >= 3 and pending >= 1
    assert _count_hits(s, n // BATCH) == n
    s.close()


def _count_hits(s: MemoryStore, batches: int) -> int:
    """The messages search finds, by the word of each batch: all of a batch or none of it."""
    total = 0
    for k in range(batches):
        found = len(s.search_messages(query=f"batch{k}", limit=100)["results"])
        assert found in (0, BATCH), (k, found)
        total += found
    return total


def test_a_batch_that_fails_to_index_fails_the_import_and_every_logged_record_is_served(store_dir):
    s, _slow = slow_store(store_dir, delay=0.02, fail_at=3)
    with pytest.raises(RuntimeError, match="injected indexing failure"):
        s.import_messages(items(10 * BATCH), batch_size=BATCH)
    h = s.get_system_health()
    assert "indexing an import batch failed" in h["last_error"]
    active = h["active_messages"]
    # batches 1-3 were written before the failure could be seen; a batch that saw it was not
    # (the import may also have written all ten before the queue reached batch 3)
    assert active % BATCH == 0 and 3 * BATCH <= active <= 10 * BATCH
    assert _count_hits(s, 10) == active  # the state was rebuilt from the log: all found
    s.close()
    with MemoryStore.open(store_dir) as s:
        assert s.get_system_health()["active_messages"] == active
        assert _count_hits(s, 10) == active


def test_a_single_batch_outside_a_bulk_import_is_indexed_before_it_returns(store_dir):
    s, _slow = slow_store(store_dir, delay=0.05)
    s.import_message_batch(items(BATCH))
    assert not s._catalog.indexing_pending
    assert s._catalog.index.n_docs == BATCH
    s.close()
