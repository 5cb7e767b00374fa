from convmem._core._common cimport GArr


cdef class SharedBlock:
    cdef char* p


cdef object share_garr(GArr* a, object dtype, tuple shape, list registry)
cdef int release_shared(list registry) except -1
