"""Pure-Python twin of the record codec (`convmem._core.codec`): the readable test oracle.

It has exactly the compiled module's API and produces identical bytes, decodes and errors (same
`CorruptRecord` offsets and reasons). The byte layout is in docs/FORMAT.md; this file follows it
field by field. It reads any buffer (bytes, bytearray, memoryview, mmap) through memoryview
slices, so apart from the decoded values it copies nothing.
"""
from __future__ import annotations

import operator
import struct
import zlib
from collections.abc import Iterable

import numpy as np

FORMAT_VERSION = 2
LOG_MAGIC = b"CVMEMLOG"
LOG_HEADER_SIZE = 48
RECORD_HEADER_SIZE = 20
MESSAGE_FIXED_SIZE = 56
ULID_SIZE = 16
MAX_PAYLOAD = 16 * 1024 * 1024
REC_MESSAGE = 1
REC_DELETE = 2

_LOG_HEADER = struct.Struct("<8sII16sQII")  # magic, version, flags, log_id, base_seq, reserved, crc
_FRAME = struct.Struct("<IIB3sQ")  # crc, length, type, reserved, seq
_MSG_FIXED = struct.Struct("<16sqqIBBBBBBBBHHII")  # the 56-byte fixed part of a MESSAGE
_U16 = struct.Struct("<H")

_U8_MAX = 0xFF
_U16_MAX = 0xFFFF
_U32_MAX = 0xFFFFFFFF
_U64_MAX = 0xFFFFFFFFFFFFFFFF
_I64_MIN = -(1 << 63)
_I64_MAX = (1 << 63) - 1
_FLAG_TOOL_CALL_ID = 0x01
_FLAG_SUMMARY = 0x02

# scan_log reasons (docs/FORMAT.md section 2); the compiled module uses the same strings.
TRUNCATED_HEADER = "truncated header"
BAD_LENGTH = "bad length"
TRUNCATED_PAYLOAD = "truncated payload"
BAD_CHECKSUM = "bad checksum"
UNKNOWN_TYPE = "unknown type"
BAD_RESERVED = "bad reserved bytes"
SEQ_NOT_INCREASING = "sequence not increasing"


class CorruptRecord(Exception):
    """Bytes that do not follow docs/FORMAT.md.

    `offset` is the absolute offset of the offending byte in the buffer that was decoded,
    `reason` a short fixed string naming the check that failed.
    """

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(offset, reason)  # args kept as (offset, reason) so that pickling works
        self.offset = offset
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.reason} at offset {self.offset}"


class ScanResult:
    """What `scan_log` found: the valid records in order, and where and why it stopped."""

    __slots__ = ("offsets", "types", "seqs", "lengths", "stop", "error", "resync")

    def __init__(self, offsets, types, seqs, lengths, stop: int, error: str | None, resync: int):
        self.offsets = offsets
        self.types = types
        self.seqs = seqs
        self.lengths = lengths
        self.stop = stop
        self.error = error
        self.resync = resync

    def __len__(self) -> int:
        return len(self.offsets)

    def __repr__(self) -> str:
        return (
            f"ScanResult(records={len(self.offsets)}, stop={self.stop}, "
            f"error={self.error!r}, resync={self.resync})"
        )


def crc32(data, value: int = 0) -> int:
    """zlib's CRC-32 of `data` (any buffer), continuing from `value`."""
    return zlib.crc32(data, value & _U32_MAX)


# ---------------------------------------------------------------------------------------------
# helpers


def _int(value, lo: int, hi: int, name: str) -> int:
    v = operator.index(value)  # TypeError for floats and other non-integers, like the C side
    if v < lo or v > hi:
        raise ValueError(f"{name} out of range {lo}..{hi}")
    return v


def _ulid(value, name: str = "ulid") -> bytes:
    data = memoryview(value).tobytes()  # buffers only: bytes(5) or a ULID object must not pass
    if len(data) != ULID_SIZE:
        raise ValueError(f"{name} must be {ULID_SIZE} bytes")
    return data


def _utf8(value, name: str, limit: int) -> bytes:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be str")
    data = value.encode("utf-8")  # UnicodeEncodeError for lone surrogates propagates
    if len(data) > limit:
        raise ValueError(f"{name} longer than {limit} UTF-8 bytes")
    return data


def _bytes_view(buf) -> memoryview:
    mv = memoryview(buf)
    return mv if mv.format == "B" and mv.ndim == 1 else mv.cast("B")


def _view(buf, offset: int, length: int) -> tuple[memoryview, int]:
    """The buffer as a byte memoryview plus the absolute end of the [offset, offset+length) span."""
    mv = _bytes_view(buf)
    n = mv.nbytes
    if length == -1:
        length = n - offset
    if offset < 0 or length < 0 or offset > n or length > n - offset:
        raise ValueError("offset/length outside the buffer")
    return mv, offset + length


def _str(mv: memoryview, pos: int, end: int, n: int, field: str) -> str:
    if n > end - pos:
        raise CorruptRecord(pos, f"{field} overruns payload")
    try:
        return str(mv[pos : pos + n], "utf-8")
    except UnicodeDecodeError as e:
        raise CorruptRecord(pos + e.start, f"invalid UTF-8 in {field}") from e


# ---------------------------------------------------------------------------------------------
# log file header


def encode_log_header(log_id: bytes, base_sequence: int) -> bytes:
    lid = _ulid(log_id, "log_id")
    seq = _int(base_sequence, 0, _U64_MAX, "base_sequence")
    head = _LOG_HEADER.pack(LOG_MAGIC, FORMAT_VERSION, 0, lid, seq, 0, 0)[:44]
    return head + struct.pack("<I", zlib.crc32(head))


def decode_log_header(buf) -> tuple[bytes, int]:
    mv, _ = _view(buf, 0, -1)
    if mv.nbytes < LOG_HEADER_SIZE:
        raise CorruptRecord(0, "truncated log header")
    magic, version, flags, log_id, base_seq, reserved, crc = _LOG_HEADER.unpack_from(mv, 0)
    if magic != LOG_MAGIC:
        raise CorruptRecord(0, "bad magic")
    if version != FORMAT_VERSION:
        raise CorruptRecord(0, "unsupported format version")
    if zlib.crc32(mv[:44]) != crc:
        raise CorruptRecord(0, "bad header checksum")
    if flags != 0:
        raise CorruptRecord(0, "bad header flags")
    if reserved != 0:
        raise CorruptRecord(0, "bad header reserved bytes")
    return log_id, base_seq


# ---------------------------------------------------------------------------------------------
# record frames


def encode_record(rtype: int, seq: int, payload) -> bytes:
    t = _int(rtype, 0, _U8_MAX, "rtype")
    if t not in (REC_MESSAGE, REC_DELETE):
        raise ValueError("rtype must be REC_MESSAGE or REC_DELETE")
    s = _int(seq, 0, _U64_MAX, "seq")
    body = memoryview(payload).tobytes()
    if len(body) > MAX_PAYLOAD:
        raise ValueError("payload longer than MAX_PAYLOAD")
    covered = _FRAME.pack(0, len(body), t, b"\0\0\0", s)[4:] + body
    return struct.pack("<I", zlib.crc32(covered)) + covered


def _check_frame(mv: memoryview, off: int, end: int, verify_crc: bool) -> str | None:
    """The first failed frame check at `off` (docs/FORMAT.md section 2), or None."""
    if end - off < RECORD_HEADER_SIZE:
        return TRUNCATED_HEADER
    crc, length, rtype, reserved, _ = _FRAME.unpack_from(mv, off)
    if length > MAX_PAYLOAD:
        return BAD_LENGTH
    if end - off - RECORD_HEADER_SIZE < length:
        return TRUNCATED_PAYLOAD
    if verify_crc and zlib.crc32(mv[off + 4 : off + RECORD_HEADER_SIZE + length]) != crc:
        return BAD_CHECKSUM
    if rtype != REC_MESSAGE and rtype != REC_DELETE:
        return UNKNOWN_TYPE
    if reserved != b"\0\0\0":
        return BAD_RESERVED
    return None


def read_record(buf, offset: int) -> tuple[int, int, int, int, int]:
    """(rtype, seq, payload_offset, payload_len, next_offset) of the valid record at `offset`."""
    mv, end = _view(buf, offset, -1)
    err = _check_frame(mv, offset, end, True)
    if err is not None:
        raise CorruptRecord(offset, err)
    _, length, rtype, _, seq = _FRAME.unpack_from(mv, offset)
    start = offset + RECORD_HEADER_SIZE
    return rtype, seq, start, length, start + length


def scan_log(buf, start: int, end: int = -1, verify_crc: bool = True) -> ScanResult:
    mv = _bytes_view(buf)
    n = mv.nbytes
    if end == -1:
        end = n
    if start < 0 or end < start or end > n:
        raise ValueError("start/end outside the buffer")
    offsets: list[int] = []
    types: list[int] = []
    seqs: list[int] = []
    lengths: list[int] = []
    off = start
    error: str | None = None
    while off < end:
        error = _check_frame(mv, off, end, verify_crc)
        if error is None:
            _, length, rtype, _, seq = _FRAME.unpack_from(mv, off)
            if seqs and seq <= seqs[-1]:
                error = SEQ_NOT_INCREASING
        if error is not None:
            break
        offsets.append(off)
        types.append(rtype)
        seqs.append(seq)
        lengths.append(length)
        off += RECORD_HEADER_SIZE + length
    resync = -1
    if error is not None:
        for cand in range(off + 1, end - RECORD_HEADER_SIZE + 1):
            if _check_frame(mv, cand, end, True) is None:
                resync = cand
                break
    return ScanResult(
        np.array(offsets, dtype=np.int64),
        np.array(types, dtype=np.uint8),
        np.array(seqs, dtype=np.uint64),
        np.array(lengths, dtype=np.uint32),
        off,
        error,
        resync,
    )


# ---------------------------------------------------------------------------------------------
# MESSAGE payload


def encode_message(
    ulid,
    timestamp: int,
    updated_at: int,
    revision: int,
    role: int,
    kind: int,
    tier: int,
    importance: int,
    session_id: str,
    content: str,
    tool_call_id: str | None,
    summary: str | None,
    tags: Iterable[str],
    relations: Iterable[tuple[int, bytes]],
    sources: Iterable[bytes],
) -> bytes:
    uid = _ulid(ulid)
    ts = _int(timestamp, _I64_MIN, _I64_MAX, "timestamp")
    upd = _int(updated_at, _I64_MIN, _I64_MAX, "updated_at")
    rev = _int(revision, 1, _U32_MAX, "revision")
    rol = _int(role, 0, 2, "role")
    knd = _int(kind, 0, 5, "kind")
    tie = _int(tier, 0, 3, "tier")
    imp = _int(importance, 0, 100, "importance")
    sess = _utf8(session_id, "session_id", _U16_MAX)
    body = _utf8(content, "content", MAX_PAYLOAD)
    flags = 0
    tool = b""
    if tool_call_id is not None:
        tool = _utf8(tool_call_id, "tool_call_id", _U16_MAX)
        flags |= _FLAG_TOOL_CALL_ID
    summ = b""
    if summary is not None:
        summ = _utf8(summary, "summary", MAX_PAYLOAD)
        flags |= _FLAG_SUMMARY
    tag_list = [_utf8(t, "tag", _U16_MAX) for t in tags]
    rel_list = [(_int(rt, 0, 3, "relation type"), _ulid(target)) for rt, target in relations]
    src_list = [_ulid(s) for s in sources]
    for name, items in (("tags", tag_list), ("relations", rel_list), ("sources", src_list)):
        if len(items) > _U8_MAX:
            raise ValueError(f"more than {_U8_MAX} {name}")
    size = (
        MESSAGE_FIXED_SIZE
        + len(sess) + len(body) + len(tool) + len(summ)
        + sum(2 + len(t) for t in tag_list)
        + 17 * len(rel_list)
        + ULID_SIZE * len(src_list)
    )
    if size > MAX_PAYLOAD:
        raise ValueError("message payload longer than MAX_PAYLOAD")
    parts = [
        _MSG_FIXED.pack(
            uid, ts, upd, rev, rol, knd, tie, imp, flags,
            len(tag_list), len(rel_list), len(src_list),
            len(sess), len(tool), len(summ), len(body),
        ),
        sess, body, tool, summ,
    ]
    for t in tag_list:
        parts += (_U16.pack(len(t)), t)
    for rt, target in rel_list:
        parts += (bytes((rt,)), target)
    parts += src_list
    return b"".join(parts)


def _message_fixed(mv: memoryview, base: int, end: int) -> tuple:
    """Unpack and check the 56-byte fixed part at `base` (FORMAT.md section 3, first rows)."""
    if end - base < MESSAGE_FIXED_SIZE:
        raise CorruptRecord(base, "truncated message header")
    f = _MSG_FIXED.unpack_from(mv, base)
    (_, _, _, revision, role, kind, tier, importance, flags, _, _, _, _, tool_len, summ_len, _) = f
    if revision == 0:
        raise CorruptRecord(base + 32, "bad revision")
    if role > 2:
        raise CorruptRecord(base + 36, "bad role")
    if kind > 5:
        raise CorruptRecord(base + 37, "bad kind")
    if tier > 3:
        raise CorruptRecord(base + 38, "bad tier")
    if importance > 100:
        raise CorruptRecord(base + 39, "bad importance")
    if flags & ~(_FLAG_TOOL_CALL_ID | _FLAG_SUMMARY):
        raise CorruptRecord(base + 40, "bad flags")
    if tool_len and not flags & _FLAG_TOOL_CALL_ID:
        raise CorruptRecord(base + 46, "tool_call_id length without flag")
    if summ_len and not flags & _FLAG_SUMMARY:
        raise CorruptRecord(base + 48, "summary length without flag")
    return f


def decode_message(buf, offset: int = 0, length: int = -1) -> tuple:
    mv, end = _view(buf, offset, length)
    (ulid, ts, upd, rev, role, kind, tier, imp, flags, n_tags, n_rel, n_src,
     sess_len, tool_len, summ_len, body_len) = _message_fixed(mv, offset, end)
    pos = offset + MESSAGE_FIXED_SIZE
    session_id = _str(mv, pos, end, sess_len, "session_id")
    pos += sess_len
    content = _str(mv, pos, end, body_len, "content")
    pos += body_len
    tool_call_id = summary = None
    if flags & _FLAG_TOOL_CALL_ID:
        tool_call_id = _str(mv, pos, end, tool_len, "tool_call_id")
        pos += tool_len
    if flags & _FLAG_SUMMARY:
        summary = _str(mv, pos, end, summ_len, "summary")
        pos += summ_len
    tags = []
    for _ in range(n_tags):
        if end - pos < 2:
            raise CorruptRecord(pos, "tag length overruns payload")
        (n,) = _U16.unpack_from(mv, pos)
        tags.append(_str(mv, pos + 2, end, n, "tag"))
        pos += 2 + n
    relations = []
    for _ in range(n_rel):
        if end - pos < 1 + ULID_SIZE:
            raise CorruptRecord(pos, "relation overruns payload")
        if mv[pos] > 3:
            raise CorruptRecord(pos, "bad relation type")
        relations.append((mv[pos], mv[pos + 1 : pos + 17].tobytes()))
        pos += 17
    sources = []
    for _ in range(n_src):
        if end - pos < ULID_SIZE:
            raise CorruptRecord(pos, "source overruns payload")
        sources.append(mv[pos : pos + ULID_SIZE].tobytes())
        pos += ULID_SIZE
    if pos != end:
        raise CorruptRecord(pos, "trailing bytes")
    return (ulid, ts, upd, rev, role, kind, tier, imp, session_id, content,
            tool_call_id, summary, tags, relations, sources)


def message_content_span(buf, offset: int = 0, length: int = -1) -> tuple[int, int]:
    mv, end = _view(buf, offset, length)
    f = _message_fixed(mv, offset, end)
    sess_len, tool_len, summ_len, body_len = f[12], f[13], f[14], f[15]
    pos = offset + MESSAGE_FIXED_SIZE
    for n, field in ((sess_len, "session_id"), (body_len, "content"),
                     (tool_len, "tool_call_id"), (summ_len, "summary")):
        if n > end - pos:
            raise CorruptRecord(pos, f"{field} overruns payload")
        pos += n
    start = offset + MESSAGE_FIXED_SIZE + sess_len
    return start, body_len


# ---------------------------------------------------------------------------------------------
# DELETE payload


def encode_delete(ulid: bytes) -> bytes:
    return _ulid(ulid)


def decode_delete(buf, offset: int = 0, length: int = -1) -> bytes:
    mv, end = _view(buf, offset, length)
    if end - offset < ULID_SIZE:
        raise CorruptRecord(offset, "truncated delete payload")
    if end - offset > ULID_SIZE:
        raise CorruptRecord(offset + ULID_SIZE, "trailing bytes")
    return mv[offset : offset + ULID_SIZE].tobytes()


__all__ = [
    "FORMAT_VERSION", "LOG_MAGIC", "LOG_HEADER_SIZE", "RECORD_HEADER_SIZE", "MAX_PAYLOAD",
    "REC_MESSAGE", "REC_DELETE", "CorruptRecord", "ScanResult", "crc32",
    "encode_log_header", "decode_log_header", "encode_record", "read_record", "scan_log",
    "encode_message", "decode_message", "message_content_span", "encode_delete", "decode_delete",
]


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def ulid_str(ulid: bytes) -> str:
    """The canonical 26-character (Crockford base32) text of a 16-byte ULID."""
    if len(ulid) != 16:
        raise ValueError("a ULID is 16 bytes")
    n = int.from_bytes(ulid, "big")
    return "".join(_CROCKFORD[(n >> shift) & 31] for shift in range(125, -1, -5))


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


def message_revision(buf, offset: int = 0, length: int = -1) -> int:
    """The revision of a MESSAGE payload; checks only its fixed part (the caller checked the
    record's checksum)."""
    mv, end = _view(buf, offset, length)
    return _message_fixed(mv, offset, end)[3]
