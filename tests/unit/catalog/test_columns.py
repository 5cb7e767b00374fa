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


def _room_view(n: int, room: int) -> np.ndarray:
    whole = np.arange(n + room, dtype=np.int64)
    whole[n:] = -9  # (what follows the section in the file: overwritten by appends)
    return whole[:n]


def test_a_writable_view_with_room_past_it_is_adopted_with_that_room():
    view = _room_view(10, 6)
    col = Column.from_array(view)
    assert col.mapped and col.n == 10 and len(col.data) == 16
    assert col.nbytes == 10 * 8  # (the room is not resident until written)
    data = col.data
    col.append(10)
    col.extend([11, 12])
    col.writable()[0] = 100  # a change in place: no copy either
    assert col.data is data and col.view().tolist() == [100] + list(range(1, 13))
    assert col.nbytes == 13 * 8
    col.extend([13, 14, 15, 16])  # past the room: grows into memory of its own
    assert col.data is not data and not col.mapped
    assert col.view().tolist() == [100] + list(range(1, 17)) and view.base[0] == 100


def test_a_frozen_mapped_column_is_copied_on_change_and_appended_to_in_its_room():
    col = Column.from_array(_room_view(4, 4))
    frozen = col.frozen()
    col.append(4)
    assert col.mapped and frozen.tolist() == [0, 1, 2, 3]
    col.writable()[1] = -1
    assert frozen.tolist() == [0, 1, 2, 3] and not col.mapped
    assert col.view().tolist() == [0, -1, 2, 3, 4]


def test_views_without_room_or_of_other_arrays_are_not_adopted_as_room():
    whole = np.arange(10, dtype=np.int64)
    assert not Column.from_array(whole).mapped  # (no base)
    assert not Column.from_array(whole[2:6]).mapped  # (starts elsewhere in its base)
    ro = np.arange(10, dtype=np.int64)
    ro.flags.writeable = False
    assert not Column.from_array(ro[:5]).mapped  # (read-only: copied on change, as before)
    assert not Column.from_array(np.zeros((8, 2))[:, :1][:4]).mapped  # (other row shape)
