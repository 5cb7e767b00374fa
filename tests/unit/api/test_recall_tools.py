"""The recall toolset against models: token estimates, recall and start_session budgets, the
since cursor, list_tags counts, and remember's exact duplicates (after update, delete, restart)."""
from __future__ import annotations

import json
import random
import threading
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from convmem import ConvMemError, MemoryStore
from convmem.api.budget import estimate_tokens, json_tokens, trim_text
from convmem.catalog.recall_keys import normalize
from convmem.tools import run_tool
from convmem.tools.toolsets import EVERY_TOOL
from convmem.validation import ulid as parse_ulid
from conftest import meta

JA = "東京で開催された会議の議事録です。データベースの設定を確認しました。"
# The property tests only read the store the fixture made: sharing it between inputs is safe.
READ_ONLY_FIXTURE = [HealthCheck.function_scoped_fixture]
EN = "We decided to keep PostgreSQL for the billing database because of the reporting needs. "


def write(store: MemoryStore, content: str, session: str = "s1", role: str = "user", **m) -> str:
    return store.write_message(session_id=session, role=role, content=content,
                               metadata_json=meta(**m))["message"]["message_id"]


def code_of(call) -> tuple[str, str]:
    with pytest.raises(ConvMemError) as info:
        call()
    return info.value.code, info.value.message


# -- token estimates ---------------------------------------------------------------------------
def test_estimate_by_script() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2  # (rounded up)
    assert estimate_tokens("東京") == 2  # one per CJK character
    assert estimate_tokens("東京abcd") == 3
    assert estimate_tokens("「はい」、。") == 6  # CJK punctuation and kana: one each
    assert estimate_tokens("한국어") == 3
    assert estimate_tokens("привет") == 3  # 12 UTF-8 bytes
    assert estimate_tokens("😀") == 1  # 4 bytes
    assert estimate_tokens("ＡＢＣ") == 3  # full-width forms
    assert estimate_tokens("naïve") == 2  # 4 ASCII bytes, one 2-byte character: each rounded up
    assert estimate_tokens("Ελληνικά") == 4  # two 2-byte characters per token


@given(st.text(max_size=60), st.text(max_size=60))
def test_estimate_is_monotone_and_subadditive(a: str, b: str) -> None:
    assert estimate_tokens(a + b) <= estimate_tokens(a) + estimate_tokens(b)
    assert estimate_tokens(a) <= estimate_tokens(a + b)


@given(st.text(max_size=200), st.integers(min_value=0, max_value=80))
def test_trim_text_is_the_longest_prefix_within(text: str, limit: int) -> None:
    cut = trim_text(text, limit)
    assert text.startswith(cut)
    assert estimate_tokens(cut) <= limit
    if len(cut) < len(text):
        assert estimate_tokens(text[: len(cut) + 1]) > limit


# -- recall --------------------------------------------------------------------------------------
@pytest.fixture
def corpus(store: MemoryStore) -> dict[str, str]:
    """A store with long English and CJK-heavy messages in three sessions, some related."""
    rng = random.Random(7)
    contents: dict[str, str] = {}
    prev = None
    for i in range(40):
        body = (JA * rng.randint(1, 30) if i % 2 else EN * rng.randint(1, 40)) + f" item{i}"
        rels = [{"type": "related_to", "message_id": prev}] if prev and i % 3 == 0 else []
        mid = write(store, body, session=f"s{i % 3}", tags=["db"] if i % 4 else ["ja", "db"],
                    summary=("要約 " + str(i)) if i % 5 == 0 else "", relations=rels)
        contents[mid] = body
        prev = mid
    return contents


@settings(max_examples=60, deadline=None, suppress_health_check=READ_ONLY_FIXTURE)
@given(budget=st.one_of(st.integers(1, 120), st.integers(120, 6000)),
       query=st.sampled_from(["database", "データベース 設定", "PostgreSQL billing", "会議"]))
def test_recall_never_exceeds_its_budget(store: MemoryStore, corpus: dict[str, str], budget: int,
                                         query: str) -> None:
    r = store.recall(query=query, budget_tokens=budget)
    items = r["items"]
    assert json_tokens(items) <= budget
    assert r["used_tokens"] == json_tokens(items)
    ids = [it["message_id"] for it in items]
    assert len(ids) == len(set(ids))  # each message once
    for it in items:
        full = corpus[it["message_id"]]
        assert full.startswith(it["content"])  # a prefix of whole characters
        assert it["content_truncated"] == (it["content"] != full)
        assert it["total_bytes"] == len(full.encode("utf-8"))
        if it["why"] != "hit":
            assert it["anchor"] in ids and ids.index(it["anchor"]) < ids.index(it["message_id"])
    scores = [it["score"] for it in items if it["why"] == "hit"]
    assert scores == sorted(scores, reverse=True)  # most relevant first


def test_recall_with_room_is_the_hits_and_their_context(store: MemoryStore,
                                                        corpus: dict[str, str]) -> None:
    """A model of the bundle: search hits, then per hit its before/after neighbours and its
    related messages (from read_messages view=context), each message the first time only."""
    r = store.recall(query="item3 item4 item9", budget_tokens=500_000, limit=3)
    hits = store.search_messages(query="item3 item4 item9", limit=3)["results"]
    want: list[tuple[str, str]] = [("hit", h["message_id"]) for h in hits]
    seen = {h["message_id"] for h in hits}
    expected: list[tuple[str, str]] = []
    for h in hits:
        expected.append(("hit", h["message_id"]))
        ctx = store.read_messages(view="context", message_id=h["message_id"], before=1, after=1)
        around = ([("before", m["message_id"]) for m in ctx["chronological_context"]["before"]]
                  + [("after", m["message_id"]) for m in ctx["chronological_context"]["after"]]
                  + [("relation", x["message"]["message_id"]) for x in ctx["relations"]
                     if "message" in x])
        for why, mid in around:
            if mid not in seen:
                seen.add(mid)
                expected.append((why, mid))
    assert [(it["why"], it["message_id"]) for it in r["items"]] == expected
    assert len(want) == 3 and not any(it["content_truncated"] for it in r["items"])
    assert r["omitted"]["hits"] == 0 and r["omitted"]["trimmed"] == 0


def test_recall_tiny_budget_leaves_everything_out_and_says_so(store: MemoryStore,
                                                              corpus: dict[str, str]) -> None:
    r = store.recall(query="database", budget_tokens=3)
    assert r["items"] == []
    assert r["omitted"]["hits"] == 10 and r["omitted"]["more_hits"] is True


def test_recall_filters_and_validation(store: MemoryStore, corpus: dict[str, str]) -> None:
    r = store.recall(query="database", budget_tokens=100_000, filters_json='{"tags":["ja"]}',
                     neighbours=0, relation_depth=0)
    assert r["items"] and all("ja" in it["tags"] for it in r["items"])
    # budget_tokens is a required keyword of the typed API; an MCP call without it is refused by name
    with pytest.raises(TypeError):
        store.recall(query="x")  # type: ignore[call-arg]
    answer = json.loads(run_tool(store, "recall", {"query": "x"}, EVERY_TOOL).text)
    assert answer["error"]["code"] == "VALIDATION_ERROR" and "budget_tokens" in answer["error"]["message"]
    assert code_of(lambda: store.recall(query="x", budget_tokens=None)) == ("VALIDATION_ERROR", "budget_tokens is required")  # type: ignore[arg-type]
    code, msg = code_of(lambda: store.recall(query="x", budget_tokens=0))
    assert code == "VALIDATION_ERROR" and "budget_tokens" in msg
    code, msg = code_of(lambda: store.recall(query="x", budget_tokens=10, neighbours=9))
    assert code == "VALIDATION_ERROR" and "neighbours" in msg
    code, msg = code_of(lambda: store.recall(query="x", budget_tokens=10, filters_json="[]"))
    assert code == "VALIDATION_ERROR" and "filters_json" in msg


# -- remember ------------------------------------------------------------------------------------
def test_remember_finds_the_same_normalized_content_in_the_same_session(store: MemoryStore) -> None:
    first = store.remember(session_id="s", content="User prefers  dark mode.", role="user")
    assert first["duplicate"] is False
    size = store.get_system_health()["log_size"]
    for variant in ("user PREFERS dark mode.", "  User prefers\n\tdark mode.  ", "Ｕｓｅｒ prefers dark mode."):
        again = store.remember(session_id="s", content=variant)
        assert again["duplicate"] is True and again["matched"] == "content"
        assert again["message"] == first["message"]
    assert store.get_system_health()["log_size"] == size  # nothing written
    other = store.remember(session_id="t", content="User prefers dark mode.")
    assert other["duplicate"] is False  # another session: written
    assert [n["message_id"] for n in other["near_duplicates"]] == [first["message"]["message_id"]]
    assert store.remember(session_id="s", content="User prefers dark mode!")["duplicate"] is False


def test_remember_same_summary_and_tags_in_any_session(store: MemoryStore) -> None:
    a = store.remember(session_id="s1", content="long text one",
                       metadata_json=meta(summary="Deploy on Fridays", tags=["ops", "deploy"]))
    b = store.remember(session_id="s2", content="other words entirely",
                       metadata_json=meta(summary="deploy on  fridays", tags=["Deploy", "ops"]))
    assert b["duplicate"] is True and b["matched"] == "summary_tags"
    assert b["message"]["message_id"] == a["message"]["message_id"]
    c = store.remember(session_id="s2", content="other words entirely",
                       metadata_json=meta(summary="Deploy on Fridays", tags=["ops"]))
    assert c["duplicate"] is False  # other tags


def test_remember_is_exact_after_update_delete_and_restart(store_dir: Path) -> None:
    s = MemoryStore.open(store_dir)
    mid = s.remember(session_id="s", content="alpha beta")["message"]["message_id"]
    s.update_message(message_id=mid, content="gamma delta")
    assert s.remember(session_id="s", content="Gamma  Delta")["duplicate"] is True
    fresh = s.remember(session_id="s", content="alpha beta")  # the old text is no longer stored
    assert fresh["duplicate"] is False
    s.delete_message(message_id=fresh["message"]["message_id"])
    keep = s.remember(session_id="s", content="kept text", metadata_json=meta(summary="k", tags=["x"]))
    s.close()  # (a snapshot)
    for reopen in range(3):
        s = MemoryStore.open(store_dir)
        assert s.remember(session_id="s", content="gamma delta")["message"]["message_id"] == mid
        assert s.remember(session_id="z", content="?", metadata_json=meta(summary="K", tags=["x"])
                          )["message"]["message_id"] == keep["message"]["message_id"]
        if reopen == 0:
            s.rebuild_index()
        if reopen == 1:  # records after the snapshot: replayed at the next open
            s.write_message(session_id="s", role="user", content="after the snapshot")
            s._catalog.unsaved_records = 0  # (no snapshot at close: the next open replays it)
        s.close()
    s = MemoryStore.open(store_dir)
    assert s.remember(session_id="s", content="after  the snapshot")["duplicate"] is True
    deleted_again = s.remember(session_id="s", content="alpha beta")
    assert deleted_again["duplicate"] is False  # the deleted one does not count
    s.close()


def test_two_remembers_of_the_same_memory_at_once_write_one(store: MemoryStore) -> None:
    results: list[dict] = []
    barrier = threading.Barrier(4)

    def go() -> None:
        barrier.wait()
        results.append(store.remember(session_id="s", content="the same memory"))

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r["duplicate"] for r in results) == [False, True, True, True]
    assert len({r["message"]["message_id"] for r in results}) == 1
    assert store.get_system_health()["active_messages"] == 1


def test_normalization() -> None:
    assert normalize("  Ａ\u3000B\n\tc ") == "a b c"
    assert normalize("Straße") == "strasse"


# -- list_tags and the counts ---------------------------------------------------------------------
def test_list_tags_matches_a_model_and_pages_stably(store_dir: Path) -> None:
    rng = random.Random(3)
    s = MemoryStore.open(store_dir)
    live: dict[str, list[str]] = {}
    for step in range(300):
        op = rng.random()
        if op < 0.6 or not live:
            tags = rng.sample(["a", "b", "c", "日本", "z z", "B"], rng.randint(0, 3))
            live[write(s, f"m{step}", tags=tags)] = tags
        elif op < 0.8:
            mid = rng.choice(list(live))
            tags = rng.sample(["a", "c", "new"], rng.randint(0, 2))
            s.update_message(message_id=mid, metadata_json=meta(tags=tags))
            live[mid] = tags
        else:
            mid = rng.choice(list(live))
            s.delete_message(message_id=mid)
            del live[mid]
        if step % 100 == 99:
            s.close()
            s = MemoryStore.open(store_dir)
    model = Counter(t for tags in live.values() for t in set(tags))
    pages, cursor = [], None
    while True:
        page = s.list_tags(limit=2, **({"cursor": cursor} if cursor else {}))
        pages.extend((x["tag"], x["count"]) for x in page["tags"])
        cursor = page.get("nextCursor")
        if cursor is None:
            break
    assert pages == sorted(model.items())
    assert s.list_tags()["tags"] == [{"tag": t, "count": n} for t, n in sorted(model.items())]
    code, _ = code_of(lambda: s.list_tags(cursor="bogus"))
    assert code == "VALIDATION_ERROR"
    s.close()


# -- start_session -------------------------------------------------------------------------------
def test_start_session_never_writes_and_is_idempotent(store: MemoryStore, corpus: dict[str, str],
                                                      store_dir: Path) -> None:
    before = store.get_system_health()
    files = {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in store_dir.iterdir()}
    a = store.start_session(budget_tokens=2000)
    b = store.start_session(budget_tokens=2000, since=a["cursor"])
    c = store.start_session(budget_tokens=2000, since=a["cursor"])
    after = store.get_system_health()
    assert after["io"] == before["io"] and after["log_size"] == before["log_size"]
    assert {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in store_dir.iterdir()} == files
    assert b == c
    assert b["changes"] == {"status": "OK", "counts": {"new": 0, "updated": 0, "deleted": 0},
                            "complete": True, "items": []}
    assert a == store.start_session(budget_tokens=2000)


def test_start_session_memories_against_a_model(store: MemoryStore) -> None:
    rng = random.Random(5)
    made = []
    for i in range(60):
        kind = rng.choice(["conversation", "semantic", "preference", "episode"])
        tier = rng.choice(["short", "mid", "long", "discard"])
        imp = rng.randint(0, 100)
        mid = write(store, f"memory {i}", session=f"s{i % 4}", memory_kind=kind, memory_tier=tier,
                    importance=imp)
        made.append((mid, kind, tier, imp, i))
    gone = made[7][0]
    store.delete_message(message_id=gone)
    model = [m for m in made if m[0] != gone and m[2] != "discard"
             and (m[1] in ("semantic", "preference") or m[2] == "long")]
    model.sort(key=lambda m: (-m[3], -m[4]))
    r = store.start_session(budget_tokens=500_000)
    assert [m["message_id"] for m in r["memories"]] == [m[0] for m in model]
    kinds = Counter(m[1] for m in made if m[0] != gone)
    assert r["kinds"] == [{"kind": k, "count": kinds[k]} for k in
                          ("conversation", "episode", "semantic", "procedure", "preference", "summary")
                          if kinds[k]]
    assert [x["session_id"] for x in r["recent_sessions"]] == ["s3", "s2", "s1", "s0"]
    assert r["recent_sessions"][0]["content"] == "memory 59"
    # The first ones are kept between calls: changes to them, and new ones, show at once.
    state = {m[0]: list(m) for m in made if m[0] != gone}
    top = [m["message_id"] for m in r["memories"]]
    store.delete_message(message_id=top[0])
    del state[top[0]]
    store.update_message(message_id=top[1], metadata_json=meta(importance=0))
    state[top[1]][3] = 0
    store.update_message(message_id=top[2], metadata_json=meta(memory_kind="conversation", memory_tier="mid"))
    state[top[2]][1:3] = ["conversation", "mid"]
    late = write(store, "late", session="s0", memory_kind="preference", importance=100)
    state[late] = [late, "preference", "short", 100, 1000]
    s0 = [m for m in made if m[4] % 4 == 0 and m[0] != gone]
    for m in s0[-2:]:
        store.delete_message(message_id=m[0])
        state.pop(m[0], None)
    model = sorted((m for m in state.values() if m[2] != "discard"
                    and (m[1] in ("semantic", "preference") or m[2] == "long")),
                   key=lambda m: (-m[3], -m[4]))
    again = store.start_session(budget_tokens=500_000, since=r["cursor"])
    assert [m["message_id"] for m in again["memories"]] == [m[0] for m in model]
    assert [x["session_id"] for x in again["recent_sessions"]] == ["s0", "s3", "s2", "s1"]
    assert again["recent_sessions"][0]["content"] == "late"


@settings(max_examples=40, deadline=None, suppress_health_check=READ_ONLY_FIXTURE)
@given(budget=st.one_of(st.integers(1, 100), st.integers(100, 5000)))
def test_start_session_never_exceeds_its_budget(store: MemoryStore, corpus: dict[str, str],
                                                budget: int) -> None:
    r = store.start_session(budget_tokens=budget)
    sections = [r["memories"], r["recent_sessions"], r["kinds"], r["tiers"], r["tags"]]
    used = sum(json_tokens(x) for x in sections if x)  # (an empty section costs nothing)
    assert used <= budget and r["used_tokens"] == used
    if budget >= 2000:
        assert all(sections[1:])  # (room for each section that has something: no memories here)


def test_since_lists_new_updated_and_deleted(store: MemoryStore) -> None:
    old = write(store, "old one")
    doomed = write(store, "to be deleted")
    cursor = store.start_session(budget_tokens=100)["cursor"]
    new = write(store, "brand new", session="s2", summary="a new summary")
    store.update_message(message_id=old, content="old one, edited")
    store.delete_message(message_id=doomed)
    transient = write(store, "made and deleted")
    store.delete_message(message_id=transient)
    r = store.start_session(budget_tokens=5000, since=cursor)
    ch = r["changes"]
    assert ch["counts"] == {"new": 1, "updated": 1, "deleted": 1} and ch["complete"] is True
    assert [(x["change"], x["message_id"]) for x in ch["items"]] == [
        ("new", new), ("updated", old), ("deleted", doomed)]
    assert ch["items"][0]["line"] == "a new summary"
    later = store.start_session(budget_tokens=5000, since=r["cursor"])
    assert later["changes"]["items"] == []


def test_since_after_rebuild_or_from_another_store(store: MemoryStore, tmp_path: Path) -> None:
    write(store, "x")
    cursor = store.start_session(budget_tokens=100)["cursor"]
    store.rebuild_index()
    ch = store.start_session(budget_tokens=100, since=cursor)["changes"]
    assert ch["status"] == "reset" and "rebuild_index" in ch["reason"] and ch["complete"] is False
    other = MemoryStore.open(tmp_path / "other")
    try:
        foreign = other.start_session(budget_tokens=100)["cursor"]
    finally:
        other.close()
    code, msg = code_of(lambda: store.start_session(budget_tokens=100, since=foreign))
    assert code == "VALIDATION_ERROR" and msg.startswith("since ")
    code, msg = code_of(lambda: store.start_session(budget_tokens=100, since=7))
    assert code == "VALIDATION_ERROR" and "since" in msg
    for i in range(3):
        write(store, f"y{i}", session=f"other-session-{i:020d}")
    listing = store.read_messages(view="sessions", limit=1)["nextCursor"]  # (a cursor of this store)
    code, msg = code_of(lambda: store.start_session(budget_tokens=100, since=listing))
    assert code == "VALIDATION_ERROR" and msg.startswith("since ")


def test_recall_keys_counts_match_a_recount(store_dir: Path) -> None:
    """The kept counts (tags, facets) equal a recount over the live messages, after a reopen."""
    rng = random.Random(11)
    s = MemoryStore.open(store_dir)
    ids = [write(s, f"t{i}", tags=rng.sample(["p", "q", "r"], rng.randint(0, 2)),
                 memory_kind=rng.choice(["semantic", "episode"])) for i in range(80)]
    for mid in ids[::7]:
        s.delete_message(message_id=mid)
    for mid in [m for m in ids[1::9] if m not in ids[::7]]:
        s.update_message(message_id=mid, metadata_json=meta(memory_kind="preference", tags=["p"]))
    for reopen in (False, True):
        if reopen:
            s.close()
            s = MemoryStore.open(store_dir)
        msgs = [m for n in ("s1",) for m in s.read_messages(session_id=n, limit=1000)["history"]]
        tags = Counter(t for m in msgs for t in set(m["metadata"]["tags"]))
        assert s._catalog.recall.tag_counts == dict(tags)
        kinds = Counter(m["metadata"]["memory_kind"] for m in msgs)
        got = {x["kind"]: x["count"] for x in s.start_session(budget_tokens=10_000)["kinds"]}
        assert got == dict(kinds)
    s.close()



def test_counts_derived_after_open_include_the_changes_made_before(store_dir: Path) -> None:
    """After a reopen the counts are derived when first asked for (open does no pass over the
    store for them); writes, deletes, updates and restores made before that are all in them."""
    rng = random.Random(5)
    s = MemoryStore.open(store_dir)
    ids = [write(s, f"t{i}", tags=rng.sample(["p", "q", "r"], rng.randint(0, 2)),
                 memory_kind=rng.choice(["semantic", "episode"])) for i in range(60)]
    s.delete_message(message_id=ids[0])
    s.close()
    s = MemoryStore.open(store_dir)
    rk = s._catalog.recall
    assert not rk._counted  # (not derived by open)
    s.restore_message(message_id=ids[0])
    s.delete_message(message_id=ids[1])
    s.update_message(message_id=ids[2], metadata_json=meta(memory_kind="preference", tags=["z", "p"]))
    write(s, "new one", tags=["q", "new"], memory_kind="procedure")
    assert not rk._counted
    msgs = s.read_messages(session_id="s1", limit=1000)["history"]
    tags = Counter(t for m in msgs for t in set(m["metadata"]["tags"]))
    kinds = Counter(m["metadata"]["memory_kind"] for m in msgs)
    assert rk.tag_counts == dict(tags) and tags["new"] == 1 and tags["z"] == 1
    got = {x["kind"]: x["count"] for x in s.start_session(budget_tokens=10_000)["kinds"]}
    assert got == dict(kinds) and got["procedure"] == 1
    write(s, "after the first ask", tags=["new"])  # (kept on every change from now on)
    assert rk.tag_counts["new"] == 2
    s.close()


def test_tools_run_through_dispatch_with_the_recall_toolset(store: MemoryStore) -> None:
    from convmem.tools.dispatch import run_tool
    from convmem.tools.toolsets import CONTRACT, ToolCatalog
    cat = ToolCatalog.of(("core", "recall"))
    out = run_tool(store, "remember", {"session_id": "s", "content": "hi"}, cat)
    assert not out.is_error and json.loads(out.text)["duplicate"] is False
    assert json.loads(run_tool(store, "list_tags", {}, cat).text) == {"tags": []}
    assert run_tool(store, "remember", {"session_id": "s", "content": "hi"}, CONTRACT).is_error


@settings(max_examples=300, deadline=None)
@given(words=st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=8),
       seps=st.lists(st.sampled_from([" ", "  ", "\t", "\n", " \u3000 ", "\u2028"]), min_size=8, max_size=8),
       upper=st.booleans())
def test_contents_equal_after_normalization_share_a_content_key(words: list[str], seps: list[str],
                                                                upper: bool) -> None:
    """The key is a hash of the content's token keys: it must not separate what normalization
    joins (else remember would miss a duplicate)."""
    from convmem.catalog.recall_keys import content_key
    a = " ".join(words)
    b = "".join(w + s for w, s in zip(words, seps)).upper() if upper else "\n" + "".join(
        w + s for w, s in zip(words, seps))
    if normalize(a) == normalize(b):
        assert content_key("s", a) == content_key("s", b)


def test_imported_batches_are_remembered_counted_and_ranked(store: MemoryStore) -> None:
    items = [{"session_id": f"s{i % 2}", "role": "user", "content": f"imported fact {i}",
              "metadata": {"tags": ["imp", f"g{i % 3}"], "memory_kind": "semantic" if i % 4 == 0 else "episode",
                           "importance": i}} for i in range(50)]
    store.start_session(budget_tokens=100)  # (the kept first memories exist before the import)
    assert store.import_messages(items, batch_size=16) == 50
    assert store.remember(session_id="s0", content="IMPORTED fact 10")["duplicate"] is True
    assert store.remember(session_id="s1", content="imported fact 10")["duplicate"] is False
    counts = {t["tag"]: t["count"] for t in store.list_tags()["tags"]}
    assert counts == {"imp": 50, "g0": 17, "g1": 17, "g2": 16}  # (the remembered one has none)
    got = [m["content"] for m in store.start_session(budget_tokens=500_000)["memories"]]
    assert got == [f"imported fact {i}" for i in range(48, -1, -4)]


def test_a_deleted_message_made_current_again_counts_again(store: MemoryStore) -> None:
    """What a restore does to the catalog (a version of a deleted message applied again:
    commit_version from no current version) brings back its tags, its duplicate key and its
    place among the memories, as if it had never been deleted."""
    mid = write(store, "restorable fact", tags=["r"], memory_kind="preference", importance=90)
    write(store, "other", tags=["r"])
    cat = store._catalog
    _, doc = cat.live_doc(parse_ulid("message_id", mid))
    rec, (offset, length) = store._reader.record(doc), cat.doc_span(doc)
    assert store.start_session(budget_tokens=1000)["memories"][0]["message_id"] == mid
    store.delete_message(message_id=mid)
    assert store.list_tags()["tags"] == [{"tag": "r", "count": 1}]
    assert store.start_session(budget_tokens=1000)["memories"] == []
    with store._mutex:
        cat.apply_message(rec, offset, length)  # (the same record, current again)
    assert store.list_tags()["tags"] == [{"tag": "r", "count": 2}]
    assert store.remember(session_id="s1", content="Restorable  FACT")["message"]["message_id"] == mid
    assert [m["message_id"] for m in store.start_session(budget_tokens=1000)["memories"]] == [mid]


def test_a_cut_text_is_a_proper_prefix_even_where_true_is_shorter_than_false() -> None:
    """`"content_truncated": true` is a byte shorter than false: an item whose whole text misses
    the cap by that byte must not come back whole and marked truncated."""
    from convmem.api.budget import fit_item

    seen = 0
    for n in range(1, 400):
        item = {"content": "x" * n, "content_truncated": False}
        over = json_tokens(item) - 1  # the whole item, marked false, is just over this cap
        if json_tokens({"content": "x" * n, "content_truncated": True}) > over:
            continue  # not a boundary case for this length
        seen += 1
        fitted = fit_item(dict(item), "content", over)
        assert fitted is not None and fitted["content_truncated"] is True
        assert len(fitted["content"]) < n and json_tokens(fitted) <= over
    assert seen > 0  # the boundary case was exercised


def test_a_restored_message_is_remembered_and_its_tags_counted_again(tmp_path: Path) -> None:
    """restore_message (the trash) makes the deleted version current again: the recall keys and
    tag counts follow it, so remember finds it and list_tags counts it."""
    with MemoryStore.open(tmp_path / "s") as s:
        mid = s.write_message(session_id="a", role="user", content="Use   ruff for linting",
                              metadata_json='{"tags":["tooling"]}')["message"]["message_id"]
        assert s.delete_message(message_id=mid)["status"] == "OK"
        assert s.list_tags()["tags"] == []
        assert s.restore_message(message_id=mid)["status"] == "OK"
        assert s.list_tags()["tags"] == [{"tag": "tooling", "count": 1}]
        again = s.remember(content="use ruff for   LINTING", session_id="a")
        assert again["duplicate"] is True and again["message"]["message_id"] == mid
    with MemoryStore.open(tmp_path / "s") as s:  # and after a reopen (snapshot or replay)
        assert s.remember(content="Use ruff for linting", session_id="a")["duplicate"] is True


def test_a_neighbour_never_outlives_the_hit_it_belongs_to() -> None:
    """pack leaves out a part that does not fit and goes on with smaller ones; a neighbour of a
    hit left out must go too (an anchor always names a part of the bundle)."""
    from convmem.api.bundle import pack

    def part(mid: str, why: str, text: str, anchor: str | None = None) -> dict:
        p = {"why": why, "message_id": mid, "total_bytes": len(text), "content": text}
        if anchor:
            p["anchor"] = anchor
        return p

    for budget in range(20, 200, 5):
        parts = [part("A", "hit", "a" * 4000 + " " * 4000), part("a1", "after", "x", anchor="A"),
                 part("B", "hit", "b")]
        # the first hit needs more than the whole budget even cut to its least: left out
        parts[0]["summary"] = "s" * (8 * budget)
        out = pack(parts, budget)
        ids = [p["message_id"] for p in out.parts]
        assert "A" not in ids and "a1" not in ids, (budget, ids)
        if ids:
            assert ids == ["B"]
