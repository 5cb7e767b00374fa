from convmem._core._common cimport cm_worker

cdef extern from "<sched.h>" nogil:
    int sched_getcpu()
    int sched_yield()

cdef extern from "<fcntl.h>" nogil:
    # Linux; Python.h defines _GNU_SOURCE, which declares it.
    int sync_file_range(int fd, long long offset, long long nbytes, unsigned int flags)
    enum: SYNC_FILE_RANGE_WRITE

# The job the worker runs: fdatasync(fd), its errno in err (0 on success). It lives in the
# Syncer; the worker only touches it between post and the owner's wait (or cm_worker_free).
cdef struct SyncJob:
    int fd
    int err

cdef class Syncer:
    cdef cm_worker* worker      # NULL until the first start(); cm_worker_alive() false in a fork child
    cdef SyncJob job
    cdef int worker_cpu         # the CPU the worker is bound to (-1: not bound)
    cdef int _ensure_worker(self) except -1
