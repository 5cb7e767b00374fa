"""Record codec: round trips, the corruption matrix and fuzzing, for the compiled codec and its twin.

Every behavioural test runs against both `convmem._core.codec` (compiled) and
`convmem._core.pycodec` (pure Python); the Hypothesis tests also check that the two give identical
bytes, decodes and errors. Byte layout under test: docs/FORMAT.md.
"""
from __future__ import annotations

import importlib
import mmap
import pickle
import random
import struct
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

compiled = importlib.import_module("convmem._core.codec")
twin = importlib.import_module("convmem._core.pycodec")


@pytest.fixture(params=[compiled, twin], ids=["compiled", "twin"])
def c(request):
    return request.param


def test_compiled_module_is_the_extension():
    assert compiled.__file__.endswith((".so", ".pyd"))


ULID_A = bytes(range(16))
ULID_B = bytes(range(16, 32))
ULID_C = b"\xff" * 16


def msg_args(**overrides) -> dict:
    args = dict(
        ulid=ULID_A,
        timestamp=1_700_000_000_000,
        updated_at=1_700_000_000_500,
        revision=1,
        role=1,
        kind=2,
        tier=1,
        importance=50,
        session_id="session-1",
        content="hello world",
        tool_call_id=None,
        summary=None,
        tags=["project", "decision"],
        relations=[(0, ULID_B), (3, ULID_C)],
        sources=[ULID_B],
    )
    args.update(overrides)
    return args


FIELDS = list(msg_args())


def as_tuple(args: dict) -> tuple:
    return tuple(args[f] for f in FIELDS)


def encode(mod, **overrides) -> bytes:
    return mod.encode_message(*as_tuple(msg_args(**overrides)))


def build_log(mod, payloads: list[tuple[int, int, bytes]]) -> tuple[bytes, list[int]]:
    """Frames for (type, seq, payload) back to back; returns the bytes and each record's offset."""
    out, offsets = bytearray(), []
    for rtype, seq, payload in payloads:
        offsets.append(len(out))
        out += mod.encode_record(rtype, seq, payload)
    return bytes(out), offsets


def sample_log(mod, n: int = 5) -> tuple[bytes, list[int]]:
    recs = []
    for i in range(n):
        if i % 3 == 2:
            recs.append((mod.REC_DELETE, i + 1, mod.encode_delete(ULID_B)))
        else:
            recs.append((mod.REC_MESSAGE, i + 1, encode(mod, content=f"message {i} " * (i + 1))))
    return build_log(mod, recs)


def refresh_crc(buf: bytearray, off: int) -> None:
    """Recompute the crc of the record at `off` after editing it (to build well-formed oddities)."""
    (length,) = struct.unpack_from("<I", buf, off + 4)
    struct.pack_into("<I", buf, off, zlib.crc32(buf[off + 4 : off + 20 + length]))


def corrupt(fn, *args):
    with pytest.raises(Exception) as info:
        fn(*args)
    assert type(info.value).__name__ == "CorruptRecord", repr(info.value)
    return info.value.offset, info.value.reason


# ---------------------------------------------------------------------------------------------
# constants and crc


def test_constants(c):
    assert c.FORMAT_VERSION == 2
    assert c.LOG_MAGIC == b"CVMEMLOG"
    assert (c.LOG_HEADER_SIZE, c.RECORD_HEADER_SIZE) == (48, 20)
    assert c.MAX_PAYLOAD == 16 * 1024 * 1024
    assert (c.REC_MESSAGE, c.REC_DELETE) == (1, 2)


def test_crc32_matches_zlib(c):
    data = bytes(range(256)) * 40
    assert c.crc32(data) == zlib.crc32(data)
    assert c.crc32(data[100:], c.crc32(data[:100])) == zlib.crc32(data)
    assert c.crc32(b"", 12345) == 12345
    assert c.crc32(memoryview(bytearray(data))) == zlib.crc32(data)


def test_corrupt_record_attributes_and_pickle(c):
    e = c.CorruptRecord(17, "bad checksum")
    assert (e.offset, e.reason) == (17, "bad checksum")
    assert str(e) == "bad checksum at offset 17"
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.offset, e2.reason) == (17, "bad checksum")


# ---------------------------------------------------------------------------------------------
# log header


def test_log_header_round_trip(c):
    h = c.encode_log_header(ULID_C, 2**64 - 1)
    assert len(h) == 48
    assert h[:8] == b"CVMEMLOG" and h[8:12] == b"\x02\0\0\0"
    assert struct.unpack_from("<I", h, 44)[0] == zlib.crc32(h[:44])
    assert c.decode_log_header(h) == (ULID_C, 2**64 - 1)
    assert c.decode_log_header(bytearray(h) + b"tail") == (ULID_C, 2**64 - 1)


@pytest.mark.parametrize(
    "edit, reason",
    [
        (lambda b: b[:47], "truncated log header"),
        (lambda b: b"CVMEMLOX" + b[8:], "bad magic"),
        (lambda b: b[:8] + b"\x03\0\0\0" + b[12:], "unsupported format version"),
        (lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:], "bad header checksum"),
        (lambda b: b[:12] + b"\x01\0\0\0" + b[16:], "bad header flags"),
        (lambda b: b[:40] + b"\x01\0\0\0" + b[44:], "bad header reserved bytes"),
    ],
    ids=["short", "magic", "version", "crc", "flags", "reserved"],
)
def test_log_header_errors(c, edit, reason):
    h = bytearray(edit(c.encode_log_header(ULID_A, 7)))
    if reason in ("bad header flags", "bad header reserved bytes"):
        struct.pack_into("<I", h, 44, zlib.crc32(h[:44]))  # only the field under test is wrong
    assert corrupt(c.decode_log_header, bytes(h)) == (0, reason)


def test_log_header_encoder_rejects(c):
    with pytest.raises(ValueError):
        c.encode_log_header(b"short", 0)
    with pytest.raises(ValueError):
        c.encode_log_header(ULID_A, -1)
    with pytest.raises(ValueError):
        c.encode_log_header(ULID_A, 2**64)


# ---------------------------------------------------------------------------------------------
# MESSAGE payload round trips


def test_message_layout(c):
    m = encode(c, tool_call_id="call_1", summary="S")
    assert m[:16] == ULID_A
    assert struct.unpack_from("<qqI", m, 16) == (1_700_000_000_000, 1_700_000_000_500, 1)
    assert tuple(m[36:44]) == (1, 2, 1, 50, 0b11, 2, 2, 1)
    assert struct.unpack_from("<HHII", m, 44) == (9, 6, 1, 11)
    assert m[56:65] == b"session-1" and m[65:76] == b"hello world"
    assert m[76:82] == b"call_1" and m[82:83] == b"S"
    assert m[83:85] == b"\x07\0" and m[85:92] == b"project"
    assert m[-16 - 34 :] == b"\x00" + ULID_B + b"\x03" + ULID_C + ULID_B
    assert len(m) == 56 + 9 + 11 + 6 + 1 + (2 + 7) + (2 + 8) + 2 * 17 + 16


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        dict(tags=[], relations=[], sources=[], session_id="", content=""),
        dict(tool_call_id="", summary=""),  # present but empty differs from absent
        dict(tool_call_id="call_abc", summary="要約です"),
        dict(content="東京で開催された会議に参加しました。🎉", tags=["日本語", "タグ"]),
        dict(timestamp=-(2**63), updated_at=2**63 - 1, revision=2**32 - 1),
        dict(role=2, kind=5, tier=3, importance=100),
        dict(role=0, kind=0, tier=0, importance=0),
        dict(content="x" * (1 << 20)),
        dict(content="あ" * ((1 << 20) // 3)),
    ],
    ids=["basic", "empty", "present-empty", "optional", "japanese", "int-limits", "enum-max",
         "enum-min", "1mib-ascii", "1mib-japanese"],
)
def test_message_round_trip(c, overrides):
    args = msg_args(**overrides)
    assert c.decode_message(c.encode_message(*as_tuple(args))) == as_tuple(args)


def test_message_round_trip_max_sizes(c):
    args = msg_args(
        session_id="s" * 65535,
        tool_call_id="t" * 65535,
        tags=["t" * 65535] + [f"{i:03d}" + "g" * 997 for i in range(254)],
        relations=[(i % 4, bytes([i]) * 16) for i in range(255)],
        sources=[bytes([255 - i]) * 16 for i in range(255)],
    )
    m = c.encode_message(*as_tuple(args))
    assert m[41:44] == b"\xff\xff\xff"
    assert c.decode_message(m) == as_tuple(args)


def test_message_payload_may_reach_max_payload_but_not_exceed_it(c):
    fixed = len(encode(c, content="", tags=[], relations=[], sources=[], session_id=""))
    big = "x" * (c.MAX_PAYLOAD - fixed)
    m = encode(c, content=big, tags=[], relations=[], sources=[], session_id="")
    assert len(m) == c.MAX_PAYLOAD
    assert c.decode_message(m)[9] == big
    with pytest.raises(ValueError):
        encode(c, content=big + "x", tags=[], relations=[], sources=[], session_id="")


@pytest.mark.parametrize(
    "overrides, exc",
    [
        (dict(ulid=b"short"), ValueError),
        (dict(ulid=16), TypeError),
        (dict(timestamp=2**63), ValueError),
        (dict(updated_at=-(2**63) - 1), ValueError),
        (dict(timestamp=1.5), TypeError),
        (dict(revision=0), ValueError),
        (dict(revision=2**32), ValueError),
        (dict(role=3), ValueError),
        (dict(kind=6), ValueError),
        (dict(tier=4), ValueError),
        (dict(importance=101), ValueError),
        (dict(importance=-1), ValueError),
        (dict(session_id="s" * 65536), ValueError),
        (dict(session_id="é" * 32768), ValueError),  # 65536 UTF-8 bytes
        (dict(tool_call_id="t" * 65536), ValueError),
        (dict(tags=["x" * 65536]), ValueError),
        (dict(tags=["t"] * 256), ValueError),
        (dict(relations=[(0, ULID_B)] * 256), ValueError),
        (dict(sources=[ULID_B] * 256), ValueError),
        (dict(relations=[(4, ULID_B)]), ValueError),
        (dict(relations=[(0, b"x" * 15)]), ValueError),
        (dict(sources=[b"x" * 17]), ValueError),
        (dict(session_id=None), TypeError),
        (dict(content=b"bytes"), TypeError),
        (dict(content="bad \ud800 surrogate"), UnicodeEncodeError),
        (dict(tags=["\udfff"]), UnicodeEncodeError),
        (dict(summary="x" * (16 * 1024 * 1024)), ValueError),
    ],
)
def test_encode_message_rejects(c, overrides, exc):
    with pytest.raises(exc):
        encode(c, **overrides)


def test_encode_message_accepts_buffers_and_iterables(c):
    m = encode(c, ulid=bytearray(ULID_A), relations=iter([(1, memoryview(ULID_B))]),
               sources=(ULID_C,), tags=("a",))
    assert m == encode(c, relations=[(1, ULID_B)], sources=[ULID_C], tags=["a"])


def test_message_content_span(c):
    content = "本文 content ✓"
    m = encode(c, content=content, tool_call_id="x", summary="y")
    start, n = c.message_content_span(m)
    assert m[start : start + n].decode() == content
    log, offs = build_log(c, [(1, 1, encode(c)), (1, 2, m)])
    start, n = c.message_content_span(log, offs[1] + 20, len(m))
    assert start == offs[1] + 20 + 56 + len("session-1")
    assert log[start : start + n].decode() == content


def test_message_content_span_checks_only_fixed_part_and_lengths(c):
    m = bytearray(encode(c, content="abc"))
    m[65] = 0xFF  # invalid UTF-8 in content: not span's business
    m[-1] ^= 1  # damage inside the sources: not span's business either
    assert c.message_content_span(bytes(m)) == (65, 3)
    m[36] = 9
    assert corrupt(c.message_content_span, bytes(m)) == (36, "bad role")
    short = encode(c, content="abcdef")[:68]
    assert corrupt(c.message_content_span, short) == (65, "content overruns payload")


# ---------------------------------------------------------------------------------------------
# decode_message errors: one per check of docs/FORMAT.md section 3


def _set(off, value, fmt="<B"):
    def edit(m: bytearray) -> bytearray:
        struct.pack_into(fmt, m, off, value)
        return m

    return edit


def _only_tags_then(extra: bytes):
    """Declare one more tag than there is, drop relations and sources, end with `extra`."""

    def edit(m: bytearray) -> bytearray:
        m[41:44] = b"\x02\x00\x00"
        return m[:69] + extra

    return edit


BASE = dict(tool_call_id=None, summary=None, session_id="sess", content="hello",
            tags=["ab"], relations=[(1, ULID_B)], sources=[ULID_C])
# offsets in BASE's payload: session 56..60, content 60..65, tag 65..69, relation 69..86,
# source 86..102


@pytest.mark.parametrize(
    "edit, expected",
    [
        (lambda m: m[:55], (0, "truncated message header")),
        (_set(32, 0, "<I"), (32, "bad revision")),
        (_set(36, 3), (36, "bad role")),
        (_set(37, 6), (37, "bad kind")),
        (_set(38, 4), (38, "bad tier")),
        (_set(39, 101), (39, "bad importance")),
        (_set(40, 0x04), (40, "bad flags")),
        (_set(46, 3, "<H"), (46, "tool_call_id length without flag")),
        (_set(48, 3, "<I"), (48, "summary length without flag")),
        (_set(44, 200, "<H"), (56, "session_id overruns payload")),
        (_set(52, 0xFFFFFFFF, "<I"), (60, "content overruns payload")),
        (_set(62, 0xFF), (62, "invalid UTF-8 in content")),
        (_set(58, 0xC0), (58, "invalid UTF-8 in session_id")),
        (_set(65, 40, "<H"), (67, "tag overruns payload")),
        (_set(67, 0x80), (67, "invalid UTF-8 in tag")),
        (_set(41, 20), (71, "tag overruns payload")),  # relation bytes read as a tag length
        (_only_tags_then(b"\0"), (69, "tag length overruns payload")),
        (_set(69, 4), (69, "bad relation type")),
        (_set(42, 3), (86, "relation overruns payload")),
        (_set(43, 2), (102, "source overruns payload")),
        (lambda m: m + b"\0", (102, "trailing bytes")),
        (lambda m: m[:-1], (86, "source overruns payload")),
    ],
)
def test_decode_message_errors(c, edit, expected):
    m = edit(bytearray(encode(c, **BASE)))
    assert corrupt(c.decode_message, bytes(m)) == expected


def test_decode_message_error_offsets_are_absolute(c):
    m = bytearray(encode(c, **BASE))
    m[36] = 7
    log, offs = build_log(c, [(1, 1, encode(c)), (1, 2, bytes(m))])
    assert corrupt(c.decode_message, log, offs[1] + 20, len(m)) == (offs[1] + 20 + 36, "bad role")


def test_decode_message_utf8_surrogate_bytes_rejected(c):
    m = bytearray(encode(c, **BASE))
    m[60:63] = b"\xed\xa0\x80"  # UTF-8 form of U+D800: invalid in strict UTF-8
    assert corrupt(c.decode_message, bytes(m)) == (60, "invalid UTF-8 in content")


def test_decode_message_rejects_span_outside_buffer(c):
    m = encode(c)
    with pytest.raises(ValueError):
        c.decode_message(m, 1, len(m))
    with pytest.raises(ValueError):
        c.decode_message(m, -1)


# ---------------------------------------------------------------------------------------------
# DELETE payload


def test_delete_round_trip_and_errors(c):
    assert c.encode_delete(ULID_B) == ULID_B
    assert c.decode_delete(ULID_B) == ULID_B
    assert c.decode_delete(b"xx" + ULID_B, 2) == ULID_B
    assert corrupt(c.decode_delete, ULID_B[:15]) == (0, "truncated delete payload")
    assert corrupt(c.decode_delete, ULID_B + b"\0") == (16, "trailing bytes")
    with pytest.raises(ValueError):
        c.encode_delete(b"x" * 17)


# ---------------------------------------------------------------------------------------------
# buffers: bytes, bytearray, memoryview, mmap, all without copying


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "mmap-anon", "mmap-file"])
def test_decode_from_any_buffer(c, kind, tmp_path):
    log, offs = sample_log(c, 4)
    data = c.encode_log_header(ULID_A, 0) + log
    if kind == "bytes":
        buf = data
    elif kind == "bytearray":
        buf = bytearray(data)
    elif kind == "memoryview":
        buf = memoryview(b"pad" + data)[3:]
    elif kind == "mmap-anon":
        buf = mmap.mmap(-1, len(data))
        buf.write(data)
    else:
        path = tmp_path / "log"
        path.write_bytes(data)
        f = open(path, "rb")
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        f.close()
    assert c.decode_log_header(buf) == (ULID_A, 0)
    scan = c.scan_log(buf, 48)
    assert scan.error is None and scan.stop == len(data)
    assert list(scan.offsets) == [48 + o for o in offs]
    rtype, seq, poff, plen, nxt = c.read_record(buf, int(scan.offsets[0]))
    assert (rtype, seq, nxt) == (1, 1, int(scan.offsets[1]))
    assert c.decode_message(buf, poff, plen)[9] == "message 0 "
    start, n = c.message_content_span(buf, poff, plen)
    assert bytes(buf[start : start + n]) == b"message 0 "
    rtype, seq, poff, plen, _ = c.read_record(buf, int(scan.offsets[2]))
    assert c.decode_delete(buf, poff, plen) == ULID_B
    if isinstance(buf, mmap.mmap):
        buf.close()  # raises BufferError if a decoder kept a view of the map


# ---------------------------------------------------------------------------------------------
# record frames and scanning


def test_encode_record_layout(c):
    r = c.encode_record(c.REC_MESSAGE, 2**64 - 1, b"abc")
    assert struct.unpack_from("<IIB3sQ", r) == (zlib.crc32(r[4:]), 3, 1, b"\0\0\0", 2**64 - 1)
    assert r[20:] == b"abc"


@pytest.mark.parametrize(
    "args, exc",
    [((3, 1, b""), ValueError), ((0, 1, b""), ValueError), ((1, -1, b""), ValueError),
     ((1, 2**64, b""), ValueError), ((1, 1, bytes(16 * 1024 * 1024 + 1)), ValueError),
     ((1, 1, "text"), TypeError)],
)
def test_encode_record_rejects(c, args, exc):
    with pytest.raises(exc):
        c.encode_record(*args)


def test_read_record_and_clean_scan(c):
    log, offs = sample_log(c, 5)
    off = 0
    for i, expected in enumerate(offs):
        rtype, seq, poff, plen, off = c.read_record(log, expected)
        assert (rtype, seq, poff) == (2 if i % 3 == 2 else 1, i + 1, expected + 20)
        assert off == (offs[i + 1] if i + 1 < len(offs) else len(log))
    for verify in (True, False):
        scan = c.scan_log(log, 0, verify_crc=verify)
        assert scan.offsets.dtype == np.int64 and scan.types.dtype == np.uint8
        assert scan.seqs.dtype == np.uint64 and scan.lengths.dtype == np.uint32
        assert list(scan.offsets) == offs
        assert list(scan.types) == [1, 1, 2, 1, 1]
        assert list(scan.seqs) == [1, 2, 3, 4, 5]
        assert list(scan.lengths) == [struct.unpack_from("<I", log, o + 4)[0] for o in offs]
        assert (scan.stop, scan.error, scan.resync) == (len(log), None, -1)


def test_scan_empty_and_windows(c):
    scan = c.scan_log(b"", 0)
    assert (len(scan.offsets), scan.stop, scan.error, scan.resync) == (0, 0, None, -1)
    log, offs = sample_log(c, 4)
    hdr = c.encode_log_header(ULID_A, 0)
    scan = c.scan_log(hdr + log, 48, 48 + offs[2])  # end exactly on a record boundary
    assert list(scan.offsets) == [48 + offs[0], 48 + offs[1]]
    assert (scan.stop, scan.error) == (48 + offs[2], None)
    scan = c.scan_log(hdr + log, 48 + offs[1])
    assert list(scan.seqs) == [2, 3, 4]
    with pytest.raises(ValueError):
        c.scan_log(log, 0, len(log) + 1)
    with pytest.raises(ValueError):
        c.scan_log(log, -1)


# ---- the corruption matrix: one test per kind of damage --------------------------------------


def check_scan(c, buf, records, stop, error, resync):
    for verify in (True, False) if error not in ("bad checksum",) else (True,):
        scan = c.scan_log(buf, 0, verify_crc=verify)
        assert list(scan.offsets) == records
        assert (scan.stop, scan.error, scan.resync) == (stop, error, resync)


def test_flipped_checksum_byte(c):
    log, offs = sample_log(c, 3)
    buf = bytearray(log)
    buf[offs[2] + 1] ^= 0x40  # the crc field of the last record
    check_scan(c, bytes(buf), offs[:2], offs[2], "bad checksum", -1)
    assert c.scan_log(bytes(buf), 0, verify_crc=False).error is None  # structure is intact
    assert corrupt(c.read_record, bytes(buf), offs[2]) == (offs[2], "bad checksum")


def test_bad_length_huge(c):
    log, offs = sample_log(c, 3)
    buf = bytearray(log)
    struct.pack_into("<I", buf, offs[1] + 4, 0xFFFFFFF0)
    check_scan(c, bytes(buf), offs[:1], offs[1], "bad length", offs[2])
    assert corrupt(c.read_record, bytes(buf), offs[1]) == (offs[1], "bad length")


def test_bad_length_past_end(c):
    log, offs = sample_log(c, 3)
    buf = bytearray(log)
    struct.pack_into("<I", buf, offs[2] + 4, len(log) - offs[2])  # 20 bytes too long
    check_scan(c, bytes(buf), offs[:2], offs[2], "truncated payload", -1)
    assert corrupt(c.read_record, bytes(buf), offs[2]) == (offs[2], "truncated payload")


def test_truncated_header(c):
    log, offs = sample_log(c, 3)
    buf = log[: offs[2] + 11]
    check_scan(c, buf, offs[:2], offs[2], "truncated header", -1)
    assert corrupt(c.read_record, buf, offs[2]) == (offs[2], "truncated header")
    assert corrupt(c.read_record, buf, len(buf)) == (len(buf), "truncated header")


def test_truncated_payload(c):
    log, offs = sample_log(c, 3)
    buf = log[:-1]
    check_scan(c, buf, offs[:2], offs[2], "truncated payload", -1)
    assert corrupt(c.read_record, buf, offs[2]) == (offs[2], "truncated payload")


def test_unknown_type(c):
    log, offs = sample_log(c, 3)
    buf = bytearray(log)
    buf[offs[1] + 8] = 9
    refresh_crc(buf, offs[1])  # an intact record of a type this reader does not know
    check_scan(c, bytes(buf), offs[:1], offs[1], "unknown type", offs[2])
    assert corrupt(c.read_record, bytes(buf), offs[1]) == (offs[1], "unknown type")
    buf[offs[1] + 8] = 0  # a damaged type byte is a checksum failure first
    assert c.scan_log(bytes(buf), 0).error == "bad checksum"
    assert c.scan_log(bytes(buf), 0, verify_crc=False).error == "unknown type"


def test_bad_reserved_bytes(c):
    log, offs = sample_log(c, 3)
    buf = bytearray(log)
    buf[offs[2] + 10] = 1
    refresh_crc(buf, offs[2])
    check_scan(c, bytes(buf), offs[:2], offs[2], "bad reserved bytes", -1)
    assert corrupt(c.read_record, bytes(buf), offs[2]) == (offs[2], "bad reserved bytes")


def test_zero_filled_tail(c):
    log, offs = sample_log(c, 3)
    buf = log + bytes(4096)
    scan = c.scan_log(buf, 0)
    assert list(scan.offsets) == offs
    assert (scan.stop, scan.error, scan.resync) == (len(log), "bad checksum", -1)
    scan = c.scan_log(buf, 0, verify_crc=False)
    assert (scan.stop, scan.error, scan.resync) == (len(log), "unknown type", -1)
    assert corrupt(c.read_record, buf, len(log)) == (len(log), "bad checksum")


def test_garbage_appended(c):
    log, offs = sample_log(c, 3)
    garbage = random.Random(7).randbytes(5000)
    scan = c.scan_log(log + garbage, 0)
    assert list(scan.offsets) == offs
    assert scan.stop == len(log)
    assert scan.error in ("bad length", "truncated payload", "bad checksum")
    assert scan.resync == -1


def test_damaged_record_in_middle_followed_by_good_records(c):
    log, offs = sample_log(c, 6)
    buf = bytearray(log)
    buf[offs[2] + 25] ^= 0xFF  # a payload byte of record 3
    check_scan(c, bytes(buf), offs[:2], offs[2], "bad checksum", offs[3])
    rest = c.scan_log(bytes(buf), offs[3])
    assert list(rest.offsets) == offs[3:] and rest.error is None
    assert corrupt(c.read_record, bytes(buf), offs[2]) == (offs[2], "bad checksum")


def test_sequence_not_increasing(c):
    payload = c.encode_delete(ULID_A)
    log, offs = build_log(c, [(2, 1, payload), (2, 5, payload), (2, 5, payload), (2, 6, payload)])
    check_scan(c, log, offs[:2], offs[2], "sequence not increasing", offs[3])
    assert c.read_record(log, offs[2])[1] == 5  # the frame itself is valid
    log, offs = build_log(c, [(2, 9, payload), (2, 3, payload)])
    check_scan(c, log, offs[:1], offs[1], "sequence not increasing", -1)


def test_resync_skips_structurally_valid_records_with_bad_crc(c):
    log, offs = sample_log(c, 4)
    buf = bytearray(log)
    buf[offs[1] + 30] ^= 1
    buf[offs[2] + 30] ^= 1
    check_scan(c, bytes(buf), offs[:1], offs[1], "bad checksum", offs[3])


# ---------------------------------------------------------------------------------------------
# Hypothesis: compiled == twin, round trips, fuzzing

ulids = st.binary(min_size=16, max_size=16)
text = st.text(max_size=40)
messages = st.fixed_dictionaries(
    dict(
        ulid=ulids,
        timestamp=st.integers(-(2**63), 2**63 - 1),
        updated_at=st.integers(-(2**63), 2**63 - 1),
        revision=st.integers(1, 2**32 - 1),
        role=st.integers(0, 2),
        kind=st.integers(0, 5),
        tier=st.integers(0, 3),
        importance=st.integers(0, 100),
        session_id=text,
        content=st.text(max_size=300),
        tool_call_id=st.none() | text,
        summary=st.none() | text,
        tags=st.lists(text, max_size=6),
        relations=st.lists(st.tuples(st.integers(0, 3), ulids), max_size=4),
        sources=st.lists(ulids, max_size=4),
    )
)
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outcome(fn, *args):
    """The result of a decoder, or ('corrupt', offset, reason); anything else propagates."""
    try:
        r = fn(*args)
    except (compiled.CorruptRecord, twin.CorruptRecord) as e:
        return ("corrupt", e.offset, e.reason)
    if isinstance(r, (compiled.ScanResult, twin.ScanResult)):
        return (r.offsets.tolist(), r.types.tolist(), r.seqs.tolist(), r.lengths.tolist(),
                r.stop, r.error, r.resync)
    return r


@FUZZ
@given(messages)
def test_hypothesis_message_identical_and_round_trips(d):
    args = as_tuple(d)
    m = compiled.encode_message(*args)
    assert twin.encode_message(*args) == m
    assert compiled.decode_message(m) == args
    assert twin.decode_message(m) == args
    assert compiled.message_content_span(m) == twin.message_content_span(m)


@FUZZ
@given(st.binary(max_size=300), st.integers(0, 40))
def test_fuzz_decode_arbitrary_bytes(data, start):
    start = min(start, len(data))
    for fn in ("decode_message", "message_content_span", "decode_delete"):
        a = outcome(getattr(compiled, fn), data, start)
        assert a == outcome(getattr(twin, fn), data, start)
    a = outcome(compiled.scan_log, data, start)
    assert a == outcome(twin.scan_log, data, start)
    assert outcome(compiled.decode_log_header, data) == outcome(twin.decode_log_header, data)


@FUZZ
@given(st.data())
def test_fuzz_mutated_records(data):
    msgs = data.draw(st.lists(messages, min_size=1, max_size=4))
    payloads = [(1, i + 1, compiled.encode_message(*as_tuple(d))) for i, d in enumerate(msgs)]
    log = bytearray(build_log(compiled, payloads)[0])
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "set", "cut", "insert"]))
        pos = data.draw(st.integers(0, max(len(log) - 1, 0)))
        if kind == "flip" and log:
            log[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "set" and log:
            log[pos] = data.draw(st.integers(0, 255))
        elif kind == "cut":
            del log[pos:]
        else:
            log[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
    buf = bytes(log)
    verify = data.draw(st.booleans())
    scan = outcome(compiled.scan_log, buf, 0, -1, verify)
    assert scan == outcome(twin.scan_log, buf, 0, -1, verify)
    for off, rtype, length in zip(scan[0], scan[1], scan[3]):
        if rtype == 1:  # the frame may be intact while its payload is not (verify_crc=False)
            for fn in ("decode_message", "message_content_span"):
                got = outcome(getattr(compiled, fn), buf, off + 20, length)
                assert got == outcome(getattr(twin, fn), buf, off + 20, length)
        assert outcome(compiled.read_record, buf, off) == outcome(twin.read_record, buf, off)
    # payload-level mutation with the frame crc refreshed: only the payload checks can catch it
    body = bytearray(payloads[0][2])
    pos = data.draw(st.integers(0, len(body) - 1))
    body[pos] = data.draw(st.integers(0, 255))
    assert outcome(compiled.decode_message, bytes(body)) == outcome(twin.decode_message,
                                                                    bytes(body))


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=16, max_size=16))
def test_ulid_str_matches_twin_and_python_ulid(data):
    import ulid as python_ulid

    text = compiled.ulid_str(data)
    assert text == twin.ulid_str(data) == str(python_ulid.ULID.from_bytes(data))


def test_ulid_str_rejects_wrong_length():
    for mod in (compiled, twin):
        with pytest.raises(ValueError):
            mod.ulid_str(b"x" * 15)
