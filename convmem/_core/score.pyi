"""convmem._core.score has no Python API: the scoring kernels, top-k heap, window pruning, the
second scoring thread and scratch of the compiled index, used through cimport by index.pyx
(contract: score.pxd)."""

BUILD: str  # "debug" or "release": how this module was compiled (convmem._core.BUILD_TYPE)
