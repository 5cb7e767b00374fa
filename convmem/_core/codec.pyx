"""Record codec: log file header, record frames, MESSAGE and DELETE payloads.

The byte layout, the order of the checks and every reason string are in docs/FORMAT.md; the
pure-Python twin `pycodec` implements the same thing readably and is the oracle in the tests.
Decoders read any contiguous buffer (bytes, bytearray, memoryview, mmap) through a
`const unsigned char[::1]` view without copying it (`[::1]` rather than `[:]` because the code
does pointer arithmetic on it, so a strided view is refused with BufferError). Every read goes
through a bounds check (`Reader`, or `check_frame` in the nogil scan loop) before any byte is
touched, and no allocation is sized from a length not yet checked against the bytes left.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.number cimport PyNumber_Index
from cpython.unicode cimport PyUnicode_AsUTF8String, PyUnicode_DecodeUTF8
from libc.stdint cimport INT64_MAX, INT64_MIN, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

import numpy as np

from convmem._core._common cimport GArr, garr_free, garr_grow, garr_init

FORMAT_VERSION = CV_FORMAT_VERSION
LOG_MAGIC = b"CVMEMLOG"
LOG_HEADER_SIZE = CV_LOG_HEADER_SIZE
RECORD_HEADER_SIZE = CV_RECORD_HEADER_SIZE
MESSAGE_FIXED_SIZE = CV_MESSAGE_FIXED_SIZE
ULID_SIZE = CV_ULID_SIZE
MAX_PAYLOAD = CV_MAX_PAYLOAD
REC_MESSAGE = CV_REC_MESSAGE
REC_DELETE = CV_REC_DELETE

TRUNCATED_HEADER = "truncated header"
BAD_LENGTH = "bad length"
TRUNCATED_PAYLOAD = "truncated payload"
BAD_CHECKSUM = "bad checksum"
UNKNOWN_TYPE = "unknown type"
BAD_RESERVED = "bad reserved bytes"
SEQ_NOT_INCREASING = "sequence not increasing"

# Indexed by FrameError.
cdef tuple _REASONS = (None, TRUNCATED_HEADER, BAD_LENGTH, TRUNCATED_PAYLOAD, BAD_CHECKSUM,
                       UNKNOWN_TYPE, BAD_RESERVED, SEQ_NOT_INCREASING)

cdef const char* _MAGIC = b"CVMEMLOG"
cdef uint64_t _U64_MAX = 0xFFFFFFFFFFFFFFFF
cdef uint32_t _ZLIB_CHUNK = 1 << 30


class CorruptRecord(Exception):
    """Bytes that do not follow docs/FORMAT.md.

    `offset` is the absolute offset of the offending byte in the buffer that was decoded,
    `reason` a short fixed string naming the check that failed.
    """

    def __init__(self, offset, reason):
        super().__init__(offset, reason)  # args kept as (offset, reason) so that pickling works
        self.offset = offset
        self.reason = reason

    def __str__(self):
        return f"{self.reason} at offset {self.offset}"


cdef class ScanResult:
    """What `scan_log` found: the valid records in order, and where and why it stopped."""

    def __init__(self, offsets, types, seqs, lengths, Py_ssize_t stop, error, Py_ssize_t resync):
        self.offsets = offsets
        self.types = types
        self.seqs = seqs
        self.lengths = lengths
        self.stop = stop
        self.error = error
        self.resync = resync

    def __len__(self):
        return len(self.offsets)

    def __repr__(self):
        return (f"ScanResult(records={len(self.offsets)}, stop={self.stop}, "
                f"error={self.error!r}, resync={self.resync})")


# ---------------------------------------------------------------------------------------------
# Reader: bounds-checked cursor (declared in codec.pxd)

cdef int rd_need(Reader* r, Py_ssize_t n, str reason) except -1:
    if n > r.end - r.pos:
        raise CorruptRecord(r.pos, reason)
    return 0


cdef int rd_u16(Reader* r, uint16_t* out, str reason) except -1:
    rd_need(r, 2, reason)
    out[0] = load_u16(r.data + r.pos)
    r.pos += 2
    return 0


cdef const unsigned char* rd_bytes(Reader* r, Py_ssize_t n, str reason) except NULL:
    rd_need(r, n, reason)
    cdef const unsigned char* p = r.data + r.pos
    r.pos += n
    return p


cdef str rd_utf8(Reader* r, Py_ssize_t n, str field):
    if n > r.end - r.pos:
        raise CorruptRecord(r.pos, field + " overruns payload")
    cdef str out
    try:
        out = PyUnicode_DecodeUTF8(<char*>(r.data + r.pos), n, NULL)
    except UnicodeDecodeError as e:
        raise CorruptRecord(r.pos + e.start, "invalid UTF-8 in " + field) from e
    r.pos += n
    return out


cdef int _open(Reader* r, const unsigned char[::1] mv, Py_ssize_t offset,
               Py_ssize_t length) except -1:
    """Point `r` at [offset, offset+length) of `mv` (length -1: to the end)."""
    cdef Py_ssize_t n = mv.shape[0]
    if length == -1:
        length = n - offset
    if offset < 0 or length < 0 or offset > n or length > n - offset:
        raise ValueError("offset/length outside the buffer")
    r.data = &mv[0] if n else <const unsigned char*>b""
    r.pos = offset
    r.end = offset + length
    return 0


# ---------------------------------------------------------------------------------------------
# checksums and frames

cdef uint32_t crc32_buf(uint32_t crc, const unsigned char* p, size_t n) noexcept nogil:
    cdef unsigned long c = crc
    cdef unsigned int chunk
    while n > 0:  # zlib's crc32(c, NULL, 0) would reset to 0, so an empty input skips the call
        chunk = <unsigned int>(n if n < _ZLIB_CHUNK else _ZLIB_CHUNK)
        c = zlib_crc32(c, p, chunk)
        p += chunk
        n -= chunk
    return <uint32_t>c


def crc32(data, value=0):
    """zlib's CRC-32 of `data` (any contiguous buffer), continuing from `value`."""
    cdef const unsigned char[::1] mv = data
    cdef uint32_t start = <uint32_t>(value & 0xFFFFFFFF)
    cdef size_t n = mv.shape[0]
    cdef uint32_t out
    if n == 0:
        return start
    with nogil:
        out = crc32_buf(start, &mv[0], n)
    return out


cdef FrameError check_frame(const unsigned char* data, Py_ssize_t off, Py_ssize_t end,
                            bint verify_crc) noexcept nogil:
    if end - off < CV_RECORD_HEADER_SIZE:
        return FE_TRUNCATED_HEADER
    cdef const unsigned char* p = data + off
    cdef uint32_t length = load_u32(p + 4)
    if length > CV_MAX_PAYLOAD:
        return FE_BAD_LENGTH
    if end - off - CV_RECORD_HEADER_SIZE < <Py_ssize_t>length:
        return FE_TRUNCATED_PAYLOAD
    if verify_crc and crc32_buf(0, p + 4, 16 + length) != load_u32(p):
        return FE_BAD_CHECKSUM
    if p[8] != CV_REC_MESSAGE and p[8] != CV_REC_DELETE:
        return FE_UNKNOWN_TYPE
    if p[9] | p[10] | p[11]:
        return FE_BAD_RESERVED
    return FE_OK


def encode_log_header(log_id, base_sequence):
    cdef bytes lid = _ulid(log_id, "log_id")
    cdef uint64_t seq = _u64(base_sequence, "base_sequence")
    cdef bytes out = PyBytes_FromStringAndSize(NULL, CV_LOG_HEADER_SIZE)
    cdef unsigned char* w = <unsigned char*>PyBytes_AS_STRING(out)
    memcpy(w, _MAGIC, 8)
    store_u32(w + 8, CV_FORMAT_VERSION)
    store_u32(w + 12, 0)
    memcpy(w + 16, PyBytes_AS_STRING(lid), CV_ULID_SIZE)
    store_u64(w + 32, seq)
    store_u32(w + 40, 0)
    store_u32(w + 44, crc32_buf(0, w, 44))
    return out


def decode_log_header(buf):
    cdef const unsigned char[::1] mv = buf
    if mv.shape[0] < CV_LOG_HEADER_SIZE:
        raise CorruptRecord(0, "truncated log header")
    cdef const unsigned char* p = &mv[0]
    if memcmp(p, _MAGIC, 8) != 0:
        raise CorruptRecord(0, "bad magic")
    if load_u32(p + 8) != CV_FORMAT_VERSION:
        raise CorruptRecord(0, "unsupported format version")
    if crc32_buf(0, p, 44) != load_u32(p + 44):
        raise CorruptRecord(0, "bad header checksum")
    if load_u32(p + 12) != 0:
        raise CorruptRecord(0, "bad header flags")
    if load_u32(p + 40) != 0:
        raise CorruptRecord(0, "bad header reserved bytes")
    return PyBytes_FromStringAndSize(<char*>(p + 16), CV_ULID_SIZE), load_u64(p + 32)


def encode_record(rtype, seq, payload):
    cdef int64_t t = _i64(rtype, 0, 255, "rtype")
    if t != CV_REC_MESSAGE and t != CV_REC_DELETE:
        raise ValueError("rtype must be REC_MESSAGE or REC_DELETE")
    cdef uint64_t s = _u64(seq, "seq")
    cdef const unsigned char[::1] body = payload
    cdef Py_ssize_t n = body.shape[0]
    if n > CV_MAX_PAYLOAD:
        raise ValueError("payload longer than MAX_PAYLOAD")
    cdef bytes out = PyBytes_FromStringAndSize(NULL, CV_RECORD_HEADER_SIZE + n)
    cdef unsigned char* w = <unsigned char*>PyBytes_AS_STRING(out)
    store_u32(w + 4, <uint32_t>n)
    w[8] = <unsigned char>t
    w[9] = w[10] = w[11] = 0
    store_u64(w + 12, s)
    if n:
        memcpy(w + CV_RECORD_HEADER_SIZE, &body[0], n)
    store_u32(w, crc32_buf(0, w + 4, 16 + n))
    return out


def read_record(buf, Py_ssize_t offset):
    """(rtype, seq, payload_offset, payload_len, next_offset) of the valid record at `offset`."""
    cdef const unsigned char[::1] mv = buf
    cdef Py_ssize_t n = mv.shape[0]
    if offset < 0 or offset > n:
        raise ValueError("offset outside the buffer")
    cdef const unsigned char* data = &mv[0] if n else <const unsigned char*>b""
    cdef FrameError err = check_frame(data, offset, n, True)
    if err != FE_OK:
        raise CorruptRecord(offset, _REASONS[err])
    cdef const unsigned char* p = data + offset
    cdef Py_ssize_t length = load_u32(p + 4)
    cdef Py_ssize_t start = offset + CV_RECORD_HEADER_SIZE
    return p[8], load_u64(p + 12), start, length, start + length


# ---------------------------------------------------------------------------------------------
# scanning

ctypedef struct _Entry:  # one valid record found by _scan
    int64_t offset
    uint64_t seq
    uint32_t length
    uint8_t rtype


cdef int _push(GArr* e, int64_t offset, uint64_t seq, uint32_t length,
               uint8_t rtype) noexcept nogil:
    """Append one entry to e (a GArr of _Entry); returns -1 when memory runs out (the caller
    raises MemoryError)."""
    if garr_grow(e, e.len + 1) < 0:
        return -1
    (<_Entry*>e.data)[e.len] = _Entry(offset, seq, length, rtype)
    e.len += 1
    return 0


cdef FrameError _scan(const unsigned char* data, Py_ssize_t start, Py_ssize_t end,
                      bint verify_crc, GArr* found, Py_ssize_t* stop,
                      bint* no_memory) noexcept nogil:
    """Walk valid records from `start`, recording each; set where the walk stopped.

    One pass that keeps what it found (instead of a counting pass and a filling pass): on a log
    larger than the caches the second pass would miss on every record header again.
    """
    cdef Py_ssize_t off = start
    cdef uint64_t seq, prev = 0
    cdef uint32_t length
    cdef FrameError err = FE_OK
    while off < end:
        err = check_frame(data, off, end, verify_crc)
        if err != FE_OK:
            break
        seq = load_u64(data + off + 12)
        if found.len and seq <= prev:
            err = FE_SEQ_NOT_INCREASING
            break
        length = load_u32(data + off + 4)
        if _push(found, off, seq, length, data[off + 8]) != 0:
            no_memory[0] = True
            break
        prev = seq
        off += CV_RECORD_HEADER_SIZE + <Py_ssize_t>length
    stop[0] = off
    return err


cdef Py_ssize_t _resync(const unsigned char* data, Py_ssize_t stop, Py_ssize_t end) noexcept nogil:
    """Smallest offset > stop where a whole record with a valid checksum starts, or -1."""
    cdef Py_ssize_t cand
    for cand in range(stop + 1, end - CV_RECORD_HEADER_SIZE + 1):
        if check_frame(data, cand, end, True) == FE_OK:
            return cand
    return -1


def scan_log(buf, Py_ssize_t start, Py_ssize_t end=-1, bint verify_crc=True):
    cdef const unsigned char[::1] mv = buf
    cdef Py_ssize_t n = mv.shape[0]
    if end == -1:
        end = n
    if start < 0 or end < start or end > n:
        raise ValueError("start/end outside the buffer")
    cdef const unsigned char* data = &mv[0] if n else <const unsigned char*>b""
    cdef GArr found                   # of _Entry; grown x2 (a temporary, freed below)
    cdef const _Entry* items
    cdef Py_ssize_t i, count, stop, resync = -1
    cdef bint no_memory = False
    cdef FrameError err
    cdef int64_t[::1] o
    cdef uint8_t[::1] t
    cdef uint64_t[::1] s
    cdef uint32_t[::1] l
    garr_init(&found, sizeof(_Entry), 0)
    try:
        with nogil:
            err = _scan(data, start, end, verify_crc, &found, &stop, &no_memory)
            if err != FE_OK and not no_memory:
                resync = _resync(data, stop, end)
        if no_memory:
            raise MemoryError()
        count = found.len
        items = <const _Entry*>found.data
        offsets = np.empty(count, dtype=np.int64)
        types = np.empty(count, dtype=np.uint8)
        seqs = np.empty(count, dtype=np.uint64)
        lengths = np.empty(count, dtype=np.uint32)
        o = offsets
        t = types
        s = seqs
        l = lengths
        with nogil:
            for i in range(count):
                o[i] = items[i].offset
                t[i] = items[i].rtype
                s[i] = items[i].seq
                l[i] = items[i].length
    finally:
        garr_free(&found)
    return ScanResult(offsets, types, seqs, lengths, stop, _REASONS[err], resync)


# ---------------------------------------------------------------------------------------------
# encoder helpers: ValueError for anything that does not fit its field

cdef int64_t _i64(object value, int64_t lo, int64_t hi, str name) except? -1:
    cdef int64_t v
    value = PyNumber_Index(value)  # TypeError for floats, like operator.index in the twin
    try:
        v = value
    except OverflowError:
        raise ValueError(f"{name} out of range {lo}..{hi}") from None
    if v < lo or v > hi:
        raise ValueError(f"{name} out of range {lo}..{hi}")
    return v


cdef uint64_t _u64(object value, str name) except? 0xFFFFFFFFFFFFFFFF:
    value = PyNumber_Index(value)
    try:
        return value
    except OverflowError:
        raise ValueError(f"{name} out of range 0..{_U64_MAX}") from None


cdef bytes _ulid(object value, str name):
    cdef bytes b
    if type(value) is bytes:
        b = <bytes>value
    else:
        b = memoryview(value).tobytes()  # buffers only: bytes(5) or a ULID object must not pass
    if PyBytes_GET_SIZE(b) != CV_ULID_SIZE:
        raise ValueError(f"{name} must be 16 bytes")
    return b


cdef bytes _utf8(object value, str name, Py_ssize_t limit):
    if not isinstance(value, str):
        raise TypeError(f"{name} must be str")
    # A temporary bytes, not PyUnicode_AsUTF8: that would cache a UTF-8 copy inside every
    # non-ASCII str for its lifetime (CPython keeps it in the str object until the str dies,
    # so a kept message body would hold its text twice).
    cdef bytes b = PyUnicode_AsUTF8String(value)
    if PyBytes_GET_SIZE(b) > limit:
        raise ValueError(f"{name} longer than {limit} UTF-8 bytes")
    return b


cdef inline unsigned char* _put(unsigned char* w, bytes b) noexcept:
    cdef Py_ssize_t n = PyBytes_GET_SIZE(b)
    memcpy(w, PyBytes_AS_STRING(b), n)
    return w + n


# ---------------------------------------------------------------------------------------------
# MESSAGE payload

def encode_message(ulid, timestamp, updated_at, revision, role, kind, tier, importance,
                   session_id, content, tool_call_id, summary, tags, relations, sources):
    cdef bytes uid = _ulid(ulid, "ulid")
    cdef int64_t ts = _i64(timestamp, INT64_MIN, INT64_MAX, "timestamp")
    cdef int64_t upd = _i64(updated_at, INT64_MIN, INT64_MAX, "updated_at")
    cdef int64_t rev = _i64(revision, 1, 0xFFFFFFFF, "revision")
    cdef int64_t rol = _i64(role, 0, 2, "role")
    cdef int64_t knd = _i64(kind, 0, 5, "kind")
    cdef int64_t tie = _i64(tier, 0, 3, "tier")
    cdef int64_t imp = _i64(importance, 0, 100, "importance")
    cdef bytes sess = _utf8(session_id, "session_id", 0xFFFF)
    cdef bytes body = _utf8(content, "content", CV_MAX_PAYLOAD)
    cdef uint8_t flags = 0
    cdef bytes tool = b""
    cdef bytes summ = b""
    if tool_call_id is not None:
        tool = _utf8(tool_call_id, "tool_call_id", 0xFFFF)
        flags |= CV_FLAG_TOOL_CALL_ID
    if summary is not None:
        summ = _utf8(summary, "summary", CV_MAX_PAYLOAD)
        flags |= CV_FLAG_SUMMARY
    cdef list tag_list = [_utf8(t, "tag", 0xFFFF) for t in tags]
    cdef list rel_list = [(_i64(rt, 0, 3, "relation type"), _ulid(target, "ulid"))
                          for rt, target in relations]
    cdef list src_list = [_ulid(x, "ulid") for x in sources]
    if len(tag_list) > 255:
        raise ValueError("more than 255 tags")
    if len(rel_list) > 255:
        raise ValueError("more than 255 relations")
    if len(src_list) > 255:
        raise ValueError("more than 255 sources")

    # Every part is bounded (<= 16 MiB each, <= 255 x 64 KiB tags), so the sum cannot overflow.
    cdef Py_ssize_t size = (CV_MESSAGE_FIXED_SIZE + len(sess) + len(body) + len(tool) + len(summ)
                            + 17 * len(rel_list) + CV_ULID_SIZE * len(src_list))
    cdef bytes b
    for b in tag_list:
        size += 2 + PyBytes_GET_SIZE(b)
    if size > CV_MAX_PAYLOAD:
        raise ValueError("message payload longer than MAX_PAYLOAD")

    cdef bytes out = PyBytes_FromStringAndSize(NULL, size)
    cdef unsigned char* w = <unsigned char*>PyBytes_AS_STRING(out)
    memcpy(w, PyBytes_AS_STRING(uid), CV_ULID_SIZE)
    store_u64(w + 16, <uint64_t>ts)
    store_u64(w + 24, <uint64_t>upd)
    store_u32(w + 32, <uint32_t>rev)
    w[36] = <unsigned char>rol
    w[37] = <unsigned char>knd
    w[38] = <unsigned char>tie
    w[39] = <unsigned char>imp
    w[40] = flags
    w[41] = <unsigned char>len(tag_list)
    w[42] = <unsigned char>len(rel_list)
    w[43] = <unsigned char>len(src_list)
    store_u16(w + 44, <uint16_t>len(sess))
    store_u16(w + 46, <uint16_t>len(tool))
    store_u32(w + 48, <uint32_t>len(summ))
    store_u32(w + 52, <uint32_t>len(body))
    w += CV_MESSAGE_FIXED_SIZE
    w = _put(w, sess)
    w = _put(w, body)
    w = _put(w, tool)
    w = _put(w, summ)
    for b in tag_list:
        store_u16(w, <uint16_t>PyBytes_GET_SIZE(b))
        w = _put(w + 2, b)
    cdef tuple rel
    for rel in rel_list:
        w[0] = <unsigned char>(<int64_t>rel[0])
        w = _put(w + 1, <bytes>rel[1])
    for b in src_list:
        w = _put(w, b)
    return out


cdef const unsigned char* _message_fixed(Reader* r) except NULL:
    """Read and check the 56-byte fixed part (FORMAT.md section 3, first rows of the table)."""
    cdef Py_ssize_t base = r.pos
    cdef const unsigned char* p = rd_bytes(r, CV_MESSAGE_FIXED_SIZE, "truncated message header")
    if load_u32(p + 32) == 0:
        raise CorruptRecord(base + 32, "bad revision")
    if p[36] > 2:
        raise CorruptRecord(base + 36, "bad role")
    if p[37] > 5:
        raise CorruptRecord(base + 37, "bad kind")
    if p[38] > 3:
        raise CorruptRecord(base + 38, "bad tier")
    if p[39] > 100:
        raise CorruptRecord(base + 39, "bad importance")
    if p[40] & ~(CV_FLAG_TOOL_CALL_ID | CV_FLAG_SUMMARY):
        raise CorruptRecord(base + 40, "bad flags")
    if load_u16(p + 46) and not (p[40] & CV_FLAG_TOOL_CALL_ID):
        raise CorruptRecord(base + 46, "tool_call_id length without flag")
    if load_u32(p + 48) and not (p[40] & CV_FLAG_SUMMARY):
        raise CorruptRecord(base + 48, "summary length without flag")
    return p


cdef tuple _decode_message(Reader* r):
    cdef const unsigned char* p = _message_fixed(r)
    cdef uint8_t flags = p[40]
    cdef Py_ssize_t i
    cdef uint16_t n
    session_id = rd_utf8(r, load_u16(p + 44), "session_id")
    content = rd_utf8(r, load_u32(p + 52), "content")
    tool_call_id = summary = None
    if flags & CV_FLAG_TOOL_CALL_ID:
        tool_call_id = rd_utf8(r, load_u16(p + 46), "tool_call_id")
    if flags & CV_FLAG_SUMMARY:
        summary = rd_utf8(r, load_u32(p + 48), "summary")
    cdef list tags = []
    for i in range(p[41]):
        rd_u16(r, &n, "tag length overruns payload")
        tags.append(rd_utf8(r, n, "tag"))
    cdef list relations = []
    cdef const unsigned char* q
    for i in range(p[42]):
        q = rd_bytes(r, 1 + CV_ULID_SIZE, "relation overruns payload")
        if q[0] > 3:
            raise CorruptRecord(r.pos - 1 - CV_ULID_SIZE, "bad relation type")
        relations.append((q[0], PyBytes_FromStringAndSize(<char*>(q + 1), CV_ULID_SIZE)))
    cdef list sources = []
    for i in range(p[43]):
        q = rd_bytes(r, CV_ULID_SIZE, "source overruns payload")
        sources.append(PyBytes_FromStringAndSize(<char*>q, CV_ULID_SIZE))
    if r.pos != r.end:
        raise CorruptRecord(r.pos, "trailing bytes")
    return (PyBytes_FromStringAndSize(<char*>p, CV_ULID_SIZE),
            <int64_t>load_u64(p + 16), <int64_t>load_u64(p + 24), load_u32(p + 32),
            p[36], p[37], p[38], p[39], session_id, content, tool_call_id, summary,
            tags, relations, sources)


def decode_message(buf, Py_ssize_t offset=0, Py_ssize_t length=-1):
    cdef const unsigned char[::1] mv = buf
    cdef Reader r = Reader(NULL, 0, 0)  # set by _open; initialised for -Wmaybe-uninitialized
    _open(&r, mv, offset, length)
    return _decode_message(&r)


def message_content_span(buf, Py_ssize_t offset=0, Py_ssize_t length=-1):
    """(absolute offset, length) of the content bytes; checks only the fixed part and lengths."""
    cdef const unsigned char[::1] mv = buf
    cdef Reader r = Reader(NULL, 0, 0)  # set by _open; initialised for -Wmaybe-uninitialized
    _open(&r, mv, offset, length)
    cdef const unsigned char* p = _message_fixed(&r)
    cdef Py_ssize_t start = r.pos + load_u16(p + 44)
    rd_need(&r, load_u16(p + 44), "session_id overruns payload")
    r.pos = start
    rd_need(&r, load_u32(p + 52), "content overruns payload")
    r.pos += load_u32(p + 52)
    rd_need(&r, load_u16(p + 46), "tool_call_id overruns payload")
    r.pos += load_u16(p + 46)
    rd_need(&r, load_u32(p + 48), "summary overruns payload")
    return start, load_u32(p + 52)


# ---------------------------------------------------------------------------------------------
# DELETE payload

def encode_delete(ulid):
    return _ulid(ulid, "ulid")


def decode_delete(buf, Py_ssize_t offset=0, Py_ssize_t length=-1):
    cdef const unsigned char[::1] mv = buf
    cdef Reader r = Reader(NULL, 0, 0)  # set by _open; initialised for -Wmaybe-uninitialized
    _open(&r, mv, offset, length)
    cdef const unsigned char* p = rd_bytes(&r, CV_ULID_SIZE, "truncated delete payload")
    if r.pos != r.end:
        raise CorruptRecord(r.pos, "trailing bytes")
    return PyBytes_FromStringAndSize(<char*>p, CV_ULID_SIZE)


__all__ = [
    "FORMAT_VERSION", "LOG_MAGIC", "LOG_HEADER_SIZE", "RECORD_HEADER_SIZE", "MAX_PAYLOAD",
    "REC_MESSAGE", "REC_DELETE", "CorruptRecord", "ScanResult", "crc32",
    "encode_log_header", "decode_log_header", "encode_record", "read_record", "scan_log",
    "encode_message", "decode_message", "message_content_span", "encode_delete", "decode_delete",
]


# -- ULID text form ------------------------------------------------------------------------
cdef const char* _CROCKFORD = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid_str(const unsigned char[::1] ulid not None):
    """The canonical 26-character (Crockford base32) text of a 16-byte ULID."""
    if ulid.shape[0] != 16:
        raise ValueError("a ULID is 16 bytes")
    cdef uint64_t hi = 0, lo = 0, v
    cdef int i, shift
    cdef char out[26]
    for i in range(8):
        hi = (hi << 8) | ulid[i]
        lo = (lo << 8) | ulid[8 + i]
    # Character i holds bits [125 - 5i, 130 - 5i) of the 128-bit number (two zero bits on top).
    for i in range(26):
        shift = 125 - 5 * i
        if shift >= 64:
            v = hi >> (shift - 64)
        elif shift + 5 <= 64:
            v = lo >> shift
        else:
            v = (hi << (64 - shift)) | (lo >> shift)
        out[i] = _CROCKFORD[v & 31]
    return out[:26].decode("ascii")


# -- the decoded MESSAGE tuple's fields, by name (decode_message's order; FORMAT.md section 3) --
R_ULID = 0
R_TIMESTAMP = 1
R_UPDATED_AT = 2
R_REVISION = 3
R_ROLE = 4
R_KIND = 5
R_TIER = 6
R_IMPORTANCE = 7
R_SESSION_ID = 8
R_CONTENT = 9
R_TOOL_CALL_ID = 10
R_SUMMARY = 11
R_TAGS = 12
R_RELATIONS = 13
R_SOURCES = 14
RECORD_FIELDS = ("ulid", "timestamp", "updated_at", "revision", "role", "kind", "tier",
                 "importance", "session_id", "content", "tool_call_id", "summary", "tags",
                 "relations", "sources")


def message_revision(buf, Py_ssize_t offset=0, Py_ssize_t length=-1):
    """The revision of a MESSAGE payload; checks only its fixed part (the caller checked the
    record's checksum)."""
    cdef const unsigned char[::1] mv = buf
    cdef Reader r = Reader(NULL, 0, 0)  # set by _open; initialised for -Wmaybe-uninitialized
    _open(&r, mv, offset, length)
    return load_u32(_message_fixed(&r) + 32)


# The build this module comes from ("debug" or "release", _common.h CM_BUILD_DEBUG), read by
# convmem._core.BUILD_TYPE.
from convmem._core._common cimport CM_BUILD_DEBUG
BUILD = "debug" if CM_BUILD_DEBUG else "release"
