"""Expensive reads leave the event loop (issue 15: a 4 KB query of ~600 common terms took 132 ms
at 300k messages, the sessions view of a huge session 101 ms, and both blocked every other
client). Which reads stay on the loop is decided from the arguments alone."""
from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import pytest
from e2e_helpers import ok
from mcp import Client

from convmem.server import build_server
from convmem.server.app import LOOP_QUERY_BYTES, cheap_read

SLOW_SECONDS = 0.4


class SlowStore:
    """A store whose long searches and sessions view take SLOW_SECONDS (as a large store's do);
    records the thread of every call."""

    def __init__(self) -> None:
        self.threads: list[tuple[str, str]] = []
        self.slow_done = threading.Event()  # (set when an expensive call has returned)

    def search_messages(self, **kwargs: Any) -> dict[str, Any]:
        self.threads.append(("search_messages", threading.current_thread().name))
        if len(kwargs["query"]) > LOOP_QUERY_BYTES:
            time.sleep(SLOW_SECONDS)
            self.slow_done.set()
        return {"results": []}

    def read_messages(self, **kwargs: Any) -> dict[str, Any]:
        self.threads.append((f"read_messages/{kwargs.get('view', 'history')}", threading.current_thread().name))
        if kwargs.get("view") == "sessions":
            time.sleep(SLOW_SECONDS)
            self.slow_done.set()
            return {"sessions": []}
        return {"history": []}

    def get_system_health(self) -> dict[str, Any]:
        self.threads.append(("get_system_health", threading.current_thread().name))
        return {"status": "OK"}


@pytest.mark.parametrize("slow_call", [
    ("search_messages", {"query": " ".join(["the"] * 1000)}),
    ("read_messages", {"view": "sessions", "limit": 1000}),
])
def test_an_expensive_read_does_not_block_other_requests(slow_call: tuple[str, dict[str, Any]]) -> None:
    store = SlowStore()
    loop_thread = threading.current_thread().name

    async def scenario() -> None:
        async with Client(build_server(store, "test"), mode="legacy") as client:  # type: ignore[arg-type]
            async with anyio.create_task_group() as tg:
                # Timed from before the expensive call: on the loop it would block even the sleep.
                started = time.monotonic()
                tg.start_soon(ok, client, *slow_call)
                await anyio.sleep(0.05)
                assert await ok(client, "get_system_health", {}) == {"status": "OK"}
                waited = time.monotonic() - started
                # Answered while the expensive read still ran (on the loop it would have come
                # after it). An order, not a time limit: a loaded machine stalled a 0.2 s limit.
                assert not store.slow_done.is_set(), \
                    f"a quick call waited {waited:.3f} s, behind an expensive read"
            assert store.slow_done.is_set()

    anyio.run(scenario)
    assert store.threads[0][1] != loop_thread  # the expensive read ran in a worker thread


def test_cheap_reads_stay_on_the_loop() -> None:
    store = SlowStore()
    loop_thread = threading.current_thread().name
    calls = [
        ("search_messages", {"query": "PostgreSQL 決定"}),
        ("search_messages", {"query": "x" * LOOP_QUERY_BYTES, "limit": 20}),
        ("read_messages", {"session_id": "s"}),
        ("read_messages", {"view": "history", "session_id": "s", "limit": 100}),
        ("get_system_health", {}),
    ]

    async def scenario() -> None:
        async with Client(build_server(store, "test"), mode="legacy") as client:  # type: ignore[arg-type]
            for name, arguments in calls:
                await ok(client, name, arguments)

    anyio.run(scenario)
    assert [thread for _, thread in store.threads] == [loop_thread] * len(calls)


@pytest.mark.parametrize(("name", "arguments", "cheap"), [
    ("get_system_health", None, True),
    ("search_messages", {"query": "short"}, True),
    ("search_messages", {"query": "x" * (LOOP_QUERY_BYTES + 1)}, False),
    ("search_messages", {"query": "é" * (LOOP_QUERY_BYTES // 2 + 1)}, False),  # bytes, not characters
    ("search_messages", {"query": "short", "limit": 21}, False),
    ("search_messages", {"query": "short", "context_size": 1}, False),
    ("search_messages", {"query": "short", "limit": 5.0}, False),
    ("search_messages", {"query": 5}, False),
    ("read_messages", {"view": "sessions"}, False),
    ("read_messages", {"view": "history", "session_id": "s", "limit": 1000}, False),
    ("read_messages", {"view": "content", "message_id": "x", "content_limit": 65536}, True),
    ("read_messages", {"view": "context", "message_id": "x", "relation_depth": 2}, True),
    ("read_messages", {"view": "bogus"}, False),
    ("read_messages", {"view": ["content"]}, False),  # unhashable: refused by the store, never raises here
    ("read_messages", {"view": {"a": 1}}, False),
    ("read_messages", {"view": "history", "limit": [1]}, False),
])
def test_cheap_read_bounds(name: str, arguments: dict[str, Any] | None, cheap: bool) -> None:
    assert cheap_read(name, arguments) is cheap
