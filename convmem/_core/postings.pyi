"""convmem._core.postings has no Python API: posting lists, their checks, segments and merges of
the compiled index, used through cimport by index.pyx (contract: postings.pxd)."""

BUILD: str  # "debug" or "release": how this module was compiled (convmem._core.BUILD_TYPE)

class DamagedPostings(ValueError): ...

# Tests only: how often a releasing merge gives pages back, and how much it has given.
def _set_give_back_step(n: int) -> None: ...
def _given_back_bytes() -> int: ...
