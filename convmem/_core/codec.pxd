# C-level contract of convmem._core.codec. Byte layout: docs/FORMAT.md.
# Another compiled module (e.g. a native log replayer) can `cimport` the bounds-checked `Reader`,
# `check_frame` and `crc32_buf` (the little-endian loaders come from _common.pxd).
from libc.stdint cimport int64_t, uint8_t, uint16_t, uint32_t, uint64_t


cdef extern from "zlib.h" nogil:
    # zlib's crc32(); uInt is 32 bits, every length passed here is <= 16 MiB + 16 or chunked.
    unsigned long zlib_crc32 "crc32"(unsigned long crc, const unsigned char* buf, unsigned int n)


cdef enum:
    CV_FORMAT_VERSION = 2
    CV_LOG_HEADER_SIZE = 48
    CV_RECORD_HEADER_SIZE = 20
    CV_MESSAGE_FIXED_SIZE = 56
    CV_ULID_SIZE = 16
    CV_MAX_PAYLOAD = 16 * 1024 * 1024
    CV_REC_MESSAGE = 1
    CV_REC_DELETE = 2
    CV_FLAG_TOOL_CALL_ID = 0x01
    CV_FLAG_SUMMARY = 0x02


# Result of check_frame / the scan loop; index into the reason strings of codec.pyx.
cdef enum FrameError:
    FE_OK = 0
    FE_TRUNCATED_HEADER = 1
    FE_BAD_LENGTH = 2
    FE_TRUNCATED_PAYLOAD = 3
    FE_BAD_CHECKSUM = 4
    FE_UNKNOWN_TYPE = 5
    FE_BAD_RESERVED = 6
    FE_SEQ_NOT_INCREASING = 7


# The unchecked little-endian loads and stores (only after the caller has checked the bytes are
# there) are _common.pxd's, cimported here so that codec.pyx and whoever cimports codec get them.
from convmem._core._common cimport load_u16, load_u32, load_u64, store_u16, store_u32, store_u64


# A bounds-checked read cursor over one span of a buffer. Offsets are absolute (from `data`), so
# a CorruptRecord raised by a read names the offset in the caller's buffer.
ctypedef struct Reader:
    const unsigned char* data  # start of the whole buffer
    Py_ssize_t pos             # next byte to read
    Py_ssize_t end             # one past the last byte of the span this reader may read


# Each raises CorruptRecord(pos, reason) when fewer than the needed bytes are left; the cursor
# only moves on success.
cdef int rd_need(Reader* r, Py_ssize_t n, str reason) except -1
cdef int rd_u16(Reader* r, uint16_t* out, str reason) except -1
cdef const unsigned char* rd_bytes(Reader* r, Py_ssize_t n, str reason) except NULL
# n bytes of strict UTF-8 as a str; reasons "<field> overruns payload" / "invalid UTF-8 in <field>"
cdef str rd_utf8(Reader* r, Py_ssize_t n, str field)

# Frame checks 1-6 of docs/FORMAT.md section 2 for the record at `off` (end = one past the last
# byte that may be read). Pure C, no allocation: usable from nogil loops.
cdef FrameError check_frame(const unsigned char* data, Py_ssize_t off, Py_ssize_t end,
                            bint verify_crc) noexcept nogil
# crc32 of any length (zlib takes a 32-bit length, so long inputs are fed in chunks).
cdef uint32_t crc32_buf(uint32_t crc, const unsigned char* p, size_t n) noexcept nogil


cdef class ScanResult:
    cdef readonly object offsets   # numpy int64: start offset of each valid record, in order
    cdef readonly object types     # numpy uint8
    cdef readonly object seqs      # numpy uint64
    cdef readonly object lengths   # numpy uint32: payload lengths
    cdef readonly Py_ssize_t stop  # where scanning stopped (== end after a clean scan)
    cdef readonly object error     # None or a reason string
    cdef readonly Py_ssize_t resync  # -1, or the next offset > stop where a valid record starts
