"""Shared fixtures and reporting of the pytest-benchmark suites (benchmarks/bench_*.py).

The suites are kept out of the default test run (pyproject's testpaths is tests/); run them with

    pytest benchmarks --benchmark-json=out.json   # measure; grouped, p50/p99 per row
    pytest benchmarks -q --benchmark-disable       # run every benchmark body once (CI smoke test)

CONVMEM_BENCH_SIZE (default 100000) is the number of messages of the seeded corpus that the
search, open, memory and MCP benchmarks run against, and the number of documents of the synthetic
index benchmark; CONVMEM_BENCH_IMPORT_SIZE (default 10000) the number the import benchmark
imports. The corpus is generated once and cached outside the checkout (corpus.DATA_DIR), the
store built from it once per session in a temporary directory.

Every result carries in `extra_info`: `size` (what was measured, at which size), `core`
(compiled / pure-python), `build` (release / debug, from the loaded extensions), `commit`, and,
once timed, `p50_ms` / `p99_ms` over its rounds. A debug build is refused (set
CONVMEM_BENCH_ALLOW_DEBUG=1 to time it anyway, labelled `build: debug`); a `[compiled...]` row
is refused unless the compiled core is the one loaded (under CONVMEM_PURE=1 it would time the
twin).
"""
from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import _paths  # noqa: E402  (corpus.py and convmem on the path)

import corpus  # noqa: E402

BENCH_SIZE = int(os.environ.get("CONVMEM_BENCH_SIZE", "100000"))
IMPORT_SIZE = int(os.environ.get("CONVMEM_BENCH_IMPORT_SIZE", "10000"))
SEED = int(os.environ.get("CONVMEM_BENCH_SEED", "1"))
ALLOW_DEBUG = os.environ.get("CONVMEM_BENCH_ALLOW_DEBUG", "") not in ("", "0")
QUERY_COUNT = 500
GROUPS = ("search", "write", "import", "open", "codec", "tokenizer", "mcp", "memory")


def size_id(n: int) -> str:
    """100000 -> "100k", 1000000 -> "1M", 300 -> "300": the size in a benchmark's name."""
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


def build_labels() -> dict[str, str]:
    """core, build, commit and core_path of this run (extra_info of every result)."""
    from convmem._core import BUILD_TYPE, CORE_KIND, CORE_PATH
    return {"core": CORE_KIND, "build": BUILD_TYPE, "commit": _paths.commit(),
            "core_path": CORE_PATH}


LABELS = build_labels()
_ROWS: list[dict[str, Any]] = []


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """Collect benchmarks/bench_*.py (pytest's default pattern is test_*.py). Files named on the
    command line are collected by pytest itself, so they are skipped here to avoid duplicates."""
    if (file_path.suffix == ".py" and file_path.name.startswith("bench_")
            and not parent.session.isinitpath(file_path)):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every benchmark belongs to one of GROUPS: a row outside them is a mistake in its file."""
    for item in items:
        if "benchmark" not in getattr(item, "fixturenames", ()):
            continue
        mark = item.get_closest_marker("benchmark")
        group = mark.kwargs.get("group") if mark else None
        if group not in GROUPS:
            raise pytest.UsageError(f"{item.nodeid}: benchmark group {group!r} is not one of {GROUPS}")


@pytest.fixture(autouse=True)
def _labelled(request: pytest.FixtureRequest) -> Iterator[None]:
    """Label every benchmark, refuse what would be mislabelled, and keep p50/p99 for the
    summary. A test must set extra_info["size"] itself (what it measured at which size)."""
    if "benchmark" not in request.fixturenames:
        yield
        return
    if LABELS["build"] == "debug" and not ALLOW_DEBUG:
        pytest.fail(f"refusing to benchmark a debug build of the core ({LABELS['core_path']}): "
                    "rebuild without CONVMEM_DEBUG (rm convmem/_core/*.c; python setup.py "
                    "build_ext --inplace), or set CONVMEM_BENCH_ALLOW_DEBUG=1 to time it labelled "
                    "build=debug", pytrace=False)
    if "[compiled" in request.node.name and LABELS["core"] != "compiled":
        pytest.fail(f"refusing to time {request.node.name} with the {LABELS['core']} core "
                    "(CONVMEM_PURE is set): the row would measure the twin", pytrace=False)
    bm = request.getfixturevalue("benchmark")
    bm.extra_info.update(LABELS)
    yield
    if "size" not in bm.extra_info:
        pytest.fail(f"{request.node.nodeid} did not set extra_info['size']", pytrace=False)
    if bm.stats is None:  # --benchmark-disable: the body ran once, untimed
        return
    data = np.asarray(bm.stats.stats.data) * 1e3
    bm.extra_info["p50_ms"] = round(float(np.percentile(data, 50)), 6)
    bm.extra_info["p99_ms"] = round(float(np.percentile(data, 99)), 6)
    _ROWS.append({"group": bm.group, "name": request.node.name, "rounds": len(data),
                  "iterations": bm.stats.iterations, **bm.extra_info})


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """p50 and p99 per benchmark, by group (pytest-benchmark's own table has no p99)."""
    if not _ROWS:
        return
    tr = terminalreporter
    tr.section(f"convmem benchmarks: p50 / p99 (core {LABELS['core']}, build {LABELS['build']}, "
               f"commit {LABELS['commit']})")
    for group in GROUPS:
        rows = [r for r in _ROWS if r["group"] == group]
        if not rows:
            continue
        tr.write_line(f"[{group}]")
        for r in rows:
            per = f" ({r['iterations']} calls per round)" if r["iterations"] > 1 else ""
            tr.write_line(f"  {r['name']:<58} p50 {r['p50_ms']:>10.4f} ms  p99 {r['p99_ms']:>10.4f} ms"
                          f"  rounds {r['rounds']:>6}{per}  size {r['size']}")


@pytest.fixture(scope="session")
def bench_size() -> int:
    return BENCH_SIZE


def _corpus(n: int) -> list[dict[str, Any]]:
    return list(corpus.read_corpus(corpus.ensure_corpus(n, SEED)))


@pytest.fixture(scope="session")
def corpus_messages() -> list[dict[str, Any]]:
    """The seeded corpus of CONVMEM_BENCH_SIZE messages, as import dicts (cached file)."""
    return _corpus(BENCH_SIZE)


@pytest.fixture(scope="session")
def import_messages() -> list[dict[str, Any]]:
    """The seeded corpus of CONVMEM_BENCH_IMPORT_SIZE messages, for the import benchmark."""
    return _corpus(IMPORT_SIZE)


@pytest.fixture(scope="session")
def bench_queries() -> list[dict[str, Any]]:
    """Seeded search_messages arguments (1-5 terms, some with filters), limit 20."""
    return corpus.make_queries(QUERY_COUNT, SEED, BENCH_SIZE)


@pytest.fixture(scope="session")
def imported_store_dir(tmp_path_factory: pytest.TempPathFactory,
                       corpus_messages: list[dict[str, Any]]) -> Path:
    """A closed store directory holding the whole corpus (snapshot written at close), built once
    per session in a temporary directory."""
    from convmem import MemoryStore

    path = tmp_path_factory.mktemp("bench-store") / "data"
    with MemoryStore.open(path) as store:
        assert store.import_messages(corpus_messages) == len(corpus_messages)
    return path

