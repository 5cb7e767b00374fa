"""The response budget, the cursors, the ULID clock, and the vocabulary that validation and the
tool schemas share."""
from __future__ import annotations

import orjson
import pytest

from convmem import ConvMemError, domain
from convmem.api.paging import Budget, Cursors
from convmem.ids import UlidClock
from convmem.tools.schemas import TOOLS_BY_NAME


def test_budget_takes_the_first_item_always_and_then_what_fits():
    big = {"x": "a" * (domain.RESPONSE_BUDGET - 100)}
    b = Budget()
    assert b.take(big) and not b.take({"y": "b" * 200}) and b.truncated
    small = Budget()
    assert all(small.take({"i": i}) for i in range(1000)) and not small.truncated


def test_budget_bounds_give_the_same_answer_as_measuring():
    items = [{"t": "é" * n} for n in (10, 5000, 300000, 1_000_000, 2_000_000, 3)]
    taken: list = []
    fast = Budget(taken)
    for it in items:
        if not fast.take(it, 6 * len(orjson.dumps(it))):
            break
        taken.append(it)
    exact = Budget()
    want = []
    for it in items:
        if not exact.take(it):
            break
        want.append(it)
    assert taken == want


def test_budget_item_cap_counts_the_start():
    b = Budget(used=10, count=1, max_items=3)
    assert b.take({"a": 1}) and b.take({"b": 2}) and not b.take({"c": 3}) and b.truncated


def test_cursors_are_signed_and_kind_bound():
    c = Cursors(b"k" * 32)
    cur = c.make(b"H", b"payload")
    assert c.open(cur, b"H") == b"payload"
    for bad, kind in [(cur, b"S"), (cur[:-2] + "AA", b"H"), ("", b"H"), (5, b"H"),
                      ("x" * 3000, b"H")]:
        with pytest.raises(ConvMemError) as err:
            c.open(bad, kind)
        assert err.value.code == "VALIDATION_ERROR"
    assert Cursors(b"j" * 32).make(b"H", b"payload") != cur


def test_ulid_clock_is_monotonic_within_a_millisecond_and_round_trips():
    clock = UlidClock((2**47, 5))  # a "last" far in the future: every new id must follow it
    ids = [clock.new() for _ in range(100)]
    assert [u for u, _ in ids] == sorted(u for u, _ in ids) and len({u for u, _ in ids}) == 100
    assert all(ms == 2**47 for _, ms in ids)
    again = UlidClock.from_meta(clock.to_meta())
    assert again.last == clock.last and again.new()[0] > ids[-1][0]


def test_schemas_take_enums_and_ranges_from_the_domain():
    write = TOOLS_BY_NAME["write_message"].input_schema["properties"]
    assert write["role"]["enum"] == list(domain.ROLES)
    assert write["content"]["maxLength"] == domain.MAX_CONTENT_BYTES
    read = TOOLS_BY_NAME["read_messages"].input_schema["properties"]
    assert read["view"]["enum"] == list(domain.VIEWS)
    assert (read["limit"]["minimum"], read["limit"]["maximum"], read["limit"]["default"]) == domain.HISTORY_LIMIT
    search = TOOLS_BY_NAME["search_messages"].input_schema["properties"]
    assert (search["limit"]["minimum"], search["limit"]["maximum"]) == domain.SEARCH_LIMIT[:2]
    assert search["query"]["maxLength"] == domain.MAX_QUERY_BYTES
