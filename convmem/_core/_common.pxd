# Shared helpers of the compiled core, header-only: cdef inline functions (copied into every
# module that cimports them, so they inline as if written there) and the C of _common.h.
# cimported by codec, tokenizer, idmap, syncer, postings, score and index; no .pyx, no Python API.
from cpython.mem cimport PyMem_RawFree, PyMem_RawMalloc, PyMem_RawRealloc
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset


cdef extern from "_common.h" nogil:
    # Invariant checks: abort with file:line under CONVMEM_DEBUG=1, nothing (not even the
    # condition) in a release build. CM_DEBUG is 1 in the debug build, for checks that loop.
    void CM_ASSERT(bint cond)
    enum: CM_DEBUG
    # 1 in a debug or unoptimized (-O0) build: each module exports it as BUILD.
    enum: CM_BUILD_DEBUG

    # The one worker thread (see _common.h): post a job, poll, wait; only the owner frees it.
    ctypedef void (*cm_job_fn)(void*) noexcept nogil
    ctypedef struct cm_worker:
        pass
    enum:
        CM_IDLE
        CM_POSTED
        CM_DONE
    cm_worker* cm_worker_new(int* err)
    bint cm_worker_alive(cm_worker* w)
    void cm_worker_post(cm_worker* w, cm_job_fn fn, void* arg)
    int cm_worker_state(cm_worker* w)
    void cm_worker_wait(cm_worker* w)
    int cm_worker_bind_cpu(cm_worker* w, int cpu)
    void cm_worker_free(cm_worker* w)
    double cm_load_relaxed(double* p)
    void cm_store_relaxed(double* p, double v)
    void cm_seq_write(int64_t* seq, double* dst, int64_t* dst_n, const double* src, int64_t n)
    int64_t cm_seq_now(int64_t* seq)
    int64_t cm_seq_read(int64_t* seq, double* src, int64_t* src_n, double* dst, int64_t cap)
    # The whole pages of [p + lo, p + hi) given back (read as zeros after); returns the new lo.
    int64_t cm_give_back(const uint8_t* p, int64_t lo, int64_t hi)
    # The first n rounded down to 8 of a stream of `bits`-bit values (8 readable bytes past it).
    int64_t cm_unpack_groups(const uint8_t* p, int64_t n, int bits, uint32_t* out)


cdef extern from *:
    int __builtin_clz(unsigned int) nogil
    int __builtin_ctz(unsigned int) nogil
    int __builtin_ctzll(unsigned long long) nogil
    void __builtin_prefetch(const void*) nogil


# ---- little-endian loads and stores --------------------------------------------------------------
# Unchecked: only after the caller has checked the bytes are there. Written with shifts (not
# memcpy + byte swap) so they are correct on any host; gcc -O3 turns each into one load/store on
# x86-64.

cdef inline uint16_t load_u16(const unsigned char* p) noexcept nogil:
    return <uint16_t>(p[0] | (<uint16_t>p[1] << 8))

cdef inline uint32_t load_u32(const unsigned char* p) noexcept nogil:
    return (<uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16)
            | (<uint32_t>p[3] << 24))

cdef inline uint64_t load_u64(const unsigned char* p) noexcept nogil:
    return <uint64_t>load_u32(p) | (<uint64_t>load_u32(p + 4) << 32)

cdef inline uint64_t load_u64_be(const unsigned char* p) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    return v

cdef inline void store_u16(unsigned char* p, uint16_t v) noexcept nogil:
    p[0] = <unsigned char>v
    p[1] = <unsigned char>(v >> 8)

cdef inline void store_u32(unsigned char* p, uint32_t v) noexcept nogil:
    p[0] = <unsigned char>v
    p[1] = <unsigned char>(v >> 8)
    p[2] = <unsigned char>(v >> 16)
    p[3] = <unsigned char>(v >> 24)

cdef inline void store_u64(unsigned char* p, uint64_t v) noexcept nogil:
    store_u32(p, <uint32_t>v)
    store_u32(p + 4, <uint32_t>(v >> 32))


# ---- hashing -------------------------------------------------------------------------------------

cdef inline uint64_t mix64(uint64_t z) noexcept nogil:
    """The splitmix64 finaliser (Stafford's mix 13): the term table, the tokenizer's word keys
    and the id map all spread their keys with it (pyindex._mix64, pytokenizer are the twins)."""
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL
    return z ^ (z >> 31)


# ---- the index's term table ----------------------------------------------------------------------
# Open addressing over a power-of-two capacity: slot mix64(key) & mask, or the next free one, holds
# term id + 1 (0: empty). Terms are placed in term-id order, so the layout depends only on the keys
# (index.pyx builds and grows it, sections.pyx rebuilds a frozen index's; pyindex is the twin).

cdef inline void term_table_put(uint32_t* table, uint64_t mask, uint64_t key,
                                uint32_t tid) noexcept nogil:
    cdef uint64_t slot = mix64(key) & mask
    while table[slot] != 0:
        slot = (slot + 1) & mask
    table[slot] = tid + 1


cdef inline void term_table_fill(uint32_t* table, int64_t cap, const uint64_t* keys,
                                 int64_t n) noexcept nogil:
    """The table of capacity `cap` (a power of two, at least 2n) for keys[0..n) in order."""
    cdef int64_t t
    memset(table, 0, <size_t>(cap * 4))
    for t in range(n):
        term_table_put(table, <uint64_t>cap - 1, keys[t], <uint32_t>t)


# ---- the growable buffer -------------------------------------------------------------------------
# One design for every growable C array of the core: `len` elements of `itemsize` bytes in use,
# `cap` allocated, memory from PyMem_Raw* (no GIL needed, so nogil code may grow it; tracemalloc
# sees it), and garr_bytes() is what it holds (capacity, as cymem's Pool.size counts it).
# `grow` sets the geometric growth, cap + cap >> grow: 3 (1/8) for long-lived columns, where
# capacity is memory and large blocks are remapped by realloc rather than copied; 1 (1/2) or 0
# (x2) for temporaries freed soon after. A buffer may also borrow memory someone else holds
# (`owned` false, e.g. a numpy view of an mmap'd snapshot): the first reserve copies it. Or it
# may share its memory with a frozen snapshot (`shared`, SearchIndex.freeze: the memory is then
# owned by a block the snapshot's arrays hold): elements past len may still be written (an
# append), growing copies instead of reallocating, and garr_own copies before a change in place.
# Or it may borrow writable memory of a private mapping (`mapped`, shared.garr_borrow: a
# growable snapshot section, store/snapshot.py, its room past len the file's next bytes): appends
# within cap and changes in place write it directly (the kernel copies the pages they touch,
# never to the file), growing copies, and it is never freed here; once a frozen snapshot views
# it (share_garr: `shared` too) a change in place copies first.

cdef struct GArr:
    char* data
    int64_t len        # elements in use
    int64_t cap        # elements allocated (or borrowed)
    int64_t itemsize
    int grow           # growth cap >> grow (see above)
    bint owned
    bint shared        # (not owned) memory a frozen snapshot holds; see above
    bint mapped        # (not owned) writable memory of a private mapping; see above


cdef inline void garr_init(GArr* a, int64_t itemsize, int grow=3) noexcept nogil:
    a.data = NULL
    a.len = 0
    a.cap = 0
    a.itemsize = itemsize
    a.grow = grow
    a.owned = True
    a.shared = False
    a.mapped = False


cdef inline int garr_grow(GArr* a, int64_t n) noexcept nogil:
    """Make room for n elements in owned memory (borrowed memory is copied first); -1 when
    memory runs out (nothing changed then)."""
    cdef int64_t cap
    cdef char* p
    if n <= a.cap and (a.owned or a.shared or a.mapped):
        return 0
    if n <= a.len:
        cap = a.len                                   # copy-on-write without growth
    else:
        cap = max(n, a.cap + (a.cap >> a.grow), 16)
    if a.owned:
        p = <char*>PyMem_RawRealloc(a.data, <size_t>(cap * a.itemsize))
    else:
        p = <char*>PyMem_RawMalloc(<size_t>(cap * a.itemsize))
        if p != NULL and a.len > 0:
            memcpy(p, a.data, <size_t>(a.len * a.itemsize))
    if p == NULL:
        return -1
    a.data = p
    a.cap = cap
    a.owned = True
    a.shared = False
    a.mapped = False
    CM_ASSERT(a.len <= a.cap and n <= a.cap)
    return 0


cdef inline int garr_reserve(GArr* a, int64_t n) except -1:
    """garr_grow that raises MemoryError."""
    if garr_grow(a, n) < 0:
        raise MemoryError()
    return 0


cdef inline int garr_claim(GArr* a) noexcept nogil:
    """Before a change in place: borrowed or shared memory is copied (copy on write; a private
    mapping's needs no copy unless a frozen snapshot views it); -1 when memory runs out."""
    if not a.owned and (a.shared or not a.mapped):
        a.shared = False
        a.mapped = False
        return garr_grow(a, a.len)
    return 0


cdef inline int garr_own(GArr* a) except -1:
    """garr_claim that raises MemoryError."""
    if garr_claim(a) < 0:
        raise MemoryError()
    return 0


cdef inline void garr_free(GArr* a) noexcept nogil:
    if a.owned and a.data != NULL:
        PyMem_RawFree(a.data)
    a.data = NULL
    a.len = 0
    a.cap = 0
    a.owned = True
    a.shared = False
    a.mapped = False


cdef inline int64_t garr_bytes(const GArr* a) noexcept nogil:
    # (a private mapping's room past len is the file's bytes, resident only once written)
    return (a.len if a.mapped else a.cap) * a.itemsize


cdef inline int garr_extend(GArr* a, int64_t n, bint zero) except -1:
    """Grow the length to n (capacity geometrically), zeroing the new elements if asked."""
    if a.len < n:
        garr_reserve(a, n)
        if zero:
            memset(a.data + a.len * a.itemsize, 0, <size_t>((n - a.len) * a.itemsize))
        a.len = n
    return 0
