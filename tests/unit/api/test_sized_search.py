"""search_messages sized for an agent (issue 12): time and role filters, snippets and the search
cursor, each against a brute-force model over the same messages."""
from __future__ import annotations

import json
from datetime import datetime, timezone

import orjson
import pytest

from convmem import ConvMemError, MemoryStore
from convmem.tools.dispatch import run_tool
from convmem.tools.toolsets import CONTRACT, ToolCatalog

ROLES = ("user", "assistant", "system")
T0 = 1_720_843_200_000
WORDS = ["alpha", "beta", "gamma", "delta", "東京", "設定", "epsilon", "zeta"]


def iso(ms: int, offset_hours: int = 0) -> str:
    from datetime import timedelta
    tz = timezone(timedelta(hours=offset_hours))
    return datetime.fromtimestamp(ms / 1000, tz).isoformat(timespec="milliseconds")


@pytest.fixture()
def corpus(tmp_path):
    """120 messages at known times (several share a millisecond), roles cycling, texts mixing
    a few words so that queries match many with different scores."""
    store = MemoryStore.open(tmp_path / "s")
    items = []
    for i in range(120):
        words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(1 + i % 5)]
        items.append({"session_id": f"s{i % 4}", "role": ROLES[i % 3],
                      "content": " ".join(words) + f" n{i}",
                      "timestamp": T0 + (i // 2) * 1000})
    store.import_message_batch(items)
    msgs = {}
    for s in range(4):
        for m in store.read_messages(view="history", session_id=f"s{s}", limit=1000)["history"]:
            msgs[m["message_id"]] = m
    yield store, msgs
    store.close()


def ranking(store, query: str, **kw) -> list[str]:
    return [r["message_id"] for r in store.search_messages(query=query, limit=100, **kw)["results"]]


def model_filter(msgs: dict, after=None, before=None, roles=None) -> set[str]:
    return {mid for mid, m in msgs.items()
            if (after is None or m["timestamp"] >= after)
            and (before is None or m["timestamp"] < before)
            and (roles is None or m["role"] in roles)}


@pytest.mark.parametrize("flt", [
    {"after": T0 + 20_000},
    {"before": T0 + 20_000},
    {"after": T0 + 5_000, "before": T0 + 31_000},
    {"roles": ["user"]},
    {"roles": ["assistant", "system"], "after": T0 + 10_000},
    {"roles": [], "before": T0 + 50_000},
])
def test_filters_select_what_the_model_selects_with_full_pages(corpus, flt) -> None:
    store, msgs = corpus
    unfiltered = ranking(store, "alpha gamma")
    want = model_filter(msgs, flt.get("after"), flt.get("before"), flt.get("roles") or None)
    expected = [mid for mid in unfiltered if mid in want]  # filters do not change the order
    assert expected
    assert ranking(store, "alpha gamma", filters_json=json.dumps(flt)) == expected
    for limit in (1, 3, 7):  # selective filters never give a short page
        got = store.search_messages(query="alpha gamma", limit=limit,
                                    filters_json=json.dumps(flt))["results"]
        assert [r["message_id"] for r in got] == expected[:limit]


def test_time_edges_exact_to_the_millisecond(tmp_path) -> None:
    t = T0 + 123
    with MemoryStore.open(tmp_path / "s") as store:
        store.import_message_batch([{"session_id": "a", "role": "user", "content": "edge word",
                                     "timestamp": ts} for ts in (t - 1, t, t + 1)])

        def times(**flt) -> list[int]:
            res = store.search_messages(query="edge", filters_json=json.dumps(flt))["results"]
            return sorted(r["timestamp"] for r in res)

        assert times(after=t) == [t, t + 1]             # after is inclusive
        assert times(after=t + 1) == [t + 1]
        assert times(before=t) == [t - 1]               # before is exclusive
        assert times(before=t + 1) == [t - 1, t]
        assert times(after=t, before=t + 1) == [t]
        assert times(after=t, before=t) == []
        # ISO-8601 with Z or an offset names the same instants
        assert times(after=iso(t).replace("+00:00", "Z")) == [t, t + 1]
        assert times(before=iso(t, 9)) == [t - 1]
        # finer than a millisecond: rounded up, the selection is that of the exact instant
        sub = datetime.fromtimestamp((t - 1) / 1000, timezone.utc).isoformat(timespec="microseconds")
        sub = sub[:-9] + "5" + sub[-8:]                 # t - 1 ms + 500 us
        assert times(after=sub) == [t, t + 1]
        assert times(before=sub) == [t - 1]


@pytest.mark.parametrize("flt, field", [
    ({"after": "2024-07-13"}, "filters_json.after"),
    ({"after": "2024-07-13T10:00:00"}, "filters_json.after"),
    ({"before": -1}, "filters_json.before"),
    ({"before": 1.5}, "filters_json.before"),
    ({"before": True}, "filters_json.before"),
    ({"after": "yesterday"}, "filters_json.after"),
    # fromisoformat would stop at the NUL (and take a tab for a separator): refused
    ({"after": "2024-07-13T10:00:00Z\x00garbage"}, "filters_json.after"),
    ({"before": "2024-07-13T10:00:00Z\x00"}, "filters_json.before"),
    ({"after": "2024-07-13T10:00:00\tZ"}, "filters_json.after"),
    ({"roles": ["bot"]}, "filters_json.roles[]"),
    ({"roles": "user"}, "filters_json.roles"),
    ({"after": T0 + 2, "before": T0 + 1}, "filters_json.after"),
    ({"since": T0}, "filters_json"),
])
def test_bad_filters_name_the_field(corpus, flt, field) -> None:
    store, _ = corpus
    with pytest.raises(ConvMemError) as e:
        store.search_messages(query="alpha", filters_json=json.dumps(flt))
    assert e.value.code == "VALIDATION_ERROR" and field in e.value.message


# -- snippets --------------------------------------------------------------------------------

def test_snippets_fit_and_keep_the_match(tmp_path) -> None:
    filler = "これは長い文章です。" * 300 + " padding words " * 200
    with MemoryStore.open(tmp_path / "s") as store:
        long_id = store.write_message(session_id="a", role="user",
                                      content=filler + " the needle is here " + filler)["message"]["message_id"]
        store.write_message(session_id="a", role="user", content="a short needle")
        plain = store.search_messages(query="needle")
        for budget in (64, 100, 257, 4096):
            res = store.search_messages(query="needle", snippet_bytes=budget)["results"]
            assert [r["message_id"] for r in res] == [r["message_id"] for r in plain["results"]]
            by_id = {r["message_id"]: r for r in res}
            long = by_id[long_id]
            data = long["content"].encode("utf-8")   # valid UTF-8: it encodes back
            assert len(data) <= budget and long["content_truncated"] is True
            assert long["content"].startswith("…") and long["content"].endswith("…")
            assert "needle" in long["content"]
            assert long["total_bytes"] == len((filler + " the needle is here " + filler).encode())
            short = [r for r in res if r["message_id"] != long_id][0]
            assert short["content"] == "a short needle" and short["content_truncated"] is False
            assert short["total_bytes"] == len("a short needle")
        # without snippet_bytes, today's answer: the whole content, no new fields
        assert "content_truncated" not in plain["results"][0]
        whole = store.read_messages(view="content", message_id=long_id, content_limit=65536)
        assert whole["content_range"]["total_bytes"] == long["total_bytes"]


def test_snippet_never_splits_a_character(tmp_path) -> None:
    with MemoryStore.open(tmp_path / "s") as store:
        for n in range(5):
            store.write_message(session_id="a", role="user",
                                content="é" * (50 + n) + "東京" * (300 + n) + "🎉" * 77 + " 東京")
        for budget in range(64, 90):
            for r in store.search_messages(query="東京", snippet_bytes=budget)["results"]:
                assert len(r["content"].encode("utf-8")) <= budget
                assert "\ufffd" not in r["content"]


@pytest.mark.parametrize("bad", [63, 65537, "100", True])
def test_snippet_bytes_range(corpus, bad) -> None:
    store, _ = corpus
    with pytest.raises(ConvMemError) as e:
        store.search_messages(query="alpha", snippet_bytes=bad)
    assert e.value.code == "VALIDATION_ERROR" and "snippet_bytes" in e.value.message


# -- cursor ----------------------------------------------------------------------------------

def pages(store, query: str, limit: int, **kw) -> list[list[str]]:
    out, cursor = [], ""
    while cursor is not None:
        res = store.search_messages(query=query, limit=limit, cursor=cursor, **kw)
        out.append([r["message_id"] for r in res["results"]])
        cursor = res.get("nextCursor")
    return out


@pytest.mark.parametrize("limit", [1, 7, 20, 100])
def test_cursor_pages_concatenated_are_the_ranking(corpus, limit) -> None:
    store, msgs = corpus
    flt = json.dumps({"roles": ["user", "assistant"], "after": T0 + 3000})
    want = ranking(store, "alpha zeta", filters_json=flt)
    got = pages(store, "alpha zeta", limit, filters_json=flt)
    assert sum(got, []) == want
    assert all(len(p) == limit for p in got[:-1]) and 0 < len(got[-1]) <= limit


def test_cursor_is_stable_while_the_store_changes(corpus) -> None:
    store, msgs = corpus
    first_ranking = ranking(store, "alpha")
    res = store.search_messages(query="alpha", limit=10, cursor="")
    seen = [r["message_id"] for r in res["results"]]
    cursor = res["nextCursor"]
    deleted = set(first_ranking[15:18]) | {first_ranking[9]}  # one just returned, three ahead
    for mid in deleted:
        store.delete_message(message_id=mid)
    new = {store.write_message(session_id="s0", role="user", content="alpha " * k)["message"]["message_id"]
           for k in range(1, 6)}  # would rank high and shift every page
    while cursor is not None:
        res = store.search_messages(query="alpha", limit=10, cursor=cursor)
        seen += [r["message_id"] for r in res["results"]]
        cursor = res.get("nextCursor")
    assert not new & set(seen)
    assert seen == [m for m in first_ranking if m not in deleted or m in seen[:10]]
    assert len(seen) == len(set(seen))


def test_cursor_of_another_request_is_refused(corpus) -> None:
    store, _ = corpus
    cursor = store.search_messages(query="alpha", limit=5, cursor="")["nextCursor"]
    for kw in ({"query": "beta"}, {"query": "alpha", "session_id": "s1"},
               {"query": "alpha", "filters_json": '{"roles":["user"]}'},
               {"query": "alpha", "min_importance": 10}):
        with pytest.raises(ConvMemError) as e:
            store.search_messages(cursor=cursor, **kw)
        assert e.value.code == "VALIDATION_ERROR" and "cursor" in e.value.message
    # other page sizes and snippets are fine: the cursor is about which results come next
    assert store.search_messages(query="alpha", limit=3, snippet_bytes=64, cursor=cursor)["results"]
    history = store.read_messages(view="history", session_id="s0", limit=2)["nextCursor"]
    for bad in (history, cursor[:-2] + ("A" if cursor[-2] != "A" else "B") + cursor[-1], "x" * 20000, 5):
        with pytest.raises(ConvMemError) as e:
            store.search_messages(query="alpha", cursor=bad)
        assert e.value.code == "VALIDATION_ERROR"
    store.rebuild_index()
    with pytest.raises(ConvMemError) as e:
        store.search_messages(query="alpha", cursor=cursor)
    assert "stale" in e.value.message


def test_without_cursor_no_next_cursor(corpus) -> None:
    store, _ = corpus
    res = store.search_messages(query="alpha", limit=2)
    assert list(res) == ["results"] and len(res["results"]) == 2


# -- the contract -----------------------------------------------------------------------------

@pytest.mark.parametrize("tool, args", [
    ("search_messages", {"query": "alpha", "snippet_bytes": 100}),
    ("search_messages", {"query": "alpha", "cursor": ""}),
    ("read_messages", {"session_id": "s0", "order": "desc"}),
    ("read_messages", {"view": "sessions", "snippet_bytes": 100}),
])
def test_contract_mode_refuses_the_new_arguments(corpus, tool, args) -> None:
    store, _ = corpus
    out = run_tool(store, tool, args, CONTRACT)
    assert out.is_error
    body = orjson.loads(out.text)
    assert body["error"]["code"] == "VALIDATION_ERROR"
    ok = run_tool(store, tool, args, ToolCatalog.of(("core",)))
    assert not ok.is_error, ok.text


def test_contract_mode_takes_the_new_filter_keys(corpus) -> None:
    store, msgs = corpus
    out = run_tool(store, "search_messages",
                   {"query": "alpha", "filters_json": json.dumps({"roles": ["system"]})}, CONTRACT)
    assert not out.is_error
    assert {msgs[r["message_id"]]["role"] for r in orjson.loads(out.text)["results"]} == {"system"}


def test_roles_and_times_survive_a_snapshot_and_a_replay(tmp_path) -> None:
    path = tmp_path / "s"
    with MemoryStore.open(path) as store:
        store.import_message_batch([{"session_id": "a", "role": ROLES[i % 3], "content": "word",
                                     "timestamp": T0 + i} for i in range(9)])
        store.checkpoint()  # these nine from the snapshot ...
        store.write_message(session_id="a", role="system", content="word")  # ... this from the log
        want = ranking(store, "word", filters_json='{"roles":["system"],"after":%d}' % (T0 + 3))
    assert len(want) == 3
    with MemoryStore.open(path) as store:
        assert ranking(store, "word", filters_json='{"roles":["system"],"after":%d}' % (T0 + 3)) == want
