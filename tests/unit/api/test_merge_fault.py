"""A merge that gives its inputs' pages back and then fails (postings._merge's `release`,
DamagedPostings) leaves no lost search results behind: the store rebuilds its state from the
log, and every imported message is found again, in this process and after a reopen."""
from __future__ import annotations

import importlib

import pytest

from convmem import MemoryStore
from convmem._core import CORE_KIND

postings = importlib.import_module("convmem._core.postings")

pytestmark = pytest.mark.skipif(CORE_KIND != "compiled", reason="the compiled index's merge")

N = 7000  # (three flushed segments and a buffer: the import's checkpoint merges them)


def _items():
    for i in range(N):
        yield {"session_id": f"s{i % 7}", "role": "user",
               "content": f"message number {i} about marker{i % 50} and rare{i}"}


def _found(store: MemoryStore, i: int) -> list[str]:
    hits = store.search_messages(query=f"rare{i}", limit=5)["results"]
    return [h["content"] for h in hits]


def test_the_state_is_rebuilt_from_the_log_when_a_releasing_merge_fails(tmp_path) -> None:
    postings._set_give_back_step(4096)
    postings._plant_merge_fault(1)  # the import's closing checkpoint: its merge fails
    try:
        with MemoryStore.open(tmp_path) as store:
            assert store.import_messages(_items()) == N
            assert postings._given_back_bytes() > 0
            for i in (0, 1234, N - 1):
                assert _found(store, i) == [f"message number {i} about marker{i % 50} and rare{i}"]
            health = store.get_system_health()
            assert health["active_messages"] == N
            assert "a merge failed after giving back" in health["last_error"]
    finally:
        postings._plant_merge_fault(0)
        postings._set_give_back_step(1 << 20)
    with MemoryStore.open(tmp_path) as store:
        assert store.get_system_health()["active_messages"] == N
        for i in (5, 4321, N - 2):
            assert _found(store, i) == [f"message number {i} about marker{i % 50} and rare{i}"]
