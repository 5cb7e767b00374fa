"""Syncer: a log append's fdatasync runs on a worker thread while the caller does its in-memory
work for the append.

`start(fd, offset, nbytes)` starts the writeback of the appended bytes in the caller's thread
(sync_file_range, which only submits the I/O), posts fdatasync(fd) to the worker (the core's one worker-thread
implementation, _common.h's cm_worker: a plain pthread that never takes the GIL) and returns at once; `wait()` blocks, without the GIL, until the
fdatasync has returned and raises OSError with its errno if it failed. One request is in flight at
a time: the store holds its lock from the write to the wait().

Why this shape (measured on a 2-vCPU VM shared with other work, benchmarks/write_floor.py):
- A Python thread would not do: it needs the GIL, which the caller holds while it works.
- Submitting the data writeback from the caller (sync_file_range) puts the data on its way to
  the device without waiting for any thread; the worker's fdatasync then waits for it and commits
  the file size. Its errors are not checked there: fdatasync reports every writeback error.
- The worker is bound to the caller's CPU (re-bound when the caller has moved). Waking a thread
  on an idle vCPU cost ~35 us each way, more than the whole overlap wins; on the caller's CPU the
  hand-over is a context switch.
- The kernel does not preempt the caller for a worker woken on its CPU: the fdatasync would only
  start once the caller blocks in wait(). start() therefore yields the CPU once (sched_yield); the
  worker submits its flush and sleeps, and the caller goes on.

The pure-Python twin `convmem._core.pysyncer` has the same API and flushes in `wait()`.
"""
from libc.errno cimport EINTR, errno
from libc.string cimport strerror
from posix.unistd cimport fdatasync

from convmem._core._common cimport (CM_DONE, CM_IDLE, cm_worker, cm_worker_alive,
                                    cm_worker_bind_cpu, cm_worker_free, cm_worker_new,
                                    cm_worker_post, cm_worker_state, cm_worker_wait)


cdef void _fdatasync_job(void* arg) noexcept nogil:
    cdef SyncJob* job = <SyncJob*>arg
    cdef int rc = fdatasync(job.fd)
    while rc != 0 and errno == EINTR:
        rc = fdatasync(job.fd)
    job.err = errno if rc != 0 else 0


cdef class Syncer:
    def __cinit__(self):
        self.worker = NULL
        self.job.fd = -1
        self.job.err = 0
        self.worker_cpu = -1

    def __dealloc__(self):
        # Joins the worker after the flush in flight, if any, has returned (a fork child has no
        # worker: only the memory is freed). The job lives in this object, so it outlives it.
        with nogil:
            cm_worker_free(self.worker)
        self.worker = NULL

    cdef int _ensure_worker(self) except -1:
        cdef int err = 0
        if cm_worker_alive(self.worker):
            return 0
        # None yet, or a fork child: the worker thread was not copied (and its lock may have
        # been copied held). Free the copy's memory and start afresh.
        cm_worker_free(self.worker)
        self.worker = cm_worker_new(&err)
        if self.worker == NULL:
            raise OSError(err, f"cannot start the fdatasync thread: {strerror(err).decode()}")
        self.worker_cpu = -1
        return 0

    def start(self, int fd, long long offset=0, long long nbytes=0) -> None:
        """Start the writeback of fd's bytes [offset, offset + nbytes) (nbytes 0: to the end),
        post fdatasync(fd) to the worker and return; collect the outcome with wait()."""
        cdef int cpu
        if fd < 0 or offset < 0 or nbytes < 0:
            raise ValueError("fd, offset and nbytes must not be negative")
        self._ensure_worker()
        if cm_worker_state(self.worker) != CM_IDLE:
            raise RuntimeError("a flush is already in flight: wait() for it first")
        # The GIL is kept throughout: these calls are short, and a GIL handed to another thread
        # here could take the interpreter's switch interval (5 ms) to come back.
        sync_file_range(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE)
        cpu = sched_getcpu()
        if cpu != self.worker_cpu and cpu >= 0:
            # Best effort: a worker left elsewhere is slower, never wrong.
            cm_worker_bind_cpu(self.worker, cpu)
            self.worker_cpu = cpu
        self.job.fd = fd
        self.job.err = 0
        cm_worker_post(self.worker, _fdatasync_job, &self.job)
        sched_yield()

    def wait(self) -> None:
        """Block until the posted fdatasync has returned; OSError(errno) if it failed."""
        cdef int state = CM_IDLE if not cm_worker_alive(self.worker) else cm_worker_state(self.worker)
        cdef int err
        if state == CM_IDLE:
            raise RuntimeError("no flush is in flight")
        if state != CM_DONE:
            # Only now give the GIL away: a flush that is already done costs no GIL round trip.
            with nogil:
                cm_worker_wait(self.worker)
        else:
            cm_worker_wait(self.worker)
        err = self.job.err
        if err != 0:
            raise OSError(err, strerror(err).decode())

    @property
    def pending(self) -> bool:
        """Whether a flush was started and not yet collected by wait()."""
        if not cm_worker_alive(self.worker):
            return False
        return cm_worker_state(self.worker) != CM_IDLE

    @property
    def nbytes(self) -> int:
        return sizeof(SyncJob) + (sizeof(cm_worker) if self.worker != NULL else 0)


# The build this module comes from ("debug" or "release", _common.h CM_BUILD_DEBUG), read by
# convmem._core.BUILD_TYPE.
from convmem._core._common cimport CM_BUILD_DEBUG
BUILD = "debug" if CM_BUILD_DEBUG else "release"
