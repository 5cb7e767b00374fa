"""Shared fixtures for the pytest-benchmark suites (benchmarks/bench_*.py).

The suites are kept out of the default test run (pyproject's testpaths is tests/); run them with

    pytest benchmarks                         # measure
    pytest benchmarks -q --benchmark-disable  # run every benchmark body once (CI smoke test)

CONVMEM_BENCH_SIZE (default 2000) is the number of messages of the seeded corpus that the search,
open and MCP benchmarks run against; CONVMEM_BENCH_IMPORT_SIZE (default 10000) the number that
the import benchmark imports. The corpus is generated in memory (benchmarks/corpus.py), never
committed.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402,F401  (corpus.py and convmem on the path)

import corpus  # noqa: E402

BENCH_SIZE = int(os.environ.get("CONVMEM_BENCH_SIZE", "2000"))
IMPORT_SIZE = int(os.environ.get("CONVMEM_BENCH_IMPORT_SIZE", "10000"))
SEED = int(os.environ.get("CONVMEM_BENCH_SEED", "1"))
QUERY_COUNT = 500


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """Collect benchmarks/bench_*.py (pytest's default pattern is test_*.py). Files named on the
    command line are collected by pytest itself, so they are skipped here to avoid duplicates."""
    if (file_path.suffix == ".py" and file_path.name.startswith("bench_")
            and not parent.session.isinitpath(file_path)):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


@pytest.fixture(scope="session")
def bench_size() -> int:
    return BENCH_SIZE


@pytest.fixture(scope="session")
def corpus_messages() -> list[dict[str, Any]]:
    """The seeded corpus of CONVMEM_BENCH_SIZE messages, as import dicts."""
    return list(corpus.iter_messages(BENCH_SIZE, SEED))


@pytest.fixture(scope="session")
def import_messages() -> list[dict[str, Any]]:
    """The seeded corpus of CONVMEM_BENCH_IMPORT_SIZE messages, for the import benchmark."""
    return list(corpus.iter_messages(IMPORT_SIZE, SEED))


@pytest.fixture(scope="session")
def bench_queries() -> list[dict[str, Any]]:
    """Seeded search_messages arguments (1-5 terms, some with filters), limit 20."""
    return corpus.make_queries(QUERY_COUNT, SEED, BENCH_SIZE)


@pytest.fixture(scope="session")
def imported_store_dir(tmp_path_factory: pytest.TempPathFactory,
                       corpus_messages: list[dict[str, Any]]) -> Path:
    """A closed store directory holding the whole corpus (snapshot written at close)."""
    from convmem import MemoryStore

    path = tmp_path_factory.mktemp("bench-store") / "data"
    with MemoryStore.open(path) as store:
        assert store.import_messages(corpus_messages) == len(corpus_messages)
    return path
