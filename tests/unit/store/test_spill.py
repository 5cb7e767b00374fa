"""store/spill.py: posting data moved to an unnamed file of the store's and mapped back; its pages
leave the process as the snapshot's writer reads them; bytes that come back changed are caught;
a file system that refuses leaves the data where it was."""
from __future__ import annotations

import errno
import os

import numpy as np
import pytest
import xxhash

from convmem.store import spill as spill_mod
from convmem.store.io import IoCounters
from convmem.store.spill import SpillFile, SpilledDataChanged

MIB = 1 << 20


def _resident_kib(arr: np.ndarray) -> int:
    """Rss of the mapping that holds arr (from /proc/self/smaps)."""
    addr = arr.ctypes.data
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= addr < hi
            elif inside and head == "Rss:":
                return int(line.split()[1])
    raise AssertionError("no mapping holds the array")


def _data(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8)


def test_take_maps_back_the_same_bytes_from_an_unnamed_private_file(tmp_path) -> None:
    sp = SpillFile(tmp_path, IoCounters())
    data = _data(3 * MIB + 17)
    got = sp.take(data)
    assert got is not None and spill_mod.spilled(got) and not spill_mod.spilled(data)
    assert not got.flags.writeable
    assert np.array_equal(got, data)
    assert os.listdir(tmp_path) == []  # (nothing in the directory: O_TMPFILE)
    st = os.fstat(sp._fd)  # noqa: SLF001
    assert st.st_mode & 0o777 == 0o600 and st.st_nlink == 0
    second = sp.take(_data(MIB, seed=2))  # (a second field, past the first in the file)
    assert second is not None and np.array_equal(second, _data(MIB, seed=2))
    assert np.array_equal(got, data)
    sp.close()
    assert np.array_equal(got, data)  # (the mapping outlives the descriptor)
    assert spill_mod.spilled(got)  # (and a later snapshot's writer still reads it in pieces)
    assert not spill_mod.spilled(got[1:]) and not spill_mod.spilled(got.copy())


def test_pieces_read_every_byte_and_leave_no_page_resident(tmp_path) -> None:
    sp = SpillFile(tmp_path, IoCounters())
    got = sp.take(_data(40 * MIB))
    assert got is not None
    spill_mod.PIECE_BYTES, old = 4 * MIB, spill_mod.PIECE_BYTES
    try:
        digest = xxhash.xxh3_64()
        for piece in spill_mod.pieces(got):
            digest.update(piece)
        assert digest.intdigest() == xxhash.xxh3_64_intdigest(_data(40 * MIB))
        assert _resident_kib(got) < 4 * 1024 + 64  # (at most the last piece's, then none)
        got.sum()  # read whole, as a writer without pieces would
        assert _resident_kib(got) > 30 * 1024
        sp.drop_pages()
        assert _resident_kib(got) < 64
    finally:
        spill_mod.PIECE_BYTES = old
    assert spill_mod.checked_digest(got) == digest.intdigest()  # (the same bytes: no error)


def test_bytes_changed_in_the_file_are_reported(tmp_path) -> None:
    sp = SpillFile(tmp_path, IoCounters())
    got = sp.take(_data(2 * MIB))
    assert got is not None
    assert spill_mod.checked_digest(got) == xxhash.xxh3_64_intdigest(_data(2 * MIB))
    os.pwrite(sp._fd, b"\x00\x01\x02", 12345)  # noqa: SLF001  (a page the disk gave back wrong)
    with pytest.raises(SpilledDataChanged, match="not those written"):
        spill_mod.checked_digest(got)


@pytest.mark.parametrize("where", ["posix_fallocate", "fdatasync"])
def test_a_refusing_file_system_leaves_the_data_in_memory(tmp_path, monkeypatch, caplog,
                                                          where) -> None:
    def refuse(*_args):
        raise OSError(errno.ENOSPC if where == "posix_fallocate" else errno.EIO, "refused")

    monkeypatch.setattr(spill_mod.os, where, refuse)
    sp = SpillFile(tmp_path, IoCounters())
    data = _data(MIB)
    assert sp.take(data) is None
    assert "posting data kept in memory" in caplog.text
    assert not spill_mod.spilled(data)
    sp.close()


def test_where_the_system_has_no_unnamed_files_nothing_is_spilled(tmp_path, monkeypatch,
                                                                 caplog) -> None:
    monkeypatch.setattr(spill_mod, "SUPPORTED", False)
    sp = SpillFile(tmp_path, IoCounters())
    assert sp.take(_data(MIB)) is None
    assert sp._fd == -1 and caplog.text == ""  # noqa: SLF001  (not tried, nothing to warn of)
    sp.close()
