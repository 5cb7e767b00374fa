"""pytest-benchmark suite for the in-process MemoryStore API (see benchmarks/conftest.py).

- search_messages over the seeded query set (limit 20) on a store of CONVMEM_BENCH_SIZE messages,
- write_message of 1 KiB with metadata (each call appends and fdatasyncs),
- import of CONVMEM_BENCH_IMPORT_SIZE messages into an empty store (group commit, 1000 per sync),
- open of an existing store (snapshot + log) followed by its first search,
- get_system_health (memory_estimate) on the same store.
Groups: search, write, import, open, memory; names carry the size.
"""
from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import BENCH_SIZE, IMPORT_SIZE, size_id

from convmem import MemoryStore

CONTENT_1K = ("Remember: the database migration is planned for Tuesday. 東京の会議に参加します。"
              "設定ファイルを確認してください。 ") * 8
CONTENT_1K = CONTENT_1K.encode("utf-8")[:1024].decode("utf-8", "ignore")
META = json.dumps({"tags": ["project", "decision"], "memory_kind": "semantic", "importance": 70})


@pytest.mark.benchmark(group="search")
@pytest.mark.parametrize("size", [BENCH_SIZE], ids=[f"{size_id(BENCH_SIZE)} msgs"])
def test_search_messages(benchmark: Any, imported_store_dir: Path, bench_queries: list[dict[str, Any]],
                         size: int) -> None:
    benchmark.extra_info.update(size=f"{size} messages, limit 20", store_messages=size)
    with MemoryStore.open(imported_store_dir) as store:
        queries = itertools.cycle(bench_queries)
        res = benchmark(lambda: store.search_messages(**next(queries)))
        assert len(res["results"]) <= 20
        # The query set is made of corpus terms: most queries must find something.
        found = sum(1 for q in bench_queries[:100] if store.search_messages(**q)["results"])
        assert found >= 50, found


@pytest.mark.benchmark(group="write")
def test_write_message_1KiB(benchmark: Any, tmp_path: Path) -> None:
    benchmark.extra_info.update(size="1 KiB content into a new store, one fdatasync each",
                                store_messages=0)
    calls = itertools.count()
    with MemoryStore.open(tmp_path / "data") as store:
        def write() -> dict[str, Any]:
            i = next(calls)
            return store.write_message(session_id=f"bench-{i // 100}", role="user",
                                       content=CONTENT_1K, metadata_json=META)
        res = benchmark(write)
        assert res["status"] == "OK"
        assert res["message"]["metadata"]["memory_kind"] == "semantic"
        assert store.get_system_health()["active_messages"] == next(calls)


@pytest.mark.benchmark(group="import")
@pytest.mark.parametrize("size", [IMPORT_SIZE], ids=[f"{size_id(IMPORT_SIZE)} msgs"])
def test_import_messages(benchmark: Any, tmp_path: Path, import_messages: list[dict[str, Any]],
                         size: int) -> None:
    benchmark.extra_info.update(size=f"{size} messages into an empty store, batches of 1000",
                                store_messages=size)
    rounds = itertools.count()

    def fresh_dir() -> tuple[tuple[Path], dict[str, Any]]:
        return (tmp_path / f"import-{next(rounds)}",), {}

    def run(path: Path) -> int:
        with MemoryStore.open(path) as store:
            return store.import_messages(import_messages, batch_size=1000)

    n = benchmark.pedantic(run, setup=fresh_dir, rounds=3, iterations=1)
    assert n == len(import_messages)


@pytest.mark.benchmark(group="open")
@pytest.mark.parametrize("size", [BENCH_SIZE], ids=[f"{size_id(BENCH_SIZE)} msgs"])
def test_open_and_first_search(benchmark: Any, imported_store_dir: Path,
                               bench_queries: list[dict[str, Any]], bench_size: int, size: int) -> None:
    benchmark.extra_info.update(size=f"{size} messages (snapshot + log)", store_messages=size)
    held: list[MemoryStore] = []

    def close_previous() -> None:
        while held:
            held.pop().close()

    def open_and_search() -> dict[str, Any]:
        store = MemoryStore.open(imported_store_dir)
        held.append(store)
        return store.search_messages(**bench_queries[0])

    try:
        res = benchmark.pedantic(open_and_search, setup=close_previous, rounds=5, iterations=1)
        assert isinstance(res["results"], list)
        assert held[0].get_system_health()["active_messages"] == bench_size
    finally:
        close_previous()


@pytest.mark.benchmark(group="memory")
@pytest.mark.parametrize("size", [BENCH_SIZE], ids=[f"{size_id(BENCH_SIZE)} msgs"])
def test_health_memory_estimate(benchmark: Any, imported_store_dir: Path, size: int) -> None:
    """get_system_health, which sums memory_estimate from the containers' byte counts; the
    estimate per message is recorded beside the time (its accuracy is gated: gate.py)."""
    with MemoryStore.open(imported_store_dir) as store:
        health = benchmark(store.get_system_health)
        est = health["memory_estimate"]["total_bytes"]
        benchmark.extra_info.update(size=f"{size} messages", store_messages=size,
                                    estimate_bytes_per_message=round(est / size, 1))
        assert health["active_messages"] == size and est > 0
