cimport numpy as cnp

from convmem._core._common cimport GArr


cdef class SharedBlock:
    cdef char* p


cdef object share_garr(GArr* a, object dtype, tuple shape, list registry, object owner=*)
cdef int release_shared(list registry) except -1
cdef int garr_borrow(GArr* a, cnp.ndarray arr, list keep) except -1
cdef object garr_to_numpy(const GArr* a, object dtype, tuple shape)
cdef object garr_take(GArr* a, object dtype, tuple shape)
cdef object room_base(object view)
