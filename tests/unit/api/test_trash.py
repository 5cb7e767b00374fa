"""The trash: list_deleted and restore_message against a plain model, across reopen (replay and
snapshot), backup, export, health and rebuild_index (after which the deleted are gone for good)."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from conftest import meta
from convmem import ConvMemError, MemoryStore
from convmem.api.trash import SNIPPET_BYTES, snippet


def write(store: MemoryStore, session: str, content: str, **fields) -> dict:
    return store.write_message(session_id=session, role="user", content=content,
                               metadata_json=meta(**fields) if fields else None)["message"]


def all_deleted(store: MemoryStore, **kwargs) -> list[dict]:
    """Every page of list_deleted, followed through nextCursor."""
    out, cursor = [], None
    while True:
        page = store.list_deleted(cursor=cursor, **kwargs)
        out += page["deleted"]
        cursor = page.get("nextCursor")
        if cursor is None:
            return out


def history_ids(store: MemoryStore, session: str) -> list[str]:
    return [m["message_id"] for m in store.read_messages(view="history", session_id=session)["history"]]


def test_a_restored_message_is_as_it_was_when_deleted(store: MemoryStore) -> None:
    first = write(store, "s", "alpha one")
    target = write(store, "s", "the kiwifruit decision", tags=["fruit"], summary="kiwi",
                   memory_kind="semantic", importance=80, tool_call_id="call-1",
                   relations=[{"type": "derived_from", "message_id": first["message_id"]}],
                   source_message_ids=[first["message_id"]])
    last = write(store, "s", "omega three")
    assert store.delete_message(message_id=target["message_id"]) == {"status": "OK"}
    assert history_ids(store, "s") == [first["message_id"], last["message_id"]]
    assert store.search_messages(query="kiwifruit")["results"] == []

    restored = store.restore_message(message_id=target["message_id"])
    assert restored["status"] == "OK"
    got = restored["message"]
    assert got["revision"] == target["revision"] + 1
    assert got["updated_at"] >= target["updated_at"]
    for key in ("message_id", "session_id", "timestamp", "role", "content", "metadata"):
        assert got[key] == target[key], key
    # Back in its place in the history, in search, and in the relation graph (both ways).
    assert history_ids(store, "s") == [first["message_id"], target["message_id"], last["message_id"]]
    hits = store.search_messages(query="kiwifruit")["results"]
    assert [h["message_id"] for h in hits] == [target["message_id"]]
    ctx = store.read_messages(view="context", message_id=first["message_id"], before=0, after=0)
    assert [(r["direction"], r["message"]["message_id"]) for r in ctx["relations"]] == [
        ("incoming", target["message_id"])]
    assert store.read_messages(view="content", message_id=target["message_id"])["content_range"][
        "content"] == "the kiwifruit decision"
    assert store.list_deleted() == {"deleted": [], "total_deleted": 0}


def test_list_deleted_entries_and_their_order(store: MemoryStore) -> None:
    long_text = "ä" * 300  # 600 UTF-8 bytes: the snippet is cut at a whole character
    a = write(store, "s1", long_text, summary="the summary")
    b = write(store, "s2", "short one")
    c = write(store, "s1", "third")
    for m in (b, a, c):
        store.delete_message(message_id=m["message_id"])
    page = store.list_deleted()
    assert page["total_deleted"] == 3 and "nextCursor" not in page
    assert [e["message_id"] for e in page["deleted"]] == [c["message_id"], a["message_id"], b["message_id"]]
    seqs = [e["deleted_seq"] for e in page["deleted"]]
    assert seqs == sorted(seqs, reverse=True) and len(set(seqs)) == 3
    entry = page["deleted"][1]
    assert entry == {
        "message_id": a["message_id"], "session_id": "s1", "role": "user",
        "timestamp": a["timestamp"], "revision": 1, "deleted_seq": seqs[1],
        "summary": "the summary", "content_bytes": 600, "snippet": "ä" * (SNIPPET_BYTES // 2),
    }
    assert "summary" not in page["deleted"][0]
    assert page["deleted"][2]["snippet"] == "short one"
    assert [e["message_id"] for e in store.list_deleted(session_id="s1")["deleted"]] == [
        c["message_id"], a["message_id"]]
    assert store.list_deleted(session_id="s1")["total_deleted"] == 2
    assert store.list_deleted(session_id="nobody") == {"deleted": [], "total_deleted": 0}


def test_snippet_cuts_at_a_code_point() -> None:
    assert snippet("abc", 2) == "ab"
    assert snippet("aé", 2) == "a"  # é is two bytes: not cut in half
    assert snippet("日本語", 7) == "日本"
    assert snippet("short", 200) == "short"


def test_pages_are_stable_while_the_trash_changes(store: MemoryStore) -> None:
    msgs = [write(store, "s", f"message {i}") for i in range(10)]
    for m in msgs:
        store.delete_message(message_id=m["message_id"])
    first = store.list_deleted(limit=4)
    assert [e["message_id"] for e in first["deleted"]] == [m["message_id"] for m in msgs[9:5:-1]]
    # Meanwhile: a new delete (newer than the cursor: not on later pages) and a restore of
    # an entry not yet listed (it leaves the listing).
    extra = write(store, "s", "late")
    store.delete_message(message_id=extra["message_id"])
    store.restore_message(message_id=msgs[3]["message_id"])
    rest, cursor = [], first["nextCursor"]
    while cursor:
        page = store.list_deleted(limit=4, cursor=cursor)
        rest += [e["message_id"] for e in page["deleted"]]
        cursor = page.get("nextCursor")
    assert rest == [m["message_id"] for m in (msgs[5], msgs[4], msgs[2], msgs[1], msgs[0])]


def test_a_session_cursor_belongs_to_its_listing(store: MemoryStore) -> None:
    for i in range(3):
        m = write(store, "s", f"m{i}")
        store.delete_message(message_id=m["message_id"])
    cursor = store.list_deleted(limit=1, session_id="s")["nextCursor"]
    assert len(store.list_deleted(limit=5, session_id="s", cursor=cursor)["deleted"]) == 2
    for kwargs in ({}, {"session_id": "other"}):
        with pytest.raises(ConvMemError) as err:
            store.list_deleted(cursor=cursor, **kwargs)
        assert err.value.code == "VALIDATION_ERROR" and "cursor" in err.value.message
    write(store, "h", "x")
    write(store, "h", "y")
    hist = store.read_messages(view="history", session_id="h", limit=1)["nextCursor"]
    with pytest.raises(ConvMemError) as err:  # another listing's cursor
        store.list_deleted(cursor=hist)
    assert err.value.code == "VALIDATION_ERROR"


@pytest.mark.parametrize("kwargs, field", [
    ({"limit": 0}, "limit"), ({"limit": 1001}, "limit"), ({"limit": "5"}, "limit"),
    ({"session_id": ""}, "session_id"), ({"session_id": 3}, "session_id"),
    ({"cursor": "not-a-cursor"}, "cursor"),
])
def test_list_deleted_rejects_bad_arguments(store: MemoryStore, kwargs: dict, field: str) -> None:
    with pytest.raises(ConvMemError) as err:
        store.list_deleted(**kwargs)
    assert err.value.code == "VALIDATION_ERROR" and field in err.value.message


def test_restore_errors_write_nothing(store: MemoryStore) -> None:
    live = write(store, "s", "still here")
    gone = write(store, "s", "deleted")
    store.delete_message(message_id=gone["message_id"])
    store.restore_message(message_id=gone["message_id"])
    before = store.get_system_health()
    cases = [
        (live["message_id"], "VALIDATION_ERROR"),  # live
        (gone["message_id"], "VALIDATION_ERROR"),  # restored already: live again
        ("01ARZ3NDEKTSV4RRFFQ69G5FAV", "NOT_FOUND"),  # never stored
        ("not-a-ulid", "VALIDATION_ERROR"),
        (None, "VALIDATION_ERROR"),
    ]
    for message_id, code in cases:
        with pytest.raises(ConvMemError) as err:
            store.restore_message(message_id=message_id)
        assert err.value.code == code, message_id
        if code == "VALIDATION_ERROR":
            assert "message_id" in err.value.message
    after = store.get_system_health()
    assert (after["log_size"], after["last_sequence"]) == (before["log_size"], before["last_sequence"])


def test_delete_restore_cycles_and_reopen(store_dir: Path) -> None:
    with MemoryStore.open(store_dir) as s:
        m = write(s, "s", "round and round")
        for _ in range(3):
            s.delete_message(message_id=m["message_id"])
            assert [e["message_id"] for e in s.list_deleted()["deleted"]] == [m["message_id"]]
            m = s.restore_message(message_id=m["message_id"])["message"]
        s.delete_message(message_id=m["message_id"])
        health = s.get_system_health()
    assert m["revision"] == 4
    assert (health["active_messages"], health["deleted_messages"], health["update_records"]) == (0, 4, 3)
    with MemoryStore.open(store_dir) as s:  # snapshot at close
        assert [e["message_id"] for e in s.list_deleted()["deleted"]] == [m["message_id"]]
        assert s.restore_message(message_id=m["message_id"])["message"]["revision"] == 5


def model_run(store_dir: Path, seed: int) -> None:
    """Random writes, deletes, restores and reopens against a dict model."""
    rng = random.Random(seed)
    live: dict[str, dict] = {}
    trash: list[str] = []  # in delete order
    s = MemoryStore.open(store_dir)
    try:
        for step in range(300):
            op = rng.random()
            if op < 0.4 or not live and not trash:
                m = write(s, f"s{rng.randrange(4)}", f"note {step} {rng.random()}")
                live[m["message_id"]] = m
            elif op < 0.7 and live:
                mid = rng.choice(sorted(live))
                s.delete_message(message_id=mid)
                trash.append(mid)
                live.pop(mid)
            elif op < 0.95 and trash:
                mid = trash.pop(rng.randrange(len(trash)))
                m = s.restore_message(message_id=mid)["message"]
                live[mid] = m
            else:
                s.close()
                s = MemoryStore.open(store_dir)
            if step % 25 == 0 or step == 299:
                assert [e["message_id"] for e in all_deleted(s, limit=7)] == trash[::-1]
                health = s.get_system_health()
                assert health["active_messages"] == len(live)
                for session in {m["session_id"] for m in live.values()}:
                    assert set(history_ids(s, session)) == {
                        k for k, m in live.items() if m["session_id"] == session}
        assert {m["message_id"]: m for m in s.export_messages()}.keys() == live.keys()
        assert s.verify()["ok"]
        s.rebuild_index()
        assert s.list_deleted()["total_deleted"] == 0
        assert s.get_system_health()["active_messages"] == len(live)
        for mid in trash:
            with pytest.raises(ConvMemError) as err:
                s.restore_message(message_id=mid)
            assert err.value.code == "NOT_FOUND"
    finally:
        s.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_trash_against_a_model(store_dir: Path, seed: int) -> None:
    model_run(store_dir, seed)


def test_replay_without_a_snapshot_rebuilds_the_trash(store_dir: Path) -> None:
    with MemoryStore.open(store_dir) as s:
        a, b, c = (write(s, "s", t) for t in ("one", "two", "three"))
        for m in (a, b, c):
            s.delete_message(message_id=m["message_id"])
        s.restore_message(message_id=b["message_id"])
        expected = s.list_deleted()
    (store_dir / "snapshot.bin").unlink()  # the log alone
    with MemoryStore.open(store_dir) as s:
        assert s.list_deleted() == expected
        assert history_ids(s, "s") == [b["message_id"]]


def test_backup_export_health_and_verify_with_restores(store_dir: Path, tmp_path: Path) -> None:
    with MemoryStore.open(store_dir) as s:
        a = write(s, "s", "kept")
        b = write(s, "s", "restored later", tags=["t"])
        c = write(s, "s", "stays deleted")
        s.delete_message(message_id=b["message_id"])
        s.delete_message(message_id=c["message_id"])
        s.restore_message(message_id=b["message_id"])
        h = s.get_system_health()
        assert h["active_messages"] == 2 and h["status"] == "OK"
        assert h["dead_bytes"] > 0
        exported = [m["message_id"] for m in s.export_messages()]
        assert exported == [a["message_id"], b["message_id"]]
        assert s.verify()["ok"] is True
        s.backup(tmp_path / "copy")
        listing = s.list_deleted()
        rebuilt = s.rebuild_index()
        # The log held 3 messages, 2 deletes and the restore: 2 live ones are kept.
        assert (rebuilt["messages_indexed"], rebuilt["records_removed"]) == (2, 4)
        h2 = s.get_system_health()
        assert h2["dead_bytes"] == 0 and h2["active_messages"] == 2
    with MemoryStore.open(tmp_path / "copy") as copy:
        assert copy.list_deleted() == listing
        assert copy.restore_message(message_id=c["message_id"])["message"]["content"] == "stays deleted"
        assert copy.verify()["ok"] is True


def test_a_read_only_store_lists_but_does_not_restore(store_dir: Path) -> None:
    with MemoryStore.open(store_dir) as s:
        m = write(s, "s", "x")
        s.delete_message(message_id=m["message_id"])
    with MemoryStore.open(store_dir, read_only=True) as ro:
        assert ro.list_deleted()["total_deleted"] == 1
        with pytest.raises(ConvMemError) as err:
            ro.restore_message(message_id=m["message_id"])
        assert err.value.code == "IO_ERROR"


def test_the_tools_answer_through_run_tool(store: MemoryStore) -> None:
    from convmem.tools import CONTRACT, ToolCatalog, run_tool

    admin = ToolCatalog.of(("core", "admin"))
    m = write(store, "s", "via the tool layer")
    store.delete_message(message_id=m["message_id"])
    listed = json.loads(run_tool(store, "list_deleted", {"limit": 5}, admin).text)
    assert [e["message_id"] for e in listed["deleted"]] == [m["message_id"]]
    out = run_tool(store, "restore_message", {"message_id": m["message_id"]}, admin)
    assert not out.is_error and json.loads(out.text)["message"]["message_id"] == m["message_id"]
    again = run_tool(store, "restore_message", {"message_id": m["message_id"]}, admin)
    assert again.is_error and json.loads(again.text)["error"]["code"] == "VALIDATION_ERROR"
    # Not a tool of the contract.
    plain = run_tool(store, "list_deleted", {}, CONTRACT)
    assert plain.is_error and json.loads(plain.text)["error"]["message"] == "unknown tool"


def test_a_torn_restore_record_leaves_the_message_in_the_trash(store_dir: Path) -> None:
    """A crash in the middle of a restore's append (before its acknowledgement): the torn record
    is cut off at open, and the message is still deleted and restorable."""
    with MemoryStore.open(store_dir) as s:
        m = write(s, "s", "torn between states")
        s.delete_message(message_id=m["message_id"])
        s.checkpoint()
        before = (store_dir / "messages.log").stat().st_size
        s.restore_message(message_id=m["message_id"])
    (store_dir / "snapshot.bin").unlink()  # (the snapshot at close covers the restore)
    log = store_dir / "messages.log"
    with open(log, "r+b") as f:
        f.truncate(before + 30)  # the restore's frame, cut short
    with MemoryStore.open(store_dir) as s:
        assert s.recovered_tail is True
        assert [e["message_id"] for e in s.list_deleted()["deleted"]] == [m["message_id"]]
        assert s.restore_message(message_id=m["message_id"])["message"]["revision"] == 2
