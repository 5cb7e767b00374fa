"""pytest-benchmark suite: search round trips over MCP stdio through the SDK client.

`python -m convmem serve --data-dir D` is spawned on a store holding the seeded corpus of
CONVMEM_BENCH_SIZE messages, and driven by the MCP SDK's Client from a blocking anyio portal
(pytest-benchmark times synchronous calls; the portal's thread hop, a few tens of microseconds,
is part of every figure). A round trip includes the JSON parse of the result text.
"""
from __future__ import annotations

import itertools
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from conftest import BENCH_SIZE, size_id
from mcp import Client, StdioServerParameters

import _paths  # benchmarks/ is on the path (conftest.py)

pytestmark = pytest.mark.benchmark(group="mcp")
COLD_SIZE = 500


def server_params(data_dir: Path) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k.startswith("CONVMEM_")}
    env.pop("CONVMEM_DATA_DIR", None)
    env["PYTHONPATH"] = _paths.convmem_pythonpath()
    return StdioServerParameters(command=sys.executable,
                                 args=["-P", "-m", "convmem", "serve", "--data-dir", str(data_dir)],
                                 env=env, cwd=str(data_dir.parent))


def payload(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    return json.loads(result.content[0].text)


@pytest.fixture(scope="module")
def mcp(imported_store_dir: Path) -> Iterator[tuple[BlockingPortal, Client]]:
    with start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(Client(server_params(imported_store_dir))) as client:
            yield portal, client


@pytest.mark.parametrize("size", [BENCH_SIZE], ids=[f"{size_id(BENCH_SIZE)} msgs"])
def test_mcp_search_round_trip(benchmark: Any, mcp: tuple[BlockingPortal, Client],
                               bench_queries: list[dict[str, Any]], size: int) -> None:
    benchmark.extra_info.update(size=f"{size} messages, stdio", store_messages=size)
    portal, client = mcp
    queries = itertools.cycle(bench_queries)

    def round_trip() -> dict[str, Any]:
        return payload(portal.call(client.call_tool, "search_messages", next(queries)))

    res = benchmark(round_trip)
    assert len(res["results"]) <= 20
    health = payload(portal.call(client.call_tool, "get_system_health", {}))
    assert health["status"] == "OK"


@pytest.mark.parametrize("size", [COLD_SIZE], ids=[f"{COLD_SIZE} msgs"])
def test_mcp_cold_start_first_search(benchmark: Any, tmp_path: Path, corpus_messages: list[dict[str, Any]],
                                     bench_queries: list[dict[str, Any]], size: int) -> None:
    """Spawn the server, initialise the session, run one search, shut down (a host's cold start)."""
    from convmem import MemoryStore

    size = min(size, len(corpus_messages))
    benchmark.extra_info.update(size=f"{size} messages, stdio spawn", store_messages=size)
    data = tmp_path / "cold"
    with MemoryStore.open(data) as store:
        store.import_messages(corpus_messages[:size])

    def cold() -> dict[str, Any]:
        with start_blocking_portal() as portal:
            with portal.wrap_async_context_manager(Client(server_params(data))) as client:
                return payload(portal.call(client.call_tool, "search_messages", bench_queries[0]))

    res = benchmark.pedantic(cold, rounds=3, iterations=1)
    assert isinstance(res["results"], list)
