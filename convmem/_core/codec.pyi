"""Stubs for the compiled record codec (convmem/_core/codec.pyx). Byte layout: docs/FORMAT.md.

The pure-Python twin `convmem._core.pycodec` has exactly this API.
"""
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

FORMAT_VERSION: int  # 2
LOG_MAGIC: bytes  # b"CVMEMLOG"
LOG_HEADER_SIZE: int  # 48
RECORD_HEADER_SIZE: int  # 20
MESSAGE_FIXED_SIZE: int  # 56
ULID_SIZE: int  # 16
MAX_PAYLOAD: int  # 16 MiB
REC_MESSAGE: int  # 1
REC_DELETE: int  # 2

# scan_log / read_record reasons
TRUNCATED_HEADER: str
BAD_LENGTH: str
TRUNCATED_PAYLOAD: str
BAD_CHECKSUM: str
UNKNOWN_TYPE: str
BAD_RESERVED: str
SEQ_NOT_INCREASING: str

class CorruptRecord(Exception):
    offset: int  # absolute offset of the offending byte in the decoded buffer
    reason: str
    def __init__(self, offset: int, reason: str) -> None: ...

class ScanResult:
    offsets: npt.NDArray[np.int64]  # start offset of each valid record, in order
    types: npt.NDArray[np.uint8]
    seqs: npt.NDArray[np.uint64]
    lengths: npt.NDArray[np.uint32]  # payload lengths
    stop: int  # where scanning stopped; == end when the buffer ended at a record boundary
    error: str | None
    resync: int  # -1, or the smallest offset > stop where a whole valid record starts
    def __init__(
        self,
        offsets: npt.NDArray[np.int64],
        types: npt.NDArray[np.uint8],
        seqs: npt.NDArray[np.uint64],
        lengths: npt.NDArray[np.uint32],
        stop: int,
        error: str | None,
        resync: int,
    ) -> None: ...
    def __len__(self) -> int: ...

MessageTuple = tuple[
    bytes,  # ulid
    int,  # timestamp (ms)
    int,  # updated_at (ms)
    int,  # revision
    int,  # role
    int,  # kind
    int,  # tier
    int,  # importance
    str,  # session_id
    str,  # content
    str | None,  # tool_call_id
    str | None,  # summary
    list[str],  # tags
    list[tuple[int, bytes]],  # relations (type, ulid)
    list[bytes],  # sources
]

def crc32(data: Buffer, value: int = 0) -> int: ...
def encode_log_header(log_id: Buffer, base_sequence: int) -> bytes: ...
def decode_log_header(buf: Buffer) -> tuple[bytes, int]: ...
def encode_record(rtype: int, seq: int, payload: Buffer) -> bytes: ...
def read_record(buf: Buffer, offset: int) -> tuple[int, int, int, int, int]: ...
def scan_log(buf: Buffer, start: int, end: int = -1, verify_crc: bool = True) -> ScanResult: ...
def encode_message(
    ulid: Buffer,
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
    relations: Iterable[tuple[int, Buffer]],
    sources: Iterable[Buffer],
) -> bytes: ...
def decode_message(buf: Buffer, offset: int = 0, length: int = -1) -> MessageTuple: ...
def message_content_span(buf: Buffer, offset: int = 0, length: int = -1) -> tuple[int, int]: ...
def message_revision(buf: Buffer, offset: int = 0, length: int = -1) -> int: ...
def encode_delete(ulid: Buffer) -> bytes: ...
def decode_delete(buf: Buffer, offset: int = 0, length: int = -1) -> bytes: ...
def ulid_str(ulid: bytes) -> str: ...

# MessageTuple's fields by index: rec[R_CONTENT] is the content.
R_ULID: int  # 0
R_TIMESTAMP: int  # 1
R_UPDATED_AT: int  # 2
R_REVISION: int  # 3
R_ROLE: int  # 4
R_KIND: int  # 5
R_TIER: int  # 6
R_IMPORTANCE: int  # 7
R_SESSION_ID: int  # 8
R_CONTENT: int  # 9
R_TOOL_CALL_ID: int  # 10
R_SUMMARY: int  # 11
R_TAGS: int  # 12
R_RELATIONS: int  # 13
R_SOURCES: int  # 14
RECORD_FIELDS: tuple[str, ...]  # their names, in that order

BUILD: str  # "debug" or "release": how this module was compiled (convmem._core.BUILD_TYPE)
