"""Writes whose fdatasync runs on the flusher thread while their in-memory work is done.

A write is answered only once its flush has succeeded. A failed flush (or failed work) leaves
nothing of the write behind: not in reads, search, scores or health, and not in the log after a
reopen. Readers on other threads never see a write half applied.
"""
from __future__ import annotations

import errno
import os
import threading

import pytest

import convmem.api.store
from convmem import ConvMemError, MemoryStore
from conftest import meta

def io_error(call) -> ConvMemError:
    with pytest.raises(ConvMemError) as info:
        call()
    assert info.value.code == "IO_ERROR"
    return info.value


class FailingFlusher:
    """The store's flusher, except that its next `failures` flushes report EIO (after really
    flushing, so that only cutting the record back keeps it out of the reopened log)."""

    def __init__(self, real, failures: int = 1) -> None:
        self.real = real
        self.failures = failures

    def start(self, fd: int, offset: int = 0, nbytes: int = 0) -> None:
        self.real.start(fd, offset, nbytes)

    def wait(self) -> None:
        self.real.wait()
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EIO, os.strerror(errno.EIO))


def fail_next_flush(store: MemoryStore) -> None:
    store._log._syncer = FailingFlusher(store._log._syncer)


def ids_found(store: MemoryStore, query: str, **kw) -> list[str]:
    return [r["message_id"] for r in store.search_messages(query=query, **kw)["results"]]


def history(store: MemoryStore, session: str) -> list[str]:
    return [m["message_id"] for m in store.read_messages(session_id=session, limit=100)["history"]]


def content(store: MemoryStore, message_id: str) -> dict:
    return store.read_messages(view="content", message_id=message_id)["content_range"]


def counts(store: MemoryStore) -> dict:
    h = store.get_system_health()
    return {k: h[k] for k in ("log_size", "active_messages", "session_count", "deleted_messages",
                              "last_sequence", "update_records", "dead_bytes")}


def io_delta(before: dict, after: dict) -> dict:
    return {k: after["io"][k] - before["io"][k] for k in after["io"]}


# -- a failed flush in the store ---------------------------------------------------------
def test_failed_flush_of_a_new_message_leaves_nothing(store_dir):
    s = MemoryStore.open(store_dir)
    kept = s.write_message(session_id="s", role="user", content="alpha shared words",
                           metadata_json=meta(tags=["t"]))["message"]["message_id"]
    scores = s.search_messages(query="alpha shared words")
    c0, h0 = counts(s), s.get_system_health()
    fail_next_flush(s)
    io_error(lambda: s.write_message(session_id="ghost", role="user",
                                     content="alpha shared zebra words",
                                     metadata_json=meta(tags=["t", "zebra"], summary="zebra")))
    h1 = s.get_system_health()
    assert counts(s) == c0
    assert h1["status"] == "DEGRADED" and h1["last_error"].startswith("IO_ERROR")
    # Written once, cut back once; the failed flush is not counted, the cut-back's is.
    d = io_delta(h0, h1)
    assert d["write_calls"] == 1 and d["truncate_calls"] == 1 and d["flush_calls"] == 1
    assert os.path.getsize(store_dir / "messages.log") == c0["log_size"]
    assert ids_found(s, "zebra") == []
    assert ids_found(s, "alpha", filters_json='{"tags":["zebra"]}') == []
    assert s.search_messages(query="alpha shared words") == scores  # same docs, same scores
    assert history(s, "ghost") == []
    assert [x["session_id"] for x in s.read_messages(view="sessions")["sessions"]] == ["s"]

    # The next writes take the place (and the slot and session numbers) the failed one had.
    real = s.write_message(session_id="real", role="user", content="zebra crossing")["message"]
    assert ids_found(s, "zebra") == [real["message_id"]]
    assert ids_found(s, "zebra", session_id="real") == [real["message_id"]]
    assert ids_found(s, "zebra", session_id="ghost") == []
    assert content(s, real["message_id"])["content"] == "zebra crossing"
    assert counts(s)["last_sequence"] == c0["last_sequence"] + 1
    # The failed write's doc number stays used, as a dead doc: a store rebuilt from the log,
    # which never had it, gives the same scores.
    scores = s.search_messages(query="alpha shared zebra words")
    s.close()
    with MemoryStore.open(store_dir) as s:  # from the snapshot written at close
        assert s.search_messages(query="alpha shared zebra words") == scores
        assert set(ids_found(s, "alpha")) == {kept}
        assert history(s, "ghost") == []
        assert s.get_system_health()["recovered_tail"] is False
    (store_dir / "snapshot.bin").unlink()
    with MemoryStore.open(store_dir) as s:  # from the log alone
        assert s.search_messages(query="alpha shared zebra words") == scores
        s.rebuild_index()
        assert s.search_messages(query="alpha shared zebra words") == scores


def test_failed_flush_of_an_update_keeps_the_old_version(store_dir):
    with MemoryStore.open(store_dir) as s:
        m = s.write_message(session_id="s", role="user", content="old giraffe")["message"]
        s.write_message(session_id="s", role="user", content="another old giraffe")
        scores = s.search_messages(query="old giraffe okapi")
        c0 = counts(s)
        fail_next_flush(s)
        io_error(lambda: s.update_message(message_id=m["message_id"], content="new okapi",
                                          metadata_json=meta(memory_kind="semantic")))
        assert counts(s) == c0
        assert s.search_messages(query="old giraffe okapi") == scores
        now = content(s, m["message_id"])
        assert now["content"] == "old giraffe" and now["revision"] == 1
        assert m["message_id"] in ids_found(s, "giraffe") and ids_found(s, "okapi") == []
        assert ids_found(s, "giraffe", filters_json='{"kinds":["semantic"]}') == []
    with MemoryStore.open(store_dir) as s:
        assert content(s, m["message_id"])["revision"] == 1 and ids_found(s, "okapi") == []
        r = s.update_message(message_id=m["message_id"], content="new okapi", expected_revision=1)
        assert r["message"]["revision"] == 2
    with MemoryStore.open(store_dir) as s:
        assert ids_found(s, "okapi") == [m["message_id"]]
        assert m["message_id"] not in ids_found(s, "giraffe")


def test_failed_flush_of_a_delete_keeps_the_message(store_dir):
    with MemoryStore.open(store_dir) as s:
        m = s.write_message(session_id="s", role="user", content="stays here")["message"]
        c0 = counts(s)
        fail_next_flush(s)
        io_error(lambda: s.delete_message(message_id=m["message_id"]))
        assert counts(s) == c0
        assert history(s, "s") == [m["message_id"]] and ids_found(s, "stays") == [m["message_id"]]
    with MemoryStore.open(store_dir) as s:
        assert history(s, "s") == [m["message_id"]]
        assert s.delete_message(message_id=m["message_id"]) == {"status": "OK"}
        assert ids_found(s, "stays") == []


def test_replaced_os_fdatasync_is_honoured(store_dir, monkeypatch):
    """Fault injection by replacing os.fdatasync reaches the store's flushes."""
    with MemoryStore.open(store_dir) as s:
        s.write_message(session_id="s", role="user", content="first")
        c0 = counts(s)

        def broken(fd: int) -> None:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

        monkeypatch.setattr(os, "fdatasync", broken)
        io_error(lambda: s.write_message(session_id="s", role="user", content="second"))
        assert counts(s) == c0 and ids_found(s, "second") == []
        monkeypatch.undo()
        s.write_message(session_id="s", role="user", content="third")
        assert len(history(s, "s")) == 2
    with MemoryStore.open(store_dir) as s:
        assert ids_found(s, "second") == [] and len(history(s, "s")) == 2


def test_work_that_fails_during_the_flush_withdraws_the_record(store_dir, monkeypatch):
    real_prepare = convmem.api.store.prepare

    def broken(rec):
        raise MemoryError("no room")

    with MemoryStore.open(store_dir) as s:
        s.write_message(session_id="s", role="user", content="first")
        c0 = counts(s)
        monkeypatch.setattr(convmem.api.store, "prepare", broken)
        with pytest.raises(MemoryError):
            s.write_message(session_id="s", role="user", content="second")
        monkeypatch.setattr(convmem.api.store, "prepare", real_prepare)
        assert counts(s) == c0
        assert os.path.getsize(store_dir / "messages.log") == c0["log_size"]
        s.write_message(session_id="s", role="user", content="third")
    with MemoryStore.open(store_dir) as s:
        assert [m["content"] for m in s.read_messages(session_id="s")["history"]] == ["first", "third"]


def test_successful_writes_count_one_write_and_one_flush_each(store):
    h0 = store.get_system_health()
    m = store.write_message(session_id="s", role="user", content="a")["message"]
    store.update_message(message_id=m["message_id"], content="b")
    store.delete_message(message_id=m["message_id"])
    h1 = store.get_system_health()
    d = io_delta(h0, h1)
    assert d == {"write_bytes": h1["log_size"] - h0["log_size"], "write_calls": 3,
                 "flush_calls": 3, "truncate_calls": 0, "replace_calls": 0}
    assert h1["last_sequence"] == 3 and h1["status"] == "OK"


# -- concurrency ---------------------------------------------------------------------------
def test_readers_never_see_a_write_half_applied(store):
    n_writes = 150
    done = threading.Event()
    errors: list[BaseException] = []
    reads = [0, 0]

    def reader(k: int) -> None:
        seen_live = 0
        try:
            while not done.is_set():
                found = store.search_messages(query="common", limit=100)["results"]
                for r in found:
                    # Every search hit is a whole message: readable by id, at its revision.
                    got = content(store, r["message_id"])
                    assert got["revision"] >= r["revision"]
                live = store.get_system_health()["active_messages"]
                assert live >= seen_live  # nothing here deletes
                seen_live = live
                hist = store.read_messages(session_id="s0", limit=100)["history"]
                assert [m["timestamp"] for m in hist] == sorted(m["timestamp"] for m in hist)
                reads[k] += 1
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    ids = []
    try:
        for i in range(n_writes):
            m = store.write_message(session_id=f"s{i % 3}", role="user", content=f"common word {i}")
            ids.append(m["message"]["message_id"])
            if i % 5 == 4:
                store.update_message(message_id=ids[i // 2], content=f"common again {i}")
    finally:
        done.set()
        for t in threads:
            t.join()
    assert errors == []
    assert min(reads) > 0
    assert store.get_system_health()["active_messages"] == n_writes
    assert len(store.search_messages(query="common", limit=100)["results"]) == 100


def fail_ftruncate(monkeypatch, times: int) -> None:
    """os.ftruncate fails with EIO the next `times` calls."""
    real = os.ftruncate
    left = [times]

    def ftruncate(fd, size):
        if left[0]:
            left[0] -= 1
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd, size)

    monkeypatch.setattr(os, "ftruncate", ftruncate)


def test_failed_flush_whose_cut_back_also_fails_never_comes_back(store_dir, monkeypatch):
    """A double fault: the flush fails, then cutting the record back off fails too. The record
    is whole in the file; no later write may be acknowledged after it, and it must not come back
    at the next open once the cut has succeeded."""
    with MemoryStore.open(store_dir) as s:
        s.write_message(session_id="s", role="user", content="first")
        fail_next_flush(s)
        # the cut after the failed flush fails, and so does its retry before the next write
        fail_ftruncate(monkeypatch, times=2)
        io_error(lambda: s.write_message(session_id="s", role="user", content="rejected"))
        size = s._log.size  # noqa: SLF001
        assert os.path.getsize(store_dir / "messages.log") > size  # the record is still there
        err = io_error(lambda: s.write_message(session_id="s", role="user", content="refused"))
        assert "could not be cut off" in err.message
        assert s.get_system_health()["status"] == "DEGRADED"
        s.write_message(session_id="s", role="user", content="second")  # the cut works now
        monkeypatch.undo()
        assert [m["content"] for m in s.read_messages(session_id="s")["history"]] == ["first", "second"]
    with MemoryStore.open(store_dir) as s:
        assert [m["content"] for m in s.read_messages(session_id="s")["history"]] == ["first", "second"]
        assert s.get_system_health()["recovered_tail"] is False  # the file ended where it should


def test_cut_back_retried_at_close_keeps_a_rejected_write_out(store_dir, monkeypatch):
    with MemoryStore.open(store_dir) as s:
        s.write_message(session_id="s", role="user", content="first")
        fail_next_flush(s)
        fail_ftruncate(monkeypatch, times=1)
        io_error(lambda: s.write_message(session_id="s", role="user", content="rejected"))
    monkeypatch.undo()
    with MemoryStore.open(store_dir) as s:
        assert [m["content"] for m in s.read_messages(session_id="s")["history"]] == ["first"]


def test_index_that_overflows_half_way_through_staging_leaves_a_consistent_store(store_dir, monkeypatch):
    """The index took the doc, then raised (as at one of its limits): the write is refused with
    INTERNAL_ERROR naming it, nothing is written, and the state stays aligned with the log."""
    from convmem.catalog import catalog as catalog_module

    with MemoryStore.open(store_dir) as s:
        s.write_message(session_id="s", role="user", content="first")
        real_add_doc = catalog_module.Catalog._add_doc

        faults = [1]

        def overflowing(self, *args):
            doc = real_add_doc(self, *args)  # the index and the doc columns took it...
            if faults and args[0][9] == "refused":  # (rec[R_CONTENT]; once: not in the replay)
                faults.pop()
                raise OverflowError("a segment field would hold more than 4 GiB of postings")
            return doc

        monkeypatch.setattr(catalog_module.Catalog, "_add_doc", overflowing)
        err = None
        try:
            s.write_message(session_id="s", role="user", content="refused")
        except ConvMemError as exc:
            err = exc
        monkeypatch.undo()
        assert err is not None and err.code == "INTERNAL_ERROR" and "4 GiB" in err.message
        s.write_message(session_id="s", role="user", content="second")
        assert [m["content"] for m in s.read_messages(session_id="s")["history"]] == ["first", "second"]
        assert len(s.search_messages(query="second")["results"]) == 1
        assert s.get_system_health()["active_messages"] == 2
    with MemoryStore.open(store_dir) as s:
        assert [m["content"] for m in s.read_messages(session_id="s")["history"]] == ["first", "second"]
