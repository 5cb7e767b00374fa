"""Hypothesis: search_messages with time and role filters, and its cursor, against a model (the
unfiltered ranking filtered by brute force) while messages are written, updated and deleted."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem import MemoryStore

ROLES = ("user", "assistant", "system")
WORDS = ("alpha", "beta", "gamma", "東京", "設定")
T0 = 1_700_000_000_000

message = st.tuples(st.sampled_from(ROLES), st.integers(0, 40),
                    st.lists(st.sampled_from(WORDS), min_size=1, max_size=6))
change = st.tuples(st.sampled_from(("delete", "update", "write")), st.integers(0, 10_000),
                   st.lists(st.sampled_from(WORDS), min_size=1, max_size=4))
filters = st.fixed_dictionaries({}, optional={
    "after": st.integers(T0 - 1, T0 + 41), "before": st.integers(T0 - 1, T0 + 41),
    "roles": st.lists(st.sampled_from(ROLES), max_size=3, unique=True)})


def ids(res: dict) -> list[str]:
    return [r["message_id"] for r in res["results"]]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=st.lists(message, min_size=1, max_size=40), flt=filters,
       changes=st.lists(change, max_size=6), limit=st.integers(1, 7),
       query=st.sampled_from(("alpha", "beta 東京", "gamma 設定 alpha")))
def test_filters_and_cursor_against_the_model(msgs, flt, changes, limit, query) -> None:
    if "after" in flt and "before" in flt and flt["after"] > flt["before"]:
        flt["after"], flt["before"] = flt["before"], flt["after"]
    with tempfile.TemporaryDirectory() as d, MemoryStore.open(Path(d) / "s") as store:
        store.import_message_batch([{"session_id": f"s{i % 3}", "role": r, "content": " ".join(w),
                                     "timestamp": T0 + t} for i, (r, t, w) in enumerate(msgs)])
        every = {}
        for s in range(3):
            for m in store.read_messages(view="history", session_id=f"s{s}", limit=1000)["history"]:
                every[m["message_id"]] = m

        def model(ranking: list[str]) -> list[str]:
            return [mid for mid in ranking
                    if flt.get("after", 0) <= every[mid]["timestamp"] < flt.get("before", 1 << 60)
                    and (not flt.get("roles") or every[mid]["role"] in flt["roles"])]

        fj = json.dumps(flt)
        unfiltered = ids(store.search_messages(query=query, limit=100))
        want = model(unfiltered)
        assert ids(store.search_messages(query=query, limit=100, filters_json=fj)) == want
        assert ids(store.search_messages(query=query, limit=limit, filters_json=fj)) == want[:limit]
        # a paged walk, with the store changing after the first page
        res = store.search_messages(query=query, limit=limit, filters_json=fj, cursor="")
        seen = ids(res)
        assert seen == want[:limit]
        gone: set[str] = set()
        known = list(every)
        for op, pick, words in changes:
            mid = known[pick % len(known)]
            if op == "delete" and mid not in gone:
                store.delete_message(message_id=mid)
                gone.add(mid)
            elif op == "update" and mid not in gone:
                if store.update_message(message_id=mid, content=" ".join(words))["changed"]:
                    gone.add(mid)  # a new version: left out of later pages
                # (the same content again is a no-op, the spec says: the message stays as it was)
            elif op == "write":
                store.write_message(session_id="s0", role="user", content=" ".join(words))
        cursor = res.get("nextCursor")
        while cursor is not None:
            res = store.search_messages(query=query, limit=limit, filters_json=fj, cursor=cursor)
            seen += ids(res)
            cursor = res.get("nextCursor")
        assert seen == [m for m in want if m not in gone or m in seen[:limit]]
