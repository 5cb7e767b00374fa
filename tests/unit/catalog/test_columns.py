"""Column: copy on write for read-only snapshot views and for frozen snapshot sections."""
from __future__ import annotations

import numpy as np

from convmem.catalog.columns import Column


def filled(n: int) -> Column:
    col = Column("i8")
    col.extend(list(range(n)))
    return col


def test_frozen_is_a_view_that_no_later_change_reaches():
    col = filled(100)
    frozen = col.frozen()
    assert np.shares_memory(frozen, col.data)  # no copy taken
    col.writable()[5] = -5  # a change in place: the column's values are copied first
    assert not np.shares_memory(frozen, col.data)
    for i in range(1000):  # appends, and growth past the capacity
        col.append(1000 + i)
    assert frozen.tolist() == list(range(100))
    assert col.data[5] == -5 and col.n == 1100 and col.data[1099] == 1999


def test_appends_after_frozen_need_no_copy():
    col = filled(10)  # capacity 256
    data = col.data
    frozen = col.frozen()
    col.append(10)
    col.extend([11, 12])
    assert col.data is data and frozen.tolist() == list(range(10))


def test_only_the_first_change_copies_and_release_stops_copying():
    col = filled(10)
    col.frozen()
    first = col.writable()
    assert col.writable() is first  # one copy per frozen section, not one per change
    col.frozen()
    col.release()  # its snapshot is written: nothing reads the section any more
    assert col.writable() is col.data and col.data is first


def test_a_read_only_view_is_frozen_as_it_is_and_copied_on_change():
    base = np.arange(20, dtype=np.int64)
    base.flags.writeable = False
    col = Column.from_array(base)
    frozen = col.frozen()
    assert np.shares_memory(frozen, base)
    col.writable()[0] = 7
    assert base[0] == 0 and frozen[0] == 0 and col.data[0] == 7
