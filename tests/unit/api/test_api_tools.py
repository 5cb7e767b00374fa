"""The seven tools through the library face, one behaviour of the spec per test."""
from __future__ import annotations

import json
import math

import pytest

from convmem import ConvMemError, MemoryStore
from conftest import meta


def write(store: MemoryStore, content: str = "hello", session: str = "s1", role: str = "user",
          **metadata) -> dict:
    kwargs = {"metadata_json": meta(**metadata)} if metadata else {}
    return store.write_message(session_id=session, role=role, content=content, **kwargs)["message"]


def code_of(call) -> str:
    with pytest.raises(ConvMemError) as info:
        call()
    return info.value.code


# -- write_message -------------------------------------------------------------------------
def test_write_returns_message_with_defaults(store):
    r = store.write_message(session_id="conv-1", role="user", content="Remember this")
    assert r["status"] == "OK"
    m = r["message"]
    assert list(m) == ["message_id", "session_id", "timestamp", "role", "content", "revision",
                       "updated_at", "metadata"]
    assert len(m["message_id"]) == 26 and m["revision"] == 1
    assert m["updated_at"] == m["timestamp"]
    assert m["metadata"] == {"tags": [], "memory_tier": "short", "memory_kind": "conversation",
                             "importance": 50, "relations": [], "source_message_ids": []}


def test_write_keeps_all_metadata_fields_in_spec_order(store):
    target = write(store, "target")
    m = write(store, "x", tool_call_id="call-1", tags=["project", "decision"], memory_tier="long",
              memory_kind="semantic", importance=80, summary="sum",
              relations=[{"type": "derived_from", "message_id": target["message_id"]}],
              source_message_ids=[target["message_id"]])
    assert list(m["metadata"]) == ["tool_call_id", "tags", "memory_tier", "memory_kind",
                                   "importance", "summary", "relations", "source_message_ids"]
    assert m["metadata"]["relations"] == [{"type": "derived_from", "message_id": target["message_id"]}]


def test_empty_summary_is_unset(store):
    assert "summary" not in write(store, summary="")["metadata"]


@pytest.mark.parametrize("bad, field", [
    ({"tags": ["a"] * 33}, "tags"),
    ({"tags": [""]}, "tags"),
    ({"tags": ["x" * 129]}, "tags"),
    ({"tags": ["é" * 65]}, "tags"),  # 130 UTF-8 bytes, 65 characters
    ({"memory_tier": "forever"}, "memory_tier"),
    ({"memory_kind": "gossip"}, "memory_kind"),
    ({"importance": 101}, "importance"),
    ({"importance": -1}, "importance"),
    ({"importance": 50.0}, "importance"),
    ({"importance": True}, "importance"),
    ({"summary": "x" * 4097}, "summary"),
    ({"tool_call_id": "x" * 257}, "tool_call_id"),
    ({"relations": [{"type": "likes", "message_id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}]}, "relations"),
    ({"relations": [{"type": "depends_on", "message_id": "nope"}]}, "relations"),
    ({"relations": [{"type": "depends_on"}]}, "relations"),
    ({"source_message_ids": ["01ARZ3NDEKTSV4RRFFQ69G5FA"]}, "source_message_ids"),
    ({"source_message_ids": ["01ARZ3NDEKTSV4RRFFQ69G5FAV"] * 65}, "source_message_ids"),
    ({"colour": "red"}, "colour"),
])
def test_metadata_validation_names_field_not_value(store, bad, field):
    with pytest.raises(ConvMemError) as info:
        store.write_message(session_id="s", role="user", content="c", metadata_json=json.dumps(bad))
    assert info.value.code == "VALIDATION_ERROR"
    assert field in info.value.message
    for value in bad.values():
        if isinstance(value, str) and len(value) > 3:
            assert value not in info.value.message
    assert store.get_system_health()["last_sequence"] == 0


@pytest.mark.parametrize("kwargs", [
    {"session_id": "", "role": "user", "content": "c"},
    {"session_id": "s" * 257, "role": "user", "content": "c"},
    {"session_id": "あ" * 86, "role": "user", "content": "c"},  # 258 bytes
    {"session_id": 5, "role": "user", "content": "c"},
    {"session_id": "s", "role": "robot", "content": "c"},
    {"session_id": "s", "role": "user", "content": ""},
    {"session_id": "s", "role": "user", "content": "x" * (1024 * 1024 + 1)},
    {"session_id": "s", "role": "user", "content": "\ud800"},
    {"session_id": "s", "role": "user", "content": "c", "metadata_json": "{"},
    {"session_id": "s", "role": "user", "content": "c", "metadata_json": "[]"},
    {"session_id": "s", "role": "user", "content": "c", "metadata_json": {"tags": []}},
])
def test_write_rejects_bad_arguments_and_writes_nothing(store, kwargs):
    before = store.get_system_health()
    assert code_of(lambda: store.write_message(**kwargs)) == "VALIDATION_ERROR"
    after = store.get_system_health()
    assert (after["log_size"], after["last_sequence"], after["io"]) == (
        before["log_size"], before["last_sequence"], before["io"])
    assert after["status"] == "OK"


def test_content_limit_is_in_bytes(store):
    write(store, "x" * (1024 * 1024))
    assert code_of(lambda: write(store, "é" * (512 * 1024 + 1))) == "VALIDATION_ERROR"


# -- update_message ------------------------------------------------------------------------
def test_update_content_keeps_identity_and_bumps_revision(store):
    m = write(store, "old", tags=["a"])
    r = store.update_message(message_id=m["message_id"], content="new")
    assert r["changed"] is True
    u = r["message"]
    assert (u["message_id"], u["session_id"], u["role"], u["timestamp"]) == (
        m["message_id"], m["session_id"], m["role"], m["timestamp"])
    assert u["revision"] == 2 and u["content"] == "new" and u["metadata"]["tags"] == ["a"]
    assert u["updated_at"] >= m["updated_at"]


def test_update_metadata_keeps_fields_not_named(store):
    m = write(store, "x", tags=["a"], importance=70, summary="s")
    u = store.update_message(message_id=m["message_id"], metadata_json=meta(importance=90))["message"]
    assert u["metadata"]["tags"] == ["a"] and u["metadata"]["summary"] == "s"
    assert u["metadata"]["importance"] == 90


def test_update_same_values_is_a_noop(store):
    m = write(store, "x", tags=["a"])
    h = store.get_system_health()
    r = store.update_message(message_id=m["message_id"], content="x", metadata_json=meta(tags=["a"]))
    assert r["changed"] is False and r["message"]["revision"] == 1
    h2 = store.get_system_health()
    assert (h2["log_size"], h2["last_sequence"], h2["io"]) == (h["log_size"], h["last_sequence"], h["io"])


def test_update_conflict_and_not_found(store):
    m = write(store)
    assert code_of(lambda: store.update_message(message_id=m["message_id"], content="y",
                                                expected_revision=2)) == "CONFLICT"
    assert store.update_message(message_id=m["message_id"], content="y",
                                expected_revision=1)["message"]["revision"] == 2
    assert code_of(lambda: store.update_message(message_id="01ARZ3NDEKTSV4RRFFQ69G5FAV",
                                                content="y")) == "NOT_FOUND"


def test_update_needs_something_and_rejects_empty_content(store):
    m = write(store)
    assert code_of(lambda: store.update_message(message_id=m["message_id"])) == "VALIDATION_ERROR"
    assert code_of(lambda: store.update_message(message_id=m["message_id"], content="")) == "VALIDATION_ERROR"
    assert code_of(lambda: store.update_message(message_id=m["message_id"], content="z",
                                                expected_revision=0)) == "VALIDATION_ERROR"


def test_update_of_deleted_message_is_not_found(store):
    m = write(store)
    store.delete_message(message_id=m["message_id"])
    assert code_of(lambda: store.update_message(message_id=m["message_id"], content="y")) == "NOT_FOUND"


# -- history -------------------------------------------------------------------------------
@pytest.mark.parametrize("n, limit", [(7, 3), (6, 3), (1, 1), (5, 100)])
def test_history_pages(store, n, limit):
    ids = [write(store, f"m{i}")["message_id"] for i in range(n)]
    write(store, "other", session="s2")
    seen, pages, cursor = [], 0, None
    while True:
        r = store.read_messages(session_id="s1", limit=limit, cursor=cursor)
        pages += 1
        seen += [m["message_id"] for m in r["history"]]
        cursor = r.get("nextCursor")
        if cursor is None:
            break
    assert seen == ids
    assert pages == math.ceil(n / limit)


def test_history_cursor_stays_valid_while_messages_arrive(store):
    ids = [write(store, f"m{i}")["message_id"] for i in range(4)]
    r = store.read_messages(session_id="s1", limit=2)
    ids.append(write(store, "late")["message_id"])
    r2 = store.read_messages(session_id="s1", limit=10, cursor=r["nextCursor"])
    assert [m["message_id"] for m in r2["history"]] == ids[2:]
    assert "nextCursor" not in r2


def test_forged_or_foreign_cursor_is_rejected(store):
    for i in range(3):
        write(store, f"m{i}")
        write(store, f"o{i}", session="s2")
    cursor = store.read_messages(session_id="s1", limit=1)["nextCursor"]
    assert code_of(lambda: store.read_messages(session_id="s2", cursor=cursor)) == "VALIDATION_ERROR"
    assert code_of(lambda: store.read_messages(view="sessions", cursor=cursor)) == "VALIDATION_ERROR"
    forged = cursor[:-2] + ("AA" if cursor[-2:] != "AA" else "BB")
    assert code_of(lambda: store.read_messages(session_id="s1", cursor=forged)) == "VALIDATION_ERROR"
    assert code_of(lambda: store.read_messages(session_id="s1", cursor="!!")) == "VALIDATION_ERROR"


def test_history_skips_deleted_and_unknown_session_is_empty(store):
    a, b, c = (write(store, x)["message_id"] for x in "abc")
    store.delete_message(message_id=b)
    assert [m["message_id"] for m in store.read_messages(session_id="s1")["history"]] == [a, c]
    assert store.read_messages(session_id="nobody") == {"history": []}


def test_history_needs_session_and_limit_range(store):
    assert code_of(lambda: store.read_messages()) == "VALIDATION_ERROR"
    for bad in (0, 1001, 2.0, True, "5"):
        assert code_of(lambda: store.read_messages(session_id="s1", limit=bad)) == "VALIDATION_ERROR"
    assert code_of(lambda: store.read_messages(view="timeline", session_id="s1")) == "VALIDATION_ERROR"


def test_history_orders_by_imported_timestamp(store):
    store.import_messages([
        {"session_id": "s", "role": "user", "content": "late", "timestamp": 3000},
        {"session_id": "s", "role": "user", "content": "early", "timestamp": 1000},
        {"session_id": "s", "role": "user", "content": "middle", "timestamp": 2000},
    ])
    assert [m["content"] for m in store.read_messages(session_id="s")["history"]] == [
        "early", "middle", "late"]


def test_history_response_budget_pages_large_messages(store):
    big = "x" * (1024 * 1024)
    for _ in range(10):
        write(store, big)
    r = store.read_messages(session_id="s1", limit=100)
    assert 1 <= len(r["history"]) < 10 and "nextCursor" in r
    assert len(json.dumps(r)) < 8.5 * 1024 * 1024


def test_search_response_budget_is_filled_exactly_like_measuring_every_item(store, monkeypatch):
    """Search results are taken under the ~8 MiB budget by size bounds until they would not fit,
    then measured: the list must be the one that measuring every item gives, and fit."""
    import orjson

    from convmem import domain, validation
    from convmem.api import paging, search as search_module
    sizes = [1024 * 1024 - 64, 300_000, 900_000, 5, 1024 * 1024 - 64, 700_000, 80, 1024 * 1024 - 64,
             400_000, 1024 * 1024 - 64, 999_999, 1024 * 1024 - 64, 12]
    for n in sizes:  # control characters: 6 JSON bytes each, the worst case for the bound
        write(store, "needle " + "\x01" * n, tags=["t"], summary="needle" + "\x02" * 100)
    got = store.search_messages(query="needle", limit=100)["results"]
    for item in got:  # each bound holds for its own record
        slot = store._catalog.ids.get(validation.ulid("message_id", item["message_id"]))  # noqa: SLF001
        doc = store._catalog.current_doc(slot)  # noqa: SLF001
        assert len(orjson.dumps(item)) + 1 <= paging.json_bound(store._catalog.doc_span(doc)[1])  # noqa: SLF001
    monkeypatch.setattr(search_module, "json_bound", lambda n: domain.RESPONSE_BUDGET + 1)  # measure all
    want = store.search_messages(query="needle", limit=100)["results"]
    assert 1 <= len(got) < len(sizes)
    assert got == want
    assert len(orjson.dumps(got)) < domain.RESPONSE_BUDGET + 16 * 1024


# -- content view --------------------------------------------------------------------------
def test_content_view_walks_utf8_ranges(store):
    text = "aあ" * 3000 + "end"  # 1- and 3-byte characters
    m = write(store, text)
    h = store.get_system_health()
    data, off, rev = b"", 0, m["revision"]
    while True:
        r = store.read_messages(view="content", message_id=m["message_id"], content_offset=off,
                                content_limit=100, expected_revision=rev)["content_range"]
        assert r["content_offset"] == off and r["total_bytes"] == len(text.encode())
        chunk = r["content"].encode()
        assert len(chunk) <= 100
        assert r["next_content_offset"] == off + len(chunk)
        data += chunk
        off = r["next_content_offset"]
        if r["complete"]:
            break
    assert data.decode() == text
    h2 = store.get_system_health()
    assert h2["io"] == h["io"] and h2["log_size"] == h["log_size"]


def test_content_view_trims_to_boundary_and_returns_one_whole_code_point(store):
    m = write(store, "あいう")
    r = store.read_messages(view="content", message_id=m["message_id"], content_limit=4)["content_range"]
    assert r["content"] == "あ" and r["next_content_offset"] == 3 and r["complete"] is False
    r = store.read_messages(view="content", message_id=m["message_id"], content_limit=1)["content_range"]
    assert r["content"] == "あ" and r["next_content_offset"] == 3
    r = store.read_messages(view="content", message_id=m["message_id"], content_offset=9)["content_range"]
    assert r["content"] == "" and r["complete"] is True and r["next_content_offset"] == 9


def test_content_view_errors(store):
    m = write(store, "あいう")
    mid = m["message_id"]
    assert code_of(lambda: store.read_messages(view="content", message_id=mid, content_offset=1)) == "VALIDATION_ERROR"
    assert code_of(lambda: store.read_messages(view="content", message_id=mid, content_offset=10)) == "VALIDATION_ERROR"
    assert code_of(lambda: store.read_messages(view="content", message_id=mid, content_limit=0)) == "VALIDATION_ERROR"
    assert code_of(lambda: store.read_messages(view="content", message_id=mid, content_limit=65537)) == "VALIDATION_ERROR"
    assert code_of(lambda: store.read_messages(view="content", message_id=mid, expected_revision=5)) == "CONFLICT"
    store.delete_message(message_id=mid)
    assert code_of(lambda: store.read_messages(view="content", message_id=mid)) == "NOT_FOUND"


# -- context view --------------------------------------------------------------------------
def test_context_neighbours_oldest_first(store):
    ids = [write(store, f"m{i}")["message_id"] for i in range(7)]
    r = store.read_messages(view="context", message_id=ids[3], before=2, after=2)
    assert [m["message_id"] for m in r["chronological_context"]["before"]] == ids[1:3]
    assert [m["message_id"] for m in r["chronological_context"]["after"]] == ids[4:6]
    assert r["session"] == {"session_id": "s1", "message_count": 7}
    assert r["truncated"] is False and r["message"]["message_id"] == ids[3]
    r = store.read_messages(view="context", message_id=ids[0])
    assert r["chronological_context"]["before"] == []
    assert [m["message_id"] for m in r["chronological_context"]["after"]] == ids[1:2]


def test_context_relations_depth_and_direction(store):
    a = write(store, "a")["message_id"]
    b = write(store, "b", relations=[{"type": "derived_from", "message_id": a}])["message_id"]
    c = write(store, "c", relations=[{"type": "supersedes", "message_id": b}])["message_id"]
    r = store.read_messages(view="context", message_id=b, before=0, after=0)
    got = {(e["type"], e["direction"], e["depth"], e["message"]["message_id"]) for e in r["relations"]}
    assert got == {("derived_from", "outgoing", 1, a), ("supersedes", "incoming", 1, c)}
    r = store.read_messages(view="context", message_id=c, before=0, after=0, relation_depth=2)
    got = [(e["type"], e["direction"], e["depth"], e["message"]["message_id"]) for e in r["relations"]]
    assert got == [("supersedes", "outgoing", 1, b), ("derived_from", "outgoing", 2, a)]
    r = store.read_messages(view="context", message_id=a, before=0, after=0, relation_depth=2,
                            relation_types_json='["derived_from"]')
    got = [(e["type"], e["direction"], e["depth"]) for e in r["relations"]]
    assert got == [("derived_from", "incoming", 1)]
    r = store.read_messages(view="context", message_id=a, relation_depth=0)
    assert r["relations"] == []


def test_context_reports_deleted_relation_target(store):
    a = write(store, "a")["message_id"]
    b = write(store, "b", relations=[{"type": "depends_on", "message_id": a}])["message_id"]
    store.delete_message(message_id=a)
    r = store.read_messages(view="context", message_id=b)
    assert r["relations"] == [{"type": "depends_on", "direction": "outgoing", "depth": 1,
                               "message_id": a, "status": "deleted"}]


def test_context_caps_at_fifty_messages(store):
    hub = write(store, "hub")["message_id"]
    for i in range(60):
        write(store, f"leaf {i}", session=f"leaf{i}", relations=[{"type": "related_to", "message_id": hub}])
    r = store.read_messages(view="context", message_id=hub)
    assert r["truncated"] is True
    assert len(r["relations"]) == 49  # the message itself plus 49 related ones


def test_context_argument_ranges(store):
    m = write(store)["message_id"]
    for kw in ({"before": 11}, {"after": -1}, {"relation_depth": 3},
               {"relation_types_json": '["likes"]'}, {"relation_types_json": "nope"}):
        assert code_of(lambda: store.read_messages(view="context", message_id=m, **kw)) == "VALIDATION_ERROR"
    assert code_of(lambda: store.read_messages(view="context", message_id="01ARZ3NDEKTSV4RRFFQ69G5FAV")) == "NOT_FOUND"


# -- sessions view -------------------------------------------------------------------------
def test_sessions_view_counts_order_and_representative(store):
    store.import_messages([
        {"session_id": "b", "role": "user", "content": "b1", "timestamp": 100},
        {"session_id": "a", "role": "user", "content": "a1", "timestamp": 100,
         "metadata": {"summary": "first summary", "memory_kind": "semantic"}},
        {"session_id": "a", "role": "user", "content": "a2", "timestamp": 200},
        {"session_id": "c", "role": "user", "content": "c1", "timestamp": 50},
    ])
    r = store.read_messages(view="sessions")
    assert [s["session_id"] for s in r["sessions"]] == ["c", "a", "b"]
    a = r["sessions"][1]
    assert a["message_count"] == 2 and a["started_at"] == 100 and a["last_message_at"] == 200
    assert a["kind_counts"] == {"conversation": 1, "episode": 0, "semantic": 1, "procedure": 0,
                                "preference": 0, "summary": 0}
    assert a["representative_summary"] == "first summary"
    assert r["sessions"][2]["representative_summary"] == "b1"
    p1 = store.read_messages(view="sessions", limit=2)
    assert len(p1["sessions"]) == 2
    p2 = store.read_messages(view="sessions", limit=2, cursor=p1["nextCursor"])
    assert [s["session_id"] for s in p2["sessions"]] == ["b"] and "nextCursor" not in p2


def test_sessions_without_live_messages_are_not_listed(store):
    m = write(store, session="gone")["message_id"]
    write(store, session="kept")
    store.delete_message(message_id=m)
    assert [s["session_id"] for s in store.read_messages(view="sessions")["sessions"]] == ["kept"]
    assert store.get_system_health()["session_count"] == 1


# -- search --------------------------------------------------------------------------------
def test_search_finds_and_explains(store):
    write(store, "We chose PostgreSQL as the database")
    write(store, "lunch plans", summary="database decision meeting", tags=["database"])
    write(store, "nothing relevant")
    r = store.search_messages(query="database")["results"]
    assert len(r) == 2
    for item in r:
        b = item["score_breakdown"]
        assert list(b) == ["content", "summary", "tags"]
        assert item["score"] == b["content"] + b["summary"] + b["tags"]
        assert item["matched_fields"] == [f for f in ("content", "summary", "tags") if b[f] > 0]
        assert "context_preview" not in item and item["relation_count"] == 0
    assert r[0]["score"] >= r[1]["score"]


def test_search_japanese_and_width_variants(store):
    jp = write(store, "来週東京で開催される会議に参加します")["message_id"]
    py = write(store, "I love Python programming")["message_id"]
    for q in ("東京", "参加", "東", "開催"):
        assert jp in [x["message_id"] for x in store.search_messages(query=q)["results"]], q
    assert [x["message_id"] for x in store.search_messages(query="Ｐｙｔｈｏｎ")["results"]] == [py]


def test_search_filters_and_session(store):
    write(store, "alpha note", memory_kind="semantic", memory_tier="long", tags=["p", "q"], importance=90)
    write(store, "alpha note", memory_kind="episode", tags=["p"], importance=10)
    write(store, "alpha note", session="s2", memory_kind="semantic")
    def n(**kw):
        return len(store.search_messages(query="alpha", **kw)["results"])
    assert n() == 3
    assert n(filters_json='{"kinds":["semantic"]}') == 2
    assert n(filters_json='{"kinds":["semantic","episode"],"tiers":["long"]}') == 1
    assert n(filters_json='{"tags":["p","q"]}') == 1
    assert n(filters_json='{"tags":["p"]}') == 2
    assert n(min_importance=60) == 1
    assert n(session_id="s2") == 1
    assert n(session_id="nobody") == 0
    for bad in ('{"kinds":["x"]}', '{"color":[]}', '[]', '{', 7):
        assert code_of(lambda: store.search_messages(query="alpha", filters_json=bad)) == "VALIDATION_ERROR"


def test_search_context_preview_and_limits(store):
    ids = [write(store, f"needle {i}" if i == 2 else f"hay {i}")["message_id"] for i in range(5)]
    r = store.search_messages(query="needle", context_size=1)["results"]
    assert [m["message_id"] for m in r[0]["context_preview"]["before"]] == [ids[1]]
    assert [m["message_id"] for m in r[0]["context_preview"]["after"]] == [ids[3]]
    for kw in ({"limit": 0}, {"limit": 101}, {"context_size": 4}, {"min_importance": 101},
               {"query": ""}, {"query": "x" * 4097}):
        args = {"query": "needle", **kw}
        assert code_of(lambda: store.search_messages(**args)) == "VALIDATION_ERROR"


def test_search_never_returns_deleted_or_old_versions(store):
    a = write(store, "unique zebra")["message_id"]
    b = write(store, "unique giraffe")["message_id"]
    store.delete_message(message_id=a)
    store.update_message(message_id=b, content="unique okapi")
    assert store.search_messages(query="zebra")["results"] == []
    assert store.search_messages(query="giraffe")["results"] == []
    assert [x["message_id"] for x in store.search_messages(query="okapi")["results"]] == [b]


def test_search_does_not_write(store):
    write(store, "something")
    h = store.get_system_health()
    store.search_messages(query="something")
    h2 = store.get_system_health()
    # Search scratch space may be allocated on first use (memory_estimate); nothing else moves.
    h.pop("memory_estimate"), h2.pop("memory_estimate")
    assert h2 == h


# -- delete --------------------------------------------------------------------------------
def test_delete_and_session_guard(store):
    m = write(store)["message_id"]
    assert store.delete_message(message_id=m, session_id="other") == {"status": "NOT_FOUND"}
    assert store.delete_message(message_id=m, session_id="s1") == {"status": "OK"}
    assert store.delete_message(message_id=m) == {"status": "NOT_FOUND"}
    assert store.delete_message(message_id="01ARZ3NDEKTSV4RRFFQ69G5FAV") == {"status": "NOT_FOUND"}
    assert code_of(lambda: store.delete_message(message_id=m.lower())) == "VALIDATION_ERROR"
    assert code_of(lambda: store.delete_message(message_id="short")) == "VALIDATION_ERROR"


# -- rebuild and health --------------------------------------------------------------------
def test_rebuild_compacts_and_reports(store, store_dir):
    keep = write(store, "keep me")["message_id"]
    gone = write(store, "secret-gone-text", session="secret-session", tags=["secret-tag"],
                 summary="secret-summary")["message_id"]
    store.update_message(message_id=keep, content="keep me v2")
    store.delete_message(message_id=gone)
    h = store.get_system_health()
    assert (h["active_messages"], h["deleted_messages"], h["update_records"]) == (1, 1, 1)
    assert h["dead_bytes"] > 0
    r = store.rebuild_index()
    assert r["status"] == "OK" and r["messages_indexed"] == 1 and r["records_removed"] == 3
    assert r["bytes_before"] == h["log_size"] and r["bytes_after"] < r["bytes_before"]
    h2 = store.get_system_health()
    assert h2["log_size"] == r["bytes_after"] and h2["dead_bytes"] == 0
    assert h2["deleted_messages"] == 0 and h2["last_sequence"] == h["last_sequence"]
    # The surviving version has revision 2: still an update record, after a reopen too.
    assert h2["update_records"] == 1
    for f in store_dir.iterdir():
        data = f.read_bytes()
        for secret in (b"secret-gone-text", b"secret-tag", b"secret-summary", b"secret-session",
                       b"keep me\x00"):
            assert secret not in data, (f.name, secret)
    assert store.read_messages(session_id="s1")["history"][0]["content"] == "keep me v2"
    assert [x["message_id"] for x in store.search_messages(query="keep")["results"]] == [keep]
    assert [x["message_id"] for x in store.search_messages(query="keep", session_id="s1")["results"]] == [keep]
    assert store.read_messages(view="sessions")["sessions"][0]["session_id"] == "s1"
    store.close()
    with MemoryStore.open(store_dir) as again:  # the snapshot rebuild wrote is used as it is
        h_open = again.get_system_health()
        assert h_open["io"]["write_calls"] == 0 and h_open["snapshot_valid"] is True
        assert again.read_messages(session_id="s1")["history"][0]["content"] == "keep me v2"
    (store_dir / "snapshot.bin").unlink()  # replayed from the compacted log alone
    with MemoryStore.open(store_dir) as again:
        h3 = again.get_system_health()
        assert (h3["update_records"], h3["deleted_messages"], h3["dead_bytes"]) == (1, 0, 0)
        assert h3["last_sequence"] == h["last_sequence"] and h3["active_messages"] == 1


def test_health_shape_and_exact_counters(store):
    h0 = store.get_system_health()
    assert list(h0) == ["status", "format_version", "log_size", "snapshot_size", "active_messages",
                        "session_count", "deleted_messages", "last_sequence", "update_records",
                        "dead_bytes", "memory_estimate", "io", "recovered_tail", "snapshot_valid",
                        "last_error"]
    assert list(h0["memory_estimate"]) == ["total_bytes", "store_entries_bytes", "body_bytes",
                                           "metadata_bytes", "search_index_bytes",
                                           "history_index_bytes", "relation_index_bytes"]
    mem = h0["memory_estimate"]
    assert mem["total_bytes"] == sum(v for k, v in mem.items() if k != "total_bytes")
    write(store, "abc")
    h1 = store.get_system_health()
    grew = h1["log_size"] - h0["log_size"]
    assert h1["io"]["write_bytes"] - h0["io"]["write_bytes"] == grew
    assert h1["io"]["write_calls"] - h0["io"]["write_calls"] == 1
    assert h1["io"]["flush_calls"] - h0["io"]["flush_calls"] == 1
    assert h1["last_sequence"] == 1 and h1["active_messages"] == 1 and h1["session_count"] == 1
    assert h1["status"] == "OK" and h1["last_error"] == ""


def test_relations_survive_rebuild_and_reopen(store_dir):
    with MemoryStore.open(store_dir) as s:
        gone = write(s, "deleted first")["message_id"]
        a = write(s, "a")["message_id"]
        b = write(s, "b", relations=[{"type": "derived_from", "message_id": a}])["message_id"]
        s.delete_message(message_id=gone)
        s.rebuild_index()  # renumbers the messages: the edge must follow
        for view_of, direction, other in ((a, "incoming", b), (b, "outgoing", a)):
            rel = s.read_messages(view="context", message_id=view_of)["relations"]
            assert [(e["direction"], e["message"]["message_id"]) for e in rel] == [(direction, other)]
    with MemoryStore.open(store_dir) as s:
        rel = s.read_messages(view="context", message_id=a)["relations"]
        assert [(e["direction"], e["message"]["message_id"]) for e in rel] == [("incoming", b)]
        s.delete_message(message_id=b)
        assert s.read_messages(view="context", message_id=a)["relations"] == []


def test_sessions_view_representative_is_the_newest_summary_however_far_back(store):
    write(store, "the early one", summary="the only summary")
    for i in range(700):  # more than the first chunks of the backwards scan
        write(store, f"later {i}")
    page = store.read_messages(view="sessions")["sessions"]
    assert page[0]["representative_summary"] == "the only summary"
    store.write_message(session_id="other", role="user", content="no summary here")
    other = [x for x in store.read_messages(view="sessions")["sessions"] if x["session_id"] == "other"]
    assert other[0]["representative_summary"] == "no summary here"


def test_writes_past_the_numbering_limits_are_refused_before_anything_is_written(store, monkeypatch):
    from convmem import domain
    first = write(store, "one")
    monkeypatch.setattr(domain, "MAX_MESSAGES", 2)
    monkeypatch.setattr(domain, "MAX_VERSIONS", 3)
    write(store, "two")
    size = store.get_system_health()["log_size"]
    assert code_of(lambda: write(store, "three")) == "INTERNAL_ERROR"
    store.update_message(message_id=first["message_id"], content="one, updated")  # version 3
    assert code_of(lambda: store.update_message(message_id=first["message_id"],
                                                content="again")) == "INTERNAL_ERROR"
    with pytest.raises(ConvMemError) as err:  # a batch is refused whole
        store.import_message_batch([{"session_id": "s", "role": "user", "content": "x"}])
    assert err.value.code == "INTERNAL_ERROR" and "most messages" in err.value.message
    h = store.get_system_health()
    assert h["active_messages"] == 2 and h["log_size"] > size  # (only the update was written)
    assert h["last_sequence"] == 3


def test_update_at_the_highest_revision_is_refused_cleanly(store):
    (err,) = store.import_message_batch([{"session_id": "s", "role": "user", "content": "old",
                                           "revision": (1 << 32) - 1}])
    assert err is None
    mid = store.read_messages(session_id="s")["history"][0]["message_id"]
    size = store.get_system_health()["log_size"]
    assert code_of(lambda: store.update_message(message_id=mid, content="new")) == "INTERNAL_ERROR"
    assert store.get_system_health()["log_size"] == size


def test_import_counters_at_their_format_limits(store):
    top_ts, top_rev = (1 << 48) - 1, (1 << 32) - 1
    ok = {"session_id": "s", "role": "user", "content": "edge", "timestamp": top_ts,
          "updated_at": top_ts, "revision": top_rev}
    assert store.import_message_batch([ok]) == [None]
    msg = store.read_messages(session_id="s")["history"][0]
    assert (msg["timestamp"], msg["updated_at"], msg["revision"]) == (top_ts, top_ts, top_rev)
    for field, value in (("timestamp", top_ts + 1), ("updated_at", top_ts + 1),
                         ("revision", top_rev + 1), ("revision", 0), ("timestamp", -1)):
        (err,) = store.import_message_batch([{**ok, field: value}])
        assert err is not None and err.code == "VALIDATION_ERROR" and field in err.message
    assert store.get_system_health()["active_messages"] == 1


@pytest.mark.parametrize("field", ["tool_call_id", "tags", "memory_tier", "memory_kind",
                                   "importance", "summary", "relations", "source_message_ids"])
def test_a_null_metadata_field_is_refused_by_name_on_write_and_update(store, field):
    first = write(store, "hello", tags=["kept"], importance=70)
    size = store.get_system_health()["log_size"]
    for call in (lambda: store.write_message(session_id="s1", role="user", content="x",
                                             metadata_json=json.dumps({field: None})),
                 lambda: store.update_message(message_id=first["message_id"],
                                              metadata_json=json.dumps({field: None}))):
        with pytest.raises(ConvMemError) as err:
            call()
        assert err.value.code == "VALIDATION_ERROR"
        assert f"metadata_json.{field} must be" in err.value.message and "not null" in err.value.message
    assert store.get_system_health()["log_size"] == size  # nothing was written
    kept = store.read_messages(session_id="s1")["history"][0]["metadata"]
    assert kept["tags"] == ["kept"] and kept["importance"] == 70


def test_an_oversized_metadata_value_is_refused_by_the_field_at_fault(store):
    meta = json.dumps({"summary": "s" * (2 * 1024 * 1024)})  # valid JSON, over 1 MiB
    with pytest.raises(ConvMemError) as err:
        store.write_message(session_id="s1", role="user", content="x", metadata_json=meta)
    assert err.value.code == "VALIDATION_ERROR" and "summary must be at most 4096" in err.value.message


def test_rebuild_stores_the_ids_hash_table(store_dir):
    """rebuild_index's snapshot holds the renumbered ids' hash table, so an open does not build
    it again (at 10M messages that was 982 ms of a 1.3 s open); every id is found through it."""
    import numpy as np

    from convmem._core import PURE
    from convmem.store.snapshot import SNAPSHOT_NAME, read_snapshot

    with MemoryStore.open(store_dir) as s:
        ids = [write(s, f"message {i}")["message_id"] for i in range(50)]
        for gone in ids[:10]:
            s.delete_message(message_id=gone)
        s.rebuild_index()
    _, arrays = read_snapshot(store_dir / SNAPSHOT_NAME)
    table = arrays["id_table"]
    if not PURE:  # (the twin's id map has no table to store)
        assert len(table) >= 2 * 40 and int(np.count_nonzero(table >= 0)) == 40
    with MemoryStore.open(store_dir) as s:
        for i, mid in enumerate(ids[10:], start=10):
            got = s.read_messages(view="content", message_id=mid)["content_range"]
            assert got["message_id"] == mid and got["content"] == f"message {i}"
        with pytest.raises(ConvMemError, match="NOT_FOUND"):
            s.read_messages(view="content", message_id=ids[0])
