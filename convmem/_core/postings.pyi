"""convmem._core.postings has no Python API: posting lists, their checks, segments and merges of
the compiled index, used through cimport by index.pyx (contract: postings.pxd)."""

BUILD: str  # "debug" or "release": how this module was compiled (convmem._core.BUILD_TYPE)
