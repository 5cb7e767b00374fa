"""Stubs for convmem/_core/syncer.pyx: fdatasync on a worker thread (twin: pysyncer.py)."""

class Syncer:
    def __init__(self) -> None: ...
    # Start the writeback of [offset, offset + nbytes) (0: to the end of the file), post
    # fdatasync(fd) to the worker, return; RuntimeError if a flush is already in flight.
    def start(self, fd: int, offset: int = 0, nbytes: int = 0) -> None: ...
    def wait(self) -> None: ...  # until it returned; OSError(errno) if it failed
    @property
    def pending(self) -> bool: ...  # started and not yet collected by wait()
    @property
    def nbytes(self) -> int: ...

BUILD: str  # "debug" or "release": how this module was compiled (convmem._core.BUILD_TYPE)
