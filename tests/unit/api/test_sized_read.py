"""read_messages sized for an agent (issue 12): order asc/desc for history and sessions, cursors
in both orders, snippet_bytes for the sessions view's representative_summary."""
from __future__ import annotations

import pytest

from convmem import ConvMemError, MemoryStore

T0 = 1_720_843_200_000


@pytest.fixture()
def store(tmp_path):
    s = MemoryStore.open(tmp_path / "s")
    items = []
    for i in range(57):
        # equal timestamps in runs of three: the ids decide the order within a run
        items.append({"session_id": f"s{i % 5}", "role": "user", "content": f"m{i} " + "長い" * (i * 20),
                      "timestamp": T0 + (i // 3) * 10})
    s.import_message_batch(items)
    yield s
    s.close()


def walk(store, limit: int, **kw) -> list[list[dict]]:
    out, cursor = [], None
    key = "history" if kw.get("view", "history") == "history" else "sessions"
    while True:
        res = store.read_messages(limit=limit, cursor=cursor, **kw)
        out.append(res[key])
        cursor = res.get("nextCursor")
        if cursor is None:
            return out


def test_history_desc_is_asc_reversed(store) -> None:
    asc = store.read_messages(view="history", session_id="s2", limit=1000)["history"]
    desc = store.read_messages(view="history", session_id="s2", limit=1000, order="desc")["history"]
    assert len(asc) > 5 and desc == asc[::-1]
    # the model: creation order is (timestamp, id)
    assert [m["message_id"] for m in asc] == sorted((m["message_id"] for m in asc),
                                                    key=lambda x: ({m["message_id"]: m["timestamp"] for m in asc}[x], x))
    last3 = store.read_messages(view="history", session_id="s2", limit=3, order="desc")
    assert last3["history"] == asc[-3:][::-1] and "nextCursor" in last3


@pytest.mark.parametrize("limit", [1, 2, 5])
@pytest.mark.parametrize("order", ["asc", "desc"])
def test_history_pages_in_either_order(store, limit, order) -> None:
    full = store.read_messages(view="history", session_id="s1", limit=1000, order=order)["history"]
    got = walk(store, limit, view="history", session_id="s1", order=order)
    assert sum(got, []) == full


def test_history_desc_cursor_survives_writes_and_deletes(store) -> None:
    first = store.read_messages(view="history", session_id="s3", limit=4, order="desc")
    asc = store.read_messages(view="history", session_id="s3", limit=1000)["history"]
    gone = asc[-6]["message_id"]                      # on the next page
    store.delete_message(message_id=gone)
    store.write_message(session_id="s3", role="user", content="newest")  # newer than page one
    rest = []
    cursor = first["nextCursor"]
    while cursor is not None:
        res = store.read_messages(view="history", session_id="s3", limit=4, order="desc", cursor=cursor)
        rest += res["history"]
        cursor = res.get("nextCursor")
    assert rest == [m for m in asc[:-4][::-1] if m["message_id"] != gone]


def test_a_cursor_of_one_order_is_refused_by_the_other(store) -> None:
    c = store.read_messages(view="history", session_id="s1", limit=2, order="desc")["nextCursor"]
    with pytest.raises(ConvMemError) as e:
        store.read_messages(view="history", session_id="s1", limit=2, cursor=c)
    assert e.value.code == "VALIDATION_ERROR"
    c = store.read_messages(view="sessions", limit=2)["nextCursor"]
    with pytest.raises(ConvMemError):
        store.read_messages(view="sessions", limit=2, order="desc", cursor=c)


@pytest.mark.parametrize("limit", [1, 2, 10])
def test_sessions_desc_is_asc_reversed_and_pages(store, limit) -> None:
    asc = store.read_messages(view="sessions", limit=1000)["sessions"]
    # today's default order, kept: start time ascending, then session id
    assert [(s["started_at"], s["session_id"]) for s in asc] == sorted(
        (s["started_at"], s["session_id"]) for s in asc)
    desc = sum(walk(store, limit, view="sessions", order="desc"), [])
    assert desc == asc[::-1]


def test_sessions_snippet(store) -> None:
    full = {s["session_id"]: s for s in store.read_messages(view="sessions")["sessions"]}
    cut = store.read_messages(view="sessions", snippet_bytes=64)["sessions"]
    for s in cut:
        whole = full[s["session_id"]]["representative_summary"]
        text = s["representative_summary"]
        assert len(text.encode()) <= 64
        assert s["representative_summary_bytes"] == len(whole.encode())
        assert s["representative_summary_truncated"] is (len(whole.encode()) > 64)
        if s["representative_summary_truncated"]:
            assert text.endswith("…") and whole.startswith(text[:-1])
        else:
            assert text == whole
    assert any(s["representative_summary_truncated"] for s in cut)
    assert "representative_summary_truncated" not in next(iter(full.values()))


@pytest.mark.parametrize("kw, field", [({"order": "newest"}, "order"), ({"order": 1}, "order"),
                                       ({"view": "sessions", "snippet_bytes": 10}, "snippet_bytes")])
def test_bad_order_and_snippet(store, kw, field) -> None:
    with pytest.raises(ConvMemError) as e:
        store.read_messages(session_id="s1", **kw)
    assert e.value.code == "VALIDATION_ERROR" and field in e.value.message
