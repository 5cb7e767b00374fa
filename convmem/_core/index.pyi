"""Stubs for the compiled search index (convmem/_core/index.pyx). Scoring: docs/SCORING.md.

The pure-Python twin `convmem._core.pyindex` has exactly this API and gives the same results.
"""
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

ARRAYS_FORMAT: int  # 4: the layout of to_arrays() (4: role in doc_meta bits 5-6); from_arrays refuses others (ValueError)
FIELDS: tuple[str, str, str]  # ("content", "summary", "tags")

class DamagedPostings(ValueError): ...  # a list found damaged on first use (never read)

_Keys = npt.NDArray[np.uint64] | Sequence[int]

class SearchIndex:
    window: int  # doc ids per scoring window (default 4096)
    prune_density: int  # queries below this many postings per 4096 doc ids are scored exhaustively
    prune_min_postings: int  # and queries with fewer postings than this
    parallel_min_postings: int  # pruned queries with this many postings are split between two threads
    # pruned queries first score the docs of their rarest groups when these hold at most this many
    # postings (and 1/64 of the query's): the k-th score is known before the sweep (0: never)
    prime_max_postings: int
    # ... of which it scores at most this many times k, those of largest estimated score (0: all)
    prime_docs_per_k: int
    last_primed: int  # docs the last search scored first that way (always 0 in the twin)
    # a list whose blocks span this many doc ids on average is sparse: a window's bound looks at
    # its block's docs, not only the block's maximum (0: never)
    sparse_block_span: int
    filter_maxima: bool
    impact_prime_blocks: int
    merge_factor: int
    last_postings: int  # postings of the last search's query lists (0 in the twin)
    last_pruned: bool  # whether the last search used the pruned scorer
    last_parallel: bool  # whether it was split between two threads (30000+ postings)
    last_session_docs: bool  # whether it scored only the session_docs it was given
    # What the pruning skipped in the last search (0 after an exhaustive one; always 0 in the
    # twin, which scores every doc): windows not decoded at all, blocks of essential lists passed
    # over on their block maxima, docs cut by the bounds before their exact score.
    last_windows_skipped: int
    last_blocks_skipped: int
    last_docs_skipped: int
    # (n_live, token totals per field, df per distinct query key ascending) the last search scored
    # with; None when it returned early (k == 0, no keys). `search(stats=...)` takes it back.
    last_stats: tuple[int, tuple[int, int, int], tuple[int, ...]] | None
    def __init__(
        self,
        k1: float = 1.2,
        weights: tuple[float, float, float] = (1.0, 1.5, 2.0),
        b: tuple[float, float, float] = (0.75, 0.75, 0.5),
    ) -> None: ...
    @property
    def n_docs(self) -> int: ...  # doc ids assigned so far: the next add uses doc == n_docs
    @property
    def n_live(self) -> int: ...
    def add(
        self,
        doc: int,
        content_keys: _Keys,
        summary_keys: _Keys,
        tag_keys: _Keys,
        tag_hashes: _Keys,
        session: int,
        kind: int,
        tier: int,
        importance: int,
        timestamp: int,
        ulid: bytes,
        role: int = 0,  # 0..2 (domain.ROLES)
    ) -> None: ...
    # add() for docs doc0, doc0 + 1, ...: entry i of each list and column is doc0 + i's, ulids
    # the 16-byte ulids one after the other; all checked before any doc is added. The compiled
    # module buffers the postings with the GIL released.
    ADD_BATCH_RELEASES_GIL: bool
    def add_batch(
        self,
        doc0: int,
        content_keys: list[_Keys],
        summary_keys: list[_Keys],
        tag_keys: list[_Keys],
        tag_hashes: list[_Keys],
        sessions: Sequence[int],
        kinds: Sequence[int],
        tiers: Sequence[int],
        importances: Sequence[int],
        timestamps: Sequence[int],
        ulids: bytes,
        roles: Sequence[int],
    ) -> None: ...
    # Idempotent; ValueError outside 0..n_docs-1. Give the three key arrays that add() got for
    # doc (cheap: one dictionary probe a key; ValueError when their lengths differ from what was
    # added or a key is unknown) or none of them (exact but slow: the doc's terms are read from
    # its segment's postings; for a doc whose text is lost).
    def remove(
        self,
        doc: int,
        content_keys: _Keys | None = None,
        summary_keys: _Keys | None = None,
        tag_keys: _Keys | None = None,
    ) -> None: ...
    def is_live(self, doc: int) -> bool: ...
    # session_docs: with session >= 0, every doc of that session in ascending order (a hint:
    # the index may score only them; the result is the same). The twin ignores it.
    def search(
        self,
        query_keys: _Keys,
        k: int,
        session: int = -1,
        kind_mask: int = 0x3F,
        tier_mask: int = 0x0F,
        min_importance: int = 0,
        tag_hashes: _Keys | None = None,
        exhaustive: bool = False,
        session_docs: _Keys | None = None,
        ts_lo: int | None = None,  # timestamp >= ts_lo
        ts_hi: int | None = None,  # timestamp < ts_hi
        role_mask: int = 0x07,  # bit r: role r
        doc_limit: int = -1,  # >= 0: only docs below it
        stats: tuple[int, Sequence[int], Sequence[int]] | None = None,  # an earlier last_stats
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float64]]: ...
    @property
    def n_segments(self) -> int: ...  # (0 in the twin)
    def merge_segments(self) -> None: ...
    def spill_postings(self, take: Callable[[npt.NDArray[np.uint8]], npt.NDArray[np.uint8] | None],
                       min_bytes: int) -> int: ...
    def adopt_postings(self, data: Mapping[str, npt.NDArray[np.uint8]],
                       only: Callable[[npt.NDArray[np.uint8]], bool]) -> int: ...
    def compacted(self) -> tuple[SearchIndex, npt.NDArray[np.int64]]: ...
    def nbytes(self) -> dict[str, int]: ...  # postings, terms, doc_columns, scratch
    def block_max_arrays(self) -> dict[str, np.ndarray]: ...  # compiled: stored block maxima
    def to_arrays(self) -> dict[str, np.ndarray]: ...
    def release_frozen(self) -> None: ...  # the last freeze()'s arrays are gone
    def freeze(self) -> _Frozen: ...  # to_arrays + block_max_arrays of now, merged by .arrays()
    @classmethod
    def from_arrays(
        cls,
        arrays: Mapping[str, np.ndarray],
        k1: float = 1.2,
        weights: tuple[float, float, float] = (1.0, 1.5, 2.0),
        b: tuple[float, float, float] = (0.75, 0.75, 0.5),
    ) -> SearchIndex: ...
    def _set_window(self, n: int) -> None: ...  # a multiple of 64, at most 4096 (tests)
    def _set_prune_density(self, n: int, min_postings: int | None = None) -> None: ...  # >= 0; 0 prunes every query (tests, benchmarks)

def _qlen_floor(n: int) -> int: ...  # tests: the length a one-byte length code stands for


class _Frozen:
    def arrays(self) -> dict[str, np.ndarray]: ...  # any thread; ValueError: a damaged list

BUILD: str  # "debug" or "release": how this module was compiled (convmem._core.BUILD_TYPE)
