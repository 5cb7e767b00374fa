"""Batch import (each column extended once a batch) leaves the state that replaying the same
records one by one builds, and writes nothing for the items it rejects."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from convmem import MemoryStore
from convmem.store.snapshot import SNAPSHOT_NAME

COLUMNS = ("doc_offset", "doc_len", "doc_slot", "doc_kind", "doc_flags", "slot_doc",
           "slot_session", "slot_ts")
ULID = "01HK3KNQ13MWEV5X6ZEPWCXZKN"


def items() -> list[dict]:
    out: list[dict] = [
        {"session_id": "s1", "role": "user", "content": "first message", "timestamp": 5000,
         "message_id": ULID},
        {"session_id": "s1", "role": "user", "content": "earlier one", "timestamp": 1000},
        {"session_id": "s2", "role": "system", "content": "another session", "timestamp": 5000,
         "metadata": {"tags": ["project", "décision"], "summary": "a summary",
                      "relations": [{"type": "supersedes", "message_id": ULID}],
                      "memory_kind": "semantic", "memory_tier": "long", "importance": 90}},
        {"session_id": "s1", "role": "assistant", "content": "same tags again", "timestamp": 5000,
         "metadata": {"tags": ["project", "décision"], "source_message_ids": [ULID]}},
        {"session_id": "s3", "role": "user", "content": "ünïcode téxt", "revision": 3,
         "updated_at": 9000, "timestamp": 8000, "metadata": {"tags": ["project"]}},
    ]
    for i in range(40):
        out.append({"session_id": f"s{i % 4}", "role": "user", "content": f"filler number {i}",
                    "timestamp": 2000 + (i * 37) % 5000,
                    "metadata": {"tags": ["project"]} if i % 3 else {}})
    return out


def state(store: MemoryStore) -> dict:
    got = {name: getattr(store._catalog, name).view().tolist() for name in COLUMNS}
    got["sessions"] = [(s.name, s.ts[: s.n].tolist(), s.slots[: s.n].tolist(), s.kind_counts)
                       for s in store._catalog.sessions.all()]
    health = store.get_system_health()
    got["health"] = {k: health[k] for k in ("log_size", "active_messages", "session_count",
                                            "last_sequence", "update_records", "dead_bytes")}
    got["search"] = [r["message_id"] for r in store.search_messages(query="project")["results"]]
    got["context"] = store.read_messages(view="context", message_id=ULID)
    return got


def test_batch_import_state_equals_replay(tmp_path: Path):
    store = MemoryStore.open(tmp_path)
    results = store.import_message_batch(items()[:20])
    results += store.import_message_batch(items()[20:])
    assert results == [None] * len(items())
    imported = state(store)
    store.close()
    (tmp_path / SNAPSHOT_NAME).unlink()  # the reopened store replays every record one by one
    with MemoryStore.open(tmp_path) as replayed:
        assert state(replayed) == imported
    assert imported["doc_flags"][:3] == [0, 0, 3]  # summary and relations flags
    assert imported["health"]["update_records"] == 1  # the item imported at revision 3


def test_batch_rejects_bad_items_and_writes_nothing_for_them(tmp_path: Path):
    good = items()[:3]
    bad = [
        {"session_id": "s", "role": "user", "content": "x\ud800"},
        {"session_id": "s", "role": "user", "content": "ok", "metadata": {"tags": ["é" * 65]}},
        {"session_id": "s", "role": "user", "content": "ok", "message_id": ULID},  # duplicate
        {"session_id": "s", "role": "user", "content": "ok", "colour": "red"},
    ]
    with MemoryStore.open(tmp_path) as store:
        results = store.import_message_batch([good[0], bad[0], good[1], bad[1], bad[2], good[2],
                                              bad[3]])
        assert [r is None for r in results] == [True, False, True, False, False, True, False]
        assert "content" in results[1].message and "\ud800" not in results[1].message
        assert results[3].message == "metadata.tags[] must be at most 128 UTF-8 bytes"
        assert results[4].code == "CONFLICT"
        assert store.get_system_health()["active_messages"] == 3
        assert len(store._catalog.doc_offset.view()) == 3 and len(store._catalog.slot_ts.view()) == 3
        assert store.import_message_batch(bad[:2], all_or_nothing=True)[0] is not None
        assert store.get_system_health()["active_messages"] == 3
        size = (tmp_path / "messages.log").stat().st_size
        assert store.import_message_batch([good[0] | {"content": 5}]) != [None]
        assert (tmp_path / "messages.log").stat().st_size == size
        assert np.array_equal(store._catalog.slot_doc.view(), np.arange(3))
