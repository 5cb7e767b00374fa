"""A GArr's memory shared with a frozen snapshot, without a copy (GArr.shared, _common.pxd).

A background snapshot takes the state under the store's mutex; the columns that only grow (the
index's per-doc values set once and term keys, the id map's ids) are handed over as read-only
numpy views of their own memory: the block becomes a SharedBlock's, which the views hold, the
GArr goes on appending past their end (growing copies rather than reallocates; a change in
place copies first, garr_own), and release_shared gives the memory back to the GArr once no
view of it is left. Its users (index.pyx, idmap.pyx) keep one registry list each. Also the
plain copy (garr_to_numpy), the hand-over (garr_take) and borrow (garr_borrow) between a GArr
and a numpy array.
"""
cimport numpy as cnp
from cpython.mem cimport PyMem_RawFree, PyMem_RawRealloc
from cpython.ref cimport Py_REFCNT
from libc.stdint cimport intptr_t

import numpy as np

from convmem._core._common cimport CM_ASSERT, garr_free
from libc.string cimport memcpy

cnp.import_array()


cdef class SharedBlock:
    """Raw memory that numpy arrays hold: freed with the last of them, unless release_shared
    hands it back to the GArr it came from first (share_garr; garr_take's never goes back)."""

    def __dealloc__(self):
        # Without the GIL: a merged field's block is hundreds of megabytes, and giving its pages
        # back to the kernel (munmap) took 20-30 ms at 1M messages, seen holding the GIL at the
        # end of a background snapshot while writes waited for it.
        cdef char* p = self.p
        self.p = NULL
        if p != NULL:
            with nogil:
                PyMem_RawFree(p)


cdef object _copy(const GArr* a, object dtype, tuple shape):
    out = np.empty(shape, dtype=dtype)
    cdef cnp.npy_intp nbytes = <cnp.npy_intp>(a.len * a.itemsize)
    if nbytes:
        memview = out.reshape(-1).view(np.uint8)
        memview[:] = np.frombuffer((<char*>a.data)[:nbytes], dtype=np.uint8)
    return out


cdef object share_garr(GArr* a, object dtype, tuple shape, list registry, object owner=None):
    """The GArr's elements as a read-only view of its memory (see the module docstring); a
    copy when its memory is borrowed (a mapped snapshot's: not the GArr's to give) or empty.
    Memory of a private mapping (`mapped`, garr_borrow) is viewed in place, the view holding
    `owner` (which keeps the mapping): from then on a change in place copies first."""
    cdef SharedBlock blk = None
    cdef cnp.npy_intp nbytes = <cnp.npy_intp>(a.len * a.itemsize)
    if nbytes and a.mapped and owner is not None:
        a.shared = True  # (garr_claim copies before a change in place; appends go past it)
        return _block_view(owner, a.data, nbytes, dtype, shape)
    if nbytes == 0 or not (a.owned or a.shared):
        return _copy(a, dtype, shape)
    for addr, b in registry:
        if <GArr*><intptr_t>addr == a and (<SharedBlock>b).p == a.data:
            blk = <SharedBlock>b  # (frozen again before a release: the same block)
    if blk is None:
        CM_ASSERT(a.owned)
        blk = SharedBlock.__new__(SharedBlock)
        blk.p = a.data
        a.owned = False
        a.shared = True
        registry.append((<intptr_t>a, blk))
    return _block_view(blk, blk.p, nbytes, dtype, shape)


cdef object _block_view(object holder, char* p, cnp.npy_intp nbytes, object dtype, tuple shape):
    """A read-only array of `shape` over the first `nbytes` at p, holding `holder` (what keeps
    the memory: a block, or the owner of a mapping)."""
    raw = cnp.PyArray_SimpleNewFromData(1, &nbytes, cnp.NPY_UINT8, <void*>p)
    cnp.set_array_base(raw, holder)
    raw.flags.writeable = False
    return raw.view(dtype).reshape(shape)


cdef int release_shared(list registry) except -1:
    """The frozen arrays are gone (their snapshot is written): a GArr that still uses its shared
    memory takes it back (no copy on a later change); one that grew away from it leaves it to
    be freed with the last view. A block a view still holds stays shared."""
    cdef GArr* a
    cdef SharedBlock blk
    kept = []
    for addr, b in registry:
        a = <GArr*><intptr_t>addr
        blk = <SharedBlock>b
        if not (a.shared and a.data == blk.p):
            continue  # (the GArr moved on: the block is the views' alone)
        if Py_REFCNT(blk) > 3:  # (the registry's tuple, b, blk: a view is still alive)
            kept.append((addr, blk))
            continue
        blk.p = NULL
        a.owned = True
        a.shared = False
    registry[:] = kept
    return 0


# ---- plain copies and borrows between a GArr and numpy --------------------------------------

cdef int garr_borrow(GArr* a, cnp.ndarray arr, list keep) except -1:
    """Point at a contiguous numpy array's memory without copying it. A writable view whose
    base runs on past it, of its row shape (a growable snapshot section: a private mapping,
    store/snapshot.py), is borrowed with that base as its capacity (`mapped`, _common.pxd)."""
    garr_free(a)
    a.data = <char*>cnp.PyArray_DATA(arr)
    a.len = arr.nbytes // a.itemsize
    a.cap = a.len
    a.owned = False
    room = room_base(arr)
    if room is not None:
        a.cap = room.nbytes // a.itemsize
        a.mapped = True
    keep.append(arr if room is None else room)
    return 0


cdef object room_base(object view):
    """The base of a writable view that runs on past it, of its dtype and row shape (a growable
    snapshot section, store/snapshot.py: a private mapping), or None. catalog/columns.py asks
    the same of a column's array."""
    base = getattr(view, "base", None)
    if (isinstance(view, np.ndarray) and view.flags.writeable and isinstance(base, np.ndarray)
            and base.flags.writeable and base.flags.c_contiguous and base.dtype == view.dtype
            and base.ndim == view.ndim and base.shape[1:] == view.shape[1:]
            and base.nbytes > view.nbytes
            and cnp.PyArray_DATA(<cnp.ndarray>base) == cnp.PyArray_DATA(<cnp.ndarray>view)):
        return base
    return None


cdef object garr_to_numpy(const GArr* a, object dtype, tuple shape):
    """A copy of the GArr's elements, made without the GIL: a big one (a merged field's data is
    hundreds of megabytes at 1M messages, first touched here, ~0.1 s) is copied on a background
    snapshot's thread, which must not stop writes meanwhile."""
    out = np.empty(shape, dtype=dtype)
    cdef void* dst = cnp.PyArray_DATA(out)
    cdef size_t n = <size_t>(a.len * a.itemsize)
    if n:
        with nogil:
            memcpy(dst, a.data, n)
    return out


cdef object garr_take(GArr* a, object dtype, tuple shape):
    """The GArr's elements as a read-only numpy array that owns them, without a copy; the GArr
    (its own memory, as a segment being built has) is left empty. A merge's output is gigabytes
    at 10M messages: handed over rather than copied, it is never held twice. The block is shrunk
    to its length (realloc keeps the contents) and given to a SharedBlock the array holds."""
    cdef cnp.npy_intp nbytes = <cnp.npy_intp>(a.len * a.itemsize)
    cdef SharedBlock blk
    CM_ASSERT(a.owned and not a.shared)
    if nbytes == 0:
        garr_free(a)
        return np.empty(shape, dtype=dtype)
    blk = SharedBlock.__new__(SharedBlock)
    blk.p = <char*>PyMem_RawRealloc(a.data, <size_t>nbytes)
    if blk.p == NULL:  # (a shrink that fails leaves the block as it was)
        blk.p = a.data
    a.data = NULL
    garr_free(a)
    return _block_view(blk, blk.p, nbytes, dtype, shape)
