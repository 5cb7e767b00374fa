"""Syncer: a log append's fdatasync runs on a worker thread while the caller does its in-memory
work for the append.

`start(fd, offset, nbytes)` starts the writeback of the appended bytes in the caller's thread
(sync_file_range, which only submits the I/O), posts fdatasync(fd) to the worker (a plain pthread
that never takes the GIL) and returns at once; `wait()` blocks, without the GIL, until the
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
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.errno cimport EINTR, errno
from libc.string cimport strerror
from posix.unistd cimport fdatasync, getpid

cdef enum:
    PHASE_IDLE = 0      # no request: start() may post one
    PHASE_POSTED = 1    # posted, the worker has not picked it up yet
    PHASE_RUNNING = 2   # the worker is inside fdatasync
    PHASE_DONE = 3      # finished; err holds the outcome until wait() collects it


cdef void* _worker(void* arg) noexcept nogil:
    cdef SyncState* st = <SyncState*>arg
    cdef sigset_t all_signals
    cdef int fd, rc, err
    # Signals are for the interpreter's main thread, never for this one.
    sigfillset(&all_signals)
    pthread_sigmask(SIG_BLOCK, &all_signals, NULL)
    pthread_mutex_lock(&st.mu)
    while True:
        while st.phase != PHASE_POSTED and not st.stop:
            pthread_cond_wait(&st.wake, &st.mu)
        if st.phase != PHASE_POSTED:
            break  # asked to stop, nothing left to do
        st.phase = PHASE_RUNNING
        fd = st.fd
        pthread_mutex_unlock(&st.mu)
        rc = fdatasync(fd)
        while rc != 0 and errno == EINTR:
            rc = fdatasync(fd)
        err = errno if rc != 0 else 0
        pthread_mutex_lock(&st.mu)
        st.err = err
        st.phase = PHASE_DONE
        pthread_cond_signal(&st.done)
    pthread_mutex_unlock(&st.mu)
    return NULL


cdef class Syncer:
    def __cinit__(self):
        self.st = <SyncState*>PyMem_Malloc(sizeof(SyncState))
        if self.st == NULL:
            raise MemoryError()
        self._init_state()
        self.running = False
        self.owner_pid = 0
        self.worker_cpu = -1

    def __dealloc__(self):
        if self.st == NULL:
            return
        if not self.running or self.owner_pid == getpid():
            if self.running:
                self._stop_worker()
            pthread_mutex_destroy(&self.st.mu)
            pthread_cond_destroy(&self.st.wake)
            pthread_cond_destroy(&self.st.done)
        # (In a fork child the worker was not copied and its lock may have been copied held:
        # there is nothing to stop or destroy, only the memory to free.)
        PyMem_Free(self.st)
        self.st = NULL

    cdef void _init_state(self) noexcept:
        pthread_mutex_init(&self.st.mu, NULL)
        pthread_cond_init(&self.st.wake, NULL)
        pthread_cond_init(&self.st.done, NULL)
        self.st.phase = PHASE_IDLE
        self.st.fd = -1
        self.st.err = 0
        self.st.stop = False

    cdef int _ensure_worker(self) except -1:
        cdef long pid = getpid()
        cdef int rc
        if self.running and self.owner_pid == pid:
            return 0
        if self.running:
            # A fork child: the worker thread was not copied, and its lock may have been copied
            # held. Start afresh.
            self._init_state()
            self.running = False
        rc = pthread_create(&self.thread, NULL, _worker, self.st)
        if rc != 0:
            raise OSError(rc, f"cannot start the fdatasync thread: {strerror(rc).decode()}")
        self.running = True
        self.owner_pid = pid
        self.worker_cpu = -1
        return 0

    cdef int _stop_worker(self) noexcept:
        pthread_mutex_lock(&self.st.mu)
        self.st.stop = True
        pthread_cond_signal(&self.st.wake)
        pthread_mutex_unlock(&self.st.mu)
        with nogil:
            pthread_join(self.thread, NULL)  # after a flush in flight, if any, has returned
        self.running = False
        return 0

    def start(self, int fd, long long offset=0, long long nbytes=0) -> None:
        """Start the writeback of fd's bytes [offset, offset + nbytes) (nbytes 0: to the end),
        post fdatasync(fd) to the worker and return; collect the outcome with wait()."""
        cdef int cpu
        cdef cpu_set_t cpus
        if fd < 0 or offset < 0 or nbytes < 0:
            raise ValueError("fd, offset and nbytes must not be negative")
        self._ensure_worker()
        pthread_mutex_lock(&self.st.mu)
        if self.st.phase != PHASE_IDLE:
            pthread_mutex_unlock(&self.st.mu)
            raise RuntimeError("a flush is already in flight: wait() for it first")
        # The GIL is kept throughout: these calls are short, and a GIL handed to another thread
        # here could take the interpreter's switch interval (5 ms) to come back.
        sync_file_range(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE)
        cpu = sched_getcpu()
        if cpu != self.worker_cpu and cpu >= 0:
            CPU_ZERO(&cpus)
            CPU_SET(cpu, &cpus)
            # Best effort: a worker left elsewhere is slower, never wrong.
            pthread_setaffinity_np(self.thread, sizeof(cpus), &cpus)
            self.worker_cpu = cpu
        self.st.fd = fd
        self.st.err = 0
        self.st.phase = PHASE_POSTED
        pthread_cond_signal(&self.st.wake)
        pthread_mutex_unlock(&self.st.mu)
        sched_yield()

    def wait(self) -> None:
        """Block until the posted fdatasync has returned; OSError(errno) if it failed."""
        cdef SyncState* st = self.st
        cdef int err
        pthread_mutex_lock(&st.mu)
        if st.phase == PHASE_IDLE:
            pthread_mutex_unlock(&st.mu)
            raise RuntimeError("no flush is in flight")
        if st.phase != PHASE_DONE:
            # Only now give the GIL away: a flush that is already done costs no GIL round trip.
            pthread_mutex_unlock(&st.mu)
            with nogil:
                pthread_mutex_lock(&st.mu)
                while st.phase != PHASE_DONE:
                    pthread_cond_wait(&st.done, &st.mu)
        err = st.err
        st.phase = PHASE_IDLE
        pthread_mutex_unlock(&st.mu)
        if err != 0:
            raise OSError(err, strerror(err).decode())

    @property
    def pending(self) -> bool:
        """Whether a flush was started and not yet collected by wait()."""
        cdef int phase
        pthread_mutex_lock(&self.st.mu)
        phase = self.st.phase
        pthread_mutex_unlock(&self.st.mu)
        return phase != PHASE_IDLE

    @property
    def nbytes(self) -> int:
        return sizeof(SyncState)
