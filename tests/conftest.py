"""Shared fixtures: a fresh store in a temporary directory."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator

import pytest

from convmem import MemoryStore


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def store(store_dir: Path) -> Iterator[MemoryStore]:
    s = MemoryStore.open(store_dir)
    try:
        yield s
    finally:
        s.close()


def meta(**fields) -> str:
    """metadata_json text from keyword arguments."""
    return json.dumps(fields, ensure_ascii=False)


def pytest_configure(config) -> None:
    # Child Python processes (servers, crash writers) must import the installed package, not
    # the source tree in the working directory.
    os.environ["PYTHONSAFEPATH"] = "1"
    if os.environ.get("CONVMEM_REQUIRE_COMPILED") == "1":
        from convmem._core import CORE_KIND

        if CORE_KIND != "compiled":
            raise pytest.UsageError(f"the compiled core is required, {CORE_KIND} is loaded")


def pytest_addoption(parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="also run the long soak tests")
    parser.addoption("--run-syscall-faults", action="store_true",
                     help="also run the fault injection at system calls (needs strace, and root "
                          "for the tmpfs)")


OPT_IN = {"slow": "--run-slow", "syscall_faults": "--run-syscall-faults"}


def pytest_collection_modifyitems(config, items) -> None:
    # Soak and system-call fault tests are opt-in: deselected (not skipped) unless asked for.
    off = [mark for mark, option in OPT_IN.items() if not config.getoption(option)]
    keep = [item for item in items if not any(mark in item.keywords for mark in off)]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
