"""Shared fixtures: a fresh store in a temporary directory."""
from __future__ import annotations

import json
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
