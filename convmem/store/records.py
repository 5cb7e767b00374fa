"""Reading one record back from the log: read it at its offset, check its frame and checksum,
decode its payload. Damage is CORRUPT_STORE naming the byte offset, never a wrong answer."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from .._core import codec
from ..errors import CORRUPT_STORE, ConvMemError
from .logfile import LogFile

_T = TypeVar("_T")
Decode = Callable[[bytes, int, int], _T]  # (record bytes, payload offset, payload length)


def read_message_at(log: LogFile, offset: int, length: int, decode: Decode[_T]) -> _T:
    """`decode` the payload of the MESSAGE record of `length` bytes at `offset`, once its frame
    and checksum are checked."""
    data = log.read(offset, length)
    try:
        rtype, _, poff, plen, _ = codec.read_record(data, 0)
        if rtype != codec.REC_MESSAGE:
            raise codec.CorruptRecord(0, "record is not a message")
        return decode(data, poff, plen)
    except codec.CorruptRecord as exc:
        raise damaged(offset, exc) from None


def read_payload_at(log: LogFile, offset: int, length: int) -> tuple[bytes, int, int]:
    """(record bytes, payload offset, payload length) of the checked record at `offset`."""
    return read_message_at(log, offset, length, lambda data, poff, plen: (data, poff, plen))


def damaged(record_offset: int, exc: codec.CorruptRecord) -> ConvMemError:
    return ConvMemError(CORRUPT_STORE, f"log record at byte offset {record_offset + exc.offset} "
                                       f"is damaged: {exc.reason}")
