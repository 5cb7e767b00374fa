cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_t:
        pass
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_create(pthread_t* thread, const void* attr, void* (*start)(void*), void* arg)
    int pthread_join(pthread_t thread, void** retval)
    int pthread_mutex_init(pthread_mutex_t* m, const void* attr)
    int pthread_mutex_destroy(pthread_mutex_t* m)
    int pthread_mutex_lock(pthread_mutex_t* m)
    int pthread_mutex_unlock(pthread_mutex_t* m)
    int pthread_cond_init(pthread_cond_t* c, const void* attr)
    int pthread_cond_destroy(pthread_cond_t* c)
    int pthread_cond_wait(pthread_cond_t* c, pthread_mutex_t* m)
    int pthread_cond_signal(pthread_cond_t* c)

cdef extern from "<signal.h>" nogil:
    ctypedef struct sigset_t:
        pass
    int sigfillset(sigset_t* s)
    int pthread_sigmask(int how, const sigset_t* s, sigset_t* old)
    enum: SIG_BLOCK

cdef extern from "<sched.h>" nogil:
    ctypedef struct cpu_set_t:
        pass
    void CPU_ZERO(cpu_set_t* s)
    void CPU_SET(int cpu, cpu_set_t* s)
    int sched_getcpu()
    int sched_yield()

cdef extern from "<pthread.h>" nogil:
    int pthread_setaffinity_np(pthread_t thread, size_t size, const cpu_set_t* s)

cdef extern from "<fcntl.h>" nogil:
    # Linux; Python.h defines _GNU_SOURCE, which declares it.
    int sync_file_range(int fd, long long offset, long long nbytes, unsigned int flags)
    enum: SYNC_FILE_RANGE_WRITE

# What the worker thread and the owner share. It lives in C memory, not in the Python object,
# and only the owner frees it, after joining the worker.
cdef struct SyncState:
    pthread_mutex_t mu
    pthread_cond_t wake         # owner -> worker: a request (or stop) is posted
    pthread_cond_t done         # worker -> owner: the request is finished
    int phase                   # PHASE_* in syncer.pyx
    int fd                      # the file to fdatasync
    int err                     # errno of the finished request, 0 on success
    bint stop                   # the owner is going away: the worker returns

cdef class Syncer:
    cdef SyncState* st
    cdef pthread_t thread
    cdef bint running           # the worker thread exists
    cdef long owner_pid         # the process that started the worker (a fork child has none)
    cdef int worker_cpu         # the CPU the worker is bound to (-1: not bound)
    cdef void _init_state(self) noexcept
    cdef int _ensure_worker(self) except -1
    cdef int _stop_worker(self) noexcept
