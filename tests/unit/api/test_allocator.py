"""heap.map_large_blocks_apart: a process holding a store maps every block of 128 KiB or more
apart (glibc's mmap threshold fixed), so that freed arrays go back to the kernel instead of
leaving resident holes in the heap; SharedStore sets it as it becomes a store's owner."""
from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest

from convmem.api import heap

GLIBC = platform.libc_ver()[0] == "glibc"

# In a process of its own: glibc's threshold is per process and, once fixed, stays fixed.
PROBE = textwrap.dedent("""
    import ctypes, importlib
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    def mapped_apart(size):
        # glibc marks a block mapped apart in its chunk header (IS_MMAPPED, 0x2 of the size
        # word before it): per block, whatever other threads allocate meanwhile. The heap is
        # trimmed first: a block that fits in free heap memory comes from there at any
        # threshold (the threshold decides how the heap grows), and how much is free at the top
        # depends on what the interpreter's start left there.
        libc.malloc_trim(0)
        p = libc.malloc(size)
        apart = bool(ctypes.c_size_t.from_address(p - ctypes.sizeof(ctypes.c_size_t)).value & 2)
        libc.free(p)
        return apart
    libc.free(libc.malloc(24 << 20))  # a mapped block freed: glibc raises its threshold past it
    print("before", mapped_apart(300_000))
    print("tuned", importlib.import_module("convmem.api.heap").map_large_blocks_apart())
    print("after", mapped_apart(300_000))
""")



@pytest.mark.skipif(not GLIBC, reason="the setting is glibc's (mallopt M_MMAP_THRESHOLD)")
def test_blocks_of_128_kib_and_more_are_mapped_apart_once_tuned() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    # untuned, a 300 KB block came from the heap once a larger mapped block had been freed
    assert done.stdout.split() == ["before", "False", "tuned", "True", "after", "True"]


def test_the_owner_of_a_store_tunes_the_allocator(tmp_path, monkeypatch) -> None:
    from convmem.owner import SharedStore

    calls = []
    monkeypatch.setattr(heap, "map_large_blocks_apart", lambda: calls.append(1) or True)
    with SharedStore.open(tmp_path) as owner:
        assert calls == [1]
        with SharedStore.open(tmp_path) as relay:  # a relay holds no store: no call
            relay.get_system_health()
        assert calls == [1]
        owner.get_system_health()
