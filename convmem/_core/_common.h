/* Shared C helpers of convmem's compiled core (declared for Cython in _common.pxd).
 *
 * Only what is natural in C lives here: the invariant-check macro, the worker thread, the
 * bit unpacking specialised by width and giving pages back to the kernel. The
 * Cython-level helpers (little-endian loads, splitmix64, the growable buffer) are cdef inline
 * functions in _common.pxd. Every module is compiled with the same CONVMEM_DEBUG setting
 * (setup.py), so a check is either in every module or in none.
 */
#ifndef CONVMEM_COMMON_H
#define CONVMEM_COMMON_H

#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- pages given back ------------------------------------------------------------------------
 * cm_give_back(p, lo, hi): the whole pages inside [p + lo, p + hi) go back to the kernel
 * (MADV_DONTNEED: they read as zeros afterwards, so only for memory nothing reads again).
 * Returns the offset from p up to which pages were given back: the next call's lo.
 */
static inline int64_t cm_give_back(const uint8_t *p, int64_t lo, int64_t hi) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)(p + lo) + page - 1) & ~(page - 1);
    uintptr_t b = (uintptr_t)(p + hi) & ~(page - 1);
    if (b > a && madvise((void *)a, b - a, MADV_DONTNEED) == 0)
        return (int64_t)(b - (uintptr_t)p);
    return lo;
}

/* ---- invariant checks ------------------------------------------------------------------------
 * CM_ASSERT(cond): with CONVMEM_DEBUG=1 (setup.py defines the macro) a false condition prints
 * file:line and the condition to stderr and aborts; in a release build it compiles to nothing
 * (the condition is not evaluated: it must have no side effects). For the invariants of
 * nogil C code that no test can see from Python: sorted doc ids in a list, block bounds, heap
 * order, buffer capacity. CM_DEBUG is 1 in the debug build, for checks that need a loop.
 */
#if defined(CONVMEM_DEBUG) && CONVMEM_DEBUG
#define CM_DEBUG 1
static inline void cm_assert_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "convmem: invariant violated at %s:%d: %s\n", file, line, cond);
    fflush(stderr);
    abort();
}
#define CM_ASSERT(cond) ((cond) ? (void)0 : cm_assert_fail(#cond, __FILE__, __LINE__))
#else
#define CM_DEBUG 0
#define CM_ASSERT(cond) ((void)0)
#endif

/* ---- build type ----------------------------------------------------------------------------
 * CM_BUILD_DEBUG is 1 when this module was built for debugging rather than measuring: the
 * CONVMEM_DEBUG build, or any build the compiler did not optimize (gcc and clang define
 * __OPTIMIZE__ from -O1 up, so a leftover `-O0` build counts as debug too). Each module exports
 * it as BUILD ("debug" / "release"); convmem._core.BUILD_TYPE and `convmem --version` report it
 * and the benchmarks refuse to time a debug build as compiled.
 */
#if CM_DEBUG || !defined(__OPTIMIZE__)
#define CM_BUILD_DEBUG 1
#else
#define CM_BUILD_DEBUG 0
#endif

/* ---- one worker thread -----------------------------------------------------------------------
 * A persistent thread that runs one posted job at a time and never touches Python objects: the
 * index's second scoring thread and the log's fdatasync thread. The owner posts a job, may poll
 * whether it is done and waits for it; only the owner frees the worker, after the job it posted
 * has been waited for. All signals are blocked in the thread (they are for the interpreter's
 * main thread). The memory comes from PyMem_RawCalloc (no GIL needed; tracemalloc sees it).
 *
 * After fork() the child has no worker thread, and the struct's mutex may have been copied
 * held: cm_worker_alive() is false there, and cm_worker_free() then only frees the memory.
 */
typedef void (*cm_job_fn)(void *);

enum { CM_IDLE = 0, CM_POSTED = 1, CM_DONE = 2, CM_QUIT = 3 };

typedef struct {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state;              /* CM_IDLE, CM_POSTED (job waiting or running), CM_DONE, CM_QUIT */
    cm_job_fn fn;
    void *arg;
    pid_t pid;              /* the process that started the thread */
} cm_worker;

static inline void *cm_worker_main(void *p) {
    cm_worker *w = (cm_worker *)p;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->state != CM_POSTED && w->state != CM_QUIT) pthread_cond_wait(&w->cv, &w->mu);
        if (w->state == CM_QUIT) break;
        pthread_mutex_unlock(&w->mu);
        w->fn(w->arg);
        pthread_mutex_lock(&w->mu);
        w->state = CM_DONE;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* A started worker, or NULL with *err set (ENOMEM, or pthread_create's error). */
static inline cm_worker *cm_worker_new(int *err) {
    int rc;
    cm_worker *w = (cm_worker *)PyMem_RawCalloc(1, sizeof(cm_worker));
    if (w == NULL) {
        *err = ENOMEM;
        return NULL;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->pid = getpid();
    rc = pthread_create(&w->th, NULL, cm_worker_main, w);
    if (rc != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        PyMem_RawFree(w);
        *err = rc;
        return NULL;
    }
    *err = 0;
    return w;
}

static inline int cm_worker_alive(cm_worker *w) { return w != NULL && w->pid == getpid(); }

/* Post a job; the worker must be idle (CM_ASSERT). */
static inline void cm_worker_post(cm_worker *w, cm_job_fn fn, void *arg) {
    pthread_mutex_lock(&w->mu);
    CM_ASSERT(w->state == CM_IDLE);
    w->fn = fn;
    w->arg = arg;
    w->state = CM_POSTED;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* CM_IDLE (nothing posted), CM_POSTED or CM_DONE (not yet waited for). */
static inline int cm_worker_state(cm_worker *w) {
    int s;
    pthread_mutex_lock(&w->mu);
    s = w->state;
    pthread_mutex_unlock(&w->mu);
    return s;
}

/* Block until the posted job is done; the worker is idle again after. */
static inline void cm_worker_wait(cm_worker *w) {
    pthread_mutex_lock(&w->mu);
    CM_ASSERT(w->state == CM_POSTED || w->state == CM_DONE);
    while (w->state != CM_DONE) pthread_cond_wait(&w->cv, &w->mu);
    w->state = CM_IDLE;
    pthread_mutex_unlock(&w->mu);
}

/* Best effort: run the worker on this CPU (0 on success). */
static inline int cm_worker_bind_cpu(cm_worker *w, int cpu) {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    CPU_SET(cpu, &cpus);
    return pthread_setaffinity_np(w->th, sizeof(cpus), &cpus);
}

/* Stop and join the thread (after the job in flight, if any, has returned) and free. */
static inline void cm_worker_free(cm_worker *w) {
    if (w == NULL) return;
    if (cm_worker_alive(w)) {
        pthread_mutex_lock(&w->mu);
        while (w->state == CM_POSTED) pthread_cond_wait(&w->cv, &w->mu);
        w->state = CM_QUIT;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->th, NULL);
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
    }
    PyMem_RawFree(w);
}

/* Relaxed atomic loads and stores of a double shared between the two scoring threads. */
static inline double cm_load_relaxed(double *p) {
    double v;
    __atomic_load(p, &v, __ATOMIC_RELAXED);
    return v;
}
static inline void cm_store_relaxed(double *p, double v) { __atomic_store(p, &v, __ATOMIC_RELAXED); }

/* A seqlock over n doubles that one thread writes and the other reads (the scores of the two
 * scoring threads' heaps). The writer bumps *seq to odd, stores, bumps it to even; the reader
 * copies and keeps the copy only when *seq was even and unchanged across it. */
static inline void cm_seq_write(int64_t *seq, double *dst, int64_t *dst_n, const double *src,
                                int64_t n) {
    int64_t s = __atomic_load_n(seq, __ATOMIC_RELAXED), i;
    __atomic_store_n(seq, s + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    for (i = 0; i < n; i++) __atomic_store(&dst[i], (double *)&src[i], __ATOMIC_RELAXED);
    __atomic_store_n(dst_n, n, __ATOMIC_RELAXED);
    __atomic_store_n(seq, s + 2, __ATOMIC_RELEASE);
}
static inline int64_t cm_seq_now(int64_t *seq) { return __atomic_load_n(seq, __ATOMIC_RELAXED); }
/* How many doubles were copied to dst (at most cap), or -1 when the writer was writing. */
static inline int64_t cm_seq_read(int64_t *seq, double *src, int64_t *src_n, double *dst,
                                  int64_t cap) {
    int64_t s1 = __atomic_load_n(seq, __ATOMIC_ACQUIRE), s2, n, i;
    if (s1 & 1) return -1;
    n = __atomic_load_n(src_n, __ATOMIC_RELAXED);
    if (n > cap) n = cap;
    for (i = 0; i < n; i++) __atomic_load(&src[i], &dst[i], __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    s2 = __atomic_load_n(seq, __ATOMIC_RELAXED);
    return s1 == s2 ? n : -1;
}

/* ---- bit unpacking ------------------------------------------------------------------------
 * cm_unpack_groups(p, n, bits, out): the first n rounded down to 8 of a stream of `bits`-bit
 * values (least significant bit first) into out; returns how many it wrote (0 for a width
 * outside 1..32). Eight values fill exactly `bits` bytes, so within a group of eight each
 * value's byte offset and shift are constants once the width is: one function per width, and
 * the compiler unrolls and vectorises each (a posting block's doc deltas took half of its
 * decoding time with the shift computed per value). Like postings' _unpack_fast it reads 8
 * bytes from each value's first byte: the caller has 8 readable bytes past the stream.
 */
#define CM_UNPACK8(B)                                                                           \
    static inline void cm_unpack8_##B(const uint8_t *p, int64_t groups, uint32_t *out) {        \
        const uint64_t mask = (B) == 32 ? 0xFFFFFFFFull : ((1ull << ((B) & 31)) - 1);           \
        for (int64_t g = 0; g < groups; g++, p += (B), out += 8) {                             \
            for (int k = 0; k < 8; k++) {                                                      \
                uint64_t w;                                                                    \
                memcpy(&w, p + ((k * (B)) >> 3), 8);                                           \
                out[k] = (uint32_t)((w >> ((k * (B)) & 7)) & mask);                            \
            }                                                                                  \
        }                                                                                      \
    }
CM_UNPACK8(1) CM_UNPACK8(2) CM_UNPACK8(3) CM_UNPACK8(4) CM_UNPACK8(5) CM_UNPACK8(6)
CM_UNPACK8(7) CM_UNPACK8(8) CM_UNPACK8(9) CM_UNPACK8(10) CM_UNPACK8(11) CM_UNPACK8(12)
CM_UNPACK8(13) CM_UNPACK8(14) CM_UNPACK8(15) CM_UNPACK8(16) CM_UNPACK8(17) CM_UNPACK8(18)
CM_UNPACK8(19) CM_UNPACK8(20) CM_UNPACK8(21) CM_UNPACK8(22) CM_UNPACK8(23) CM_UNPACK8(24)
CM_UNPACK8(25) CM_UNPACK8(26) CM_UNPACK8(27) CM_UNPACK8(28) CM_UNPACK8(29) CM_UNPACK8(30)
CM_UNPACK8(31) CM_UNPACK8(32)

static inline int64_t cm_unpack_groups(const uint8_t *p, int64_t n, int bits, uint32_t *out) {
    int64_t groups = n >> 3;
    switch (bits) {
#define CM_UNPACK_CASE(B) case B: cm_unpack8_##B(p, groups, out); break;
        CM_UNPACK_CASE(1) CM_UNPACK_CASE(2) CM_UNPACK_CASE(3) CM_UNPACK_CASE(4)
        CM_UNPACK_CASE(5) CM_UNPACK_CASE(6) CM_UNPACK_CASE(7) CM_UNPACK_CASE(8)
        CM_UNPACK_CASE(9) CM_UNPACK_CASE(10) CM_UNPACK_CASE(11) CM_UNPACK_CASE(12)
        CM_UNPACK_CASE(13) CM_UNPACK_CASE(14) CM_UNPACK_CASE(15) CM_UNPACK_CASE(16)
        CM_UNPACK_CASE(17) CM_UNPACK_CASE(18) CM_UNPACK_CASE(19) CM_UNPACK_CASE(20)
        CM_UNPACK_CASE(21) CM_UNPACK_CASE(22) CM_UNPACK_CASE(23) CM_UNPACK_CASE(24)
        CM_UNPACK_CASE(25) CM_UNPACK_CASE(26) CM_UNPACK_CASE(27) CM_UNPACK_CASE(28)
        CM_UNPACK_CASE(29) CM_UNPACK_CASE(30) CM_UNPACK_CASE(31) CM_UNPACK_CASE(32)
#undef CM_UNPACK_CASE
        default: return 0;
    }
    return groups << 3;
}

#endif /* CONVMEM_COMMON_H */
