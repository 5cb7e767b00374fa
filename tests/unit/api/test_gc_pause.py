"""The collector pause of bulk imports (api/gc_pause.py): off while any pause runs, back as it
was when the last one ends, errors included; a bulk import runs inside one."""
from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest

from convmem import MemoryStore
from convmem.api import gc_pause


@pytest.fixture(autouse=True)
def _collector_restored():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_nested_pauses_turn_the_collector_back_on_only_at_the_last_end():
    gc.enable()
    with gc_pause.paused():
        assert not gc.isenabled()
        with gc_pause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_turned_off_by_the_application_stays_off():
    gc.disable()
    with gc_pause.paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_an_error_inside_still_ends_the_pause():
    gc.enable()
    with pytest.raises(RuntimeError):
        with gc_pause.paused():
            raise RuntimeError("boom")
    assert gc.isenabled()


def test_pauses_of_two_threads_overlapping_end_with_the_later():
    gc.enable()
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with gc_pause.paused():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=other)
    t.start()
    assert inside.wait(10)
    with gc_pause.paused():
        pass
    assert not gc.isenabled()  # the other thread's pause still runs
    release.set()
    t.join(10)
    assert gc.isenabled()


def test_import_messages_runs_with_the_collector_paused(tmp_path: Path):
    gc.enable()
    seen: list[bool] = []

    def items():
        for i in range(30):
            seen.append(gc.isenabled())
            yield {"session_id": "s", "role": "user", "content": f"imported {i}"}

    with MemoryStore.open(tmp_path / "store") as s:
        assert s.import_messages(items(), batch_size=10) == 30
        assert gc.isenabled()
        assert seen == [False] * 30
        assert s.get_system_health()["active_messages"] == 30
