"""What a store opened from a snapshot leaves for later (issue 14): no object per session
(SessionIndex: a session's is made when something asks for it, and the next snapshot writes the
others straight from the loaded sections), and the recall keys' tag lists parsed when a tool
needs them. Held to the state replayed from the log."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson

from convmem import MemoryStore
from convmem.store.io import IoCounters
from convmem.store.snapshot import SNAPSHOT_NAME, read_snapshot, write_snapshot

KINDS = ("episode", "semantic", "procedure")


def _fill(s: MemoryStore, sessions: int, per: int) -> dict[str, list[str]]:
    ids: dict[str, list[str]] = {}
    for i in range(sessions * per):
        name = f"s{i % sessions}"
        m = s.write_message(session_id=name, role="user", content=f"message {i} of {name}",
                            metadata={"memory_kind": KINDS[i % 3]})["message"]
        ids.setdefault(name, []).append(m["message_id"])
    return ids


def _replayed(store_dir: Path, end: int, tmp_path: Path) -> MemoryStore:
    """A store with no snapshot whose log is store_dir's up to `end`: every session made."""
    truth = tmp_path / "truth"
    truth.mkdir(mode=0o700)
    (truth / "cursor.key").write_bytes((store_dir / "cursor.key").read_bytes())
    (truth / "messages.log").write_bytes((store_dir / "messages.log").read_bytes()[:end])
    return MemoryStore.open(truth)


def test_open_makes_no_session_object_until_one_is_asked_for(store_dir: Path):
    with MemoryStore.open(store_dir) as s:
        _fill(s, sessions=6, per=5)
        s.checkpoint()
    with MemoryStore.open(store_dir) as s:
        sessions = s._catalog.sessions
        assert len(sessions) == 6 and sessions._by_num == [None] * 6
        assert s.get_system_health()["session_count"] == 6
        history = s.read_messages(session_id="s2")["history"]
        assert [m["content"] for m in history] == [f"message {i} of s2" for i in range(2, 30, 6)]
        assert [x is not None for x in sessions._by_num] == [False, False, True, False, False,
                                                             False]
        # the session order from the loaded sections, without objects, as the made ones give it
        order = sessions.ordered()
        assert [x is not None for x in sessions._by_num].count(True) == 1
        assert [name for _, name, _ in order] == [b"s0", b"s1", b"s2", b"s3", b"s4", b"s5"]
        # the histories a snapshot would write now: those it was loaded from (s3-s5 unmade,
        # after the last made one)
        _, loaded = read_snapshot(store_dir / SNAPSHOT_NAME)
        _, _, histories = s._catalog._state_sections()
        now = histories()
        s._catalog.release_frozen()
        for name in ("hist_off", "hist_ts", "hist_slots", "kind_counts"):
            assert np.array_equal(now[name], np.array(loaded[name])), name
        sessions._order = None
        sessions.all()
        assert sessions.ordered() == order


def test_the_next_snapshot_writes_made_and_untouched_sessions_as_the_log_has_them(
        store_dir: Path, tmp_path: Path):
    with MemoryStore.open(store_dir) as s:
        ids = _fill(s, sessions=8, per=6)
        s.checkpoint()
    with MemoryStore.open(store_dir) as s:
        assert s._catalog.sessions._by_num == [None] * 8
        s.write_message(session_id="s1", role="user", content="appended to a loaded session")
        s.delete_message(message_id=ids["s3"][2])  # out of the middle of a loaded history
        s.update_message(message_id=ids["s5"][1], metadata={"memory_kind": "procedure"})  # (was semantic)
        s.read_messages(session_id="s6")  # made, unchanged
        s.write_message(session_id="new", role="user", content="a session of its own")
        made = [x is not None for x in s._catalog.sessions._by_num]
        assert made == [False, True, False, True, False, True, True, False, True]
        s.checkpoint()
        order = s._catalog.sessions.ordered()
    meta, sections = read_snapshot(store_dir / SNAPSHOT_NAME)
    with _replayed(store_dir, meta["covered_end"], tmp_path) as t:
        t_meta, expected, histories = t._catalog._state_sections()
        expected.update(histories())
        assert t._catalog.sessions.ordered() == order
    assert meta["sessions"] == t_meta["sessions"] == [f"s{i}" for i in range(8)] + ["new"]
    for name in ("hist_off", "hist_ts", "hist_slots", "kind_counts"):
        assert np.array_equal(np.array(sections[name]), expected[name]), name
    # and the store reopened from it reads every session as before
    with MemoryStore.open(store_dir) as s:
        assert len(s.read_messages(session_id="s3")["history"]) == 5
        assert [m["content"] for m in s.read_messages(session_id="s1")["history"]][-1] == \
            "appended to a loaded session"


def _tagged(s: MemoryStore) -> None:
    for i in range(40):
        s.write_message(session_id=f"t{i % 4}", role="user", content=f"tagged {i}",
                        metadata={"tags": [f"tag{i % 5}", f"tag{i % 3}"][: 1 + i % 2]})


def _tag_counts(s: MemoryStore) -> dict[str, int]:
    return {t["tag"]: t["count"] for t in s.list_tags(limit=100)["tags"]}


def test_tag_lists_are_parsed_when_first_needed_and_written_back_as_they_came(store_dir: Path):
    with MemoryStore.open(store_dir) as s:
        _tagged(s)
        expected = _tag_counts(s)
        s.checkpoint()
    meta, _ = read_snapshot(store_dir / SNAPSHOT_NAME)
    assert isinstance(meta["recall_tagsets"], str)
    assert len(orjson.loads(meta["recall_tagsets"])) == meta["recall_tagset_count"] > 5
    with MemoryStore.open(store_dir) as s:
        rk = s._catalog.recall
        assert rk._tagsets is None and s.search_messages(query="tagged")["results"]
        s.write_message(session_id="t0", role="user", content="no tags")  # a snapshot's worth
        s.checkpoint()
        assert rk._tagsets is None  # neither the write nor the snapshot parsed them
    again, _ = read_snapshot(store_dir / SNAPSHOT_NAME)
    assert again["last_seq"] == meta["last_seq"] + 1
    assert again["recall_tagsets"] == meta["recall_tagsets"]
    with MemoryStore.open(store_dir) as s:
        assert _tag_counts(s) == expected and s._catalog.recall._tagsets is not None
        s.write_message(session_id="t0", role="user", content="new list",
                        metadata={"tags": ["fresh", "tag1"]})
        expected["fresh"] = 1
        expected["tag1"] += 1
        assert _tag_counts(s) == expected
    with MemoryStore.open(store_dir) as s:
        assert _tag_counts(s) == expected


def test_a_snapshot_holding_its_tag_lists_as_an_array_is_read_as_before(store_dir: Path):
    """Snapshots written before the tag lists became JSON text (state version 4) hold a JSON
    array there, and no count: such a store opens from its snapshot (no re-index) with the same
    tags."""
    with MemoryStore.open(store_dir) as s:
        _tagged(s)
        expected = _tag_counts(s)
        s.checkpoint()
    path = store_dir / SNAPSHOT_NAME
    meta, arrays = read_snapshot(path)
    assert meta["state_version"] == 5
    meta["recall_tagsets"] = orjson.loads(meta.pop("recall_tagsets"))
    del meta["recall_tagset_count"]
    meta["state_version"] = 4
    meta.pop("sections")
    write_snapshot(path, meta, {k: np.array(v) for k, v in arrays.items()}, IoCounters())
    with MemoryStore.open(store_dir) as s:
        assert s.get_system_health()["snapshot_valid"] is True and s._catalog.recall._tagsets
        assert _tag_counts(s) == expected
