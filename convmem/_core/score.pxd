# C-level contract of convmem._core.score: BM25F scoring of one query over the index's
# segments and buffer, with filters, window pruning and a deterministic top k (docs/SCORING.md).
# No Python API. index.pyx fills a Query and calls _score once per query (and _group_df once per
# multi-key group); everything per posting happens inside score.pyx, on postings.pxd's inlines.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

from convmem._core._common cimport GArr, __builtin_clz, cm_worker
from convmem._core.postings cimport IX_BLOCK, PList, SegView


cdef enum:
    IX_WINDOW = 4096        # largest scoring window (doc ids)
    IX_PAR_MIN = 30000      # queries touching this many postings are scored by two threads
    IX_PRIME_MAX = 4096     # the most postings a pruned query primes its k-th score with
    IX_PRIME_SHARE = 64     # ... and at most this fraction (1/64) of the query's postings
    IX_SPARSE_SPAN = 32768  # a list whose blocks span this many doc ids (8 windows) is sparse
    IX_IMPACT_BLOCKS = 32   # blocks of highest maximum a pruned query primes with, a list
    IX_IMPACT_MAX = 64      # ... at most, over its lists
    IX_IMPACT_MAX_G = 2     # ... in queries of at most this many groups
    IX_IMPACT_MIN_NB = 256  # ... taken from lists of at least this many blocks
    IX_PRIME_PER_K = 4      # _prime scores exactly at most this many docs per result asked
    IX_CTAB_TF = 4          # _approx_total's table: content tfs 1..IX_CTAB_TF at each length,
    IX_CTAB_MIN = 30000     # for queries touching at least this many postings (_set_ctab)
    # When the pruned scorer is used (benchmarks/README.md "Choosing the scorer"): it has a fixed
    # cost, the first windows scored in full until the heap holds k and its k-th score has risen,
    # and a cost per window, the bounds of every list. So a query is pruned when it has at least
    # IX_PRUNE_MIN_POSTINGS postings and averages at least IX_PRUNE_DENSITY per window of 4096 doc
    # ids. Measured on the corpus's 1000 queries at 100k and 1M messages, this is as fast as the
    # better scorer per query (search core p50 at 1M: 1.012 ms; 1.149 with the density of 128 alone).
    IX_PRUNE_DENSITY = 16
    IX_PRUNE_MIN_POSTINGS = 3000


# One query group (docs/SCORING.md): its term ids are gterms[key_lo:key_hi], its segment lists
# plists[list_lo:list_hi].
cdef struct Group:
    uint64_t key
    double idf
    int64_t df
    int64_t key_lo
    int64_t key_hi
    int64_t list_lo
    int64_t list_hi
    int64_t n_postings


# A doc _prime may score, with an estimate of its score from the groups it was found in.
cdef struct PrimeDoc:
    uint32_t d
    float est


# A top-k heap entry: `i` is the slot of its breakdown (index.pyx: Eng.hbd).
cdef struct HeapItem:
    double s
    uint32_t d
    uint32_t i


# Everything the nogil scoring loops read: statistics, doc columns, filters, scratch.
cdef struct Query:
    double k1
    double lead             # the lead bonus's weight (a lead group adds lead * idf)
    double w[3]
    double b[3]
    double avgdl[3]
    double c0[3]            # 1 - b and b / avgdl, for the approximate scores of the pruning
    double cb[3]
    int64_t n_live
    # doc columns
    const uint8_t* meta
    const uint8_t* imp
    const int32_t* sess
    const int64_t* ts
    const uint8_t* ulid
    const uint32_t* lens
    const uint32_t* tag_off
    const uint64_t* tag_val
    # filters
    uint8_t okmeta[256]
    bint extra              # session, importance, tag, time or doc-range filters are active
    int64_t session
    int64_t ts_lo           # created_at (q.ts) >= ts_lo ...
    int64_t ts_hi           # ... and < ts_hi (filters_json after / before)
    uint32_t doc_hi         # only docs below (a search cursor's page: docs of its first page)
    int32_t min_imp
    const uint64_t* tags
    int64_t n_tags
    const uint8_t* tagb     # per doc: bit b set when it holds a tag of bucket b (a doc lacking
                            # one of bx_tagb is dropped as its postings are read)
    # the filter maxima columns a block bound may take (PList.bx, _bx_share): the kinds asked
    # (bx_nk of them, 0: every kind), the tiers asked (bx_nt, 0: every tier), the importance
    # column (-1: none), the buckets of the tags asked (bit b: column IX_BX_TAG + b; also the
    # bits a doc's tagb must hold, filter maxima on or off); bx_on when any is set
    uint8_t bx_kinds[8]
    int32_t bx_nk
    uint8_t bx_tiers[4]
    int32_t bx_nt
    int32_t bx_imp
    uint8_t bx_tagb
    bint bx_on
    # buffer chains
    const uint32_t* b_doc
    const uint8_t* b_tf
    const uint8_t* b_field
    const int32_t* b_next
    const int32_t* head
    uint32_t buf_lo
    const SegView* views
    int64_t n_views
    int64_t n_docs
    const uint8_t* qlen     # one-byte content lengths, rounded down (index.pyx: _qlen_code)
    const uint8_t* qlen2    # the same for summary and tags, 2 a doc (apart: content is hot)
    double qnorm[768]       # per field, the norm (1 - b) + b * len / avgdl of each one-byte length
    double wqinv[768]       # per field, w_f / qnorm: the content-and-more bound multiplies
    # a / (k1 * qnorm[m] + a) with a = w[0] * tf, at [(tf - 1) * 256 + m] (when ctab_on)
    double ctab[IX_CTAB_TF * 256]
    bint ctab_on
    # scratch
    uint64_t* gbits         # one bit per doc, all zero between uses (df of multi-key groups;
                            # during scoring, the docs primed when `primed`)
    bint primed             # gbits marks the docs already scored and offered by _prime
    int64_t sparse_span     # a list whose blocks span this many doc ids is sparse (0: none)
    int64_t impact_blocks   # _prime's blocks of highest maximum (at most IX_IMPACT_BLOCKS; 0: none)


# One posting list of the current segment during a query: a term-at-a-time position, the block
# decoded (read by the term-at-a-time, the sparse bounds and the probes), a block position for
# the window bounds and the probes' place.
cdef struct LState:
    const PList* L
    int64_t tblk            # term-at-a-time: the first block not finished
    int64_t cblk            # the block decoded in bd/bt (-1: none)
    int64_t cpos            # the next posting of the decoded block
    int64_t ccnt
    int64_t bblk            # bounds: the first block whose last doc is >= the window start
    int64_t pblk            # probes: the same for the doc probed
    uint32_t pnext          # probes: the list holds no doc from the last one probed to this
    int64_t ppblk           # probes: the decoded block (cblk) they last searched, and where
    int64_t ppos            # they stopped in it (bd[ppos] >= the doc probed)
    uint32_t last1          # one-block lists (no skip table): the last doc, and the max of x_f
    double xm1              # over the block (a bound like bmf * bm)
    bint sparse             # one block, or blocks spanning q.sparse_span doc ids on average
    uint32_t bd[IX_BLOCK]
    uint8_t bt[IX_BLOCK]


cdef struct Eng:
    Query* q
    const Group* groups
    int64_t G
    const uint32_t* gterms
    LState* ls              # the lists of the current segment, by group: ls[goff[g]:goff[g+1]]
    int64_t* goff
    double* wub             # per group: its bound in the current window
    double* gx              # per group and field: the bound of x_f in the window
    int32_t* gnl            # per group and field: lists that may hold docs of the window
    int64_t* order          # groups by bound ascending
    uint32_t* gw            # per group: the packed tfs of the doc being finished
    uint32_t* wtf           # per window doc: packed tfs of the group being accumulated
    double* wacc            # per window doc: partial score
    double* wbd             # per window doc: breakdown (full windows)
    uint32_t* gl            # window docs touched by the group being accumulated
    uint64_t* wbits         # window docs touched by the query
    HeapItem* heap
    double* hbd             # the breakdowns of the heap's docs, 3 a slot (HeapItem.i)
    int64_t nh
    int64_t k
    double theta            # the k-th best score once the heap is full, else -1
    # Two threads: each prunes with the larger of the two thetas, publishes its heap's scores
    # (pub, pub_n under the seqlock pub_seq) and raises its theta to the k-th best of its heap
    # and the peer's together (_share_theta)
    Eng* peer               # the other thread's engine (NULL: one thread)
    double* pub             # k doubles
    int64_t pub_n
    int64_t pub_seq
    double* ubuf            # scratch: this heap's scores and the peer's (2k)
    int64_t n_taken         # docs the heap has taken
    int64_t n_taken_pub     # ... when it was last published
    int64_t peer_seen       # the peer's pub_seq when its scores were last read
    int64_t share_every     # windows from one share to the next (more for a large k)
    int64_t share_wait
    # what the pruning skipped (SearchIndex.last_*_skipped; tests assert on them)
    int64_t n_windows_skipped   # windows whose bound stayed below the k-th score: not decoded
    int64_t n_blocks_skipped    # blocks of essential lists skipped on their block maxima
    int64_t n_docs_skipped      # docs reached by the essential lists but cut by the bounds
    int64_t n_theta_shared      # times theta rose to the k-th of both threads' heaps
    int64_t n_primed            # docs scored first to prime the k-th score (_prime)
    int64_t prime_max           # _prime's most postings (engine()'s prime_max; 0: no priming)
    uint32_t* pbuf              # _prime's docs: room for prime_max + IX_BLOCK + the impact docs
    PrimeDoc* pdocs             # ... with their estimates (the same room)
    int64_t prime_docs          # _prime scores exactly at most this many of them (0: all)


# What the second scoring thread gets: its engine and the half of the windows it runs.
cdef struct Job:
    Eng* e
    const PList* lists
    int64_t window
    bint prune


# The scratch of one scoring thread: fixed window arrays and per-query arrays sized by the
# query (never by the corpus).
cdef class _Scratch:
    cdef GArr w_tf, w_acc, w_bd, w_gl, w_bits, w_prime, w_pdocs
    cdef GArr ls, goff, wub, gx, gnl, gw, order, heap, hbd, pub, ubuf
    # Size the arrays for the query and point e at them.
    cdef int engine(self, Eng* e, Query* q, const Group* groups, int64_t G,
                    const uint32_t* gterms, int64_t n_lists, int64_t k,
                    int64_t prime_max, int64_t prime_docs) except -1
    cdef int64_t nbytes(self) noexcept


# One-byte field lengths for the bounds (index.pyx fills q.qlen / q.qlen2 and q.qnorm with them).
cdef inline uint8_t _qlen_code(uint32_t n) noexcept nogil:
    """A field length in one byte, for bounds: exact below 64, then 4 significant bits,
    rounded down (_qlen_value(_qlen_code(n)) <= n)."""
    cdef int e
    if n < 64:
        return <uint8_t>n
    e = 31 - __builtin_clz(n)
    if e > 17:
        return 255
    return <uint8_t>(64 + (e - 6) * 16 + ((n >> (e - 4)) & 15))


cdef inline uint32_t _qlen_value(int c) noexcept nogil:
    if c < 64:
        return <uint32_t>c
    return <uint32_t>(16 + (c - 64) % 16) << ((c - 64) // 16 + 2)



# Live docs holding any key of the group in any field (for groups of several keys); the bitmap
# q.gbits is all zero before and after.
cdef int64_t _group_df(Query* q, const Group* g, const PList* lists,
                       const uint32_t* gterms) noexcept nogil
# Score one query: e (and e2 with the worker w when both are given: two threads, half of each
# segment's windows each) over `lists`; with nc >= 0 only the nc candidate docs cand[]
# (ascending) of the segments, and the buffer. A pruned query first scores the docs of its
# rarest groups when they are few (at most e.prime_max postings and 1/IX_PRIME_SHARE of the
# query's): its k-th score is then known before the sweep (_prime). Leaves the top k in e.heap,
# best first, their breakdowns in e.hbd.
# The BM25F configuration (k1, three weights, three b) as floats, or ValueError.
# q.ctab on (filled from q.qnorm, q.w and q.k1) for a pruned query of IX_CTAB_MIN postings or
# more, else off.
cdef void _set_ctab(Query* q, bint pruned, int64_t postings) noexcept nogil
# Set the query's filters (docs/SCORING.md "Results") and the filter maxima columns they allow.
cdef void _set_filters(Query* q, int64_t session, int64_t kind_mask, int64_t tier_mask,
                       int64_t role_mask, int64_t min_importance, const uint64_t* tags,
                       int64_t n_tags, int64_t ts_lo, int64_t ts_hi, uint32_t doc_hi,
                       bint filter_maxima) noexcept
cdef void _score(Eng* e, Eng* e2, cm_worker* w, const PList* lists, int64_t window, bint prune,
                 const uint32_t* cand, int64_t nc) noexcept nogil
